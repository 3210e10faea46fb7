//! Deleting one consumer instance (spec, "Delete one consumer instance"):
//!
//! ```text
//! deletion-policy=Orphan? ──yes──▶ release the finalizer (the copy and its markers stay)
//!        │ no
//!        ▼
//! read the provider target ── absent ──────────────────────────▶ release the finalizer
//!        │ present: both UIDs ours?
//!        ├── no (foreign, conflicting, or owned by an older incarnation) ─▶ release, delete nothing
//!        ▼ yes
//! delete the owned copy (UID precondition) and keep the finalizer until it is gone
//! ```
//!
//! An unreachable provider or a provider-side finalizer therefore holds the consumer deletion
//! open, visibly: the finalizer stays, and an Event and the instance's `Synced=False` condition
//! (reason `ProviderFinalizers`) name the copy and each provider finalizer it waits for.

use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use tracing::{debug, info};

use crate::api::names::SYNCER_FINALIZER;
use crate::markers::{CopyDeletion, copy_deletion, orphaned};

use super::context::SyncContext;
use super::placement::display;
use super::report::deletion_waits;
use super::{Error, Result};
use crate::k8s::{ApiErrorExt, remove_finalizer};

/// Runs the deletion path for an instance that carries the syncer finalizer.
pub(super) async fn cleanup(obj: &DynamicObject, ctx: &SyncContext) -> Result<Action> {
    if orphaned(obj) {
        info!("deletion-policy Orphan: keeping the provider copy");
        release_finalizer(obj, ctx).await?;
        return Ok(Action::await_change());
    }
    let uid = obj.metadata.uid.as_deref().ok_or(Error::MissingIdentity)?;
    let placed = ctx.spec.isolation.strategy != crate::api::IsolationStrategy::None;
    if placed && !ctx.provider_cache_ready().await {
        // Which copy is this instance's is known from the provider cache, once it has listed.
        return Ok(Action::requeue(ctx.settings.error_backoff_base));
    }
    let Some(place) = ctx.recorded_placement(obj) else {
        debug!("no provider copy was ever placed for this instance");
        release_finalizer(obj, ctx).await?;
        return Ok(Action::await_change());
    };
    // Spec: "Reads the provider target and checks both ownership UIDs." A live read: the
    // decision to delete must not rest on a cache.
    let target = ctx.live_object(&place).await?;
    match copy_deletion(target.as_ref(), &ctx.spec.consumer_cluster_uid, uid) {
        CopyDeletion::Absent => {
            release_finalizer(obj, ctx).await?;
            return Ok(Action::await_change());
        }
        CopyDeletion::NotOurs => {
            // Spec: "Deleting a conflicting consumer object does not delete the foreign provider
            // object."
            info!("provider object is not ours; releasing without deleting it");
            release_finalizer(obj, ctx).await?;
            return Ok(Action::await_change());
        }
        CopyDeletion::Delete(params) => {
            match ctx
                .provider_api(place.namespace.as_deref())
                .delete(&place.name, &params)
                .await
            {
                Ok(_) => info!("provider copy deletion requested"),
                Err(e) if e.is_not_found() => {
                    release_finalizer(obj, ctx).await?;
                    return Ok(Action::await_change());
                }
                // 409: the precondition failed, the object was replaced; look again.
                Err(e) if e.is_conflict() => {
                    return Ok(Action::requeue(ctx.settings.error_backoff_base));
                }
                Err(e) => return Err(Error::DeleteFromProvider(e)),
            }
        }
        CopyDeletion::Terminating => {
            debug!("provider copy is terminating");
            let finalizers = target.as_ref().map(|t| t.finalizers().to_vec());
            let at = display(place.namespace.as_deref(), &place.name);
            deletion_waits(obj, ctx, &at, &finalizers.unwrap_or_default()).await;
        }
    }
    // Spec: "Waits for the provider object to disappear before releasing the consumer
    // finalizer." The provider watch reports the disappearance; the poll is a backstop.
    Ok(Action::requeue(ctx.settings.deletion_poll))
}

/// Releases the syncer finalizer (only ours: see [`crate::k8s::remove_finalizer`]).
async fn release_finalizer(obj: &DynamicObject, ctx: &SyncContext) -> Result<()> {
    remove_finalizer(
        &ctx.consumer_api(obj.metadata.namespace.as_deref()),
        obj,
        SYNCER_FINALIZER,
    )
    .await
    .map_err(Error::RemoveFinalizer)?;
    info!("finalizer released");
    Ok(())
}
