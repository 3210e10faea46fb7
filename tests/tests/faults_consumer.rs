//! Fault: the consumer kube-apiserver (and its etcd) restarted under a running konnector
//! (required: "watches recover without a restart of the konnector").
//!
//! Injected: `Cluster::stop` then `Cluster::start` of the consumer, on the same data, ports
//! and credentials, while the in-process konnector stack keeps running (it is never
//! restarted or re-engaged).
//!
//! Counted: instances created and changed *after* the restart reach the provider (only a
//! recovered consumer watch can deliver them), and both sides then correspond one to one
//! ([`check_converged`]: 40 instances, 40 copies, 40 distinct UID markers).

use std::time::Duration;

use kbind_tests::faults::{check_converged, create_instances, instance_name, wait_copies};
use kbind_tests::syncenv::{Stack, TestApi, ensure_namespace, merge, wait_for};
use kbind_tests::testenv::ClusterPair;
use konnector::api::ConflictPolicy;
use serde_json::json;

const BEFORE: usize = 20;
const AFTER: usize = 20;
const WAIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_restart_recovers_watches_without_restarting_the_konnector() -> anyhow::Result<()>
{
    let pair = ClusterPair::start_private()?;
    let ns = "consumer-restart";
    let stack = Stack::start(&pair, ns).await?;
    let api = TestApi::namespaced("restart.faults.kbind.io");
    let result = pair
        .diagnose(stack.diagnose(&[&api], async {
            api.export(&stack).await?;
            stack.engage(&[&api]);
            stack
                .create_ready_binding(&stack.binding(ns, "widgets", &[&api], ConflictPolicy::Fail))
                .await?;
            ensure_namespace(&stack.consumer, ns).await?;
            create_instances(&api, &stack.consumer, ns, "before", 0..BEFORE).await?;
            wait_copies(&api, &stack.provider, ns, BEFORE, WAIT).await?;

            // Fault: the consumer apiserver restarts; the konnector's watches break.
            tokio::task::block_in_place(|| pair.consumer.stop());
            tokio::time::sleep(Duration::from_secs(3)).await;
            tokio::task::block_in_place(|| pair.consumer.start())?;

            let consumer = pair.consumer.client().await?;
            create_instances(&api, &consumer, ns, "after", 0..AFTER).await?;
            let changed = instance_name("before", 0);
            merge(
                &api.api(&consumer, Some(ns)),
                &changed,
                json!({ "spec": { "index": "changed" } }),
            )
            .await?;
            wait_copies(&api, &stack.provider, ns, BEFORE + AFTER, WAIT).await?;
            let provider = api.api(&stack.provider, Some(ns));
            wait_for("the change made after the restart", WAIT, || async {
                Ok(provider
                    .get_opt(&changed)
                    .await?
                    .filter(|o| o.data["spec"] == json!({ "index": "changed" })))
            })
            .await?;
            let counted = check_converged(&api, &consumer, &stack.provider, ns).await?;
            println!("consumer restart: {counted:?}");
            assert_eq!(counted.provider, BEFORE + AFTER);
            assert_eq!(counted.distinct_markers, BEFORE + AFTER);
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}
