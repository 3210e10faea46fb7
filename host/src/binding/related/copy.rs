//! Writing what the related-selection policy answered for one entry: each selected source
//! copied as its payload fields plus the `core.kbind.io/related-binding` marker (server-side
//! apply as `kbind-konnector-related`, an immutable copy recreated when its source changed),
//! and this binding's copies that are no longer selected deleted. Only objects the guard let
//! through are written or deleted, whatever the plan names.

use std::collections::BTreeSet;

use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, ResourceExt};
use serde_json::{Map, Value, json};
use tracing::{debug, info};

use crate::api::names::{RELATED_BINDING_ANNOTATION, RELATED_FIELD_MANAGER};
use crate::api::{RelatedResource, RelatedResourceKind};
use crate::k8s::{self, ApiErrorExt, NamespaceState};
use crate::policy::RelatedPlan;

use super::{Objects, RelatedScope, Sides, api, count_skipped, resource, resource_label};
use crate::binding::{Error, Result};

/// `related_skipped` reason of a target that carries another binding's marker, or none.
const FOREIGN_TARGET: &str = "foreign-target";

/// The payload fields a copy carries (spec: "data, stringData, binaryData, type, and
/// immutable when present, not arbitrary source metadata").
const PAYLOAD_FIELDS: [&str; 5] = ["data", "stringData", "binaryData", "type", "immutable"];

/// Writes what the plan says within what the guard allows: copies (a changed immutable
/// copy is recreated), skips counted, copies no longer selected deleted.
pub(super) async fn apply_plan(
    scope: &RelatedScope<'_>,
    entry: &RelatedResource,
    sides: &Sides,
    plan: &RelatedPlan,
    sources: &Objects,
    targets: &Objects,
) -> Result<()> {
    let resource = resource_label(entry.resource);
    for skipped in &plan.skip {
        // Spec: "These collisions are silently skipped and are not included in instance
        // conflict counts."
        debug!(namespace = %skipped.namespace, name = %skipped.name, reason = ?skipped.reason, "related target belongs to someone else; skipped");
        count_skipped(entry, FOREIGN_TARGET);
    }
    let mut namespaces = BTreeSet::new();
    for copy in &plan.copy {
        let key = (copy.namespace.clone(), copy.name.clone());
        // Only a source the guard let through is written, whatever the plan names.
        let Some(source) = sources.get(&key) else {
            continue;
        };
        if !scope.guard.allows_namespace(&copy.namespace) {
            continue;
        }
        let body = payload(entry, source, scope.binding_uid);
        let target_api = api(&sides.target, entry, Some(&copy.namespace));
        if let Some(existing) = targets.get(&key) {
            if is_immutable(existing) && payload_differs(existing, &body) {
                // An immutable object cannot be updated: recreate it.
                info!(namespace = %copy.namespace, name = %copy.name, resource, "immutable related source changed; recreating the copy");
                delete_target(&sides.target, entry, existing).await?;
                target_api
                    .create(&PostParams::default(), &serde_json::from_value(body)?)
                    .await
                    .map_err(|source| Error::ApplyRelated { resource, source })?;
                continue;
            }
        } else if namespaces.insert(copy.namespace.clone()) {
            ensure_namespace(&sides.target, &copy.namespace).await?;
        }
        target_api
            .patch(
                &copy.name,
                &PatchParams::apply(RELATED_FIELD_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await
            .map_err(|source| Error::ApplyRelated { resource, source })?;
        debug!(namespace = %copy.namespace, name = %copy.name, "related copy applied");
    }
    for gone in &plan.delete {
        let key = (gone.namespace.clone(), gone.name.clone());
        if let Some(target) = targets
            .get(&key)
            .filter(|_| scope.guard.allows_namespace(&gone.namespace))
        {
            info!(namespace = %gone.namespace, name = %gone.name, "related copy no longer selected; deleting it");
            delete_target(&sides.target, entry, target).await?;
        }
    }
    Ok(())
}

/// The copy: namespace/name, the marker, and only the payload fields present on the source.
pub fn payload(entry: &RelatedResource, source: &DynamicObject, binding_uid: &str) -> Value {
    let (kind, ar) = match entry.resource {
        RelatedResourceKind::Secrets => ("Secret", resource(entry.resource)),
        RelatedResourceKind::Configmaps => ("ConfigMap", resource(entry.resource)),
    };
    let mut body = Map::new();
    body.insert("apiVersion".into(), json!(ar.api_version));
    body.insert("kind".into(), json!(kind));
    body.insert(
        "metadata".into(),
        json!({
            "name": source.name_any(),
            "namespace": source.metadata.namespace,
            "annotations": { RELATED_BINDING_ANNOTATION: binding_uid },
        }),
    );
    if let Some(fields) = source.data.as_object() {
        for field in PAYLOAD_FIELDS {
            if let Some(value) = fields.get(field).filter(|v| !v.is_null()) {
                body.insert(field.into(), value.clone());
            }
        }
    }
    Value::Object(body)
}

fn is_immutable(obj: &DynamicObject) -> bool {
    obj.data.get("immutable").and_then(Value::as_bool) == Some(true)
}

/// Whether the target's payload differs from the desired copy's.
fn payload_differs(existing: &DynamicObject, desired: &Value) -> bool {
    PAYLOAD_FIELDS
        .iter()
        .filter(|f| **f != "stringData")
        .any(|f| existing.data.get(*f) != desired.get(*f))
}

/// Deletes one copy under its uid, so an object someone else put there since the list stays.
pub(super) async fn delete_target(
    client: &Client,
    entry: &RelatedResource,
    target: &DynamicObject,
) -> Result<()> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: target.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api(client, entry, target.metadata.namespace.as_deref())
        .delete(&target.name_any(), &params)
        .await
    {
        Ok(_) => Ok(()),
        // Already gone, or replaced by someone else since the list: nothing of ours to delete.
        Err(e) if e.is_not_found() || e.is_conflict() => Ok(()),
        Err(source) => Err(Error::DeleteRelated {
            resource: resource_label(entry.resource),
            source,
        }),
    }
}

/// Spec: "Namespace creation and source/target RBAC are still required": a create attempt;
/// an existing namespace is fine, a refusal is logged and the copy's own write reports.
async fn ensure_namespace(client: &Client, name: &str) -> Result<()> {
    match k8s::ensure_namespace(client, name).await {
        Ok(NamespaceState::Created) => {
            info!(namespace = name, "namespace created for related copies");
            Ok(())
        }
        Ok(NamespaceState::Existed) => Ok(()),
        Ok(NamespaceState::CreateForbidden) => {
            debug!(
                namespace = name,
                "may not create namespace; trying the copy anyway"
            );
            Ok(())
        }
        Err(source) => Err(Error::CreateNamespace {
            namespace: name.to_string(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::entry;
    use super::*;

    fn secret() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {
                "name": "s", "namespace": "ns", "uid": "u1",
                "labels": { "a": "b" }, "annotations": { "x": "y" },
                "finalizers": ["f"], "ownerReferences": [],
            },
            "data": { "k": "dg==" }, "type": "Opaque", "immutable": true,
        }))
        .unwrap_or_else(|e| panic!("fixture: {e}"))
    }

    #[test]
    fn payload_carries_only_payload_fields_and_the_marker() {
        let body = payload(&entry(RelatedResourceKind::Secrets), &secret(), "b-uid");
        assert_eq!(
            body,
            json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {
                    "name": "s", "namespace": "ns",
                    "annotations": { RELATED_BINDING_ANNOTATION: "b-uid" },
                },
                "data": { "k": "dg==" }, "type": "Opaque", "immutable": true,
            })
        );
    }

    #[test]
    fn an_immutable_target_with_other_data_differs() {
        let existing = secret();
        let mut desired = payload(&entry(RelatedResourceKind::Secrets), &existing, "b");
        assert!(is_immutable(&existing));
        assert!(!payload_differs(&existing, &desired));
        desired["data"] = json!({ "k": "dzI=" });
        assert!(payload_differs(&existing, &desired));
    }
}
