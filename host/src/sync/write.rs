//! Writing the provider copy once the conflict policy allowed it: a create where the cache
//! has none (so an object the cache cannot see makes it fail instead of being written over),
//! otherwise a forced server-side apply as `kbind-konnector`, after which the copy's `spec` is
//! exactly the consumer's: create-time field ownership is folded into the apply entry and
//! fields another manager added under `spec` are removed.

use kube::ResourceExt as _;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use tracing::{debug, info};

use crate::api::names::FIELD_MANAGER;
use crate::policy::Placement;

use super::cache::watched::Watched;
use super::context::SyncContext;
use super::{Error, Result};
use super::{desired, fields};

/// The provider copy of `obj` (instance uid `uid`) at `place`, as this syncer writes it.
fn provider_copy(
    obj: &DynamicObject,
    place: &Placement,
    ctx: &SyncContext,
    uid: &str,
    resource_version: Option<&str>,
) -> serde_json::Value {
    desired::provider_copy(
        obj,
        place,
        &ctx.ar,
        &ctx.spec.consumer_cluster_uid,
        uid,
        resource_version,
    )
}

/// Creates the provider copy where the cache has none. A create, not an apply: it fails with
/// AlreadyExists on an object the cache does not hold (another consumer's, or one nobody
/// marked) instead of writing over it, which is what lets a first sync skip the live read.
pub(super) async fn create_on_provider(
    obj: &DynamicObject,
    place: &Placement,
    ctx: &SyncContext,
    uid: &str,
) -> Result<DynamicObject> {
    let body = provider_copy(obj, place, ctx, uid, None);
    let copy: DynamicObject = serde_json::from_value(body)
        .map_err(|e| Error::CreateOnProvider(kube::Error::SerdeError(e)))?;
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PostParams::default()
    };
    let created = ctx
        .provider_creates(place.namespace.as_deref())
        .create(&params, &Watched(copy))
        .await
        .map_err(Error::CreateOnProvider)?;
    info!("provider copy created");
    Ok(created.0)
}

/// Server-side apply of the provider copy, forced: the policy has allowed it. Fields another
/// manager added under `spec` (drift that adds, or what an adopted object had) are then
/// removed with a merge patch, so the copy ends up with exactly the consumer's spec.
pub(super) async fn apply_to_provider(
    obj: &DynamicObject,
    place: &Placement,
    ctx: &SyncContext,
    uid: &str,
    resource_version: Option<&str>,
) -> Result<DynamicObject> {
    let api = ctx.provider_api(place.namespace.as_deref());
    let name = place.name.clone();
    let apply = |resource_version: Option<&str>| {
        let body = provider_copy(obj, place, ctx, uid, resource_version);
        let (api, name) = (&api, &name);
        async move {
            api.patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await
            .map_err(Error::ApplyToProvider)
        }
    };
    let mut applied = apply(resource_version).await?;
    if let Some(upgrade) = fields::create_time_ownership_patch(&applied, obj) {
        // A field the consumer removed is still ours through the create's managedFields
        // entry: fold it into our apply entry, then apply again so the removal takes.
        debug!("moving create-time field ownership to the apply entry");
        let upgrade = serde_json::from_value(upgrade)
            .map_err(|e| Error::ApplyToProvider(kube::Error::SerdeError(e)))?;
        let upgraded = api
            .patch(&name, &PatchParams::default(), &Patch::<()>::Json(upgrade))
            .await
            .map_err(Error::ApplyToProvider)?;
        applied = apply(upgraded.resource_version().as_deref()).await?;
    }
    let extra = fields::foreign_extra_spec_fields(&applied, obj);
    if !extra.is_empty() {
        debug!(fields = ?extra, "removing spec fields another manager added");
        let patch = fields::prune_patch(&extra, applied.resource_version().as_deref());
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        applied = api
            .patch(&name, &params, &Patch::Merge(&patch))
            .await
            .map_err(Error::ApplyToProvider)?;
    }
    info!("provider copy written");
    Ok(applied)
}
