//! Fault: the konnector process killed with SIGKILL mid-sync and started again converges, with
//! every instance's finalizer consistent.
//!
//! Injected: the real `konnector run` binary syncs 1 000 instances being created on the
//! consumer; once at least 200 copies exist it gets SIGKILL (no graceful shutdown, in-flight
//! writes cut off), and a new process is started on the same clusters.
//!
//! Counted: after the restart 1 000 instances, 1 000 copies, 1 000 distinct UID markers, each
//! instance with exactly one syncer finalizer ([`check_converged`]); then 50 instances are
//! deleted and both sides drop to 950 with the same one-to-one correspondence (the finalizers
//! added before the kill are released by the new process).

use std::time::Duration;

use kbind_tests::faults::process::KonnectorProcess;
use kbind_tests::faults::{
    check_converged, count_copies, create_instances, create_ready_binding, instance_name,
    wait_copies,
};
use kbind_tests::fixtures::{connect, has_condition, install_core_crds, wait_connection};
use kbind_tests::syncenv::{TestApi, delete, ensure_namespace, wait_for};
use kbind_tests::testenv::ClusterPair;
use konnector::api::names::DEFAULT_SECRET_NAMESPACE;
use konnector::api::{SchemaPolicy, SchemaSource};

const INSTANCES: usize = 1000;
const KILL_AFTER: usize = 200;
const DELETED: usize = 50;
const WAIT: Duration = Duration::from_secs(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_sync_then_restart_converges_with_consistent_finalizers() -> anyhow::Result<()>
{
    let binary = kbind_tests::konnector_binary!();
    let pair = ClusterPair::start_private()?;
    let log = pair.root().join("konnector.log");
    let kubeconfig = pair.consumer.admin().kubeconfig_path().to_path_buf();
    let result = pair
        .diagnose(async {
            let consumer = pair.consumer.client().await?;
            let provider = pair.provider.client().await?;
            install_core_crds(&consumer).await?;
            ensure_namespace(&consumer, DEFAULT_SECRET_NAMESPACE).await?;
            let api = TestApi::namespaced("kill.faults.kbind.io");
            api.install_on_provider(&provider).await?;
            let schema = SchemaPolicy {
                source: SchemaSource::Crd,
                ..SchemaPolicy::default()
            };
            connect(&consumer, &pair.provider, "provider", schema, false).await?;
            let mut konnector = KonnectorProcess::start(&binary, &kubeconfig, &log, &[])?;
            wait_connection(&consumer, "provider", "Ready", |c| {
                has_condition(c, "Ready", "True", "AsExpected")
            })
            .await?;
            let ns = "killed";
            create_ready_binding(&consumer, ns, "provider", &[&api], WAIT).await?;

            let creating = {
                let (api, consumer) = (api.clone(), consumer.clone());
                tokio::spawn(async move {
                    create_instances(&api, &consumer, ns, "w", 0..INSTANCES).await
                })
            };
            wait_for(
                &format!("{KILL_AFTER} copies before the kill"),
                WAIT,
                || async {
                    let n = count_copies(&api, &provider, ns).await?;
                    Ok((n >= KILL_AFTER).then_some(()))
                },
            )
            .await?;
            // Fault: SIGKILL mid-sync.
            konnector.kill_hard()?;
            let at_kill = count_copies(&api, &provider, ns).await?;
            creating.await??;
            let konnector = KonnectorProcess::start(&binary, &kubeconfig, &log, &[])?;
            konnector.wait_ready(WAIT).await?;

            wait_copies(&api, &provider, ns, INSTANCES, WAIT).await?;
            let counted = check_converged(&api, &consumer, &provider, ns).await?;
            println!("SIGKILL with {at_kill} copies written: after restart {counted:?}");
            assert_eq!(counted.consumer, INSTANCES);
            assert_eq!(counted.distinct_markers, INSTANCES);

            // The finalizers the killed process placed are honoured by the new one.
            let instances = api.api(&consumer, Some(ns));
            for i in 0..DELETED {
                delete(&instances, &instance_name("w", i)).await?;
            }
            wait_copies(&api, &provider, ns, INSTANCES - DELETED, WAIT).await?;
            wait_for("deleted instances released", WAIT, || async {
                let left = instances
                    .list_metadata(&Default::default())
                    .await?
                    .items
                    .len();
                Ok((left == INSTANCES - DELETED).then_some(()))
            })
            .await?;
            let counted = check_converged(&api, &consumer, &provider, ns).await?;
            assert_eq!(counted.distinct_markers, INSTANCES - DELETED);
            drop(konnector);
            anyhow::Ok(())
        })
        .await;
    match result {
        Ok(()) => Ok(()),
        Err(e) => {
            let tail = kbind_tests::testenv::tail(&log, 60);
            Err(anyhow::anyhow!("{e:?}\n--- konnector log\n{tail}"))
        }
    }
}
