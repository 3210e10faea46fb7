//! Provider traffic through an HTTP proxy: a Connection whose kubeconfig names a `proxy-url`
//! reaches its provider through that proxy (HTTP CONNECT tunnels, TLS to the apiserver inside
//! them), as a consumer behind an egress proxy does. The provider's server name resolves only
//! at the proxy (see `kbind_tests::proxy`), so nothing reaches it without the proxy: the same
//! kubeconfig without `proxy-url` is the control that fails.

use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, ensure};
use kbind_tests::faults::{Sides, create_binding, wait_binding_ready};
use kbind_tests::fixtures::{
    connection, crd_source, put_kubeconfig_secret, start_konnector, wait_connection, wait_ready,
};
use kbind_tests::proxy::Tinyproxy;
use kbind_tests::syncenv::{TestApi, wait_for};
use kbind_tests::testenv::ClusterPair;
use konnector::api::Connection;
use kube::api::{Api, PostParams};
use kube::config::Kubeconfig;
use serde_json::json;

/// A name no resolver but the proxy's knows (`.test` is reserved, RFC 6761).
const PROVIDER_NAME: &str = "provider.kbind.test";
/// The API group the test binds.
const GROUP: &str = "proxy.kbind.io";
/// The namespace of the binding and its instances.
const TEAM: &str = "team-p";
/// How long one effect may take.
const WAIT: Duration = Duration::from_secs(60);

/// The provider's admin kubeconfig, addressed as `https://provider.kbind.test:<port>`
/// (verified as `localhost`, a name its serving certificate holds), with `proxy_url` as its
/// cluster's `proxy-url` when given.
fn renamed_kubeconfig(pair: &ClusterPair, proxy_url: Option<&str>) -> Result<(String, u16)> {
    let mut kubeconfig = Kubeconfig::from_yaml(&pair.provider.admin().kubeconfig_yaml()?)?;
    let server: http::Uri = pair.provider.server().parse()?;
    let port = server
        .port_u16()
        .context("the provider server has no port")?;
    let [named] = kubeconfig.clusters.as_mut_slice() else {
        anyhow::bail!("expected one cluster in the provider kubeconfig");
    };
    let cluster = named
        .cluster
        .as_mut()
        .context("a cluster entry without cluster")?;
    cluster.server = Some(format!("https://{PROVIDER_NAME}:{port}"));
    cluster.tls_server_name = Some("localhost".to_string());
    cluster.proxy_url = proxy_url.map(str::to_string);
    Ok((serde_saphyr::to_string(&kubeconfig)?, port))
}

#[test]
fn provider_reached_through_the_kubeconfig_proxy_url_by_a_name_only_the_proxy_resolves()
-> Result<()> {
    let pair = ClusterPair::start_private()?;
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let proxy = Tinyproxy::start(&pair.root().join("proxy"), &[(PROVIDER_NAME, loopback)])?;
    let _konnector = start_konnector(&pair.consumer)?;
    let result = kbind_tests::runtime()?.block_on(pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let (proxied, port) = renamed_kubeconfig(&pair, Some(&proxy.url()))?;
        // This process (which runs the konnector) cannot resolve the provider's name.
        let resolved = (PROVIDER_NAME, port).to_socket_addrs();
        ensure!(
            resolved.is_err(),
            "{PROVIDER_NAME} resolves here: {resolved:?}"
        );

        // Through the proxy: Ready, bound, synced both ways.
        put_kubeconfig_secret(&consumer, "proxied", &proxied).await?;
        let connections = Api::<Connection>::all(consumer.clone());
        let proxied_connection = connection("proxied", "proxied", crd_source(), false);
        connections
            .create(&PostParams::default(), &proxied_connection)
            .await?;
        let sides = Sides::on(&pair, TestApi::namespaced(GROUP), TEAM).await?;
        sides.api.install_on_provider(&sides.provider).await?;
        wait_ready(&consumer, "proxied").await?;
        create_binding(&consumer, TEAM, "proxied", &[&sides.api]).await?;
        wait_binding_ready(&consumer, TEAM, WAIT).await?;
        let spec = json!({"size": 4});
        sides.create("w", spec.clone()).await?;
        wait_for("the provider copy", WAIT, || async {
            let copy = sides.copies().get_opt("w").await?;
            Ok(copy.filter(|c| c.data["spec"] == spec).map(|_| ()))
        })
        .await?;
        kbind_tests::syncenv::set_status(&sides.copies(), "w", json!({"phase": "Running"})).await?;
        wait_for("the status back on the consumer", WAIT, || async {
            let w = sides.instances().get("w").await?;
            Ok((w.data["status"]["phase"] == "Running").then_some(()))
        })
        .await?;

        // The proxy tunnelled them: its log has the CONNECTs to the provider's name.
        let log = proxy.log_text()?;
        let tunnel = format!("CONNECT {PROVIDER_NAME}:{port} HTTP/1.1");
        let tunnels = log.lines().filter(|l| l.contains(&tunnel)).count();
        ensure!(tunnels > 0, "no {tunnel:?} in the proxy log:\n{log}");
        eprintln!("the proxy tunnelled {tunnels} connection(s) to {PROVIDER_NAME}:{port}");

        // The control: the same kubeconfig without proxy-url never connects.
        let (direct, _) = renamed_kubeconfig(&pair, None)?;
        put_kubeconfig_secret(&consumer, "direct", &direct).await?;
        let direct_connection = connection("direct", "direct", crd_source(), false);
        connections
            .create(&PostParams::default(), &direct_connection)
            .await?;
        let refused = wait_connection(&consumer, "direct", "a failed connect", |c| {
            let status = c.status.as_ref();
            let conditions = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
            conditions
                .iter()
                .any(|c| c.type_ == "Connected" && c.status == "False")
        })
        .await?;
        let ready = refused
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready").cloned());
        ensure!(
            ready.as_ref().is_none_or(|c| c.status != "True"),
            "a Connection to {PROVIDER_NAME} without the proxy is Ready: {ready:?}"
        );
        anyhow::Ok(())
    }));
    result.map_err(|e| anyhow!("{e:?}\n{}", proxy.log_tail(40)))
}
