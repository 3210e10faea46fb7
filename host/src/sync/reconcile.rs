//! Reconciling one consumer instance: the arrows of the data path, in the order the spec
//! fixes them.
//!
//! ```text
//! consumer instance
//!   │ 0. deleting? ─▶ finalizer core.kbind.io/syncer ? cleanup (super::delete) : leave it
//!   │ 1. selected by a Ready binding? (binding index)        no ─▶ leave it alone
//!   │ 2. provider cache synced?                              no ─▶ requeue soon
//!   │ 3. finalizer set and our cached copy already matches? ─▶ straight to 7, no policy call
//!   │ 4. finalizer core.kbind.io/syncer, before the first provider write
//!   │ 5. namespace on the provider (create attempt, AlreadyExists is fine)
//!   │ 6. target's two UID markers ─▶ conflict policy (Wasm)
//!   │      Conflict ─▶ annotation + Warning Event + Synced=False, stop here
//!   │    provider copy already matches? skip : create or SSA (kbind-konnector, force)
//!   │      refused by the provider (invalid, too large) ─▶ Warning Event ProviderRejected
//!   │      + Synced=False, retried with backoff
//!   │ 7. provider status ─▶ consumer status subresource (absent status never clears)
//!   ▼
//! conflict annotation cleared when the conflict is gone
//! ```
//!
//! What the instance is told (conditions, annotation, Events, the outcome registry) is in
//! [`super::report`]; how a copy is created or applied is in `super::write`; deleting
//! instances is in [`super::delete`].

use std::sync::Arc;
use std::time::Instant;

use kube::ResourceExt;
use kube::api::{DynamicObject, Patch};
use kube::runtime::controller::Action;
use serde_json::json;
use tracing::{Instrument, debug, info, info_span};

use crate::api::ConflictPolicy;
use crate::api::names::SYNCER_FINALIZER;
use crate::policy::{ConflictDecision, Placement};
use crate::registry::{Outcome, Selection};
use crate::telemetry::{ApiLabels, metrics};

use super::cache::copy::CachedCopy;
use super::cache::instance::{CachedInstance, Confirmation};
use super::conflict::conflict_input;
use super::context::SyncContext;
use super::report::Reported;
use super::write::{apply_to_provider, create_on_provider};
use super::{Error, Result};
use super::{desired, report};
use crate::k8s::{ApiErrorExt, NamespaceState, ensure_namespace, patch_params};

/// Reconciles one consumer instance. Wired into the syncer's controller. A periodic resync of
/// an instance still in sync is answered before any span is made (at 100 000 instances, 333 a
/// second, formatting the span's fields would be most of an idle konnector's CPU).
pub(super) async fn reconcile(
    instance: Arc<CachedInstance>,
    ctx: Arc<SyncContext>,
) -> Result<Action> {
    ctx.queue.started_object(&instance.metadata);
    // Before each attempt: a replica whose hold on this work lapsed (its Lease not renewed in
    // time, the process paused) does nothing until the coordinator renews it or stops this
    // syncer.
    if let Err(lapsed) = crate::fencing::holds().check_current() {
        tracing::debug!(%lapsed, "reconcile deferred");
        return Ok(Action::requeue(HOLD_RECHECK));
    }
    let newer = ctx.newer_instance(&instance);
    let instance = newer.map_or(instance, Arc::new);
    if still_in_sync(&instance, &ctx) {
        return Ok(resync());
    }
    let span = info_span!(
        "reconcile",
        connection = %ctx.spec.connection,
        api = %ctx.spec.api,
        namespace = instance.metadata.namespace.as_deref().unwrap_or(""),
        name = instance.metadata.name.as_deref().unwrap_or(""),
    );
    reconcile_changed(&instance, &ctx).instrument(span).await
}

/// How soon a reconcile deferred for a lapsed hold is tried again.
const HOLD_RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// The full reconcile of an instance the resync shortcut does not answer.
async fn reconcile_changed(instance: &CachedInstance, ctx: &SyncContext) -> Result<Action> {
    let obj = instance.object();
    let action = reconcile_inner(instance, &obj, ctx).await;
    match &action {
        Ok(_) => ctx.reconciled(&obj.metadata),
        Err(_) => ctx.attempted(&obj),
    }
    action
}

/// The periodic resync of an instance nothing changed for: the instance is the one a reconcile
/// found in sync and wrote nothing for, and its provider copy is the version that reconcile saw,
/// so every input of the verdict is the same and it is not computed again. The instance's
/// selection is still checked (a binding change does not change the instance), and its
/// outcome recorded (a lookup when unchanged). `false`: reconcile in full.
pub(super) fn still_in_sync(instance: &CachedInstance, ctx: &SyncContext) -> bool {
    ctx.selects(instance.metadata.namespace.as_deref()) && selected_still_in_sync(instance, ctx)
}

/// [`still_in_sync`] for an instance already known to be selected: the periodic resync
/// ([`super::resync`]) checks the selection first, skips the instances no binding selects, and
/// queues only the others this says no for.
pub(super) fn selected_still_in_sync(instance: &CachedInstance, ctx: &SyncContext) -> bool {
    let meta = &instance.metadata;
    if meta.deletion_timestamp.is_some() || !instance.has_finalizer(SYNCER_FINALIZER) {
        return false;
    }
    let Some(copy) = ctx
        .recorded_placement(instance)
        .and_then(|place| ctx.cached_target(&place))
    else {
        return false;
    };
    if !instance.confirmed_with(Confirmation::of(&copy, ctx.conditions_pruned())) {
        return false;
    }
    ctx.record_outcome(instance, Outcome::InSync);
    ctx.count_in_sync_check();
    ctx.forget_failures(meta);
    true
}

/// The phases of one instance reconcile, in the spec's order (see the module diagram).
async fn reconcile_inner(
    instance: &CachedInstance,
    obj: &DynamicObject,
    ctx: &SyncContext,
) -> Result<Action> {
    let started = Instant::now();
    let has_finalizer = instance.has_finalizer(SYNCER_FINALIZER);
    if obj.metadata.deletion_timestamp.is_some() {
        return deleting(obj, ctx, has_finalizer).await;
    }
    let Some(selection) = selection(obj, ctx) else {
        return Ok(Action::await_change());
    };
    let uid = obj.metadata.uid.as_deref().ok_or(Error::MissingIdentity)?;
    if !ctx.provider_cache_ready().await {
        debug!("provider cache not synced yet");
        return Ok(Action::requeue(ctx.settings.error_backoff_base));
    }
    let place = match ctx.placement(obj).await {
        Ok(place) => place,
        Err(e) => {
            report::policy_failed(obj, ctx, &e.to_string()).await;
            return Err(e);
        }
    };
    let target = ctx.cached_target(&place);
    if let Some(copy) = own_copy_in_sync(instance, ctx, uid, has_finalizer, target.as_deref()) {
        if report::in_sync(obj, ctx, copy).await? == Reported::Unchanged {
            instance.confirm(Confirmation::of(copy, ctx.conditions_pruned()));
        }
        ctx.count_in_sync_check();
        return Ok(resync());
    }
    // Spec: "The engine places core.kbind.io/syncer on the consumer instance before its
    // first provider write."
    if !has_finalizer {
        add_finalizer(obj, ctx).await?;
    }
    if let Some(ns) = place.namespace.as_deref() {
        ctx.ensure_provider_namespace(ns).await?;
    }
    let written = decide_and_write(
        (instance, obj),
        &place,
        ctx,
        uid,
        selection.conflict_policy,
        target,
    )
    .await?;
    let copy = match written {
        WriteResult::Conflict => {
            return Ok(resync());
        }
        WriteResult::Unchanged(copy) => copy,
        WriteResult::Written(copy) => {
            count_write(ctx, started);
            copy
        }
    };
    if report::in_sync(obj, ctx, &copy).await? == Reported::Unchanged {
        instance.confirm(Confirmation::of(&copy, ctx.conditions_pruned()));
    }
    Ok(resync())
}

/// Done with an instance until something changes: its watch events, its copy's and its
/// binding's queue it again, and the periodic resync is the syncer's sweep
/// ([`super::resync`]), not a timer per instance.
fn resync() -> Action {
    Action::await_change()
}

/// A deleting instance is no longer one a binding waits on to be in sync. A finalizer means
/// this engine once wrote to the provider and owes the cleanup, whether or not a binding
/// still selects the object.
async fn deleting(obj: &DynamicObject, ctx: &SyncContext, has_finalizer: bool) -> Result<Action> {
    ctx.forget_outcome(obj);
    if has_finalizer {
        super::delete::cleanup(obj, ctx).await
    } else {
        Ok(Action::await_change())
    }
}

/// The binding that selects `obj`; `None` (and its outcome forgotten) when no Ready
/// binding does.
fn selection(obj: &DynamicObject, ctx: &SyncContext) -> Option<Selection> {
    let namespace = obj.metadata.namespace.as_deref();
    let selected = ctx
        .shared
        .index
        .read(|i| i.selecting(&ctx.spec.connection, &ctx.spec.api, namespace));
    if selected.is_none() {
        debug!("not selected by any Ready binding");
        ctx.forget_outcome(obj);
    }
    selected
}

/// The cached copy when it is our own and already right (typically the reconcile our own
/// finalizer or status write triggered): whatever a policy answered, nothing would be
/// written, so neither the provider nor the policy is asked.
fn own_copy_in_sync<'a>(
    obj: &CachedInstance,
    ctx: &SyncContext,
    uid: &str,
    has_finalizer: bool,
    target: Option<&'a CachedCopy>,
) -> Option<&'a CachedCopy> {
    let strategy = ctx.spec.isolation.strategy;
    let copy = target.filter(|t| {
        has_finalizer
            && desired::provider_copy_matches(t, obj, strategy, &ctx.spec.consumer_cluster_uid, uid)
    })?;
    debug!("provider copy already matches");
    Some(copy)
}

/// Counts a write to the provider and how long the instance took to get there.
fn count_write(ctx: &SyncContext, started: Instant) {
    let labels = ApiLabels {
        api: ctx.spec.api.clone(),
    };
    metrics().instances_synced.get_or_create(&labels).inc();
    metrics()
        .sync_lag
        .get_or_create(&labels)
        .observe(started.elapsed().as_secs_f64());
}

/// What the ownership check and the write came to.
enum WriteResult {
    /// The target is someone else's; the instance is marked, nothing was written.
    Conflict,
    /// The copy already was what the consumer asks for.
    Unchanged(Arc<CachedCopy>),
    /// The copy was created or applied.
    Written(Arc<CachedCopy>),
}

/// The ownership check and the write it allows. `target` is what the cache knows; when the
/// write finds the provider different (a foreign object where the cache had none, a copy
/// changed since it was read), the decision is taken once more on a live read.
async fn decide_and_write(
    (instance, obj): (&CachedInstance, &DynamicObject),
    place: &Placement,
    ctx: &SyncContext,
    uid: &str,
    policy: ConflictPolicy,
    mut target: Option<Arc<CachedCopy>>,
) -> Result<WriteResult> {
    let mut reread = false;
    loop {
        let input = conflict_input(
            &ctx.spec.consumer_cluster_uid,
            uid,
            policy,
            target.as_deref(),
        );
        // Spec: force ownership only "after the object-ownership check".
        let policies = ctx.shared.policies.for_connection(&ctx.spec.connection);
        let decision = match policies.decide_conflict(&input).await {
            Ok(decision) => decision,
            // The cache holds this consumer's copies only, so its "absent" may hide another
            // object: before calling an answer impossible, look at the provider itself.
            Err(e) if target.is_none() && !reread => {
                reread = true;
                target = ctx.live_target(place).await?.map(Arc::new);
                if target.is_some() {
                    continue;
                }
                report::policy_failed(obj, ctx, &e.to_string()).await;
                return Err(Error::DecideConflict(e));
            }
            Err(e) => {
                report::policy_failed(obj, ctx, &e.to_string()).await;
                return Err(Error::DecideConflict(e));
            }
        };
        let written = match (decision, target.as_ref()) {
            (ConflictDecision::Conflict { reason, message }, _) => {
                report::conflict(obj, ctx, reason, &message).await?;
                return Ok(WriteResult::Conflict);
            }
            (ConflictDecision::Create, Some(_)) => {
                return Err(Error::UnexpectedDecision {
                    decision: "Create".into(),
                    target: "an existing target",
                });
            }
            // No live read first: a create fails on an existing object instead.
            (ConflictDecision::Create, None) => create_on_provider(obj, place, ctx, uid)
                .await
                .map(|created| CachedCopy::of(&created)),
            (decision @ (ConflictDecision::UpdateOwned | ConflictDecision::Adopt), None) => {
                return Err(Error::UnexpectedDecision {
                    decision: format!("{decision:?}"),
                    target: "an absent target",
                });
            }
            (decision, Some(existing)) => {
                if desired::provider_copy_matches(
                    existing,
                    instance,
                    ctx.spec.isolation.strategy,
                    &ctx.spec.consumer_cluster_uid,
                    uid,
                ) {
                    return Ok(WriteResult::Unchanged(existing.clone()));
                }
                if decision == ConflictDecision::Adopt {
                    info!("adopting unmarked provider object");
                }
                let version = existing.resource_version.as_deref();
                apply_to_provider(obj, place, ctx, uid, version)
                    .await
                    .map(|applied| CachedCopy::of(&applied))
            }
        };
        match written {
            Ok(copy) => {
                ctx.recent_writes.remember(&copy);
                return Ok(WriteResult::Written(Arc::new(copy)));
            }
            // 409: an object exists where the cache had none (AlreadyExists), or the target
            // changed since it was read (Conflict); decide again on a fresh read.
            Err(Error::ApplyToProvider(e) | Error::CreateOnProvider(e))
                if !reread && (e.is_already_exists() || e.is_conflict()) =>
            {
                debug!("provider target differs from the cache; re-reading");
                reread = true;
                ctx.recent_writes
                    .forget(place.namespace.as_deref(), &place.name);
                target = ctx.live_target(place).await?.map(Arc::new);
            }
            Err(e) => {
                ctx.recent_writes
                    .forget(place.namespace.as_deref(), &place.name);
                if let Error::ApplyToProvider(inner) | Error::CreateOnProvider(inner) = &e {
                    report::write_failed(obj, ctx, inner).await;
                }
                return Err(e);
            }
        }
    }
}

/// JSON patch with a `test`, like kube-runtime's `finalizer()`: fails instead of clobbering a
/// concurrent finalizer change.
async fn add_finalizer(obj: &DynamicObject, ctx: &SyncContext) -> Result<()> {
    let api = ctx.consumer_writes(obj.metadata.namespace.as_deref());
    let patch = if obj.finalizers().is_empty() {
        json!([
            { "op": "test", "path": "/metadata/finalizers", "value": null },
            { "op": "add", "path": "/metadata/finalizers", "value": [SYNCER_FINALIZER] },
        ])
    } else {
        json!([
            { "op": "test", "path": "/metadata/finalizers", "value": obj.finalizers() },
            { "op": "add", "path": "/metadata/finalizers/-", "value": SYNCER_FINALIZER },
        ])
    };
    let patch = serde_json::from_value(patch)
        .map_err(|e| Error::AddFinalizer(kube::Error::SerdeError(e)))?;
    let stored = api
        .patch(&obj.name_any(), &patch_params(), &Patch::<()>::Json(patch))
        .await
        .map_err(Error::AddFinalizer)?;
    ctx.wrote_instance(stored.0, None);
    Ok(())
}

impl SyncContext {
    /// Creates the namespace on the provider unless this syncer already saw it exist.
    /// Spec: "Namespace creation and source/target RBAC are still required."
    ///
    /// One creation at a time: the concurrent reconciles of a first sync all meet the same
    /// new namespace, and the ones that waited find it known instead of asking again.
    async fn ensure_provider_namespace(&self, ns: &str) -> Result<()> {
        if self.namespace_known(ns) {
            return Ok(());
        }
        let _creating = self.namespace_creation.lock().await;
        if self.namespace_known(ns) {
            return Ok(());
        }
        match ensure_namespace(&self.spec.provider, ns).await {
            Ok(NamespaceState::Created) => {
                info!(namespace = ns, "namespace created on the provider")
            }
            Ok(NamespaceState::Existed) => {}
            // Credentials may not create namespaces the provider pre-created; the write that
            // follows tells whether it exists (a NotFound forgets it again).
            Ok(NamespaceState::CreateForbidden) => {
                debug!(
                    namespace = ns,
                    "namespace create forbidden; assuming it exists"
                );
            }
            Err(source) => {
                return Err(Error::CreateNamespace {
                    namespace: ns.to_string(),
                    source,
                });
            }
        }
        self.remember_namespace(ns);
        Ok(())
    }
}
