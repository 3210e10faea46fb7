//! Fault: a swapped conflict-policy module ([`kbind_tests::faults::policy`]). One traps on one
//! consumer object and loops forever on another (a 500 ms deadline bounds the loop): those two
//! report the failure and never get a copy, the others keep syncing. Another answers Adopt to
//! everything: the host carries it out only where the ownership rule allows (an unmarked
//! object under `conflictPolicy: Adopt`), refuses it elsewhere without touching the provider
//! object, and the binding counts the refusals in its own `Synced`.

use std::time::Duration;

use anyhow::Context as _;
use kbind_tests::faults::policy::{always_adopt_conflict_policy, poisoned_conflict_policy};
use kbind_tests::faults::{FAULT_WAIT, Sides};
use kbind_tests::fixtures::metric_value;
use kbind_tests::syncenv::{BINDING, Scenario, ensure_namespace, stays, wait_for};
use kbind_tests::testenv::shared_pair;
use konnector::api::Binding;
use konnector::api::ConflictPolicy::{Adopt, Fail};
use konnector::api::names::{CONSUMER_CLUSTER_UID_ANNOTATION, CONSUMER_OBJECT_UID_ANNOTATION};
use konnector::policy::{Policies, PolicyRole};
use kube::api::{DynamicObject, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

const OTHERS: usize = 30;
/// How long refused provider objects are watched for a change.
const UNCHANGED: Duration = Duration::from_secs(4);
/// The instances the poisoned module traps on and loops on.
const POISONED: [&str; 2] = ["poison-trap", "poison-loop"];

/// The built-in policies with `module` as the conflict policy.
fn conflict_policy(module: &[u8]) -> anyhow::Result<Policies> {
    Ok(Policies::builtin()?.with_module(PolicyRole::ConflictPolicy, module, "swapped.wasm")?)
}

/// The metric sample counting conflict-policy failures of `kind`.
fn failures(kind: &str) -> String {
    format!("kbind_policy_failures_total{{role=\"conflict\",kind=\"{kind}\"}}")
}

/// Fails unless the konnector's metrics counted `sample` at least `min` times.
fn counted(sample: &str, min: usize) -> anyhow::Result<()> {
    let text = konnector::telemetry::metrics().encode();
    let n = metric_value(&text, sample).unwrap_or(0.0);
    anyhow::ensure!(n >= min as f64, "{sample} counted {n}, not {min}\n{text}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_that_traps_or_loops_on_one_object_does_not_stop_the_others() -> anyhow::Result<()>
{
    let scenario = Scenario::unbound("faults-policy");
    // The consumer CRD is installed up front (pinned to the stack's Connection, as schema
    // installation would) so the poisoned instances exist, with their UIDs, before the stack
    // that runs the poisoned module starts.
    let sides = Sides::on(shared_pair()?, scenario.api().clone(), "faults-policy").await?;
    let (api, ns) = (&sides.api, Some(sides.namespace.as_str()));
    api.install_on_provider(&sides.provider).await?;
    api.install_on_consumer(&sides.consumer, ns).await?;
    let mut uids = Vec::new();
    for name in POISONED {
        let poisoned = sides.create(name, json!({ "v": 1 })).await?;
        uids.push(poisoned.uid().context("uid")?);
    }
    let policies = conflict_policy(&poisoned_conflict_policy(&uids[0], &uids[1])?)?;
    let mut limits = policies.limits();
    limits.timeout = Duration::from_millis(500);
    let scenario = scenario.policies(policies.with_limits(limits));
    Scenario::run(scenario.start().await?, async |s| {
        s.engage();
        s.bind().await?;
        sides.create_many("ok", 0..OTHERS).await?;
        sides.wait_copies(OTHERS).await?;
        for (name, failure) in POISONED.into_iter().zip(["trap", "did not finish"]) {
            sides.warned(name, "PolicyFailed", failure).await?;
        }
        // The syncer keeps going: a later instance syncs while the poisoned ones retry.
        s.create("late", json!({ "v": 1 })).await?;
        sides.wait_copies(OTHERS + 1).await?;
        sides.never_copied(&POISONED).await?;
        let synced = format!("kbind_instances_synced_total{{api=\"{}\"}}", api.name());
        counted(&failures("trap"), 1)?;
        counted(&failures("timeout"), 1)?;
        counted(&synced, OTHERS + 1)
    })
    .await
}

/// Creates a provider object directly, with the ownership annotations `markers`.
async fn provider_object(at: &Sides, name: &str, markers: &Value) -> anyhow::Result<DynamicObject> {
    let spec = json!({ "owner": "someone else" });
    let mut obj = at.api.object(Some(&at.namespace), name, spec);
    obj.metadata.annotations = serde_json::from_value(markers.clone())?;
    Ok(at.copies().create(&PostParams::default(), &obj).await?)
}

/// What a refused provider object must keep: resourceVersion, spec and annotations.
fn state(obj: &DynamicObject) -> Value {
    json!([obj.resource_version(), obj.data["spec"], obj.annotations()])
}

#[test]
fn a_policy_that_always_adopts_takes_only_what_the_host_allows() -> anyhow::Result<()> {
    let policies = conflict_policy(&always_adopt_conflict_policy()?)?;
    let scenario = Scenario::unbound("faults-adopt").policies(policies);
    scenario.run(async |s| {
        let fail = Sides::of(s).in_namespace("faults-adopt-fail");
        let adopt = Sides::of(s).in_namespace("faults-adopt-adopt");
        s.export().await?;
        s.engage();
        for (sides, policy) in [(&fail, Fail), (&adopt, Adopt)] {
            let binding = s.binding(&sides.namespace, BINDING, &[&s.api], policy);
            s.create_ready_binding(&binding).await?;
            ensure_namespace(&s.provider, &sides.namespace).await?;
        }
        let another = json!({
            CONSUMER_CLUSTER_UID_ANNOTATION: "another-consumer-cluster",
            CONSUMER_OBJECT_UID_ANNOTATION: "another-object",
        });
        let partial = json!({ CONSUMER_CLUSTER_UID_ANNOTATION: s.consumer_uid });
        let unmarked = json!({});
        // The provider objects the module would take, all refused.
        let guarded = [
            (&fail, "owned-elsewhere", &another),
            (&fail, "unmarked", &unmarked),
            (&adopt, "owned-elsewhere", &another),
            (&adopt, "partial", &partial),
        ];
        let mine = json!({ "mine": true });
        let mut before = Vec::new();
        for (sides, name, markers) in guarded {
            before.push(state(&provider_object(sides, name, markers).await?));
            sides.create(name, mine.clone()).await?;
        }
        let adoptable = provider_object(&adopt, "unmarked", &unmarked).await?;
        adopt.create("unmarked", mine.clone()).await?;
        fail.create("no-target", mine.clone()).await?;

        // The one answer the rule allows is carried out: the unmarked object under Adopt.
        let adopted = wait_for("the adoption", FAULT_WAIT, || async {
            let obj = adopt.copies().get("unmarked").await?;
            Ok((obj.data["spec"] == mine).then_some(obj))
        })
        .await?;
        assert_ne!(adopted.resource_version(), adoptable.resource_version());
        let refused = guarded.map(|(sides, name, _)| (sides, name, "decided Adopt"));
        let no_target = (&fail, "no-target", "no provider object");
        for (sides, name, says) in refused.into_iter().chain([no_target]) {
            sides.warned(name, "PolicyFailed", says).await?;
            sides.synced(name, "False", "PolicyFailed").await?;
        }
        // The binding counts its refused instances under the policy's reason and says what
        // to do.
        let bindings = Api::<Binding>::namespaced(s.consumer.clone(), &fail.namespace);
        let synced = wait_for("the binding's count", FAULT_WAIT, || async {
            let status = bindings.get(BINDING).await?.status.unwrap_or_default();
            Ok(status.conditions.into_iter().find(|c| {
                c.type_ == "Synced"
                    && c.reason == "PolicyFailed"
                    && c.message.starts_with("3 of 3 instance(s) not in sync")
            }))
        })
        .await?;
        assert_eq!(synced.status, "False");
        for says in ["PolicyFailed: 3 e.g. ", "the conflict policy module failed"] {
            assert!(synced.message.contains(says), "{}", synced.message);
        }
        // Retries keep being refused: nothing changes on the provider for a while.
        stays("guarded objects unchanged", UNCHANGED, || async {
            for ((sides, name, _), before) in guarded.iter().zip(&before) {
                if state(&sides.copies().get(name).await?) != *before {
                    return Ok(false);
                }
            }
            Ok(fail.copies().get_opt("no-target").await?.is_none())
        })
        .await?;
        counted(&failures("invalid-output"), 5)
    })
}
