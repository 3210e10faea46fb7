//! The clients' transport against a real apiserver: requests share at most four HTTP/2
//! connections however many are in flight, each watch holds a connection of its own, and a
//! kubeconfig's `tls-server-name` is the name the certificate is verified for. Connections are
//! counted from the kernel's table of this process's sockets, so the tests of this binary run
//! one at a time: another test's clients would be counted with them.

use std::collections::HashSet;
use std::fs;

use anyhow::{Context as _, Result, ensure};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Namespace;
use kbind_tests::testenv::shared_pair;
use kube::api::{Api, ListParams, WatchParams};
use tokio::sync::Mutex;

/// Held by each test for its whole run.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// The apiserver port of `server` (`https://127.0.0.1:PORT`).
fn port_of(server: &str) -> Result<u16> {
    let uri: http::Uri = server.parse()?;
    uri.port_u16().context("the apiserver URL has no port")
}

/// The inodes of this process's sockets.
fn own_sockets() -> Result<HashSet<u64>> {
    let mut inodes = HashSet::new();
    for fd in fs::read_dir("/proc/self/fd")? {
        // A descriptor closed while the directory is read has no link left: not a socket of ours.
        let Ok(target) = fs::read_link(fd?.path()) else {
            continue;
        };
        let target = target.to_string_lossy();
        if let Some(inode) = target
            .strip_prefix("socket:[")
            .and_then(|rest| rest.strip_suffix(']'))
        {
            inodes.insert(inode.parse()?);
        }
    }
    Ok(inodes)
}

/// This process's established TCP connections to `port`.
fn connections_to(port: u16) -> Result<usize> {
    let own = own_sockets()?;
    let mut count = 0;
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        for line in fs::read_to_string(table)?.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(remote), Some(state), Some(inode)) =
                (fields.get(2), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let remote_port = remote
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            // 01: ESTABLISHED.
            if remote_port == Some(port) && *state == "01" && own.contains(&inode.parse()?) {
                count += 1;
            }
        }
    }
    Ok(count)
}

#[tokio::test]
async fn requests_share_four_connections_and_each_watch_has_its_own() -> Result<()> {
    let _alone = ONE_AT_A_TIME.lock().await;
    let pair = shared_pair()?;
    let port = port_of(&pair.consumer.server())?;
    let config = pair.consumer.admin().config().await?;
    let client = konnector::fencing::client(config, "consumer")?;
    let namespaces: Api<Namespace> = Api::all(client);
    let before = connections_to(port)?;

    let in_flight = 64;
    let everything = ListParams::default();
    let lists = (0..in_flight).map(|_| namespaces.list(&everything));
    futures::future::try_join_all(lists).await?;
    let requests = connections_to(port)?.saturating_sub(before);
    ensure!(
        (1..=4).contains(&requests),
        "{in_flight} lists at once used {requests} connections, not one to four"
    );

    let params = WatchParams::default().timeout(60);
    let mut watches = Vec::new();
    for _ in 0..3 {
        watches.push(namespaces.watch(&params, "0").await?.boxed());
    }
    // Each watch is open: its first event (a namespace as it stands) has arrived.
    for watch in &mut watches {
        watch.next().await.context("a watch ended at once")??;
    }
    let watching = connections_to(port)?.saturating_sub(before);
    ensure!(
        watching == requests + 3,
        "three watches beside {requests} request connections: {watching} connections"
    );
    Ok(())
}

#[tokio::test]
async fn the_kubeconfig_tls_server_name_is_the_name_verified() -> Result<()> {
    let _alone = ONE_AT_A_TIME.lock().await;
    let pair = shared_pair()?;
    let mut config = pair.consumer.admin().config().await?;
    config.cluster_url =
        format!("https://127.0.0.1:{}", port_of(&pair.consumer.server())?).parse()?;
    let list = |name: &str| {
        let mut config = config.clone();
        config.tls_server_name = Some(name.to_string());
        async move {
            let client = konnector::fencing::client(config, "consumer")?;
            Api::<Namespace>::all(client)
                .list(&ListParams::default().limit(1))
                .await
                .map_err(anyhow::Error::from)
        }
    };
    list("localhost")
        .await
        .context("the serving certificate holds localhost")?;
    let refused = list("not-this-server.kbind.test").await;
    ensure!(
        refused.is_err(),
        "a certificate without the kubeconfig's tls-server-name was accepted"
    );
    Ok(())
}
