//! Writing what the related-selection policy answered for one entry, in proportion to what
//! changed. The lists are metadata-only; a selected source is read in full only when its copy
//! is missing or out of date, which the copy's own annotations tell:
//!
//! ```text
//! copy of ours ──(source resourceVersion = core.kbind.io/related-source-version,
//!                 digest present, no other manager owns payload fields)──▶ up to date
//!              ──otherwise──▶ read the source, SSA payload + markers under the copy's listed
//!                             resourceVersion (an object replaced meanwhile is not taken);
//!                             an immutable copy whose digest differs is recreated
//! no target at list time ──▶ read the source, create (POST) a claim, then SSA the payload
//!                            under the claim's resourceVersion; AlreadyExists means someone
//!                            else's object appeared: its marker is re-checked, never taken
//! target of another binding (or unmarked) ──▶ skipped, counted
//! ```
//!
//! Each copy's failure is counted in the pass's [`Outcome`] and the others go on. Only objects
//! the guard let through are written or deleted, whatever the plan names.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tracing::{debug, info};

use crate::api::RelatedResource;
use crate::api::names::{
    RELATED_DIGEST_ANNOTATION, RELATED_FIELD_MANAGER, RELATED_SOURCE_VERSION_ANNOTATION,
};
use crate::k8s::{self, ApiErrorExt, NamespaceState};
use crate::policy::RelatedPlan;

use super::payload::{PAYLOAD_FIELDS, payload};
use super::placed::{Coordinates, Sites};
use super::select::count_read;
use super::{
    Objects, Outcome, RelatedScope, Sides, annotation, api, count_skipped, marker, resource_label,
};
use crate::binding::related_guard::RelatedGuard;
use crate::binding::{Error, Result};

/// `related_skipped` reason of a target that carries another binding's marker, or none.
const FOREIGN_TARGET: &str = "foreign-target";
/// `related_skipped` reason of a source Secret whose type the host does not copy.
const SECRET_TYPE: &str = "secret-type";
/// `related_skipped` reason of a copy that changed between the list and the write: it is
/// looked at again on the next pass.
const CHANGED_MEANWHILE: &str = "changed-meanwhile";

/// What one selected source's copy needs, decided from metadata alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Decision {
    /// No target at list time: create it (never apply over whatever appears meanwhile).
    Create,
    /// Our copy, from this very source version and not edited by anyone else: nothing to do.
    UpToDate,
    /// Our copy, but the source changed, the copy predates the annotations, or someone else
    /// wrote its payload: read the source and apply under the copy's resourceVersion.
    Refresh,
    /// A target with another binding's marker or none: never touched.
    Foreign,
}

/// Decides what a selected source's copy needs from the two objects' metadata.
pub(super) fn decide(
    binding_uid: &str,
    source: &ObjectMeta,
    target: Option<&ObjectMeta>,
) -> Decision {
    let Some(target) = target else {
        return Decision::Create;
    };
    if marker(target) != Some(binding_uid) {
        return Decision::Foreign;
    }
    let same_source = source.resource_version.is_some()
        && annotation(target, RELATED_SOURCE_VERSION_ANNOTATION)
            == source.resource_version.as_deref();
    if same_source
        && annotation(target, RELATED_DIGEST_ANNOTATION).is_some()
        && !foreign_payload_writer(target)
    {
        Decision::UpToDate
    } else {
        Decision::Refresh
    }
}

/// Whether a manager other than ours owns a payload field of the copy (someone edited it), as
/// the copy's managedFields in a metadata-only list tell.
fn foreign_payload_writer(target: &ObjectMeta) -> bool {
    target.managed_fields.iter().flatten().any(|m| {
        m.manager.as_deref() != Some(RELATED_FIELD_MANAGER)
            && m.fields_v1.as_ref().is_some_and(|f| {
                f.0.as_object().is_some_and(|fields| {
                    PAYLOAD_FIELDS
                        .iter()
                        .any(|p| fields.contains_key(&format!("f:{p}")))
                })
            })
    })
}

/// Writes what the plan says within what the guard allows: copies created or refreshed (a
/// changed immutable copy is recreated), skips counted, copies no longer selected deleted.
/// Every failure is counted in `outcome`; the other copies go on.
pub(super) async fn apply_plan(
    scope: &RelatedScope<'_>,
    entry: &RelatedResource,
    sides: &Sides,
    plan: &RelatedPlan,
    listed: &Listed<'_>,
    outcome: &mut Outcome,
) {
    let Listed {
        sources,
        targets,
        sites,
    } = listed;
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
        let target = targets.get(&key);
        let at = At {
            source: sites.source_of(&key),
            target: sites.target_of(&key),
        };
        // Where isolation placed the target is held to the same rule as the binding's own
        // namespace (never a system, credential or konnector namespace).
        if !scope.guard.allows_namespace(&at.target.0) {
            continue;
        }
        let decision = decide(scope.binding_uid, source, target);
        if decision == Decision::Create
            && namespaces.insert(at.target.0.clone())
            && let Err(error) = ensure_namespace(&sides.target, &at.target.0).await
        {
            outcome.fail(entry, error);
            continue;
        }
        let copied = match (decision, target) {
            (Decision::UpToDate, _) => Ok(()),
            (Decision::Foreign, _) => {
                // The host enforces the marker rule whatever the module planned.
                count_skipped(entry, FOREIGN_TARGET);
                Ok(())
            }
            (Decision::Refresh, Some(target)) => refresh(scope, entry, sides, &at, target).await,
            (Decision::Create | Decision::Refresh, _) => create(scope, entry, sides, &at).await,
        };
        if let Err(error) = copied {
            outcome.fail(entry, error);
        }
    }
    for gone in &plan.delete {
        let key = (gone.namespace.clone(), gone.name.clone());
        if let Some(target) = targets
            .get(&key)
            .filter(|_| scope.guard.allows_namespace(&gone.namespace))
        {
            info!(namespace = %gone.namespace, name = %gone.name, "related copy no longer selected; deleting it");
            if let Err(error) = delete_target(&sides.target, entry, target).await {
                outcome.fail(entry, error);
            }
        }
    }
}

/// What one entry's pass listed, by consumer coordinates, and where each object is.
pub(super) struct Listed<'a> {
    /// Selectable sources.
    pub(super) sources: &'a Objects,
    /// Objects on the target side.
    pub(super) targets: &'a Objects,
    /// Where sources and targets placed elsewhere are.
    pub(super) sites: &'a Sites,
}

/// Where one copy's source and target are: the same namespace and name, unless isolation
/// placed the provider side elsewhere.
struct At<'a> {
    source: &'a Coordinates,
    target: &'a Coordinates,
}

/// A source as read in full.
enum Read {
    /// To be copied.
    Copyable(Box<DynamicObject>),
    /// Gone since the list: the next pass's plan deletes its copy.
    Gone,
    /// A Secret of a type the host does not copy (counted in `related_skipped`).
    Refused,
}

/// Reads one selected source in full, because its copy is to be written.
async fn read_source(entry: &RelatedResource, sides: &Sides, at: &At<'_>) -> Result<Read> {
    let (namespace, name) = at.source;
    count_read(entry, "get-full");
    let source = api(&sides.source, entry, Some(namespace))
        .get_opt(name)
        .await
        .map_err(|source| Error::ReadRelated {
            resource: resource_label(entry.resource),
            object: format!("{namespace}/{name}"),
            source,
        })?;
    Ok(match source {
        None => Read::Gone,
        Some(s) if RelatedGuard::copyable(entry.resource, &s) => Read::Copyable(Box::new(s)),
        Some(_) => {
            debug!(%namespace, %name, "related Secret of a type the host does not copy; skipped");
            count_skipped(entry, SECRET_TYPE);
            Read::Refused
        }
    })
}

/// Creates a copy that was absent at list time with a POST, so an object someone created
/// meanwhile is never written (a Secret's payload must be valid for its type from the start,
/// so the whole copy is posted).
async fn create(
    scope: &RelatedScope<'_>,
    entry: &RelatedResource,
    sides: &Sides,
    at: &At<'_>,
) -> Result<()> {
    let Read::Copyable(source) = read_source(entry, sides, at).await? else {
        return Ok(());
    };
    let (namespace, name) = at.target;
    let body = placed_payload(entry, &source, scope.binding_uid, at);
    let target_api = api(&sides.target, entry, Some(namespace));
    let params = PostParams {
        field_manager: Some(RELATED_FIELD_MANAGER.to_string()),
        ..PostParams::default()
    };
    let object = format!("{namespace}/{name}");
    let resource = resource_label(entry.resource);
    match target_api
        .create(&params, &serde_json::from_value(body.clone())?)
        .await
    {
        Ok(_) => {
            debug!(%namespace, %name, "related copy created");
            Ok(())
        }
        Err(e) if e.is_already_exists() => {
            // Someone else's object appeared since the list (or a pass of ours raced this
            // one): look at its marker again and never take an object that is not ours.
            let existing =
                target_api
                    .get_metadata_opt(name)
                    .await
                    .map_err(|source| Error::ReadRelated {
                        resource,
                        object: object.clone(),
                        source,
                    })?;
            match existing {
                Some(existing) if marker(&existing.metadata) == Some(scope.binding_uid) => {
                    apply_under(entry, sides, at, body, &existing.metadata).await
                }
                _ => {
                    info!(%namespace, %name, resource, "an object appeared where a related copy was to be created; left untouched");
                    count_skipped(entry, FOREIGN_TARGET);
                    Ok(())
                }
            }
        }
        Err(source) => Err(Error::ApplyRelated {
            resource,
            object,
            source,
        }),
    }
}

/// Refreshes our copy `target` (as listed) from its source: applied under the listed
/// resourceVersion; an immutable copy whose payload differs is recreated instead.
async fn refresh(
    scope: &RelatedScope<'_>,
    entry: &RelatedResource,
    sides: &Sides,
    at: &At<'_>,
    target: &ObjectMeta,
) -> Result<()> {
    let source = match read_source(entry, sides, at).await? {
        Read::Copyable(source) => source,
        // Gone since the list: the next pass's plan deletes the copy.
        Read::Gone => return Ok(()),
        // A source of a type the host does not copy is not selected: its copy goes.
        Read::Refused => return delete_target(&sides.target, entry, target).await,
    };
    let body = placed_payload(entry, &source, scope.binding_uid, at);
    let resource = resource_label(entry.resource);
    let (namespace, name) = at.target;
    let object = format!("{namespace}/{name}");
    if annotation(target, RELATED_DIGEST_ANNOTATION)
        != body["metadata"]["annotations"][RELATED_DIGEST_ANNOTATION].as_str()
    {
        // The payload differs: an immutable copy cannot be updated, so it is recreated. Only
        // a copy whose payload differs is read in full to tell.
        count_read(entry, "get-full");
        let full = api(&sides.target, entry, Some(namespace))
            .get_opt(name)
            .await
            .map_err(|source| Error::ReadRelated {
                resource,
                object: object.clone(),
                source,
            })?;
        if let Some(full) = full.as_ref().filter(|f| !is_immutable(f))
            && full.metadata.uid == target.uid
            && has_keys_beyond(full, &body)
        {
            // A key the source dropped is still on the copy, owned by the create: replace the
            // payload under the listed resourceVersion, so it goes.
            return replace_under(entry, sides, full, &body, target).await;
        }
        if let Some(full) = full.filter(is_immutable) {
            if full.metadata.uid != target.uid {
                count_skipped(entry, CHANGED_MEANWHILE);
                return Ok(());
            }
            info!(%namespace, %name, resource, "immutable related source changed; recreating the copy");
            delete_target(&sides.target, entry, target).await?;
            return create(scope, entry, sides, at).await;
        }
    }
    apply_under(entry, sides, at, body, target).await
}

/// The copy of `source` as [`payload`] builds it, at the target's place.
fn placed_payload(
    entry: &RelatedResource,
    source: &DynamicObject,
    binding_uid: &str,
    at: &At<'_>,
) -> Value {
    let mut body = payload(entry, source, binding_uid);
    let (namespace, name) = at.target;
    body["metadata"]["namespace"] = json!(namespace);
    body["metadata"]["name"] = json!(name);
    body
}

/// Applies `body` to the copy `target` only while it is still the object as read: a
/// resourceVersion precondition, so an object deleted and replaced by someone else in the
/// window is never taken over (it is looked at again on the next pass).
async fn apply_under(
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
fn has_keys_beyond(full: &DynamicObject, body: &Value) -> bool {
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
async fn replace_under(
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

fn is_immutable(obj: &DynamicObject) -> bool {
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
    use super::*;
    use crate::api::names::RELATED_BINDING_ANNOTATION;

    fn meta(value: Value) -> ObjectMeta {
        serde_json::from_value(value).unwrap_or_else(|e| panic!("fixture: {e}"))
    }

    #[test]
    fn a_target_absent_at_list_time_is_created_never_applied() {
        let source = meta(json!({ "name": "s", "namespace": "ns", "resourceVersion": "7" }));
        assert_eq!(decide("b", &source, None), Decision::Create);
    }

    #[test]
    fn a_target_with_another_or_no_marker_is_never_touched() {
        let source = meta(json!({ "name": "s", "resourceVersion": "7" }));
        let unmarked = meta(json!({ "name": "s" }));
        let other =
            meta(json!({ "name": "s", "annotations": { RELATED_BINDING_ANNOTATION: "x" } }));
        assert_eq!(decide("b", &source, Some(&unmarked)), Decision::Foreign);
        assert_eq!(decide("b", &source, Some(&other)), Decision::Foreign);
    }

    #[test]
    fn our_copy_of_the_same_source_version_is_up_to_date_unless_someone_edited_it() {
        let source = meta(json!({ "name": "s", "resourceVersion": "7" }));
        let copy = |version: &str, managers: Value| {
            meta(json!({ "name": "s", "annotations": {
                RELATED_BINDING_ANNOTATION: "b",
                RELATED_DIGEST_ANNOTATION: "d",
                RELATED_SOURCE_VERSION_ANNOTATION: version,
            }, "managedFields": managers }))
        };
        let ours = json!([{ "manager": RELATED_FIELD_MANAGER, "operation": "Apply",
            "fieldsType": "FieldsV1", "fieldsV1": { "f:data": { "f:k": {} } } }]);
        assert_eq!(
            decide("b", &source, Some(&copy("7", ours.clone()))),
            Decision::UpToDate
        );
        assert_eq!(
            decide("b", &source, Some(&copy("6", ours))),
            Decision::Refresh,
            "source changed"
        );
        let edited = json!([
            { "manager": RELATED_FIELD_MANAGER, "operation": "Apply", "fieldsType": "FieldsV1",
              "fieldsV1": { "f:data": {} } },
            { "manager": "kubectl-edit", "operation": "Update", "fieldsType": "FieldsV1",
              "fieldsV1": { "f:data": { "f:k": {} } } },
        ]);
        assert_eq!(
            decide("b", &source, Some(&copy("7", edited))),
            Decision::Refresh,
            "edited"
        );
        let labelled = json!([{ "manager": "kubectl-label", "operation": "Update",
            "fieldsType": "FieldsV1", "fieldsV1": { "f:metadata": { "f:labels": {} } } }]);
        assert_eq!(
            decide("b", &source, Some(&copy("7", labelled))),
            Decision::UpToDate
        );
        let old = meta(json!({ "name": "s", "annotations": { RELATED_BINDING_ANNOTATION: "b" } }));
        assert_eq!(
            decide("b", &source, Some(&old)),
            Decision::Refresh,
            "no annotations yet"
        );
    }
}
