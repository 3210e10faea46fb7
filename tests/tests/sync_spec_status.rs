//! Spec travels to the provider (created, updated, not rewritten when equal), status comes
//! back (and a provider copy without status does not clear it), consumer metadata stays on
//! the consumer, and drift on the provider is reverted.

use std::time::Duration;

use anyhow::Context as _;

use kbind_tests::syncenv::related::put_configmap;
use kbind_tests::syncenv::{
    Scenario, WAIT, holds_syncer_finalizer, merge, set_status, stays, unwritten, wait_for,
};
use konnector::api::names::{
    CONSUMER_CLUSTER_LABEL, CONSUMER_CLUSTER_UID_ANNOTATION, CONSUMER_OBJECT_UID_ANNOTATION,
    FIELD_MANAGER, MANAGED_LABEL,
};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The consumer instance's status without kbind's own `Synced` condition (and without
/// `conditions` when that was the only one): what is compared with the provider's status.
async fn consumer_status(s: &Scenario, name: &str) -> anyhow::Result<Value> {
    let mut status = s.instances().get(name).await?.data["status"].take();
    if let Some(conditions) = status["conditions"].as_array_mut() {
        conditions.retain(|c| c["type"] != "Synced");
    }
    if status["conditions"] == json!([])
        && let Some(status) = status.as_object_mut()
    {
        status.remove("conditions");
    }
    Ok(status)
}

/// Waits until [`consumer_status`] is `expected`.
async fn consumer_status_is(s: &Scenario, name: &str, expected: Value) -> anyhow::Result<()> {
    let what = format!("status {expected} on the consumer");
    wait_for(&what, WAIT, || async {
        Ok((consumer_status(s, name).await? == expected).then_some(()))
    })
    .await
}

#[test]
fn spec_is_created_updated_and_not_rewritten_when_equal() -> anyhow::Result<()> {
    Scenario::bound("spec-cun").run(async |s| {
        let created = s.create_copied("w", json!({ "size": 1 })).await?;
        assert!(holds_syncer_finalizer(&s.in_sync("w").await?));

        merge(&s.instances(), "w", json!({ "spec": { "size": 2 } })).await?;
        let updated = s.copy_with_spec("w", json!({ "size": 2 })).await?;
        s.in_sync("w").await?;
        assert_eq!(updated.uid(), created.uid(), "updated in place");

        // No-op: a consumer change outside spec triggers a reconcile (and resyncs run every
        // 5 s), but the provider copy is already right, so it is not written again.
        let touched = json!({ "metadata": { "labels": { "touched": "yes" } } });
        merge(&s.instances(), "w", touched).await?;
        unwritten(&s.copies(), &updated, Duration::from_secs(7)).await
    })
}

#[test]
fn a_field_removed_from_the_consumer_spec_is_removed_from_the_copy() -> anyhow::Result<()> {
    Scenario::bound("spec-remove").run(async |s| {
        let spec = json!({ "size": 1, "tier": "gold", "db": { "engine": "pg", "tls": true } });
        s.create_copied("w", spec).await?;
        let remove = json!({ "spec": { "tier": null, "db": { "tls": null } } });
        merge(&s.instances(), "w", remove).await?;
        let spec = json!({ "size": 1, "db": { "engine": "pg" } });
        s.copy_with_spec("w", spec).await.map(drop)
    })
}

#[test]
fn provider_status_is_copied_to_the_consumer() -> anyhow::Result<()> {
    Scenario::bound("status-copy").run(async |s| {
        s.create_copied("w", json!({ "size": 1 })).await?;
        let status = json!({ "phase": "Ready", "endpoint": "db.example:5432" });
        set_status(&s.copies(), "w", status.clone()).await?;
        consumer_status_is(s, "w", status).await?;
        // Changes follow.
        let changed = set_status(&s.copies(), "w", json!({ "phase": "Degraded" })).await?;
        consumer_status_is(s, "w", changed.data["status"].clone()).await
    })
}

#[test]
fn status_absent_on_provider_does_not_clear_consumer() -> anyhow::Result<()> {
    Scenario::bound("status-keep").run(async |s| {
        s.create("w", json!({ "size": 1 })).await?;
        set_status(&s.instances(), "w", json!({ "phase": "LocalNote" })).await?;
        s.copy_with_spec("w", json!({ "size": 1 })).await?;
        // Another spec round-trip through a provider copy that has no status.
        merge(&s.instances(), "w", json!({ "spec": { "size": 2 } })).await?;
        let copy = s.copy_with_spec("w", json!({ "size": 2 })).await?;
        assert_eq!(copy.data.get("status"), None);
        let kept = "the consumer status kept";
        stays(kept, Duration::from_secs(6), || async {
            Ok(consumer_status(s, "w").await? == json!({ "phase": "LocalNote" }))
        })
        .await
    })
}

#[test]
fn consumer_metadata_does_not_travel_to_the_provider() -> anyhow::Result<()> {
    Scenario::bound("isolation").run(async |s| {
        // A real owner, so the consumer's garbage collector keeps the instance.
        let owner = put_configmap(&s.consumer, s.ns(), "owner", &[], &[]).await?;
        let mut obj = s.api.object(Some(s.ns()), "w", json!({ "size": 1 }));
        obj.metadata = serde_json::from_value(json!({
            "name": "w",
            "namespace": s.ns(),
            "labels": { "team": "a" },
            "annotations": { "secret-note": "consumer only" },
            "finalizers": ["example.org/keep"],
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.uid(),
            }],
        }))?;
        let created = s.instances().create(&PostParams::default(), &obj).await?;
        let copy = s.copy_with_spec("w", json!({ "size": 1 })).await?;
        // Same name and namespace, kbind's markers only, written by kbind-konnector only: the
        // whole metadata but what the apiserver generates.
        let managers: Vec<_> = copy.managed_fields().iter().map(|m| &m.manager).collect();
        let mut travelled = serde_json::to_value(&copy.metadata)?;
        travelled["managedFields"] = json!(managers);
        let fields = travelled.as_object_mut().context("metadata is an object")?;
        for generated in ["uid", "resourceVersion", "generation", "creationTimestamp"] {
            fields.remove(generated);
        }
        let expected = json!({
            "name": "w",
            "namespace": s.ns(),
            "labels": { MANAGED_LABEL: "true", CONSUMER_CLUSTER_LABEL: s.consumer_uid },
            "annotations": {
                CONSUMER_CLUSTER_UID_ANNOTATION: s.consumer_uid,
                CONSUMER_OBJECT_UID_ANNOTATION: created.uid(),
            },
            "managedFields": [FIELD_MANAGER],
        });
        assert_eq!(travelled, expected);
        Ok(())
    })
}

#[test]
fn drift_on_provider_is_reverted() -> anyhow::Result<()> {
    Scenario::bound("drift").run(async |s| {
        let spec = json!({ "size": 1, "tier": "gold" });
        s.create_copied("w", spec.clone()).await?;
        // A direct edit of the provider copy (a field changed, one added) is reverted ...
        let edit = json!({ "spec": { "size": 99, "extra": "sneaked in" } });
        merge(&s.copies(), "w", edit).await?;
        s.copy_with_spec("w", spec.clone()).await?;
        // ... and so is a server-side apply by another manager.
        let intrusion = json!({
            "apiVersion": s.api.resource().api_version, "kind": "Widget",
            "metadata": { "name": "w", "namespace": s.ns() },
            "spec": { "tier": "bronze" },
        });
        let intruder = PatchParams::apply("intruder").force();
        s.copies()
            .patch("w", &intruder, &Patch::Apply(intrusion))
            .await?;
        let fixed = s.copy_with_spec("w", spec).await?;
        // Reverted once, then left alone (resyncs every 5 s find nothing to write).
        unwritten(&s.copies(), &fixed, Duration::from_secs(6)).await
    })
}
