//! The `konnector run` process as a Deployment runs it: leader election between replicas,
//! failover when the leader dies, Prometheus metrics and the process probes.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;

use kbind_tests::eventually;
use kbind_tests::fixtures::*;
use kbind_tests::testenv::{ClusterPair, shared_pair};
use konnector::api::{SchemaPolicy, SchemaSource};

/// One `konnector run` replica with its probe and metrics ports.
struct Replica {
    name: String,
    child: Child,
    metrics: u16,
    health: u16,
}

impl Replica {
    fn start(binary: &Path, pair: &ClusterPair, name: &str) -> anyhow::Result<Self> {
        let (metrics, health) = (free_port()?, free_port()?);
        let log = std::fs::File::create(pair.root().join(format!("{name}.log")))?;
        let child = Command::new(binary)
            .args(["run", "--kubeconfig"])
            .arg(pair.consumer.admin().kubeconfig_path())
            .args([
                "--leader-elect",
                &format!("--leader-election-namespace={SECRET_NAMESPACE}"),
                "--leader-election-lease-duration=4s",
                "--connection-resync=1s",
                &format!("--metrics-bind-address=127.0.0.1:{metrics}"),
                &format!("--health-probe-bind-address=127.0.0.1:{health}"),
            ])
            .env("POD_NAME", name)
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .context("starting konnector run")?;
        Ok(Self {
            name: name.to_string(),
            child,
            metrics,
            health,
        })
    }

    async fn reconciles(&self) -> anyhow::Result<f64> {
        let (_, body) = http_get(self.metrics, "/metrics").await?;
        Ok(metric_value(&body, "kbind_reconciles_total{controller=\"connection\"}").unwrap_or(0.0))
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The identity holding the konnector's Lease.
async fn holder(consumer: &kube::Client) -> anyhow::Result<String> {
    let leases = Api::<Lease>::namespaced(consumer.clone(), SECRET_NAMESPACE);
    let spec = leases.get("konnector.kbind.io").await?.spec;
    let holder = spec
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty());
    holder.context("the lease has no holder")
}

/// A Connection to the provider, Ready: proof that the leader reconciles.
async fn ready_connection(pair: &ClusterPair, name: &str) -> anyhow::Result<()> {
    let consumer = pair.consumer.client().await?;
    let schema = SchemaPolicy {
        source: SchemaSource::Crd,
        ..SchemaPolicy::default()
    };
    connect(&consumer, &pair.provider, name, schema, false).await?;
    wait_ready(&consumer, name).await?;
    Ok(())
}

#[tokio::test]
async fn one_of_two_replicas_reconciles_and_the_other_takes_over_when_it_dies() -> anyhow::Result<()>
{
    let pair = shared_pair()?;
    let binary = kbind_tests::konnector_binary!();
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        install_core_crds(&consumer).await?;
        ensure_namespace(&consumer, SECRET_NAMESPACE).await?;
        let mut replicas = vec![
            Replica::start(&binary, pair, "replica-a")?,
            Replica::start(&binary, pair, "replica-b")?,
        ];

        // Both processes answer their probes; exactly one holds the lease.
        eventually(CONVERGE, || async {
            let paths = ["/healthz", "/readyz"];
            for (replica, path) in replicas.iter().flat_map(|r| paths.map(|p| (r, p))) {
                let (code, _) = http_get(replica.health, path).await?;
                anyhow::ensure!(code == 200, "{} {path}: {code}", replica.name);
            }
            Ok(())
        })
        .await?;
        let leader = eventually(CONVERGE, || holder(&consumer)).await?;
        ready_connection(pair, &unique("elected")).await?;
        let index = replicas
            .iter()
            .position(|r| r.name == leader)
            .context("the lease holder is no replica")?;
        let (leading, standby) = (&replicas[index], &replicas[1 - index]);
        assert!(leading.reconciles().await? > 0.0, "the leader reconciles");
        assert_eq!(standby.reconciles().await?, 0.0, "the standby does not");
        let (_, exposition) = http_get(leading.metrics, "/metrics").await?;
        let engaged = metric_value(&exposition, "kbind_engaged_connections");
        assert!(engaged.unwrap_or(0.0) >= 1.0, "{exposition}");
        let durations = exposition.contains("kbind_reconcile_duration_seconds_bucket");
        assert!(durations, "durations are exported");

        // The leader dies (dropping a Replica kills it) without releasing the lease; the
        // standby takes over.
        drop(replicas.remove(index));
        let survivor = &replicas[0];
        eventually(Duration::from_secs(30), || async {
            let now = holder(&consumer).await?;
            anyhow::ensure!(now == survivor.name, "lease still held by {now}");
            Ok(())
        })
        .await?;
        ready_connection(pair, &unique("after-failover")).await?;
        assert!(survivor.reconciles().await? > 0.0, "the new leader too");
        anyhow::Ok(())
    })
    .await
}
