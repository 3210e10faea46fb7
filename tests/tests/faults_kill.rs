//! Fault: the real `konnector run` process killed with SIGKILL (no graceful shutdown,
//! in-flight writes cut off) while 1 000 instances are created and synced, then started again:
//! both sides converge one to one, and the finalizers the killed process placed are released
//! by the new one when 50 instances are deleted.

use kbind_tests::faults::process::KonnectorProcess;
use kbind_tests::faults::{FAULT_WAIT, Sides, instance_name};
use kbind_tests::fixtures::install_core_crds;
use kbind_tests::syncenv::{TestApi, delete, ensure_namespace};
use kbind_tests::testenv::{ClusterPair, tail};
use konnector::api::names::DEFAULT_SECRET_NAMESPACE;

const INSTANCES: usize = 1000;
const KILL_AFTER: usize = 200;
const DELETED: usize = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_sync_then_restart_converges_with_consistent_finalizers() -> anyhow::Result<()>
{
    let binary = kbind_tests::konnector_binary!();
    let pair = ClusterPair::start_private()?;
    let log = pair.root().join("konnector.log");
    let kubeconfig = pair.consumer.admin().kubeconfig_path().to_path_buf();
    let start = || KonnectorProcess::start(&binary, &kubeconfig, &log, &[]);
    let result = pair.diagnose(async {
        let api = TestApi::namespaced("kill.faults.kbind.io");
        let sides = Sides::on(&pair, api, "killed").await?;
        install_core_crds(&sides.consumer).await?;
        ensure_namespace(&sides.consumer, DEFAULT_SECRET_NAMESPACE).await?;
        let mut konnector = start()?;
        sides.connect(&pair.provider, "provider").await?;
        let kill = async || konnector.kill_hard();
        sides.fault_mid_sync(INSTANCES, KILL_AFTER, kill).await?;
        let restarted = start()?;
        restarted.wait_ready(FAULT_WAIT).await?;
        sides.converged(INSTANCES).await?;

        // The finalizers the killed process placed are honoured by the new one.
        for i in 0..DELETED {
            delete(&sides.instances(), &instance_name("w", i)).await?;
        }
        sides.converged(INSTANCES - DELETED).await
    });
    result
        .await
        .map_err(|e| anyhow::anyhow!("{e:?}\n--- konnector log\n{}", tail(&log, 60)))
}
