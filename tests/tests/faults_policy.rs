//! Fault: a conflict-policy module that traps on one consumer object and loops forever on
//! another (issue 8: "that object reports the error, the others keep syncing").
//!
//! Injected: a hand-written component ([`poisoned_conflict_policy`]) swapped in for the
//! built-in conflict policy, with the UIDs of two consumer instances baked in; a 500 ms policy
//! deadline bounds the loop.
//!
//! Counted: the 30 other instances all reach the provider (and one created later does), the two
//! poisoned instances never get a provider copy, and each carries a `PolicyFailed` Warning
//! Event naming the failure (trap, deadline); the konnector's metrics count both failure kinds
//! and at least 31 instance writes.

use std::time::Duration;

use anyhow::Context as _;
use kbind_tests::faults::policy::poisoned_conflict_policy;
use kbind_tests::faults::{create_instances, wait_copies};
use kbind_tests::fixtures::metric_value;
use kbind_tests::syncenv::{
    Stack, TestApi, ensure_namespace, events_for, fast_settings, stays, wait_for,
};
use kbind_tests::testenv::shared_pair;
use konnector::api::ConflictPolicy;
use konnector::policy::{Policies, PolicyLimits, PolicyRole};
use kube::ResourceExt;
use serde_json::json;

const OTHERS: usize = 30;
const WAIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_that_traps_or_loops_on_one_object_does_not_stop_the_others() -> anyhow::Result<()>
{
    let pair = shared_pair()?;
    let ns = "faults-policy";
    let api = TestApi::namespaced("policy.faults.kbind.io");
    // The consumer CRD is installed up front (pinned to the stack's Connection, as schema
    // installation would) so the poisoned instances exist, with their UIDs, before the stack
    // that runs the poisoned module starts.
    let provider = pair.provider.client().await?;
    let consumer = pair.consumer.client().await?;
    api.install_on_provider(&provider).await?;
    api.install_on_consumer(&consumer, Some(ns)).await?;
    ensure_namespace(&consumer, ns).await?;
    let trap = api
        .create(&consumer, Some(ns), "poison-trap", json!({ "v": 1 }))
        .await?;
    let spin = api
        .create(&consumer, Some(ns), "poison-loop", json!({ "v": 1 }))
        .await?;
    let module =
        poisoned_conflict_policy(&trap.uid().context("uid")?, &spin.uid().context("uid")?)?;
    let policies =
        Policies::builtin()?.with_module(PolicyRole::ConflictPolicy, &module, "poisoned.wasm")?;
    let policies = policies.with_limits(PolicyLimits {
        timeout: Duration::from_millis(500),
        ..policies.limits()
    });
    let stack = Stack::start_with_policies(pair, ns, fast_settings(ns), policies).await?;
    let result = pair
        .diagnose(stack.diagnose(&[&api], async {
            stack.engage(&[&api]);
            stack
                .create_ready_binding(&stack.binding(ns, "widgets", &[&api], ConflictPolicy::Fail))
                .await?;
            create_instances(&api, &stack.consumer, ns, "ok", 0..OTHERS).await?;
            wait_copies(&api, &stack.provider, ns, OTHERS, WAIT).await?;

            for (name, expected) in [("poison-trap", "trap"), ("poison-loop", "did not finish")] {
                let note = wait_for(&format!("PolicyFailed Event on {name}"), WAIT, || async {
                    let events = events_for(&stack.consumer, Some(ns), name).await?;
                    Ok(events
                        .into_iter()
                        .filter(|e| e.reason.as_deref() == Some("PolicyFailed"))
                        .find_map(|e| e.note))
                })
                .await?;
                println!("{name}: {note}");
                assert!(
                    note.contains(expected),
                    "the Event on {name} names the failure ({expected}): {note}"
                );
            }
            // The syncer keeps going: a later instance syncs while the poisoned ones retry.
            api.create(&stack.consumer, Some(ns), "late", json!({ "v": 1 }))
                .await?;
            wait_copies(&api, &stack.provider, ns, OTHERS + 1, WAIT).await?;
            let copies = api.api(&stack.provider, Some(ns));
            stays(
                "no provider copy of the poisoned instances",
                Duration::from_secs(3),
                || async {
                    Ok(copies.get_opt("poison-trap").await?.is_none()
                        && copies.get_opt("poison-loop").await?.is_none())
                },
            )
            .await?;
            // The failures and the writes are counted in the konnector's metrics.
            let text = konnector::telemetry::metrics().encode();
            for kind in ["trap", "timeout"] {
                let sample =
                    format!("kbind_policy_failures_total{{role=\"conflict\",kind=\"{kind}\"}}");
                let n = metric_value(&text, &sample).unwrap_or(0.0);
                assert!(n >= 1.0, "{sample} counted: {n}\n{text}");
            }
            let sample = format!("kbind_instances_synced_total{{api=\"{}\"}}", api.name());
            let synced = metric_value(&text, &sample).unwrap_or(0.0);
            assert!(synced >= (OTHERS + 1) as f64, "{sample}: {synced}");
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}
