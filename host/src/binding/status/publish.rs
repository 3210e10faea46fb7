//! Writing a binding's status: only when it changed, through the status subresource with
//! server-side apply, and followed by an Event for each condition that changed state.

use kube::{Api, ResourceExt};
use tracing::{info, warn};

use crate::api::BindingStatus;
use crate::conditions::{self, Desired};
use crate::k8s;

use super::{events, shard_status};
use crate::binding::object::BindingObject;
use crate::binding::{Context, Error, Result};

/// Writes `new_status` when it differs from the stored one, then publishes an Event for each
/// condition that changed state.
pub(crate) async fn publish_status<K: BindingObject>(
    obj: &K,
    api: &Api<K>,
    ctx: &Context,
    new_status: BindingStatus,
) -> Result<()> {
    let newer = newer_write(obj, ctx);
    let old = newer.as_ref().unwrap_or(obj).binding_status();
    if old == Some(&new_status) {
        return Ok(());
    }
    let written = write_status(obj, api, ctx, &new_status).await?;
    K::status_writes(&ctx.status_writes).remember(&written);
    let before = old.map(|s| s.conditions.as_slice()).unwrap_or_default();
    events::announce(ctx, obj, before, &new_status.conditions).await;
    let ready = new_status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.reason.as_str());
    info!(reason = ready, "binding status updated");
    Ok(())
}

async fn write_status<K: BindingObject>(
    obj: &K,
    api: &Api<K>,
    ctx: &Context,
    status: &BindingStatus,
) -> Result<K> {
    let written = if ctx.shared.shards.sharded() {
        // The API entries' counts belong to the replicas running their syncers.
        let own = shard_status::without_syncer_fields(status)?;
        k8s::apply_status(api, obj, &own).await
    } else {
        k8s::apply_status(api, obj, status).await
    };
    written.map_err(Error::WriteStatus)
}

/// Our own last status write to `obj`, when it is newer than `obj` (from the cache).
fn newer_write<K: BindingObject>(obj: &K, ctx: &Context) -> Option<K> {
    let writes = K::status_writes(&ctx.status_writes);
    writes.newer(obj.meta().namespace.as_deref(), &obj.name_any(), Some(obj))
}

/// Sets one condition on a binding's stored status and writes it when that changes anything,
/// announcing a change of state with an Event; a failure to write is logged (used where the
/// condition is a report, not a step to retry).
pub(crate) async fn write_condition<K: BindingObject>(obj: &K, ctx: &Context, desired: Desired) {
    let newer = newer_write(obj, ctx);
    let stored = newer.as_ref().unwrap_or(obj);
    let mut new_status = stored.binding_status().cloned().unwrap_or_default();
    conditions::set(&mut new_status.conditions, desired, obj.meta().generation);
    let api = obj.api_for(ctx.shared.consumer.clone());
    if let Err(error) = publish_status(obj, &api, ctx, new_status).await {
        warn!(%error, "writing a binding condition failed");
    }
}
