//! The Binding and ClusterBinding controllers: one generic reconcile for both kinds, wrapped
//! in kube-runtime's `finalizer()` with `core.kbind.io/cleanup`.
//!
//! ```text
//! Binding / ClusterBinding ─▶ gather facts (Connection, engagement, consumer CRDs, index pin)
//!        │                     ─▶ readiness verdict ─▶ binding index (selection for syncers)
//!        │                     ─▶ drain APIs dropped from `apis` (teardown::drain_dropped)
//!        │                        [connectionRef edited: drain all through the previous
//!        │                         Connection first, selecting nothing (move_connection)]
//!        │                     ─▶ release APIs no longer exported (release::run)
//!        │                     ─▶ related Secrets/ConfigMaps (when Ready)
//!        │                     ─▶ instance outcomes in scope (sync engine's summary)
//!        │                     ─▶ status, written when changed (publish) ─▶ Events
//!        └─ deleted ─▶ leave the index (stops selection) ─▶ teardown ─▶ release the finalizer
//!                                                          └ failed ─▶ TeardownFailed, Event
//! ```
//!
//! Requeue policy, written down once: Ready → the periodic status interval (30 s by default);
//! not Ready → soon (level-triggered, not an error); failures → `error_policy`, backing off
//! per binding. A change in the sync engine's outcomes for a binding's scope reconciles it at
//! once.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, instrument, warn};

use crate::api::names::CLEANUP_FINALIZER;
use crate::api::{BindingStatus, ConditionType, Connection, Reason};
use crate::conditions::{self, Desired};

use super::facts::{self, Facts};
use super::object::BindingObject;
use super::readiness::{self, Verdict};
use super::status::publish::{publish_status, write_condition};
use super::status::{self, Related};
use super::status::{failure, shard_status, summary};
use super::teardown::release::{self, Release};
use super::teardown::{self, Dropped};
use super::{Context, Error, Result};
use super::{dependencies, triggers};
use crate::registry::{BindingKey, Entry};
use crate::related::{self, RelatedScope};

/// Runs the controller for one binding kind until `shutdown`.
pub(super) async fn run<K: BindingObject>(ctx: Arc<Context>, shutdown: CancellationToken) {
    let client = ctx.shared.consumer.clone();
    let mut config = watcher::Config::default();
    if let Some(selector) = &ctx.settings.binding_selector {
        config = config.labels(selector);
    }
    let controller = Controller::new(Api::<K>::all(client.clone()), config);
    let by_connection = controller.store();
    let by_api = controller.store();
    let by_namespace = controller.store();
    let by_summary = controller.store();
    let by_dependency = controller.store();
    // A namespace's labels decide whether its Bindings may use a Connection with a
    // bindingNamespaceSelector: watching Namespaces makes a relabel take effect at once, both
    // ways (a revoked namespace stops syncing without waiting for a periodic requeue).
    // Namespaces are few and rarely change; ClusterBindings do not depend on them.
    let controller = if K::is_namespaced() {
        controller.watches(
            Api::<Namespace>::all(client.clone()),
            watcher::Config::default(),
            move |namespace| {
                let name = namespace.name_any();
                bindings_where(&by_namespace, |b| {
                    b.namespace().as_deref() == Some(name.as_str())
                })
            },
        )
    } else {
        controller
    };
    controller
        // A Connection changing (appearing, Ready flipping) concerns the bindings naming it.
        .watches(
            Api::<Connection>::all(client.clone()),
            watcher::Config::default(),
            move |connection| {
                let name = connection.name_any();
                bindings_where(&by_connection, |b| {
                    b.binding_spec().connection_ref.name == name
                })
            },
        )
        // A consumer CRD appearing or becoming Established concerns the bindings listing it.
        .watches(
            Api::<CustomResourceDefinition>::all(client),
            watcher::Config::default(),
            move |crd| {
                let name = crd.name_any();
                bindings_where(&by_api, |b| {
                    b.binding_spec().apis.iter().any(|a| a.name == name)
                })
            },
        )
        // The sync engine's outcomes for a binding's scope changed: its Synced, Conflicts and
        // PermissionDenied conditions follow at once, not on the next periodic requeue.
        .reconcile_on(triggers::summary_changes(
            ctx.shared.outcomes.clone(),
            by_summary,
        ))
        // Engagement and index changes reconcile only the bindings whose Connection or pins
        // they change.
        .reconcile_on(dependencies::dependency_changes(
            ctx.shared.engagements.subscribe(),
            ctx.shared.index.subscribe(),
            by_dependency,
        ))
        // A Connection shard acquired or given up: its bindings switch between owner and
        // follower at once.
        .reconcile_all_on(ctx.shared.shards.connection_changes())
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile::<K>, error_policy::<K>, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                debug!(error = %e, "binding controller event");
            }
        })
        .await;
}

/// The bindings in `store` for which `concerned` holds: those a change of one watched object
/// concerns.
fn bindings_where<K: BindingObject>(
    store: &Store<K>,
    concerned: impl Fn(&K) -> bool,
) -> Vec<ObjectRef<K>> {
    store
        .state()
        .iter()
        .filter(|b| concerned(b))
        .map(|b| ObjectRef::from_obj(&**b))
        .collect()
}

#[instrument(skip(obj, ctx), fields(kind = %K::kind(&()), namespace = obj.namespace().unwrap_or_default(), name = %obj.name_any()))]
async fn reconcile<K: BindingObject>(obj: Arc<K>, ctx: Arc<Context>) -> Result<Action> {
    // Held for the whole reconcile: the Connection shard is not handed over while it writes.
    let Some(_work) = ctx
        .shared
        .shards
        .claim_connection(&obj.binding_spec().connection_ref.name)
    else {
        return follow(&*obj, &ctx).await;
    };
    let failure_key = failure_key(&*obj);
    let api = obj.api_for(ctx.shared.consumer.clone());
    let connection = obj.binding_spec().connection_ref.name.clone();
    let work = finalizer(&api, CLEANUP_FINALIZER, obj, |event| async {
        match event {
            Finalizer::Apply(obj) => apply(&*obj, &api, &ctx).await,
            Finalizer::Cleanup(obj) => cleanup(&*obj, &ctx).await,
        }
    });
    // Its writes need the Connection shard's hold.
    let hold = crate::fencing::hold::connection_key(&connection);
    let work = crate::fencing::hold::within(&hold, work);
    let action = tokio::select! {
        action = work => action.map_err(|e| Error::Finalizer(Box::new(e))),
        // The Connection shard lapsed (its Lease could not be renewed): stop here.
        () = ctx.shared.shards.connection_lost(&connection) => Err(Error::ShardLost(connection)),
    };
    if action.is_ok() {
        ctx.failures.succeeded(&failure_key);
    }
    action
}

/// The non-deleting reconcile: judge readiness and select, drain what the binding stopped
/// listing, copy related resources, then report what was observed.
async fn apply<K: BindingObject>(obj: &K, api: &Api<K>, ctx: &Context) -> Result<Action> {
    // Our last status write stands in for the cache until the cache catches up, so a drain
    // that write recorded as done is not run again on a stale copy.
    let newer = K::status_writes(&ctx.status_writes).newer(
        obj.meta().namespace.as_deref(),
        &obj.name_any(),
        Some(obj),
    );
    let obj = newer.as_ref().unwrap_or(obj);
    let key = obj.index_key().ok_or(Error::MissingName)?;
    if let Some(previous) = teardown::moved_from(obj) {
        return move_connection(obj, api, ctx, key, previous).await;
    }
    let facts = facts::gather(obj, &key, ctx).await?;
    let verdict = readiness::evaluate(&facts.connection, &facts.state, &facts.apis);
    select(ctx, key, &facts, &verdict);
    // After the index stopped listing them: drain the APIs this binding no longer lists.
    let dropped = match teardown::drain_dropped(obj, ctx).await {
        Ok(dropped) => dropped,
        Err(error) => {
            // The instances not drained keep their finalizer; the binding says why, and the
            // drain is retried with backoff.
            write_condition(obj, ctx, failure::drain_failed(&error)).await;
            return Err(error);
        }
    };
    // An un-export releases (never drains): finalizers go, everything else stays.
    let released = release::run(obj, ctx, &verdict.released).await?;
    let (related, related_error) = sync_related(obj, ctx, &facts, verdict.syncs_any()).await;
    // Only the APIs that sync have a syncer to report on them.
    let idle = verdict.not_syncing();
    let summary = if ctx.shared.shards.sharded() {
        status::prune::entries_of_gone_replicas(obj, ctx).await;
        // The syncers run on whichever replicas hold the API shards: judge from their entries.
        let apis = obj.binding_spec().apis.iter().map(|a| a.name.as_str());
        shard_status::summary_from_entries(
            obj.binding_status(),
            apis.filter(|a| !idle.iter().any(|r| r == a)),
        )
    } else {
        summary::of_active(obj, &ctx.shared.outcomes, &idle)
    };
    let observed = status::Observed {
        verdict: &verdict,
        listed: &listed_apis(obj),
        hashes: &facts.hashes,
        summary: &summary,
        related: &related,
    };
    let new_status = observed_status(obj, &observed, &dropped, &released);
    publish_status(obj, api, ctx, new_status).await?;
    if let Some(error) = related_error {
        return Err(error);
    }
    Ok(Action::requeue(requeue_after(
        ctx, &verdict, &dropped, &released,
    )))
}

/// A binding whose Connection shard another replica holds: this replica only keeps its index
/// entry (which API shards exist, and what the syncers it runs select), and writes nothing,
/// neither status nor finalizer. Deleting or moving bindings select nothing.
async fn follow<K: BindingObject>(obj: &K, ctx: &Context) -> Result<Action> {
    let key = obj.index_key().ok_or(Error::MissingName)?;
    if obj.meta().deletion_timestamp.is_some() || teardown::moved_from(obj).is_some() {
        ctx.shared.index.delete(&key);
        return Ok(Action::requeue(ctx.settings.pending_requeue));
    }
    let facts = facts::gather(obj, &key, ctx).await?;
    let verdict = readiness::evaluate(&facts.connection, &facts.state, &facts.apis);
    select(ctx, key, &facts, &verdict);
    let ready = verdict.is_ready();
    Ok(Action::requeue(if ready {
        ctx.settings.status_interval
    } else {
        ctx.settings.pending_requeue
    }))
}

/// `connectionRef` was edited: until what was bound through the previous Connection is
/// drained through it (owned provider copies deleted, finalizers released; what other
/// bindings of that Connection cover stays), the binding selects nothing and is not Ready.
/// Then `boundAPIs` empties and the next reconcile binds through the new Connection.
async fn move_connection<K: BindingObject>(
    obj: &K,
    api: &Api<K>,
    ctx: &Context,
    key: BindingKey,
    previous: &str,
) -> Result<Action> {
    let next = &obj.binding_spec().connection_ref.name;
    // Out of the index: it neither selects instances nor pins an API meanwhile.
    ctx.shared.index.delete(&key);
    let drained = match teardown::drain_moved(obj, ctx, previous).await {
        Ok(drained) => drained,
        Err(error) => {
            write_condition(obj, ctx, failure::drain_failed(&error)).await;
            return Err(error);
        }
    };
    let generation = obj.meta().generation;
    let mut status = obj.binding_status().cloned().unwrap_or_default();
    let left = drained.pending.len() + drained.unchecked;
    let message = if left == 0 {
        status.bound_apis.clear();
        status.bound_connection = Some(next.clone());
        format!("drained what was bound through Connection {previous}; binding through {next}")
    } else {
        format!(
            "connectionRef changed from {previous} to {next}: draining the instances bound through {previous} first \
             ({left} API(s) left); sync through {next} starts once they are drained"
        )
    };
    conditions::set(
        &mut status.conditions,
        Desired::falsy(ConditionType::Ready, Reason::ConnectionChanged, message),
        generation,
    );
    if let Some(condition) = drained.condition {
        conditions::set(&mut status.conditions, condition, generation);
    }
    publish_status(obj, api, ctx, status).await?;
    Ok(Action::requeue(ctx.settings.pending_requeue))
}

/// The names in the binding's `apis`.
fn listed_apis<K: BindingObject>(obj: &K) -> Vec<String> {
    obj.binding_spec()
        .apis
        .iter()
        .map(|a| a.name.clone())
        .collect()
}

/// The status to store: what this reconcile observed, with the APIs still waiting to be
/// drained kept in `boundAPIs`, the `Drained` condition when a drain ran and the `Released`
/// condition when an API is (or was) released.
fn observed_status<K: BindingObject>(
    obj: &K,
    observed: &status::Observed<'_>,
    dropped: &Dropped,
    released: &Release,
) -> BindingStatus {
    let generation = obj.meta().generation;
    let mut new_status = status::build(obj.binding_status(), observed, generation);
    new_status.bound_connection = Some(obj.binding_spec().connection_ref.name.clone());
    status::keep_pending_drains(&mut new_status, obj.binding_status(), &dropped.pending);
    for condition in [dropped.condition.clone(), released.condition.clone()]
        .into_iter()
        .flatten()
    {
        conditions::set(&mut new_status.conditions, condition, generation);
    }
    new_status
}

/// Requeue policy: a Ready binding with nothing left to drain or release comes back at the
/// periodic status interval, anything still waiting comes back soon.
fn requeue_after(
    ctx: &Context,
    verdict: &Verdict,
    dropped: &Dropped,
    released: &Release,
) -> Duration {
    if verdict.is_ready() && dropped.pending.is_empty() && released.pending.is_empty() {
        ctx.settings.status_interval
    } else {
        ctx.settings.pending_requeue
    }
}

/// Writes the binding's entry into the index: it selects instances of the APIs that sync
/// (each judged on its own), and lists, so pins to its Connection, every API that did not
/// fail definitively.
fn select(ctx: &Context, key: BindingKey, facts: &Facts, verdict: &Verdict) {
    // An API that can never sync as written here (not exported, its CRD not kbind's or bound
    // elsewhere, schema refused, the namespace not allowed, the Connection absent) pins
    // nothing, so a tenant's typo cannot make a real binding `APIBoundElsewhere`. A waiting
    // API (Connection not Ready, released, settling) keeps its pin.
    let failed: Vec<&str> = verdict.failed().collect();
    let apis = verdict
        .targets
        .iter()
        .filter(|(api, _)| !failed.contains(&api.as_str()))
        .map(|(api, target)| (api.clone(), target.clone()))
        .collect();
    ctx.shared.index.apply(
        key,
        Entry {
            apis,
            ready: verdict.syncs_any(),
            ..facts.candidate.clone()
        },
    );
}

/// Related resources run in binding reconciliation (spec: "normally every 30 seconds, rather
/// than using the instance watch path"), for a binding with at least one API syncing. Failed copies are counted
/// in the status (the others are copied) and the first is returned, so the binding backs off
/// like any failed reconcile.
async fn sync_related<K: BindingObject>(
    obj: &K,
    ctx: &Context,
    facts: &Facts,
    syncing: bool,
) -> (Related, Option<Error>) {
    let entries = &obj.binding_spec().related_resources;
    if entries.is_empty() {
        return (Related::NotDeclared, None);
    }
    let (Some(engagement), true) = (&facts.engagement, syncing) else {
        return (Related::NotRun, None);
    };
    let uid = obj.meta().uid.clone().unwrap_or_default();
    let namespace = obj.namespace();
    let scope = RelatedScope {
        binding_uid: &uid,
        namespace: namespace.as_deref(),
        entries,
        guard: &ctx.related_guard,
    };
    let outcome = related::sync(
        &scope,
        &ctx.shared.consumer,
        engagement,
        &ctx.shared.policies,
    )
    .await;
    match outcome.first {
        None => (Related::Ran(related::related_synced(entries.len())), None),
        Some(error) => (
            Related::Ran(related::related_partly_failed(outcome.failed, &error)),
            Some(error.into()),
        ),
    }
}

async fn cleanup<K: BindingObject>(obj: &K, ctx: &Context) -> Result<Action> {
    // Spec: "Deleting one stops it being selected for new instance sync and runs cleanup."
    // Leaving the index stops selection at once; the supervisor stops syncers nothing else
    // needs.
    if let Some(key) = obj.index_key() {
        ctx.shared.index.delete(&key);
    }
    if let Err(error) = teardown::run(obj, ctx).await {
        // The finalizer stays and the teardown is retried; the binding says what blocks it.
        write_condition(obj, ctx, failure::teardown_failed(&error)).await;
        return Err(error);
    }
    info!("binding deleted; cleanup done");
    Ok(Action::await_change())
}

fn error_policy<K: BindingObject>(obj: Arc<K>, err: &Error, ctx: Arc<Context>) -> Action {
    // The backoff grows per failure; a cluster that said when to come back is not asked sooner.
    let asked = crate::k8s::retry_after_in(err).unwrap_or_default();
    let delay = ctx.failures.failed(failure_key(&*obj)).max(asked);
    warn!(kind = %K::kind(&()), name = %obj.name_any(), error = %err, ?delay, "binding reconcile failed");
    Action::requeue(delay)
}

fn failure_key<K: BindingObject>(obj: &K) -> String {
    format!(
        "{}/{}/{}",
        K::kind(&()),
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
}
