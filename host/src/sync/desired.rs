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

use super::conflict::owned_by;

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
    let owned = owned_by(target, consumer_cluster_uid, consumer_object_uid);
    labelled && owned && spec_of(target) == spec_of(consumer)
}

fn spec_of(obj: &DynamicObject) -> Option<&Value> {
    obj.data.get("spec").filter(|s| !s.is_null())
}

/// Fields under the provider copy's `spec` that the consumer's spec does not have and that
/// another field manager owns, as key paths (objects only; lists are atomic and replaced by
/// the forced apply). Server-side apply never removes a field another manager owns, so drift
/// that *adds* fields survives a plain apply; these are removed by [`prune_patch`].
///
/// Fields nobody else owns (defaults, or what a mutating webhook adds to our own writes) are
/// left alone: removing them would only bring them back and loop.
pub fn foreign_extra_spec_fields(
    target: &DynamicObject,
    consumer: &DynamicObject,
) -> Vec<Vec<String>> {
    let (Some(have), want) = (spec_of(target), spec_of(consumer)) else {
        return Vec::new();
    };
    let mut extra = Vec::new();
    extra_paths(
        have,
        want.unwrap_or(&Value::Null),
        &mut Vec::new(),
        &mut extra,
    );
    let foreign: Vec<&Value> = target
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref().unwrap_or("").is_empty())
        .filter(|m| m.manager.as_deref() != Some(FIELD_MANAGER))
        .filter_map(|m| m.fields_v1.as_ref().and_then(|f| f.0.get("f:spec")))
        .collect();
    extra.retain(|path| foreign.iter().any(|owned| owns(owned, path)));
    extra
}

/// Collects key paths present in `have` but absent from `want`, descending into objects
/// present on both sides.
fn extra_paths(have: &Value, want: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let (Some(have), Some(want)) = (have.as_object(), want.as_object()) else {
        if prefix.is_empty() && have.is_object() {
            // The consumer has no spec at all: every provider key is extra.
            for key in have.as_object().into_iter().flat_map(|o| o.keys()) {
                out.push(vec![key.clone()]);
            }
        }
        return;
    };
    for (key, value) in have {
        prefix.push(key.clone());
        match want.get(key) {
            None => out.push(prefix.clone()),
            Some(wanted) => extra_paths(value, wanted, prefix, out),
        }
        prefix.pop();
    }
}

/// Whether a `fieldsV1` tree (below `f:spec`) covers `path`.
fn owns(fields: &Value, path: &[String]) -> bool {
    let Some((first, rest)) = path.split_first() else {
        return true;
    };
    match fields.get(format!("f:{first}")) {
        Some(child) => {
            rest.is_empty() || child.as_object().is_some_and(|o| o.is_empty()) || owns(child, rest)
        }
        None => false,
    }
}

/// A JSON merge patch removing `paths` under `spec`, guarded by the resourceVersion the
/// decision was made on.
pub fn prune_patch(paths: &[Vec<String>], resource_version: Option<&str>) -> Value {
    let mut spec = json!({});
    for path in paths {
        let mut node = &mut spec;
        for (i, key) in path.iter().enumerate() {
            if i + 1 == path.len() {
                node[key.as_str()] = Value::Null;
            } else {
                if !node.get(key.as_str()).is_some_and(Value::is_object) {
                    node[key.as_str()] = json!({});
                }
                node = &mut node[key.as_str()];
            }
        }
    }
    let mut patch = json!({ "spec": spec });
    if let Some(rv) = resource_version {
        patch["metadata"] = json!({ "resourceVersion": rv });
    }
    patch
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
    fn extra_fields_owned_by_another_manager_are_found_at_any_depth() {
        let mut c = consumer();
        c.data["spec"] = json!({ "size": 3, "db": { "engine": "pg" } });
        let mut p = provider_of(&c);
        p.data["spec"] = json!({ "size": 3, "sneaked": 1, "db": { "engine": "pg", "extra": true }, "defaulted": 0 });
        p.metadata.managed_fields = Some(vec![
            managed(
                FIELD_MANAGER,
                "Apply",
                json!({ "f:spec": { "f:size": {}, "f:db": { "f:engine": {} } } }),
            ),
            managed(
                "kubectl-edit",
                "Update",
                json!({ "f:spec": { "f:sneaked": {}, "f:db": { "f:extra": {} } } }),
            ),
            managed(
                "operator",
                "Update",
                json!({ "f:status": { "f:defaulted": {} } }),
            ),
        ]);
        assert_eq!(
            foreign_extra_spec_fields(&p, &c),
            vec![
                vec!["db".to_string(), "extra".to_string()],
                vec!["sneaked".to_string()],
            ],
            "`defaulted` has no other owner and stays"
        );
    }

    #[test]
    fn our_own_fields_are_never_pruned() {
        let c = consumer();
        let mut p = provider_of(&c);
        p.data["spec"]["webhook"] = json!("injected");
        p.metadata.managed_fields = Some(vec![managed(
            FIELD_MANAGER,
            "Update",
            json!({ "f:spec": { "f:webhook": {} } }),
        )]);
        assert!(foreign_extra_spec_fields(&p, &c).is_empty());
    }

    #[test]
    fn atomic_ownership_of_a_parent_covers_its_children() {
        let mut c = consumer();
        c.data["spec"] = json!({ "db": {} });
        let mut p = provider_of(&c);
        p.data["spec"] = json!({ "db": { "extra": 1 } });
        p.metadata.managed_fields = Some(vec![managed(
            "other",
            "Update",
            json!({ "f:spec": { "f:db": {} } }),
        )]);
        assert_eq!(
            foreign_extra_spec_fields(&p, &c),
            vec![vec!["db".to_string(), "extra".to_string()]]
        );
    }

    #[test]
    fn prune_patch_nulls_each_path_under_a_resource_version_guard() {
        let paths = vec![
            vec!["a".to_string()],
            vec!["b".to_string(), "c".to_string()],
        ];
        assert_eq!(
            prune_patch(&paths, Some("7")),
            json!({ "spec": { "a": null, "b": { "c": null } }, "metadata": { "resourceVersion": "7" } })
        );
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
