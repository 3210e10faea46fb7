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
//! Each copy's failure is counted in the pass's [`PassReport`] and the others go on. Only objects
//! the guard let through are written or deleted, whatever the plan names.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};
use tracing::{debug, info};

use crate::api::RelatedResource;
use crate::api::names::{RELATED_DIGEST_ANNOTATION, RELATED_FIELD_MANAGER};
use crate::k8s::ApiErrorExt;
use crate::policy::RelatedPlan;

use super::decision::{Decision, decide};
use super::guard::RelatedGuard;
use super::payload::payload;
use super::placed::{Coordinates, Sites};
use super::select::count_read;
use super::write::{
    At, CHANGED_MEANWHILE, apply_under, delete_target, ensure_namespace, has_keys_beyond,
    is_immutable, replace_under,
};
use super::{
    Error, Objects, PassReport, RelatedScope, Result, Sides, annotation, api, count_skipped,
    marker, resource_label,
};

/// `related_skipped` reason of a target that carries another binding's marker, or none.
const FOREIGN_TARGET: &str = "foreign-target";
/// `related_skipped` reason of a source Secret whose type the host does not copy.
const SECRET_TYPE: &str = "secret-type";

/// Writes what the plan says within what the guard allows: copies created or refreshed (a
/// changed immutable copy is recreated), skips counted, copies no longer selected deleted.
/// Every failure is counted in `outcome`; the other copies go on.
pub(super) async fn apply_plan(
    scope: &RelatedScope<'_>,
    entry: &RelatedResource,
    sides: &Sides,
    plan: &RelatedPlan,
    listed: &Listed<'_>,
    outcome: &mut PassReport,
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
    let source = read_full(&sides.source, entry, at.source).await?;
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

/// Reads one object of the entry's kind in full (counted as such), because a copy is to be
/// written from it or compared with it.
async fn read_full(
    client: &Client,
    entry: &RelatedResource,
    (namespace, name): &Coordinates,
) -> Result<Option<DynamicObject>> {
    count_read(entry, "get-full");
    api(client, entry, Some(namespace))
        .get_opt(name)
        .await
        .map_err(Error::read(resource_label(entry.resource), namespace, name))
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
            let existing = target_api
                .get_metadata_opt(name)
                .await
                .map_err(Error::read(resource, namespace, name))?;
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
    let _object = format!("{namespace}/{name}");
    if annotation(target, RELATED_DIGEST_ANNOTATION)
        != body["metadata"]["annotations"][RELATED_DIGEST_ANNOTATION].as_str()
    {
        // The payload differs: an immutable copy cannot be updated, so it is recreated. Only
        // a copy whose payload differs is read in full to tell.
        let full = read_full(&sides.target, entry, at.target).await?;
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
