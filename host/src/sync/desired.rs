//! What gets written where, as pure functions over objects: the provider copy of a consumer
//! instance, whether the provider copy already matches, and the status copied back.
//!
//! ```text
//! consumer instance ──spec + managed label + both UID markers──▶ provider copy (SSA, force)
//! consumer instance ◀──────────────── status ───────────────────── provider copy
//! ```
//!
//! Spec: "The engine does not copy arbitrary consumer labels, annotations, owner references,
//! or finalizers to the provider, it writes its own management and ownership metadata.
//! Top-level fields other than spec are not a generic object replication interface."

use k8s_openapi::jiff::Timestamp;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use serde_json::{Value, json};

use crate::api::names::{
    CONSUMER_CLUSTER_UID_ANNOTATION, CONSUMER_OBJECT_UID_ANNOTATION, FIELD_MANAGER, MANAGED_LABEL,
};
use crate::api::{ConditionType, Reason};

use super::conflict::TargetMarkers;

/// The server-side apply body for the provider copy: identity, the managed label, both
/// ownership markers and `spec`, nothing else. `resource_version` makes the apply fail if
/// the target changed since it was read (the ownership check must hold for the object that
/// is actually written).
pub fn provider_copy(
    consumer: &DynamicObject,
    ar: &ApiResource,
    consumer_cluster_uid: &str,
    consumer_object_uid: &str,
    resource_version: Option<&str>,
) -> Value {
    let mut metadata = json!({
        "name": consumer.metadata.name,
        "labels": { MANAGED_LABEL: "true" },
        "annotations": {
            CONSUMER_CLUSTER_UID_ANNOTATION: consumer_cluster_uid,
            CONSUMER_OBJECT_UID_ANNOTATION: consumer_object_uid,
        },
    });
    if let Some(ns) = &consumer.metadata.namespace {
        metadata["namespace"] = json!(ns);
    }
    if let Some(rv) = resource_version {
        metadata["resourceVersion"] = json!(rv);
    }
    let mut body = json!({
        "apiVersion": ar.api_version,
        "kind": ar.kind,
        "metadata": metadata,
    });
    if let Some(spec) = consumer.data.get("spec").filter(|s| !s.is_null()) {
        body["spec"] = spec.clone();
    }
    body
}

/// Whether the provider copy already is what [`provider_copy`] would write, so the write can
/// be skipped: managed label, both markers naming this consumer object, identical `spec`.
pub fn provider_copy_matches(
    target: &DynamicObject,
    consumer: &DynamicObject,
    consumer_cluster_uid: &str,
    consumer_object_uid: &str,
) -> bool {
    let labelled = target
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_LABEL))
        .is_some_and(|v| v == "true");
    let owned = target.metadata.annotations.as_ref().is_some_and(|a| {
        TargetMarkers::from_annotations(a).owned_by(consumer_cluster_uid, consumer_object_uid)
    });
    labelled && owned && spec_of(target) == spec_of(consumer)
}

fn spec_of(obj: &DynamicObject) -> Option<&Value> {
    obj.data.get("spec").filter(|s| !s.is_null())
}

/// Whether some field manager other than our own apply owns fields under `spec` on the
/// provider copy. Server-side apply never removes fields another manager owns, so drift that
/// *adds* fields survives a plain apply; this tells the reconciler to take those fields over
/// and drop them (see `reconcile::apply_to_provider`).
pub fn foreign_spec_managers(target: &DynamicObject) -> bool {
    target
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref().unwrap_or("").is_empty())
        .filter(|m| {
            !(m.manager.as_deref() == Some(FIELD_MANAGER)
                && m.operation.as_deref() == Some("Apply"))
        })
        .any(|m| {
            m.fields_v1
                .as_ref()
                .and_then(|f| f.0.get("f:spec"))
                .is_some_and(|spec| spec.as_object().is_none_or(|o| !o.is_empty()))
        })
}

/// Whether the provider copy's spec differs from the consumer's.
pub fn spec_differs(target: &DynamicObject, consumer: &DynamicObject) -> bool {
    spec_of(target) != spec_of(consumer)
}

/// The status-subresource apply body copying the provider's `status` to the consumer, or
/// `None` when there is nothing to write: the provider has no status (spec: "Absence of
/// provider status does not actively clear an existing consumer status") or the consumer
/// already has exactly this status.
pub fn status_copy(
    provider: &DynamicObject,
    consumer: &DynamicObject,
    ar: &ApiResource,
) -> Option<Value> {
    let status = provider.data.get("status").filter(|s| !s.is_null())?;
    if consumer.data.get("status") == Some(status) {
        return None;
    }
    Some(status_body(consumer, ar, status.clone()))
}

/// The consumer status with the instance condition `Synced` set (`Some`) or removed (`None`),
/// as a status apply body; `None` when that would change nothing. Best-effort by design: the
/// API's status schema may prune it (spec, "Ownership and conflicts").
pub fn synced_condition(
    consumer: &DynamicObject,
    ar: &ApiResource,
    failure: Option<(Reason, &str)>,
) -> Option<Value> {
    let mut status = consumer
        .data
        .get("status")
        .filter(|s| s.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}));
    let synced = ConditionType::Synced.as_str();
    let mut conditions: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let existing = conditions
        .iter()
        .position(|c| c.get("type").and_then(Value::as_str) == Some(synced));
    match (failure, existing) {
        (None, None) => return None,
        (None, Some(i)) => {
            conditions.remove(i);
        }
        (Some((reason, message)), i) => {
            let same = i.and_then(|i| conditions.get(i)).is_some_and(|c| {
                c.get("status").and_then(Value::as_str) == Some("False")
                    && c.get("reason").and_then(Value::as_str) == Some(reason.as_str())
                    && c.get("message").and_then(Value::as_str) == Some(message)
            });
            if same {
                return None;
            }
            let condition = json!({
                "type": synced,
                "status": "False",
                "reason": reason.as_str(),
                "message": message,
                "lastTransitionTime": Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            });
            match i {
                Some(i) => conditions[i] = condition,
                None => conditions.push(condition),
            }
        }
    }
    status["conditions"] = Value::Array(conditions);
    Some(status_body(consumer, ar, status))
}

fn status_body(consumer: &DynamicObject, ar: &ApiResource, status: Value) -> Value {
    let mut metadata = json!({ "name": consumer.metadata.name });
    if let Some(ns) = &consumer.metadata.namespace {
        metadata["namespace"] = json!(ns);
    }
    json!({
        "apiVersion": ar.api_version,
        "kind": ar.kind,
        "metadata": metadata,
        "status": status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        FieldsV1, ManagedFieldsEntry, OwnerReference,
    };
    use kube::api::ObjectMeta;
    use std::collections::BTreeMap;

    fn ar() -> ApiResource {
        ApiResource {
            group: "example.org".into(),
            version: "v1".into(),
            api_version: "example.org/v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
        }
    }

    fn consumer() -> DynamicObject {
        DynamicObject {
            types: None,
            metadata: ObjectMeta {
                name: Some("w".into()),
                namespace: Some("team-a".into()),
                uid: Some("obj-uid".into()),
                labels: Some(BTreeMap::from([("app".into(), "x".into())])),
                annotations: Some(BTreeMap::from([("note".into(), "private".into())])),
                finalizers: Some(vec!["core.kbind.io/syncer".into(), "other/f".into()]),
                owner_references: Some(vec![OwnerReference {
                    name: "owner".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            data: json!({ "spec": { "size": 3 }, "status": { "phase": "Old" } }),
        }
    }

    #[test]
    fn provider_copy_carries_spec_and_markers_only() {
        let body = provider_copy(&consumer(), &ar(), "cluster-uid", "obj-uid", None);
        assert_eq!(
            body,
            json!({
                "apiVersion": "example.org/v1",
                "kind": "Widget",
                "metadata": {
                    "name": "w",
                    "namespace": "team-a",
                    "labels": { "core.kbind.io/managed": "true" },
                    "annotations": {
                        "core.kbind.io/consumer-cluster-uid": "cluster-uid",
                        "core.kbind.io/consumer-object-uid": "obj-uid",
                    },
                },
                "spec": { "size": 3 },
            })
        );
    }

    #[test]
    fn provider_copy_of_cluster_scoped_instance_has_no_namespace() {
        let mut c = consumer();
        c.metadata.namespace = None;
        let body = provider_copy(&c, &ar(), "c", "o", Some("42"));
        assert!(body["metadata"].get("namespace").is_none());
        assert_eq!(body["metadata"]["resourceVersion"], "42");
    }

    fn provider_of(c: &DynamicObject) -> DynamicObject {
        let body = provider_copy(c, &ar(), "cluster-uid", "obj-uid", None);
        let mut p: DynamicObject = serde_json::from_value(body).expect("valid object");
        p.metadata.uid = Some("provider-uid".into());
        p
    }

    #[test]
    fn matching_copy_is_recognised_and_any_spec_change_is_not() {
        let c = consumer();
        let mut p = provider_of(&c);
        assert!(provider_copy_matches(&p, &c, "cluster-uid", "obj-uid"));
        assert!(
            !provider_copy_matches(&p, &c, "cluster-uid", "new-uid"),
            "recreated object"
        );
        p.data["spec"]["size"] = json!(4);
        assert!(!provider_copy_matches(&p, &c, "cluster-uid", "obj-uid"));
    }

    #[test]
    fn missing_label_means_the_copy_must_be_rewritten() {
        let c = consumer();
        let mut p = provider_of(&c);
        p.metadata.labels = None;
        assert!(!provider_copy_matches(&p, &c, "cluster-uid", "obj-uid"));
    }

    fn managed(manager: &str, operation: &str, fields: Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            fields_v1: Some(FieldsV1(fields)),
            ..Default::default()
        }
    }

    #[test]
    fn foreign_spec_owner_is_detected_but_our_apply_and_status_writers_are_not() {
        let mut p = provider_of(&consumer());
        p.metadata.managed_fields = Some(vec![
            managed(
                FIELD_MANAGER,
                "Apply",
                json!({ "f:spec": { "f:size": {} } }),
            ),
            managed(
                "operator",
                "Update",
                json!({ "f:status": { "f:phase": {} } }),
            ),
        ]);
        assert!(!foreign_spec_managers(&p));
        p.metadata
            .managed_fields
            .get_or_insert_with(Vec::new)
            .push(managed(
                "kubectl-edit",
                "Update",
                json!({ "f:spec": { "f:extra": {} } }),
            ));
        assert!(foreign_spec_managers(&p));
    }

    #[test]
    fn status_is_copied_only_when_present_and_different() {
        let c = consumer();
        let mut p = provider_of(&c);
        assert_eq!(
            status_copy(&p, &c, &ar()),
            None,
            "absent provider status never clears"
        );
        p.data["status"] = json!(null);
        assert_eq!(status_copy(&p, &c, &ar()), None);
        p.data["status"] = json!({ "phase": "Old" });
        assert_eq!(status_copy(&p, &c, &ar()), None, "already equal");
        p.data["status"] = json!({ "phase": "Ready" });
        let body = status_copy(&p, &c, &ar()).expect("a write");
        assert_eq!(body["status"], json!({ "phase": "Ready" }));
        assert_eq!(
            body["metadata"],
            json!({ "name": "w", "namespace": "team-a" })
        );
    }

    #[test]
    fn synced_condition_is_added_once_and_removed_when_the_conflict_is_gone() {
        let mut c = consumer();
        let body = synced_condition(&c, &ar(), Some((Reason::OwnedByAnother, "m"))).expect("added");
        assert_eq!(body["status"]["phase"], "Old", "the rest of status is kept");
        assert_eq!(body["status"]["conditions"][0]["reason"], "OwnedByAnother");
        c.data["status"] = body["status"].clone();
        assert_eq!(
            synced_condition(&c, &ar(), Some((Reason::OwnedByAnother, "m"))),
            None
        );
        let cleared = synced_condition(&c, &ar(), None).expect("removed");
        assert_eq!(cleared["status"]["conditions"], json!([]));
        c.data["status"] = cleared["status"].clone();
        assert_eq!(synced_condition(&c, &ar(), None), None);
    }
}
