//! Fault: a conflict-policy module that traps on one consumer object and loops forever on
//! another (that object reports the error, the others keep syncing); and one that answers
//! Adopt to everything, which the host must not obey beyond the ownership rule.
//!
//! Injected: a hand-written component ([`poisoned_conflict_policy`]) swapped in for the
//! built-in conflict policy, with the UIDs of two consumer instances baked in; a 500 ms policy
//! deadline bounds the loop.
//!
//! Counted: the 30 other instances all reach the provider (and one created later does), the two
//! poisoned instances never get a provider copy, and each carries a `PolicyFailed` Warning
//! Event naming the failure (trap, deadline); the konnector's metrics count both failure kinds
//! and at least 31 instance writes.
//!
//! Always-adopt: under `conflictPolicy: Fail`, a provider object marked by another consumer
//! and an unmarked one; under `Adopt`, one marked by another consumer, one with a partial
//! marker and an unmarked one; plus an instance with no provider object at all. Counted: every
//! refused object keeps its spec, annotations and resourceVersion, the instance without a
//! target gets no copy, each refused instance has `Synced=False` reason `PolicyFailed` and a
//! Warning Event saying why, and the binding counts them in its own `Synced`; only the unmarked
//! object under Adopt is taken.

use std::time::Duration;

use anyhow::Context as _;
use kbind_tests::faults::policy::{always_adopt_conflict_policy, poisoned_conflict_policy};
use kbind_tests::faults::{create_instances, wait_copies};
use kbind_tests::fixtures::metric_value;
use kbind_tests::syncenv::{
    BINDING, Scenario, TestApi, ensure_namespace, event_note, stays, synced_condition, wait_for,
};
use kbind_tests::testenv::shared_pair;
use konnector::api::names::{CONSUMER_CLUSTER_UID_ANNOTATION, CONSUMER_OBJECT_UID_ANNOTATION};
use konnector::api::{Binding, ConflictPolicy};
use konnector::policy::{Policies, PolicyLimits, PolicyRole};
use kube::api::{DynamicObject, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const OTHERS: usize = 30;
const WAIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_that_traps_or_loops_on_one_object_does_not_stop_the_others() -> anyhow::Result<()>
{
    let scenario = Scenario::unbound("faults-policy");
    let (api, ns) = (scenario.api().clone(), "faults-policy");
    // The consumer CRD is installed up front (pinned to the stack's Connection, as schema
    // installation would) so the poisoned instances exist, with their UIDs, before the stack
    // that runs the poisoned module starts.
    let pair = shared_pair()?;
    let consumer = pair.consumer.client().await?;
    api.install_on_provider(&pair.provider.client().await?)
        .await?;
    api.install_on_consumer(&consumer, Some(ns)).await?;
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
    scenario
        .policies(policies)
        .start()
        .await?
        .run(async |s| {
            s.engage();
            s.bind().await?;
            create_instances(&api, &s.consumer, ns, "ok", 0..OTHERS).await?;
            wait_copies(&api, &s.provider, ns, OTHERS, WAIT).await?;

            for (name, expected) in [("poison-trap", "trap"), ("poison-loop", "did not finish")] {
                let note = event_note(&s.consumer, (ns, name), "PolicyFailed", None, WAIT).await?;
                println!("{name}: {note}");
                assert!(
                    note.contains(expected),
                    "the Event on {name} names the failure ({expected}): {note}"
                );
            }
            // The syncer keeps going: a later instance syncs while the poisoned ones retry.
            s.create("late", json!({ "v": 1 })).await?;
            wait_copies(&api, &s.provider, ns, OTHERS + 1, WAIT).await?;
            stays(
                "no provider copy of the poisoned instances",
                Duration::from_secs(3),
                || async {
                    Ok(s.copies().get_opt("poison-trap").await?.is_none()
                        && s.copies().get_opt("poison-loop").await?.is_none())
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
            Ok(())
        })
        .await
}

/// Creates a provider object directly, with the given ownership annotations.
async fn provider_object(
    api: &TestApi,
    provider: &kube::Client,
    ns: &str,
    name: &str,
    markers: &[(&str, &str)],
) -> anyhow::Result<DynamicObject> {
    let mut obj = api.object(Some(ns), name, json!({ "owner": "someone else" }));
    obj.metadata.annotations = Some(
        markers
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect(),
    );
    Ok(api
        .api(provider, Some(ns))
        .create(&PostParams::default(), &obj)
        .await?)
}

/// Waits until the consumer instance shows the refusal: a `PolicyFailed` Warning Event whose
/// note names the refused answer, and `Synced=False` reason `PolicyFailed`.
async fn refused(s: &Scenario, ns: &str, name: &str) -> anyhow::Result<String> {
    let note = event_note(
        &s.consumer,
        (ns, name),
        "PolicyFailed",
        Some("Warning"),
        WAIT,
    )
    .await?;
    wait_for(
        &format!("Synced=False PolicyFailed on {ns}/{name}"),
        WAIT,
        || async {
            let obj = s.api.api(&s.consumer, Some(ns)).get(name).await?;
            Ok(synced_condition(&obj)
                .filter(|c| c["status"] == "False" && c["reason"] == "PolicyFailed"))
        },
    )
    .await?;
    Ok(note)
}

/// Fails unless the provider object is exactly as it was: resourceVersion, spec, annotations.
async fn unchanged(
    api: &TestApi,
    provider: &kube::Client,
    before: &DynamicObject,
) -> anyhow::Result<bool> {
    let ns = before.namespace();
    let now = api
        .api(provider, ns.as_deref())
        .get(&before.name_any())
        .await?;
    Ok(now.resource_version() == before.resource_version()
        && now.data["spec"] == before.data["spec"]
        && now.annotations() == before.annotations())
}

#[test]
fn a_policy_that_always_adopts_takes_only_what_the_host_allows() -> anyhow::Result<()> {
    let (fail_ns, adopt_ns) = ("faults-adopt-fail", "faults-adopt-adopt");
    let module = always_adopt_conflict_policy()?;
    let policies = Policies::builtin()?.with_module(
        PolicyRole::ConflictPolicy,
        &module,
        "always-adopt.wasm",
    )?;
    Scenario::unbound("faults-adopt")
        .policies(policies)
        .run(async |s| {
            let (api, provider) = (&s.api, &s.provider);
            s.export().await?;
            s.engage();
            for (ns, policy) in [
                (fail_ns, ConflictPolicy::Fail),
                (adopt_ns, ConflictPolicy::Adopt),
            ] {
                s.create_ready_binding(&s.binding(ns, BINDING, &[api], policy))
                    .await?;
                ensure_namespace(provider, ns).await?;
            }
            let another = [
                (CONSUMER_CLUSTER_UID_ANNOTATION, "another-consumer-cluster"),
                (CONSUMER_OBJECT_UID_ANNOTATION, "another-object"),
            ];
            let partial = [(CONSUMER_CLUSTER_UID_ANNOTATION, s.consumer_uid.as_str())];
            // (namespace, name, markers): the objects the module would take, all refused.
            let guarded: [(&str, &str, Markers); 4] = [
                (fail_ns, "owned-elsewhere", &another),
                (fail_ns, "unmarked", &[]),
                (adopt_ns, "owned-elsewhere", &another),
                (adopt_ns, "partial", &partial),
            ];
            let mut before = Vec::new();
            for (ns, name, markers) in guarded {
                before.push(provider_object(api, provider, ns, name, markers).await?);
            }
            let adoptable = provider_object(api, provider, adopt_ns, "unmarked", &[]).await?;
            let mine = json!({ "mine": true });
            for (ns, name, _) in guarded {
                api.create(&s.consumer, Some(ns), name, mine.clone())
                    .await?;
            }
            api.create(&s.consumer, Some(adopt_ns), "unmarked", mine.clone())
                .await?;
            api.create(&s.consumer, Some(fail_ns), "no-target", mine.clone())
                .await?;

            // The one answer the rule allows is carried out: the unmarked object under Adopt.
            let adopted = wait_for("the unmarked object under Adopt adopted", WAIT, || async {
                let obj = api.api(provider, Some(adopt_ns)).get("unmarked").await?;
                Ok((obj.data["spec"] == mine).then_some(obj))
            })
            .await?;
            assert_ne!(adopted.resource_version(), adoptable.resource_version());

            for (ns, name, _) in guarded {
                let note = refused(s, ns, name).await?;
                println!("{ns}/{name}: {note}");
                assert!(note.contains("decided Adopt"), "{ns}/{name}: {note}");
            }
            let note = refused(s, fail_ns, "no-target").await?;
            assert!(note.contains("no provider object"), "{note}");
            // The binding counts its refused instances under the policy's reason and says what
            // to do.
            let synced = wait_for("the binding counting PolicyFailed", WAIT, || async {
                let b = Api::<Binding>::namespaced(s.consumer.clone(), fail_ns)
                    .get(BINDING)
                    .await?;
                Ok(b.status.and_then(|st| {
                    st.conditions.into_iter().find(|c| {
                        c.type_ == "Synced"
                            && c.reason == "PolicyFailed"
                            && c.message.starts_with("3 of 3 instance(s) not in sync")
                    })
                }))
            })
            .await?;
            assert_eq!(synced.status, "False");
            assert!(
                synced.message.contains("PolicyFailed: 3 e.g. ")
                    && synced.message.contains("the conflict policy module failed"),
                "{}",
                synced.message
            );
            // Retries keep being refused: nothing changes on the provider for a while.
            stays(
                "the guarded provider objects unchanged",
                Duration::from_secs(4),
                || async {
                    for obj in &before {
                        if !unchanged(api, provider, obj).await? {
                            return Ok(false);
                        }
                    }
                    Ok(api
                        .api(provider, Some(fail_ns))
                        .get_opt("no-target")
                        .await?
                        .is_none())
                },
            )
            .await?;
            let text = konnector::telemetry::metrics().encode();
            let sample = "kbind_policy_failures_total{role=\"conflict\",kind=\"invalid-output\"}";
            let n = metric_value(&text, sample).unwrap_or(0.0);
            assert!(n >= 5.0, "{sample} counted: {n}");
            Ok(())
        })
}

/// Ownership annotations to put on a provider object: `(key, value)` pairs.
type Markers<'a> = &'a [(&'a str, &'a str)];
