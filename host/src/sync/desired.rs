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
    CONSUMER_CLUSTER_LABEL, CONSUMER_CLUSTER_UID_ANNOTATION, CONSUMER_OBJECT_UID_ANNOTATION,
    MANAGED_LABEL,
};
use crate::api::{ConditionType, Reason};

use super::conflict::owned_by;

/// The server-side apply body for the provider copy: identity, the managed label, the
/// consumer-cluster label (what the provider watch selects on), both ownership markers and
/// `spec`, nothing else. `resource_version` makes the apply fail if
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
        "labels": { MANAGED_LABEL: "true", CONSUMER_CLUSTER_LABEL: consumer_cluster_uid },
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
/// be skipped: both labels, both markers naming this consumer object, identical `spec`. A copy
/// written before the consumer-cluster label existed is rewritten once, so the label-selected
/// provider watch sees it from then on.
pub fn provider_copy_matches(
    target: &DynamicObject,
    consumer: &DynamicObject,
    consumer_cluster_uid: &str,
    consumer_object_uid: &str,
) -> bool {
    let label = |key: &str| target.metadata.labels.as_ref().and_then(|l| l.get(key));
    let labelled = label(MANAGED_LABEL).is_some_and(|v| v == "true")
        && label(CONSUMER_CLUSTER_LABEL).is_some_and(|v| v == consumer_cluster_uid);
    let owned = owned_by(target, consumer_cluster_uid, consumer_object_uid);
    labelled && owned && spec_of(target) == spec_of(consumer)
}

/// The object's `spec`, unless absent or null.
pub(super) fn spec_of(obj: &DynamicObject) -> Option<&Value> {
    obj.data.get("spec").filter(|s| !s.is_null())
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

/// Reasons of the `Synced=False` instance condition this engine sets (and may remove).
pub const SYNCED_FAILURE_REASONS: [Reason; 3] = [
    Reason::ForeignObjectExists,
    Reason::OwnedByAnother,
    Reason::PolicyFailed,
];

/// Whether the consumer instance carries a `Synced` condition this engine set.
pub fn has_synced_failure(consumer: &DynamicObject) -> bool {
    consumer.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            c["type"] == ConditionType::Synced.as_str()
                && SYNCED_FAILURE_REASONS
                    .iter()
                    .any(|r| c["reason"] == r.as_str())
        })
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
            // Only a condition this engine set is removed; a provider's own `Synced`
            // condition copied with its status is not ours to drop.
            let ours = conditions[i]
                .get("reason")
                .and_then(Value::as_str)
                .is_some_and(|r| SYNCED_FAILURE_REASONS.iter().any(|o| o.as_str() == r));
            if !ours {
                return None;
            }
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
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
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
                    "labels": {
                        "core.kbind.io/managed": "true",
                        "core.kbind.io/consumer-cluster": "cluster-uid",
                    },
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

    #[test]
    fn copy_without_the_consumer_cluster_label_is_rewritten_once() {
        let c = consumer();
        let mut p = provider_of(&c);
        if let Some(labels) = p.metadata.labels.as_mut() {
            labels.remove(CONSUMER_CLUSTER_LABEL);
        }
        assert!(!provider_copy_matches(&p, &c, "cluster-uid", "obj-uid"));
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
        assert!(has_synced_failure(&c));
        let cleared = synced_condition(&c, &ar(), None).expect("removed");
        assert_eq!(cleared["status"]["conditions"], json!([]));
        c.data["status"] = cleared["status"].clone();
        assert!(!has_synced_failure(&c));
        assert_eq!(synced_condition(&c, &ar(), None), None);
    }

    #[test]
    fn a_providers_own_synced_condition_is_never_removed() {
        let mut c = consumer();
        c.data["status"] = json!({ "conditions": [{ "type": "Synced", "status": "False", "reason": "BackendDown" }] });
        assert!(!has_synced_failure(&c));
        assert_eq!(synced_condition(&c, &ar(), None), None);
    }
}
