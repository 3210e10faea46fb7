//! The `konnector run` process as a Deployment runs it: leader election between replicas,
//! failover when the leader dies, a rolling upgrade from replicas that elected through
//! `kube-lease-manager`, Prometheus metrics and the process probes.

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::Lease;
use kbind_tests::eventually;
use kbind_tests::faults::process::KonnectorProcess;
use kbind_tests::fixtures::*;
use kbind_tests::testenv::{ClusterPair, shared_pair};
use kube::api::Api;

/// The sample counting Connection reconciles: non-zero only on a leader.
const RECONCILES: &str = "kbind_reconciles_total{controller=\"connection\"}";

/// Starts replica `name` (its leader-election identity) of a leader-elected `konnector run`.
fn replica(pair: &ClusterPair, name: &str) -> anyhow::Result<(String, KonnectorProcess)> {
    replica_on(pair, name, "konnector.kbind.io")
}

/// [`replica`] electing on Lease `lease`.
fn replica_on(
    pair: &ClusterPair,
    name: &str,
    lease: &str,
) -> anyhow::Result<(String, KonnectorProcess)> {
    let args = format!(
        "--leader-elect --leader-election-namespace={SECRET_NAMESPACE} --pod-name={name} \
         --leader-election-id={lease} --leader-election-lease-duration=4s \
         --leader-election-renew-deadline=3s --leader-election-retry-period=1s \
         --connection-resync=1s --log-format=json"
    );
    let args: Vec<&str> = args.split_whitespace().collect();
    let kubeconfig = pair.consumer.admin().kubeconfig_path();
    let log = pair.root().join(format!("{name}.log"));
    let binary = kbind_tests::konnector_binary!();
    let process = KonnectorProcess::start(&binary, kubeconfig, &log, &args)?;
    Ok((name.to_string(), process))
}

/// How many Connection reconciles a replica's metrics count.
async fn reconciles(replica: &KonnectorProcess) -> anyhow::Result<f64> {
    let (_, body) = http_get(replica.metrics, "/metrics").await?;
    Ok(metric_value(&body, RECONCILES).unwrap_or(0.0))
}

/// The identity holding the konnector's Lease.
async fn holder(consumer: &kube::Client) -> anyhow::Result<String> {
    holder_of(consumer, "konnector.kbind.io").await
}

/// The identity holding Lease `lease`.
async fn holder_of(consumer: &kube::Client, lease: &str) -> anyhow::Result<String> {
    let leases = Api::<Lease>::namespaced(consumer.clone(), SECRET_NAMESPACE);
    let spec = leases.get(lease).await?.spec;
    let holder = spec.and_then(|s| s.holder_identity);
    holder
        .filter(|h| !h.is_empty())
        .context("the lease has no holder")
}

/// A Connection to the provider, Ready: proof that the leader reconciles.
async fn ready_connection(pair: &ClusterPair, name: &str) -> anyhow::Result<()> {
    let consumer = pair.consumer.client().await?;
    connect_ready(&consumer, &pair.provider, name).await?;
    Ok(())
}

#[tokio::test]
async fn one_replica_leads_and_the_standby_takes_over_when_it_dies() -> anyhow::Result<()> {
    let pair = shared_pair()?;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        install_core_crds(&consumer).await?;
        ensure_namespace(&consumer, SECRET_NAMESPACE).await?;
        let mut replicas = vec![replica(pair, "replica-a")?, replica(pair, "replica-b")?];

        // Both processes answer their probes; exactly one holds the lease.
        eventually(CONVERGE, || async {
            for (name, replica) in &replicas {
                for path in ["/healthz", "/readyz"] {
                    let (code, _) = http_get(replica.health, path).await?;
                    anyhow::ensure!(code == 200, "{name} {path}: {code}");
                }
            }
            Ok(())
        })
        .await?;
        let leader = eventually(CONVERGE, || holder(&consumer)).await?;
        ready_connection(pair, &unique("elected")).await?;
        let index = replicas.iter().position(|(name, _)| *name == leader);
        let index = index.context("the lease holder is no replica")?;
        let (leading, standby) = (&replicas[index].1, &replicas[1 - index].1);
        assert!(reconciles(leading).await? > 0.0, "the leader reconciles");
        assert_eq!(reconciles(standby).await?, 0.0, "the standby does not");
        let (_, exposition) = http_get(leading.metrics, "/metrics").await?;
        let engaged = metric_value(&exposition, "kbind_engaged_connections");
        assert!(engaged.unwrap_or(0.0) >= 1.0, "{exposition}");
        let durations = exposition.contains("kbind_reconcile_duration_seconds_bucket");
        assert!(durations, "durations are exported");

        // The leader dies (SIGKILL) without releasing the lease; the standby takes over.
        replicas[index].1.kill_hard()?;
        let (survivor, process) = &replicas[1 - index];
        eventually(Duration::from_secs(30), || async {
            let now = holder(&consumer).await?;
            anyhow::ensure!(now == *survivor, "lease still held by {now}");
            Ok(())
        })
        .await?;
        ready_connection(pair, &unique("after-failover")).await?;
        assert!(reconciles(process).await? > 0.0, "the new leader too");
        anyhow::Ok(())
    })
    .await
}

/// Whether `replica`'s log says it became leader.
fn led(pair: &ClusterPair, name: &str) -> anyhow::Result<bool> {
    let log = std::fs::read_to_string(pair.root().join(format!("{name}.log")))?;
    Ok(log.contains("became leader"))
}

/// A replica of a release that elected through `kube-lease-manager` (as earlier konnectors
/// did), on Lease `lease` with the new replicas' duration: its leadership as it reports it.
async fn earlier_replica(
    consumer: &kube::Client,
    identity: &str,
    lease: &str,
) -> anyhow::Result<(
    tokio::sync::watch::Receiver<bool>,
    tokio::task::JoinHandle<
        Result<kube_lease_manager::LeaseManager, kube_lease_manager::LeaseManagerError>,
    >,
)> {
    let params = kube_lease_manager::LeaseParams::new(identity, 4, 1);
    let manager = kube_lease_manager::LeaseManager::new(
        consumer.clone(),
        lease,
        SECRET_NAMESPACE,
        params,
        kube_lease_manager::LeaseCreateMode::AutoCreate,
    )
    .await?;
    Ok(manager.watch().await)
}

#[tokio::test]
async fn a_rolling_upgrade_from_the_earlier_election_never_has_two_leaders() -> anyhow::Result<()> {
    const LEASE: &str = "upgrade.kbind.io";
    let pair = shared_pair()?;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        install_core_crds(&consumer).await?;
        ensure_namespace(&consumer, SECRET_NAMESPACE).await?;
        // The earlier release leads.
        let (mut old_leads, old_task) = earlier_replica(&consumer, "old-replica", LEASE).await?;
        tokio::time::timeout(CONVERGE, old_leads.wait_for(|leads| *leads))
            .await
            .context("the earlier replica never led")??;
        // The new replica starts beside it: a standby for as long as the old one renews.
        let _new = replica_on(pair, "upgraded", LEASE)?;
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(holder_of(&consumer, LEASE).await?, "old-replica");
        assert!(*old_leads.borrow(), "the earlier replica still leads");
        assert!(
            !led(pair, "upgraded")?,
            "the new replica led beside the earlier one"
        );

        // The earlier Pod stops and releases the Lease: the new replica takes it.
        drop(old_leads);
        old_task.await??;
        eventually(Duration::from_secs(30), || async {
            anyhow::ensure!(led(pair, "upgraded")?, "the new replica does not lead yet");
            Ok(())
        })
        .await?;
        assert_eq!(holder_of(&consumer, LEASE).await?, "upgraded");

        // A second earlier replica (a rollback, or one not yet replaced) never takes it while
        // the new one renews.
        let (late_leads, late_task) = earlier_replica(&consumer, "old-replica-2", LEASE).await?;
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(
            !*late_leads.borrow(),
            "an earlier replica took the Lease from a live leader"
        );
        assert_eq!(holder_of(&consumer, LEASE).await?, "upgraded");
        drop(late_leads);
        late_task.await??;
        anyhow::Ok(())
    })
    .await
}
