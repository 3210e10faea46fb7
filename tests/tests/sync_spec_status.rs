//! Spec travels to the provider (created, updated, not rewritten when equal), status comes
//! back (and a provider copy without status does not clear it), consumer metadata stays on
//! the consumer, and drift on the provider is reverted.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kbind_tests::syncenv::{
    Scenario, WAIT, holds_syncer_finalizer, merge, set_status, stays, unwritten, wait_for,
};
use konnector::api::names::{
    CONSUMER_CLUSTER_LABEL, CONSUMER_CLUSTER_UID_ANNOTATION, CONSUMER_OBJECT_UID_ANNOTATION,
    FIELD_MANAGER, MANAGED_LABEL,
};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

/// The status without kbind's own `Synced` condition (and without `conditions` when that was
/// the only one): what the provider's status copy is compared with.
fn without_synced(mut status: Value) -> Value {
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

/// Waits until the consumer instance's status `phase` is `phase`; returns the status.
async fn consumer_phase_is(s: &Scenario, name: &str, phase: &str) -> anyhow::Result<Value> {
    wait_for(
        &format!("status phase {phase} on the consumer"),
        WAIT,
        || async {
            let status = s.instances().get(name).await?.data.get("status").cloned();
            Ok(status.filter(|st| st["phase"] == phase))
        },
    )
    .await
}

#[test]
fn spec_is_created_updated_and_not_rewritten_when_equal() -> anyhow::Result<()> {
    Scenario::bound("spec-cun").run(async |s| {
        s.create("w", json!({ "size": 1 })).await?;
        let created = s.copy_with_spec("w", json!({ "size": 1 })).await?;
        let obj = s.instances().get("w").await?;
        assert!(holds_syncer_finalizer(&obj), "finalizer before the write");
        s.in_sync("w").await?;

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
        s.create("w", spec.clone()).await?;
        s.copy_with_spec("w", spec).await?;
        let remove = serde_json::from_value(json!([
            { "op": "remove", "path": "/spec/tier" },
            { "op": "remove", "path": "/spec/db/tls" },
        ]))?;
        s.instances()
            .patch("w", &PatchParams::default(), &Patch::<()>::Json(remove))
            .await?;
        s.copy_with_spec("w", json!({ "size": 1, "db": { "engine": "pg" } }))
            .await?;
        Ok(())
    })
}

#[test]
fn provider_status_is_copied_to_the_consumer() -> anyhow::Result<()> {
    Scenario::bound("status-copy").run(async |s| {
        s.create("w", json!({ "size": 1 })).await?;
        s.copy_with_spec("w", json!({ "size": 1 })).await?;
        let status = json!({ "phase": "Ready", "endpoint": "db.example:5432" });
        set_status(&s.copies(), "w", status.clone()).await?;
        let copied = consumer_phase_is(s, "w", "Ready").await?;
        assert_eq!(without_synced(copied), status);
        // Changes follow.
        set_status(&s.copies(), "w", json!({ "phase": "Degraded" })).await?;
        consumer_phase_is(s, "w", "Degraded").await?;
        Ok(())
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
        assert!(
            copy.data.get("status").is_none(),
            "the provider copy has no status"
        );
        stays(
            "the consumer status kept",
            Duration::from_secs(6),
            || async {
                let status = s.instances().get("w").await?.data["status"].clone();
                Ok(without_synced(status) == json!({ "phase": "LocalNote" }))
            },
        )
        .await
    })
}

#[test]
fn consumer_metadata_does_not_travel_to_the_provider() -> anyhow::Result<()> {
    Scenario::bound("isolation").run(async |s| {
        // A real owner, so the consumer's garbage collector keeps the instance.
        let owner: ConfigMap = serde_json::from_value(json!({ "metadata": { "name": "owner" } }))?;
        let owner = Api::<ConfigMap>::namespaced(s.consumer.clone(), s.ns())
            .create(&PostParams::default(), &owner)
            .await?;
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

        // Same name and namespace, kbind's markers only, written by kbind-konnector only.
        let managers: Vec<_> = copy
            .managed_fields()
            .iter()
            .map(|m| m.manager.clone())
            .collect();
        let travelled = json!({
            "name": copy.name_any(),
            "namespace": copy.namespace(),
            "labels": copy.labels(),
            "annotations": copy.annotations(),
            "finalizers": copy.finalizers(),
            "ownerReferences": copy.owner_references(),
            "managers": managers,
        });
        let expected = json!({
            "name": "w",
            "namespace": s.ns(),
            "labels": { MANAGED_LABEL: "true", CONSUMER_CLUSTER_LABEL: s.consumer_uid },
            "annotations": {
                CONSUMER_CLUSTER_UID_ANNOTATION: s.consumer_uid,
                CONSUMER_OBJECT_UID_ANNOTATION: created.uid(),
            },
            "finalizers": [],
            "ownerReferences": [],
            "managers": [FIELD_MANAGER],
        });
        assert_eq!(travelled, expected);
        Ok(())
    })
}

#[test]
fn drift_on_provider_is_reverted() -> anyhow::Result<()> {
    Scenario::bound("drift").run(async |s| {
        let spec = json!({ "size": 1, "tier": "gold" });
        s.create("w", spec.clone()).await?;
        s.copy_with_spec("w", spec.clone()).await?;
        // Someone edits the provider copy directly: changes a field and adds one.
        let edit = json!({ "spec": { "size": 99, "extra": "sneaked in" } });
        merge(&s.copies(), "w", edit).await?;
        let reverted = s.copy_with_spec("w", spec.clone()).await?;
        assert!(reverted.data["spec"].get("extra").is_none());
        // And server-side apply by another manager is reverted too.
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
