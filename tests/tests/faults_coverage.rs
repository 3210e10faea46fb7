//! Tenant mistakes and overlapping bindings: only bindings that can ever sync count, and
//! coverage is computed per (Connection, API, namespace), so a teardown neither stalls on a
//! typo elsewhere nor strands what no binding covers any more. Editing a binding's
//! `connectionRef` drains what it bound through the previous Connection.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition as Crd;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kbind_tests::syncenv::remains::Left::{Gone, Kept, Released};
use kbind_tests::syncenv::remains::{delete_gone, expect_left, kind, wait_left};
use kbind_tests::syncenv::{
    BINDING, Scenario, TestApi, appears, delete, holds_syncer_finalizer, merge, stays, wait_for,
};
use konnector::api::{ApiState, Binding, ClusterBinding, ConflictPolicy};
use konnector::registry::Engagement;
use kube::Api;
use kube::api::Patch;
use serde_json::json;

/// The `Ready` reason of Binding `ns/name`, once it has one.
async fn ready_reason(s: &Scenario, ns: &str, name: &str) -> anyhow::Result<String> {
    let bindings = Api::<Binding>::namespaced(s.consumer.clone(), ns);
    wait_for(
        "the binding's Ready condition",
        kbind_tests::syncenv::WAIT,
        || async {
            let b = bindings.get(name).await?;
            let conditions = b.status.map(|s| s.conditions).unwrap_or_default();
            Ok(conditions
                .into_iter()
                .find(|c| c.type_ == "Ready")
                .map(|c| c.reason))
        },
    )
    .await
}

#[test]
fn broken_tenant_binding_neither_pins_nor_blocks_teardown() -> anyhow::Result<()> {
    Scenario::unbound("cov-tenant")
        .cluster_binding()
        .run(async |s| {
            s.export().await?;
            s.engage();
            // A tenant's typo, older than every real binding: a Connection that does not exist.
            let tenant_ns = format!("{}-tenant", s.ns());
            let mut typo = s
                .stack
                .binding(&tenant_ns, "typo", &[&s.api], ConflictPolicy::Fail);
            typo.spec.connection_ref.name = "nope".into();
            s.stack.create_binding(&typo).await?;
            assert_eq!(
                ready_reason(s, &tenant_ns, "typo").await?,
                "ConnectionNotFound"
            );

            s.bind().await?;
            s.create("w", json!({"size": 1})).await?;
            s.copy("w").await?;

            // The admin's ClusterBinding goes: the typo covers nothing, so the instance is drained
            // and, as the last counting binding, the CRD goes with it.
            s.unbind().await?;
            let api = s.api.name();
            let path = format!("{}/w", s.ns());
            wait_left(&[
                (&s.provider, s.api.resource(), &*path, Gone),
                (&s.consumer, kind::<Crd>(), &*api, Gone),
            ])
            .await?;

            // A real Binding, newer than the typo, is Ready: the typo pinned nothing.
            let real_ns = format!("{}-real", s.ns());
            let real = s
                .stack
                .binding(&real_ns, BINDING, &[&s.api], ConflictPolicy::Fail);
            s.stack.create_ready_binding(&real).await?;
            Ok(())
        })
}

#[test]
fn teardown_of_a_binding_whose_api_is_pinned_elsewhere_keeps_the_pinned_connections_finalizers()
-> anyhow::Result<()> {
    let runtime = kbind_tests::runtime()?;
    runtime.block_on(async {
        let s = Scenario::bound("cov-pinned").start().await?;
        s.run_then(
            async |s| {
                s.create("w", json!({"size": 1})).await?;
                s.copy("w").await?;
                // A ClusterBinding with a typo'd connectionRef lists the same API: it syncs nothing
                // (its Connection does not exist) and the API stays pinned to the real Connection.
                let mut spec = s
                    .stack
                    .binding(s.ns(), "cov-pinned-typo", &[&s.api], ConflictPolicy::Fail)
                    .spec;
                spec.connection_ref.name = "cov-pinned-nope".into();
                let mut typo =
                    s.stack
                        .cluster_binding("cov-pinned-typo", &[&s.api], ConflictPolicy::Fail);
                typo.spec = spec.into();
                s.stack.create_cluster_binding(&typo).await?;
                let cluster_bindings = Api::<ClusterBinding>::all(s.consumer.clone());
                wait_for(
                    "the typo's Ready condition",
                    kbind_tests::syncenv::WAIT,
                    || async {
                        let b = cluster_bindings.get("cov-pinned-typo").await?;
                        let conditions = b.status.map(|s| s.conditions).unwrap_or_default();
                        Ok(conditions.iter().any(|c| c.type_ == "Ready").then_some(()))
                    },
                )
                .await?;
                // The real Connection is disengaged (its syncer stopped, nothing puts a finalizer
                // back) while the typo goes: its teardown spans every namespace, but the instances
                // are the real Connection's syncer's, so their finalizers stay.
                s.disengage();
                s.binding_has("Ready", "False", "ConnectionNotReady")
                    .await?;
                cluster_bindings
                    .delete("cov-pinned-typo", &Default::default())
                    .await?;
                wait_for("the typo gone", kbind_tests::syncenv::WAIT, || async {
                    Ok(cluster_bindings
                        .get_opt("cov-pinned-typo")
                        .await?
                        .is_none()
                        .then_some(()))
                })
                .await?;
                let path = format!("{}/w", s.ns());
                wait_left(&[
                    (&s.consumer, s.api.resource(), &*path, Kept),
                    (&s.provider, s.api.resource(), &*path, Kept),
                ])
                .await?;
                stays("w keeps its finalizer", Duration::from_secs(3), || async {
                    Ok(holds_syncer_finalizer(&s.instances().get("w").await?))
                })
                .await?;
                // Engaged again, it syncs on.
                s.engage();
                s.binding_has("Ready", "True", "AsExpected").await?;
                merge(&s.instances(), "w", json!({"spec": {"size": 2}})).await?;
                wait_for(
                    "w's new spec on its copy",
                    kbind_tests::syncenv::WAIT,
                    || async {
                        Ok((s.copies().get("w").await?.data["spec"]["size"] == 2).then_some(()))
                    },
                )
                .await
            },
            async |s| {
                let _ = Api::<ClusterBinding>::all(s.consumer.clone())
                    .delete("cov-pinned-typo", &Default::default())
                    .await;
            },
        )
        .await
    })
}

#[test]
fn overlapping_bindings_drain_only_what_nothing_covers() -> anyhow::Result<()> {
    let other_api = TestApi::namespaced("cov-overlap-b.e2e.kbind.io");
    Scenario::bound("cov-overlap")
        .with_api(other_api)
        .run(async |s| {
            // Binding B in another namespace lists the same API on the same Connection.
            let ns_b = format!("{}-b", s.ns());
            let b = s
                .stack
                .binding(&ns_b, BINDING, &[&s.api], ConflictPolicy::Fail);
            s.stack.create_ready_binding(&b).await?;
            s.create("a1", json!({"size": 1})).await?;
            s.copy("a1").await?;
            s.api
                .create(&s.consumer, Some(&ns_b), "b1", json!({"size": 1}))
                .await?;
            let copies_b = s.api.api(&s.provider, Some(&ns_b));
            let b1 = appears(&copies_b, "b1").await?;

            // Binding A drops the API: namespace a is drained, namespace b is B's.
            let bindings = Api::namespaced_with(s.consumer.clone(), s.ns(), &kind::<Binding>());
            let keep = json!({"spec": {"apis": [{"name": s.extra[0].name()}]}});
            merge(&bindings, BINDING, keep).await?;
            let a1 = format!("{}/a1", s.ns());
            let b1_path = format!("{ns_b}/b1");
            wait_left(&[
                (&s.provider, s.api.resource(), &*a1, Gone),
                (&s.consumer, s.api.resource(), &*a1, Released),
                (&s.provider, s.api.resource(), &*b1_path, Kept),
            ])
            .await?;
            // B's copy is the same object and keeps syncing.
            let instances_b = s.api.api(&s.consumer, Some(&ns_b));
            merge(&instances_b, "b1", json!({"spec": {"size": 2}})).await?;
            wait_for(
                "b1's new spec on its provider copy",
                kbind_tests::syncenv::WAIT,
                || async {
                    let copy = copies_b.get("b1").await?;
                    let same = copy.metadata.uid == b1.metadata.uid;
                    anyhow::ensure!(same, "b1's copy was recreated");
                    Ok((copy.data["spec"]["size"] == 2).then_some(()))
                },
            )
            .await?;

            // B goes: its instance is drained too; nothing keeps a finalizer.
            Api::<Binding>::namespaced(s.consumer.clone(), &ns_b)
                .delete(BINDING, &Default::default())
                .await?;
            wait_left(&[
                (&s.provider, s.api.resource(), &*b1_path, Gone),
                (&s.consumer, s.api.resource(), &*b1_path, Released),
            ])
            .await
        })
}

#[test]
fn editing_connection_ref_drains_what_the_previous_connection_bound() -> anyhow::Result<()> {
    Scenario::bound("cov-move").run(async |s| {
        s.create("w", json!({"size": 1})).await?;
        s.copy("w").await?;
        // A second Connection, engaged too: the binding is pointed at it.
        let other = format!("{}-other", s.stack.name);
        s.stack.engagements.engage(Engagement {
            connection: other.clone(),
            ..s.engage()
        });
        let bindings = Api::<Binding>::namespaced(s.consumer.clone(), s.ns());
        let patch = json!({"spec": {"connectionRef": {"name": other}}});
        bindings
            .patch(BINDING, &Default::default(), &Patch::Merge(patch))
            .await?;
        // What the previous Connection bound is drained through it: its owned copy deleted,
        // the instance released; the consumer CRD stays (it is pinned to the previous one).
        let path = format!("{}/w", s.ns());
        wait_left(&[
            (&s.provider, s.api.resource(), &*path, Gone),
            (&s.consumer, s.api.resource(), &*path, Released),
            (&s.consumer, kind::<Crd>(), &s.api.name(), Kept),
        ])
        .await?;
        let moved = |b: &Binding| {
            let status = b.status.as_ref();
            status.and_then(|s| s.bound_connection.as_deref()) == Some(other.as_str())
        };
        wait_for(
            "boundConnection to follow",
            kbind_tests::syncenv::WAIT,
            || async { Ok(moved(&bindings.get(BINDING).await?).then_some(())) },
        )
        .await
    })
}

/// The `Ready` condition of ClusterBinding `name` once `until` holds for it.
async fn cluster_binding_until(
    s: &Scenario,
    name: &str,
    what: &str,
    until: impl Fn(&ClusterBinding) -> bool,
) -> anyhow::Result<ClusterBinding> {
    let api = Api::<ClusterBinding>::all(s.consumer.clone());
    wait_for(what, kbind_tests::syncenv::WAIT, || async {
        let b = api.get(name).await?;
        Ok(until(&b).then_some(b))
    })
    .await
}

/// The `Ready` condition of `b`, if it has one.
fn ready_of(b: &ClusterBinding) -> Option<&Condition> {
    let conditions = b.status.as_ref().map(|s| s.conditions.as_slice());
    conditions
        .unwrap_or_default()
        .iter()
        .find(|c| c.type_ == "Ready")
}

#[test]
fn a_binding_with_one_typod_api_syncs_the_other_and_strands_nothing() -> anyhow::Result<()> {
    Scenario::bound("cov-typo-api")
        .cluster_binding()
        .run(async |s| {
            s.create("w1", json!({"size": 1})).await?;
            s.copy("w1").await?;
            // A second ClusterBinding lists the good API and one its Connection does not export.
            let typo_api = TestApi::namespaced("cov-typo-api-nope.e2e.kbind.io");
            let name = format!("{}-typo", s.stack.name);
            let typo = s
                .stack
                .cluster_binding(&name, &[&s.api, &typo_api], ConflictPolicy::Fail);
            s.stack.create_cluster_binding(&typo).await?;
            let (good, bad) = (s.api.name(), typo_api.name());
            let b = cluster_binding_until(s, &name, "Ready=False APIsNotReady", |b| {
                ready_of(b).is_some_and(|c| c.reason == "APIsNotReady" && c.message.contains(&bad))
            })
            .await?;
            let entries = b.status.map(|s| s.bound_apis).unwrap_or_default();
            let good_entry = entries.iter().find(|e| e.name == good);
            assert_eq!(
                good_entry.and_then(|e| e.state),
                Some(ApiState::Syncing),
                "{entries:?}"
            );

            // The admin's real ClusterBinding goes: the typo'd one still syncs the good API, so
            // nothing is drained and its CRD stays.
            s.unbind().await?;
            let path = format!("{}/w1", s.ns());
            expect_left(&[
                (&s.consumer, kind::<Crd>(), &*good, Kept),
                (&s.provider, s.api.resource(), &*path, Kept),
            ])
            .await?;
            merge(&s.instances(), "w1", json!({"spec": {"size": 2}})).await?;
            s.copy_with_spec("w1", json!({"size": 2})).await?;
            // Nothing is stranded: deleting the instance is released by the remaining syncer.
            delete(&s.instances(), "w1").await?;
            wait_left(&[
                (&s.consumer, s.api.resource(), &*path, Gone),
                (&s.provider, s.api.resource(), &*path, Gone),
            ])
            .await?;
            delete_gone(&s.consumer, kind::<ClusterBinding>(), &name).await
        })
}

#[test]
fn a_typod_connection_cluster_binding_deleted_while_the_real_one_is_disengaged_keeps_every_finalizer()
-> anyhow::Result<()> {
    Scenario::bound("cov-typo-conn")
        .cluster_binding()
        .run(async |s| {
            s.create("w1", json!({"size": 1})).await?;
            s.copy("w1").await?;
            s.stack.disengage();
            let name = format!("{}-typo", s.stack.name);
            let mut typo = s
                .stack
                .cluster_binding(&name, &[&s.api], ConflictPolicy::Fail);
            typo.spec.spec.connection_ref.name = "cov-typo-conn-nope".into();
            s.stack.create_cluster_binding(&typo).await?;
            cluster_binding_until(s, &name, "Ready=False ConnectionNotFound", |b| {
                ready_of(b).is_some_and(|c| c.reason == "ConnectionNotFound")
            })
            .await?;
            delete_gone(&s.consumer, kind::<ClusterBinding>(), &name).await?;
            // The instance is the real Connection's: its finalizer stays through the outage.
            let instances = s.instances();
            stays(
                "w1 keeps core.kbind.io/syncer",
                Duration::from_secs(3),
                || async { Ok(holds_syncer_finalizer(&instances.get("w1").await?)) },
            )
            .await?;
            s.engage();
            Ok(())
        })
}
