//! Binding teardown under `core.kbind.io/cleanup` (spec, "Delete a binding"), and the same
//! drain for an API a binding stops listing:
//!
//! ```text
//! deleted binding ─▶ leave the index (syncers stop selecting its instances)
//!   for each listed API no other non-deleting binding lists:
//!     consumer CRD not kbind's for this Connection (no or another core.kbind.io/connection,
//!     or a protected group): release core.kbind.io/syncer only; CRD, objects and provider
//!     copies stay, and a Warning Event says so
//!     otherwise drain instances in scope: delete owned provider copies (both UIDs; Orphan
//!                               keeps them), release core.kbind.io/syncer
//!     ClusterBinding: delete the consumer CRD (which deletes its consumer instances), only
//!                     while it is still annotated for this Connection
//!   delete this binding's related copies for the declared entries
//!
//! API dropped from apis (edited; an un-export releases instead: [`release`]), seen as a
//! name in status.boundAPIs that spec.apis no longer lists:
//!   no other non-deleting binding lists it ─▶ wait until its syncer has stopped
//!     ─▶ drain instances in scope as above (the CRD stays) ─▶ status.boundAPIs drops it
//! ```
//!
//! connectionRef edited (status.boundConnection names another Connection):
//!   the binding selects nothing (Ready=False, ConnectionChanged) ─▶ every stored boundAPIs
//!   entry is drained through the previous Connection as above ─▶ boundAPIs empties and the
//!   new Connection binds as a new binding would
//!
//! Both drain one API at a time through [`drain`], with the provider client
//! [`drain_provider`] finds: the engaged one, or one built from the Connection's
//! credentials (a deleting Connection after a restart). Never because a
//! Connection went not Ready: readiness changes neither `apis` nor the binding's existence.
//!
//! What other bindings still cover, and which CRDs a deletion deletes, is the one rule in
//! [`coverage`] (read through [`gather`]), which `kubectl kbind` asks too.
//!
//! A drain never releases the finalizers of instances the API's own Connection syncs when that
//! is not the binding's (a typo'd `connectionRef`, an API bound elsewhere): under the pin rule
//! they are that Connection's syncer's. `Drained` says what happened ([`outcome`]): copies
//! deleted, copies whose deletion was requested and that are still there, instances released
//! without deleting.
//!
//! Limits: without any provider client (or when a provider read fails) the drain
//! is best-effort and provider copies may remain, which the binding reports (`Drained=False`,
//! a Warning Event); provider delete errors block (retry); deletion is requested, not waited
//! for.

pub(super) mod coverage;
pub(super) mod drain;
pub(super) mod drain_provider;
pub(super) mod gather;
pub(super) mod outcome;
pub(super) mod release;

use std::collections::BTreeSet;

use kube::ResourceExt;
use tracing::info;

use crate::conditions::Desired;

use crate::binding::object::BindingObject;
use crate::binding::status::publish::write_condition;
use crate::binding::{Context, Result};
use crate::related::{self, RelatedScope};
use drain::{DrainScope, drain_api};

/// Runs the whole teardown of a deleted binding.
pub(super) async fn run<K: BindingObject>(obj: &K, ctx: &Context) -> Result<()> {
    let spec = obj.binding_spec();
    let uid = obj.meta().uid.clone().unwrap_or_default();
    let namespace = obj.namespace();
    let binding = obj.object_ref(&());
    // Deleted while moving to another Connection: what the previous one still holds first.
    if let Some(previous) = moved_from(obj) {
        let drained = drain_moved(obj, ctx, previous).await?;
        if !drained.pending.is_empty() {
            return Err(crate::binding::Error::WaitingForSyncers(drained.pending));
        }
    }
    let provider = drain_provider::resolve(ctx, &spec.connection_ref.name).await?;
    let engagement = provider.as_ref().ok();
    let scope = DrainScope {
        connection: &spec.connection_ref.name,
        binding: &binding,
        namespace: namespace.as_deref(),
    };
    // The one rule `kubectl kbind` asks too: what the bindings left cover, and which CRDs
    // this deletion deletes.
    let key = obj.index_key().ok_or(crate::binding::Error::MissingName)?;
    let deleted = BTreeSet::from([key]);
    let listed: BTreeSet<String> = spec.apis.iter().map(|a| a.name.clone()).collect();
    let view = gather::consumer(&ctx.shared.consumer, &listed).await?;
    let covered = view.covered(scope.connection, &deleted);
    let crds_deleted = view.crds_deleted(&deleted);
    if ctx.shared.shards.sharded() {
        // Sharded: an API nothing else lists has its syncer stop on whichever replica holds
        // its shard, which then releases the Lease; drain after that, never beside it.
        let mut running = Vec::new();
        for listed in &spec.apis {
            if !covered.of(&listed.name).any()
                && crate::binding::syncer_may_write(ctx, scope.connection, &listed.name).await
            {
                running.push(listed.name.clone());
            }
        }
        if !running.is_empty() {
            return Err(crate::binding::Error::WaitingForSyncers(running));
        }
    }
    let mut unchecked = Vec::new();
    for listed in &spec.apis {
        if let Some(owner) = view.pinned_elsewhere(&listed.name, scope.connection) {
            // Never synced through this binding: the instances are the pinned Connection's
            // bindings' to release, even while that Connection is not Ready.
            info!(api = %listed.name, %owner, "API pinned to another Connection; nothing of it is this binding's");
            continue;
        }
        let others = covered.of(&listed.name);
        if others.covers_scope(namespace.as_deref()) {
            // Another binding that can sync still covers every instance in this scope.
            info!(api = %listed.name, "another binding covers this API in scope; nothing to drain");
            continue;
        }
        // A ClusterBinding leaves the namespaces Bindings still cover, and deletes the CRD
        // only when the rule says so (no counting binding left lists the API at all).
        let remove_crd = crds_deleted.contains_key(&listed.name);
        let tally = drain_api(ctx, engagement, &listed.name, &scope, others, remove_crd).await?;
        if tally.unchecked > 0 {
            unchecked.push(listed.name.clone());
        }
    }
    // An API dropped from `apis` whose drain was still pending: drained too; its CRD stays.
    for api in dropped_apis(obj) {
        let others = covered.of(api);
        if others.covers_scope(namespace.as_deref()) {
            continue;
        }
        if drain_api(ctx, engagement, api, &scope, others, false)
            .await?
            .unchecked
            > 0
        {
            unchecked.push(api.to_string());
        }
    }
    match engagement {
        Some(engagement) => {
            let scope = RelatedScope {
                binding_uid: &uid,
                namespace: namespace.as_deref(),
                entries: &spec.related_resources,
                guard: &ctx.related_guard,
            };
            related::delete_copies(
                &scope,
                &ctx.shared.consumer,
                engagement,
                &ctx.shared.policies,
            )
            .await?;
        }
        None if !spec.related_resources.is_empty() => unchecked.push("related copies".into()),
        None => {}
    }
    if let (Err(why), false) = (&provider, unchecked.is_empty()) {
        let condition = drain_provider::report_unavailable(obj, ctx, &unchecked, why).await;
        write_condition(obj, ctx, condition).await;
    }
    Ok(())
}

/// What draining the APIs a binding stopped listing did.
#[derive(Debug, Default)]
pub(super) struct Dropped {
    /// Dropped APIs whose syncer has not stopped yet: drained on a later reconcile, and kept
    /// in `status.boundAPIs` until then.
    pub pending: Vec<String>,
    /// The `Drained` condition to store, when a drain ran.
    pub condition: Option<Desired>,
    /// Drained APIs with instances left unchecked (no provider client to check their copies).
    pub unchecked: usize,
}

/// Drains, in the binding's scope, the instances of every API its stored `boundAPIs` has but
/// its spec no longer lists, unless another non-deleting binding lists it. Call after the
/// binding's index entry no longer lists those APIs. The consumer CRD stays.
pub(super) async fn drain_dropped<K: BindingObject>(obj: &K, ctx: &Context) -> Result<Dropped> {
    let connection = obj.binding_spec().connection_ref.name.as_str();
    drain_through(obj, ctx, connection, dropped_apis(obj)).await
}

/// The Connection the stored `boundAPIs` were bound through, when `connectionRef` now names
/// another one: what was bound through it must be drained through it first.
pub(super) fn moved_from<K: BindingObject>(obj: &K) -> Option<&str> {
    let status = obj.binding_status()?;
    let previous = status.bound_connection.as_deref()?;
    let bound = status
        .bound_apis
        .iter()
        .any(|b| !crate::binding::status::shard_status::leftover(b));
    (previous != obj.binding_spec().connection_ref.name && bound).then_some(previous)
}

/// Drains every stored `boundAPIs` entry through the previous Connection after an edit of
/// `connectionRef` (what other counting bindings of that Connection cover is left alone).
pub(super) async fn drain_moved<K: BindingObject>(
    obj: &K,
    ctx: &Context,
    previous: &str,
) -> Result<Dropped> {
    let stored = obj.binding_status().into_iter().flat_map(|s| &s.bound_apis);
    let stored = stored.filter(|b| !crate::binding::status::shard_status::leftover(b));
    let apis = stored.map(|b| b.name.as_str()).collect();
    drain_through(obj, ctx, previous, apis).await
}

/// Drains `apis` in the binding's scope through `connection`, each once its syncer stopped,
/// unless another counting binding of that Connection covers the scope.
async fn drain_through<K: BindingObject>(
    obj: &K,
    ctx: &Context,
    connection: &str,
    dropped: Vec<&str>,
) -> Result<Dropped> {
    if dropped.is_empty() {
        return Ok(Dropped::default());
    }
    let key = obj.index_key().ok_or(crate::binding::Error::MissingName)?;
    let view = gather::consumer(&ctx.shared.consumer, &BTreeSet::new()).await?;
    let covered = view.covered(connection, &BTreeSet::from([key]));
    let namespace = obj.namespace();
    // The syncer could still put a finalizer back or write a copy: drain once it is done.
    // While other bindings keep the API's syncer running it no longer selects this scope
    // (the index dropped it before this drain), so the drain goes ahead.
    let (mut pending, mut ready) = (Vec::new(), Vec::new());
    for api in dropped {
        let others = covered.of(api);
        if others.covers_scope(namespace.as_deref()) {
            continue;
        }
        if !others.any() && crate::binding::syncer_may_write(ctx, connection, api).await {
            pending.push(api);
        } else {
            ready.push(api);
        }
    }
    let mut out = Dropped {
        pending: pending.iter().map(|a| a.to_string()).collect(),
        condition: None,
        unchecked: 0,
    };
    if ready.is_empty() {
        return Ok(out);
    }
    let provider = drain_provider::resolve(ctx, connection).await?;
    let binding = obj.object_ref(&());
    let scope = DrainScope {
        connection,
        binding: &binding,
        namespace: namespace.as_deref(),
    };
    let mut unchecked = Vec::new();
    let mut tallies = Vec::new();
    for api in &ready {
        info!(
            api,
            "API no longer listed by the binding; draining its instances"
        );
        let others = covered.of(api);
        let tally = drain_api(ctx, provider.as_ref().ok(), api, &scope, others, false).await?;
        if tally.unchecked > 0 {
            unchecked.push(api.to_string());
        }
        tallies.push((api.to_string(), tally));
    }
    out.unchecked = unchecked.len();
    out.condition = match &provider {
        Ok(_) => Some(outcome::condition(&tallies)),
        Err(why) if !unchecked.is_empty() => {
            Some(drain_provider::report_unavailable(obj, ctx, &unchecked, why).await)
        }
        // Nothing was left to drain: whatever an earlier drain reported still stands.
        Err(_) => None,
    };
    Ok(out)
}

/// The APIs the stored `status.boundAPIs` has and the spec no longer lists (a sharded
/// replica's leftover entry binds nothing: it is pruned, not drained).
fn dropped_apis<K: BindingObject>(obj: &K) -> Vec<&str> {
    let listed: BTreeSet<&str> = obj
        .binding_spec()
        .apis
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    obj.binding_status()
        .iter()
        .flat_map(|s| s.bound_apis.iter())
        .filter(|b| !crate::binding::status::shard_status::leftover(b))
        .map(|b| b.name.as_str())
        .filter(|name| !listed.contains(name))
        .collect()
}
