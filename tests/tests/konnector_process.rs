//! The `konnector run` process as a Deployment runs it: leader election between replicas,
//! failover when the leader dies, Prometheus metrics and the process probes.

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
    let args = format!(
        "--leader-elect --leader-election-namespace={SECRET_NAMESPACE} --pod-name={name} \
         --leader-election-lease-duration=4s --leader-election-renew-deadline=3s \
         --leader-election-retry-period=1s --connection-resync=1s"
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
    let leases = Api::<Lease>::namespaced(consumer.clone(), SECRET_NAMESPACE);
    let spec = leases.get("konnector.kbind.io").await?.spec;
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
