//! Spec travels to the provider (created, updated, not rewritten when equal), status comes
//! back (and a provider copy without status does not clear it), consumer metadata stays on
//! the consumer, and drift on the provider is reverted.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kbind_tests::syncenv::{Scenario, WAIT, merge, set_status, stays, synced_condition, wait_for};
use konnector::api::names::{
    CONSUMER_CLUSTER_LABEL, CONSUMER_CLUSTER_UID_ANNOTATION, CONSUMER_OBJECT_UID_ANNOTATION,
    FIELD_MANAGER, MANAGED_LABEL, SYNCER_FINALIZER,
};
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

/// Waits until the provider copy of `name` has `spec`.
async fn provider_spec_is(s: &Scenario, name: &str, spec: Value) -> anyhow::Result<DynamicObject> {
    wait_for(&format!("provider spec {spec}"), WAIT, || async {
        Ok(s.copies()
            .get_opt(name)
            .await?
            .filter(|o| o.data["spec"] == spec))
    })
    .await
}

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

/// Waits until the instance says `Synced=True` for its current generation.
async fn synced_for_generation(s: &Scenario, name: &str) -> anyhow::Result<()> {
    wait_for("Synced=True for the current generation", WAIT, || async {
        let obj = s.instances().get(name).await?;
        Ok(synced_condition(&obj)
            .filter(|c| {
                c["status"] == "True" && c["observedGeneration"] == json!(obj.metadata.generation)
            })
            .map(|_| ()))
    })
    .await
}

/// Waits until the consumer instance's status `phase` is `phase`; returns the status.
async fn consumer_phase_is(s: &Scenario, name: &str, phase: &str) -> anyhow::Result<Value> {
    wait_for(
        &format!("status phase {phase} on the consumer"),
        WAIT,
        || async {
            let obj = s.instances().get(name).await?;
            Ok(obj
                .data
                .get("status")
                .filter(|st| st["phase"] == phase)
                .cloned())
        },
    )
    .await
}

#[test]
fn spec_is_created_updated_and_not_rewritten_when_equal() -> anyhow::Result<()> {
    Scenario::bound("spec-cun").run(async |s| {
        s.create("w", json!({ "size": 1 })).await?;
        let created = provider_spec_is(s, "w", json!({ "size": 1 })).await?;
        let obj = s.instances().get("w").await?;
        assert!(
            obj.finalizers().iter().any(|f| f == SYNCER_FINALIZER),
            "finalizer before the write"
        );
        synced_for_generation(s, "w").await?;

        merge(&s.instances(), "w", json!({ "spec": { "size": 2 } })).await?;
        let updated = provider_spec_is(s, "w", json!({ "size": 2 })).await?;
        synced_for_generation(s, "w").await?;
        assert_eq!(
            updated.metadata.uid, created.metadata.uid,
            "updated in place"
        );

        // No-op: a consumer change outside spec triggers a reconcile (and resyncs run every
        // 5 s), but the provider copy is already right, so it is not written again.
        let rv = updated.resource_version();
        merge(
            &s.instances(),
            "w",
            json!({ "metadata": { "labels": { "touched": "yes" } } }),
        )
        .await?;
        stays(
            "the provider copy unwritten",
            Duration::from_secs(7),
            || async { Ok(s.copies().get("w").await?.resource_version() == rv) },
        )
        .await
    })
}

#[test]
fn a_field_removed_from_the_consumer_spec_is_removed_from_the_copy() -> anyhow::Result<()> {
    Scenario::bound("spec-remove").run(async |s| {
        let spec = json!({ "size": 1, "tier": "gold", "db": { "engine": "pg", "tls": true } });
        s.create("w", spec.clone()).await?;
        provider_spec_is(s, "w", spec).await?;
        let remove = serde_json::from_value(json!([
            { "op": "remove", "path": "/spec/tier" },
            { "op": "remove", "path": "/spec/db/tls" },
        ]))?;
        s.instances()
            .patch("w", &PatchParams::default(), &Patch::<()>::Json(remove))
            .await?;
        provider_spec_is(s, "w", json!({ "size": 1, "db": { "engine": "pg" } })).await?;
        Ok(())
    })
}

#[test]
fn provider_status_is_copied_to_the_consumer() -> anyhow::Result<()> {
    Scenario::bound("status-copy").run(async |s| {
        s.create("w", json!({ "size": 1 })).await?;
        provider_spec_is(s, "w", json!({ "size": 1 })).await?;
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
        provider_spec_is(s, "w", json!({ "size": 1 })).await?;
        // Another spec round-trip through a provider copy that has no status.
        merge(&s.instances(), "w", json!({ "spec": { "size": 2 } })).await?;
        let copy = provider_spec_is(s, "w", json!({ "size": 2 })).await?;
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
        obj.metadata.labels = Some(BTreeMap::from([("team".into(), "a".into())]));
        obj.metadata.annotations = Some(BTreeMap::from([(
            "secret-note".into(),
            "consumer only".into(),
        )]));
        obj.metadata.finalizers = Some(vec!["example.org/keep".into()]);
        obj.metadata.owner_references = Some(vec![serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner.uid().context("owner uid")?,
        }))?]);
        let created = s.instances().create(&PostParams::default(), &obj).await?;
        let copy = provider_spec_is(s, "w", json!({ "size": 1 })).await?;

        assert_eq!(
            copy.namespace().as_deref(),
            Some(s.ns()),
            "namespace unchanged"
        );
        assert_eq!(copy.name_any(), "w", "name unchanged");
        assert_eq!(
            copy.labels(),
            &BTreeMap::from([
                (MANAGED_LABEL.to_string(), "true".to_string()),
                (CONSUMER_CLUSTER_LABEL.to_string(), s.consumer_uid.clone()),
            ])
        );
        assert_eq!(
            copy.annotations(),
            &BTreeMap::from([
                (
                    CONSUMER_CLUSTER_UID_ANNOTATION.to_string(),
                    s.consumer_uid.clone()
                ),
                (
                    CONSUMER_OBJECT_UID_ANNOTATION.to_string(),
                    created.uid().context("uid")?
                ),
            ])
        );
        assert!(
            copy.finalizers().is_empty(),
            "no finalizers travel: {:?}",
            copy.finalizers()
        );
        assert!(
            copy.owner_references().is_empty(),
            "no owner references travel"
        );
        let managers: Vec<_> = copy
            .managed_fields()
            .iter()
            .filter_map(|m| m.manager.clone())
            .collect();
        assert_eq!(
            managers,
            vec![FIELD_MANAGER.to_string()],
            "written by kbind-konnector only"
        );
        Ok(())
    })
}

#[test]
fn drift_on_provider_is_reverted() -> anyhow::Result<()> {
    Scenario::bound("drift").run(async |s| {
        let spec = json!({ "size": 1, "tier": "gold" });
        s.create("w", spec.clone()).await?;
        provider_spec_is(s, "w", spec.clone()).await?;
        // Someone edits the provider copy directly: changes a field and adds one.
        merge(
            &s.copies(),
            "w",
            json!({ "spec": { "size": 99, "extra": "sneaked in" } }),
        )
        .await?;
        let reverted = provider_spec_is(s, "w", spec.clone()).await?;
        assert!(reverted.data["spec"].get("extra").is_none());
        // And server-side apply by another manager is reverted too.
        let intrusion = json!({
            "apiVersion": s.api.resource().api_version, "kind": "Widget",
            "metadata": { "name": "w", "namespace": s.ns() },
            "spec": { "tier": "bronze" },
        });
        s.copies()
            .patch(
                "w",
                &PatchParams::apply("intruder").force(),
                &Patch::Apply(intrusion),
            )
            .await?;
        let fixed = provider_spec_is(s, "w", spec).await?;
        // Reverted once, then left alone (resyncs every 5 s find nothing to write).
        stays(
            "the reverted copy settled",
            Duration::from_secs(6),
            || async {
                Ok(s.copies().get("w").await?.resource_version() == fixed.resource_version())
            },
        )
        .await
    })
}
