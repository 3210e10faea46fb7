//! The writes of a related pass, each under a precondition so that an object someone else
//! put in a copy's place since the list is never taken: applies and replacements under the
//! listed resourceVersion, deletions under the listed uid, and the namespaces copies need.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tracing::{debug, info};

use crate::api::RelatedResource;
use crate::api::names::RELATED_FIELD_MANAGER;
use crate::k8s::{self, ApiErrorExt, NamespaceState};

use super::payload::PAYLOAD_FIELDS;
use super::placed::Coordinates;
use super::{Error, Result, Sides, api, count_skipped, resource_label};

/// `related_skipped` reason of a copy that changed between the list and the write: it is
/// looked at again on the next pass.
/// Where one copy's source and target are: the same namespace and name, unless isolation
/// placed the provider side elsewhere.
pub(super) struct At<'a> {
    pub(super) source: &'a Coordinates,
    pub(super) target: &'a Coordinates,
}

pub(super) const CHANGED_MEANWHILE: &str = "changed-meanwhile";

/// Applies `body` to the copy `target` only while it is still the object as read: a
/// resourceVersion precondition, so an object deleted and replaced by someone else in the
/// window is never taken over (it is looked at again on the next pass).
pub(super) async fn apply_under(
    entry: &RelatedResource,
    sides: &Sides,
    at: &At<'_>,
    mut body: Value,
    target: &ObjectMeta,
) -> Result<()> {
    let (namespace, name) = at.target;
    body["metadata"]["resourceVersion"] = json!(target.resource_version);
    let resource = resource_label(entry.resource);
    match api(&sides.target, entry, Some(namespace))
        .patch(
            name,
            &PatchParams::apply(RELATED_FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
    {
        Ok(_) => {
            debug!(%namespace, %name, "related copy applied");
            Ok(())
        }
        Err(e) if e.is_conflict() || e.is_not_found() => {
            debug!(%namespace, %name, "related copy changed since it was listed; looked at again next pass");
            count_skipped(entry, CHANGED_MEANWHILE);
            Ok(())
        }
        Err(source) => Err(Error::ApplyRelated {
            resource,
            object: format!("{namespace}/{name}"),
            source,
        }),
    }
}

/// Whether `full` carries a data or binaryData key that `body` does not.
pub(super) fn has_keys_beyond(full: &DynamicObject, body: &Value) -> bool {
    ["data", "binaryData"].iter().any(|field| {
        full.data
            .get(*field)
            .and_then(Value::as_object)
            .is_some_and(|keys| {
                keys.keys()
                    .any(|k| body.get(*field).and_then(|b| b.get(k)).is_none())
            })
    })
}

/// Replaces the copy's payload and our annotations (PUT) under the listed resourceVersion;
/// an object changed or replaced meanwhile is left for the next pass.
pub(super) async fn replace_under(
    entry: &RelatedResource,
    sides: &Sides,
    full: &DynamicObject,
    body: &Value,
    target: &ObjectMeta,
) -> Result<()> {
    let mut replaced = full.clone();
    replaced.metadata.resource_version = target.resource_version.clone();
    replaced.metadata.managed_fields = None;
    if let Some(ours) = body["metadata"]["annotations"].as_object() {
        let annotations = replaced
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        for (k, v) in ours {
            annotations.insert(k.clone(), v.as_str().unwrap_or_default().to_string());
        }
    }
    if let Some(fields) = replaced.data.as_object_mut() {
        for field in PAYLOAD_FIELDS {
            match body.get(field) {
                Some(value) => fields.insert(field.to_string(), value.clone()),
                None => fields.remove(field),
            };
        }
    }
    let name = full.name_any();
    let namespace = full.metadata.namespace.clone().unwrap_or_default();
    let params = PostParams {
        field_manager: Some(RELATED_FIELD_MANAGER.to_string()),
        ..PostParams::default()
    };
    match api(&sides.target, entry, Some(&namespace))
        .replace(&name, &params, &replaced)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.is_conflict() || e.is_not_found() => {
            count_skipped(entry, CHANGED_MEANWHILE);
            Ok(())
        }
        Err(source) => Err(Error::ApplyRelated {
            resource: resource_label(entry.resource),
            object: format!("{namespace}/{name}"),
            source,
        }),
    }
}

/// Whether a copy is `immutable: true`: it cannot be updated, only recreated.
pub(super) fn is_immutable(obj: &DynamicObject) -> bool {
    obj.data.get("immutable").and_then(Value::as_bool) == Some(true)
}

/// Deletes one copy under its uid, so an object someone else put there since the list stays.
pub(super) async fn delete_target(
    client: &Client,
    entry: &RelatedResource,
    target: &ObjectMeta,
) -> Result<()> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: target.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let Some(name) = target.name.as_deref() else {
        return Ok(());
    };
    match api(client, entry, target.namespace.as_deref())
        .delete(name, &params)
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
pub(super) async fn ensure_namespace(client: &Client, name: &str) -> Result<()> {
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
