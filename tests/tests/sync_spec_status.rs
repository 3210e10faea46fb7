//! Spec to the provider, status back, field isolation and drift (required: "spec
//! create/update/no-op; status copy and 'no status does not clear'; field isolation; drift
//! reverted").

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kbind_tests::syncenv::{Stack, TestApi, merge, set_status, stays, synced_condition, wait_for};
use kbind_tests::testenv::shared_pair;
use konnector::api::ConflictPolicy;
use konnector::api::names::{
    CONSUMER_CLUSTER_LABEL, CONSUMER_CLUSTER_UID_ANNOTATION, CONSUMER_OBJECT_UID_ANNOTATION,
    FIELD_MANAGER, MANAGED_LABEL, SYNCER_FINALIZER,
};
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

/// A stack with one namespaced API bound by a Binding in `ns`.
async fn bound(name: &str) -> anyhow::Result<(Stack, TestApi)> {
    let pair = shared_pair()?;
    let stack = Stack::start(pair, name).await?;
    let api = TestApi::namespaced(&format!("{name}.e2e.kbind.io"));
    api.export(&stack).await?;
    stack.engage(&[&api]);
    stack
        .create_ready_binding(&stack.binding(name, "widgets", &[&api], ConflictPolicy::Fail))
        .await?;
    Ok((stack, api))
}

async fn provider_spec_is(
    stack: &Stack,
    api: &TestApi,
    ns: &str,
    name: &str,
    spec: serde_json::Value,
) -> anyhow::Result<DynamicObject> {
    wait_for(&format!("provider spec {spec}"), WAIT, || async {
        Ok(api
            .api(&stack.provider, Some(ns))
            .get_opt(name)
            .await?
            .filter(|o| o.data["spec"] == spec))
    })
    .await
}

/// The status without kbind's own `Synced` condition (and without `conditions` when that was
/// the only one): what the provider's status copy is compared with.
fn without_synced(mut status: serde_json::Value) -> serde_json::Value {
    if let Some(conditions) = status.get_mut("conditions").and_then(|c| c.as_array_mut()) {
        conditions.retain(|c| c["type"] != "Synced");
        if conditions.is_empty()
            && let Some(status) = status.as_object_mut()
        {
            status.remove("conditions");
        }
    }
    status
}

/// Waits until the instance says `Synced=True` for its current generation.
async fn synced_for_generation(consumer: &Api<DynamicObject>, name: &str) -> anyhow::Result<()> {
    wait_for("Synced=True for the current generation", WAIT, || async {
        let obj = consumer.get(name).await?;
        Ok(synced_condition(&obj)
            .filter(|c| {
                c["status"] == "True" && c["observedGeneration"] == json!(obj.metadata.generation)
            })
            .map(|_| ()))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_is_created_updated_and_not_rewritten_when_equal() -> anyhow::Result<()> {
    let ns = "spec-cun";
    let (stack, api) = bound(ns).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            let consumer = api.api(&stack.consumer, Some(ns));
            api.create(&stack.consumer, Some(ns), "w", json!({ "size": 1 }))
                .await?;
            let created = provider_spec_is(&stack, &api, ns, "w", json!({ "size": 1 })).await?;
            let obj = consumer.get("w").await?;
            assert!(
                obj.finalizers().iter().any(|f| f == SYNCER_FINALIZER),
                "finalizer before the write"
            );
            synced_for_generation(&consumer, "w").await?;

            merge(&consumer, "w", json!({ "spec": { "size": 2 } })).await?;
            let updated = provider_spec_is(&stack, &api, ns, "w", json!({ "size": 2 })).await?;
            synced_for_generation(&consumer, "w").await?;
            assert_eq!(
                updated.metadata.uid, created.metadata.uid,
                "updated in place"
            );

            // No-op: a consumer change outside spec triggers a reconcile (and resyncs run every
            // 5 s), but the provider copy is already right, so it is not written again.
            let rv = updated.resource_version();
            merge(
                &consumer,
                "w",
                json!({ "metadata": { "labels": { "touched": "yes" } } }),
            )
            .await?;
            stays(
                "the provider copy unwritten",
                Duration::from_secs(7),
                || async {
                    Ok(api
                        .api(&stack.provider, Some(ns))
                        .get("w")
                        .await?
                        .resource_version()
                        == rv)
                },
            )
            .await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_removed_from_the_consumer_spec_is_removed_from_the_copy() -> anyhow::Result<()> {
    let ns = "spec-remove";
    let (stack, api) = bound(ns).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            let consumer = api.api(&stack.consumer, Some(ns));
            api.create(
                &stack.consumer,
                Some(ns),
                "w",
                json!({ "size": 1, "tier": "gold", "db": { "engine": "pg", "tls": true } }),
            )
            .await?;
            provider_spec_is(
                &stack,
                &api,
                ns,
                "w",
                json!({ "size": 1, "tier": "gold", "db": { "engine": "pg", "tls": true } }),
            )
            .await?;
            let remove = serde_json::from_value(json!([
                { "op": "remove", "path": "/spec/tier" },
                { "op": "remove", "path": "/spec/db/tls" },
            ]))?;
            consumer
                .patch("w", &PatchParams::default(), &Patch::<()>::Json(remove))
                .await?;
            provider_spec_is(
                &stack,
                &api,
                ns,
                "w",
                json!({ "size": 1, "db": { "engine": "pg" } }),
            )
            .await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_status_is_copied_to_the_consumer() -> anyhow::Result<()> {
    let ns = "status-copy";
    let (stack, api) = bound(ns).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            api.create(&stack.consumer, Some(ns), "w", json!({ "size": 1 }))
                .await?;
            provider_spec_is(&stack, &api, ns, "w", json!({ "size": 1 })).await?;
            let provider = api.api(&stack.provider, Some(ns));
            set_status(
                &provider,
                "w",
                json!({ "phase": "Ready", "endpoint": "db.example:5432" }),
            )
            .await?;
            let consumer = api.api(&stack.consumer, Some(ns));
            let copied = wait_for("the status on the consumer", WAIT, || async {
                Ok(consumer
                    .get("w")
                    .await?
                    .data
                    .get("status")
                    .filter(|s| s["phase"] == "Ready")
                    .cloned())
            })
            .await?;
            assert_eq!(
                without_synced(copied),
                json!({ "phase": "Ready", "endpoint": "db.example:5432" })
            );
            // Changes follow.
            set_status(&provider, "w", json!({ "phase": "Degraded" })).await?;
            wait_for("the changed status on the consumer", WAIT, || async {
                Ok(consumer
                    .get("w")
                    .await?
                    .data
                    .get("status")
                    .filter(|s| s["phase"] == "Degraded")
                    .cloned())
            })
            .await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_absent_on_provider_does_not_clear_consumer() -> anyhow::Result<()> {
    let ns = "status-keep";
    let (stack, api) = bound(ns).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            let consumer = api.api(&stack.consumer, Some(ns));
            api.create(&stack.consumer, Some(ns), "w", json!({ "size": 1 }))
                .await?;
            set_status(&consumer, "w", json!({ "phase": "LocalNote" })).await?;
            provider_spec_is(&stack, &api, ns, "w", json!({ "size": 1 })).await?;
            // Another spec round-trip through a provider copy that has no status.
            merge(&consumer, "w", json!({ "spec": { "size": 2 } })).await?;
            let copy = provider_spec_is(&stack, &api, ns, "w", json!({ "size": 2 })).await?;
            assert!(
                copy.data.get("status").is_none(),
                "the provider copy has no status"
            );
            stays(
                "the consumer status kept",
                Duration::from_secs(6),
                || async {
                    Ok(
                        without_synced(consumer.get("w").await?.data["status"].clone())
                            == json!({ "phase": "LocalNote" }),
                    )
                },
            )
            .await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_metadata_does_not_travel_to_the_provider() -> anyhow::Result<()> {
    let ns = "isolation";
    let (stack, api) = bound(ns).await?;
    let result = shared_pair()?.diagnose(stack.diagnose(&[&api], async {
        // A real owner, so the consumer's garbage collector keeps the instance.
        let owner = Api::<ConfigMap>::namespaced(stack.consumer.clone(), ns)
            .create(&PostParams::default(), &serde_json::from_value(json!({ "metadata": { "name": "owner" } }))?)
            .await?;
        let mut obj = api.object(Some(ns), "w", json!({ "size": 1 }));
        obj.metadata.labels = Some(BTreeMap::from([("team".into(), "a".into())]));
        obj.metadata.annotations = Some(BTreeMap::from([("secret-note".into(), "consumer only".into())]));
        obj.metadata.finalizers = Some(vec!["example.org/keep".into()]);
        obj.metadata.owner_references = Some(vec![serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.uid().context("owner uid")?,
        }))?]);
        let created = api.api(&stack.consumer, Some(ns)).create(&PostParams::default(), &obj).await?;
        let copy = provider_spec_is(&stack, &api, ns, "w", json!({ "size": 1 })).await?;

        assert_eq!(copy.namespace().as_deref(), Some(ns), "namespace unchanged");
        assert_eq!(copy.name_any(), "w", "name unchanged");
        assert_eq!(
            copy.labels(),
            &BTreeMap::from([
                (MANAGED_LABEL.to_string(), "true".to_string()),
                (CONSUMER_CLUSTER_LABEL.to_string(), stack.consumer_uid.clone()),
            ])
        );
        assert_eq!(
            copy.annotations(),
            &BTreeMap::from([
                (CONSUMER_CLUSTER_UID_ANNOTATION.to_string(), stack.consumer_uid.clone()),
                (CONSUMER_OBJECT_UID_ANNOTATION.to_string(), created.uid().context("uid")?),
            ])
        );
        assert!(copy.finalizers().is_empty(), "no finalizers travel: {:?}", copy.finalizers());
        assert!(copy.owner_references().is_empty(), "no owner references travel");
        let managers: Vec<_> = copy.managed_fields().iter().filter_map(|m| m.manager.clone()).collect();
        assert_eq!(managers, vec![FIELD_MANAGER.to_string()], "written by kbind-konnector only");
        anyhow::Ok(())
    }))
    .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_on_provider_is_reverted() -> anyhow::Result<()> {
    let ns = "drift";
    let (stack, api) = bound(ns).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            api.create(
                &stack.consumer,
                Some(ns),
                "w",
                json!({ "size": 1, "tier": "gold" }),
            )
            .await?;
            provider_spec_is(&stack, &api, ns, "w", json!({ "size": 1, "tier": "gold" })).await?;
            let provider = api.api(&stack.provider, Some(ns));
            // Someone edits the provider copy directly: changes a field and adds one.
            provider
                .patch(
                    "w",
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "spec": { "size": 99, "extra": "sneaked in" } })),
                )
                .await?;
            let reverted =
                provider_spec_is(&stack, &api, ns, "w", json!({ "size": 1, "tier": "gold" }))
                    .await?;
            assert!(reverted.data["spec"].get("extra").is_none());
            // And server-side apply by another manager is reverted too.
            provider
                .patch(
                    "w",
                    &PatchParams::apply("intruder").force(),
                    &Patch::Apply(json!({
                        "apiVersion": api.resource().api_version, "kind": "Widget",
                        "metadata": { "name": "w", "namespace": ns },
                        "spec": { "tier": "bronze" },
                    })),
                )
                .await?;
            let fixed =
                provider_spec_is(&stack, &api, ns, "w", json!({ "size": 1, "tier": "gold" }))
                    .await?;
            // Reverted once, then left alone (resyncs every 5 s find nothing to write).
            stays(
                "the reverted copy settled",
                Duration::from_secs(6),
                || async {
                    Ok(provider.get("w").await?.resource_version() == fixed.resource_version())
                },
            )
            .await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}
