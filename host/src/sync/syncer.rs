//! One syncer: a consumer watch and a provider watch of one API, feeding one kube-runtime
//! `Controller` whose queue is keyed by the consumer object.
//!
//! ```text
//! consumer watch (DynamicObject, all namespaces) ──────────────┐
//! provider watch ──▶ provider cache ──▶ same namespace/name ───┼─▶ queue keyed by consumer object
//! selection changes (coverage), per-object resync ─────────────┘   (dedup, N at a time)
//! ```
//!
//! Both caches hold what reconciles read and nothing more: managedFields are dropped as
//! objects arrive (the drift check reads them from the write's response, not the cache), and
//! the provider watch selects on `core.kbind.io/consumer-cluster`, so a konnector caches its
//! own copies only, however many consumers share the provider. A foreign object of the same
//! name is still found: creating over it fails, and the live read that follows decides.
//!
//! The controller gives what the issue asks of the queue: one entry per object however many
//! events arrive, at most `concurrency` reconciles at once, never two for the same object,
//! and no task per object. Watch restarts and `410 Gone` are handled by kube-runtime's
//! `watcher`. Provider events are how drift on a provider copy gets reverted.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::api::names::CONSUMER_CLUSTER_LABEL;
use crate::k8s::{ApiErrorExt, dynamic_api};
use crate::shared::Shared;

use super::recent::RecentWrites;
use super::{Error, Result, SyncSettings};
use crate::backoff::Backoff;
use crate::registry::Outcome;
use crate::schema::ApiTarget;

/// Everything one syncer's reconciles share.
pub struct SyncContext {
    /// What this syncer was built for.
    pub spec: SyncerSpec,
    /// The consumer client, registries and policies every controller shares.
    pub shared: Shared,
    /// `spec.target` as a dynamic resource.
    pub ar: ApiResource,
    /// The provider watch's cache: this consumer's copies only.
    pub provider_store: Store<DynamicObject>,
    /// Copies written since the provider watch last caught up.
    pub recent_writes: RecentWrites,
    /// Instances as our own last write returned them, until the consumer watch catches up.
    pub recent_instances: RecentWrites,
    /// Whether this API's status schema prunes the instance `Synced` condition.
    conditions_pruned: AtomicBool,
    /// Timings.
    pub settings: SyncSettings,
    known_namespaces: Mutex<HashSet<String>>,
    failures: Backoff<(Option<String>, String)>,
}

impl std::fmt::Debug for SyncContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncContext")
            .field("connection", &self.spec.connection)
            .field("api", &self.spec.api)
            .finish_non_exhaustive()
    }
}

/// What one syncer is built for: a bound (Connection, API) and the engagement it runs under.
/// Any difference from a running syncer's means a rebuild.
#[derive(Clone)]
pub struct SyncerSpec {
    /// The Connection.
    pub connection: String,
    /// The API, `<plural>.<group>`.
    pub api: String,
    /// The resolved resource on both clusters.
    pub target: ApiTarget,
    /// Provider client of the current engagement.
    pub provider: Client,
    /// The pinned consumer cluster UID, written into ownership markers.
    pub consumer_cluster_uid: String,
}

impl SyncContext {
    pub(crate) fn consumer_api(&self, ns: Option<&str>) -> Api<DynamicObject> {
        dynamic_api(
            &self.shared.consumer,
            &self.ar,
            self.spec.target.namespaced,
            ns,
        )
    }

    pub(crate) fn provider_api(&self, ns: Option<&str>) -> Api<DynamicObject> {
        dynamic_api(
            &self.spec.provider,
            &self.ar,
            self.spec.target.namespaced,
            ns,
        )
    }

    /// Waits briefly for the provider cache's first list; decisions need it.
    pub(crate) async fn provider_cache_ready(&self) -> bool {
        tokio::time::timeout(
            Duration::from_secs(5),
            self.provider_store.wait_until_ready(),
        )
        .await
        .is_ok_and(|r| r.is_ok())
    }

    /// This consumer's provider copy with the instance's namespace and name, from the cache
    /// or, newer, from our own last write. `None` says nothing about objects of other
    /// consumers: the cache does not hold them.
    pub(crate) fn cached_target(&self, obj: &DynamicObject) -> Option<DynamicObject> {
        let mut key = ObjectRef::new_with(&obj.name_any(), self.ar.clone());
        key.namespace = obj.metadata.namespace.clone();
        let cached = self.provider_store.get(&key).map(|o| (*o).clone());
        self.recent_writes
            .newest(obj.metadata.namespace.as_deref(), &obj.name_any(), cached)
    }

    /// The newer of `obj` (from the consumer cache) and the instance as our own last write to
    /// it returned it. The reconcile that our finalizer patch triggers otherwise sees the
    /// instance without the status written since, and writes that status a second time.
    pub(crate) fn newest_instance(&self, obj: &DynamicObject) -> DynamicObject {
        let name = obj.name_any();
        self.recent_instances
            .newest(obj.metadata.namespace.as_deref(), &name, Some(obj.clone()))
            .unwrap_or_else(|| obj.clone())
    }

    /// Remembers what a write to an instance returned (without managedFields, like the cache).
    pub(crate) fn wrote_instance(&self, mut stored: DynamicObject) {
        drop_managed_fields(&mut stored);
        self.recent_instances.remember(&stored);
    }

    /// The provider object with the instance's namespace and name, read live.
    pub(crate) async fn live_target(&self, obj: &DynamicObject) -> Result<Option<DynamicObject>> {
        self.provider_api(obj.metadata.namespace.as_deref())
            .get_opt(&obj.name_any())
            .await
            .map_err(Error::ReadTarget)
    }

    pub(crate) fn namespace_known(&self, ns: &str) -> bool {
        lock(&self.known_namespaces).contains(ns)
    }

    pub(crate) fn remember_namespace(&self, ns: &str) {
        lock(&self.known_namespaces).insert(ns.to_string());
    }

    pub(crate) fn forget_provider_namespace(&self, ns: &str) {
        lock(&self.known_namespaces).remove(ns);
    }

    pub(crate) fn conditions_pruned(&self) -> bool {
        self.conditions_pruned.load(Ordering::Relaxed)
    }

    pub(crate) fn set_conditions_pruned(&self) {
        self.conditions_pruned.store(true, Ordering::Relaxed);
    }

    pub(crate) fn forget_failures(&self, obj: &DynamicObject) {
        self.failures.succeeded(&failure_key(obj));
    }

    /// Leaves what reconciling `obj` came to in the outcome registry.
    pub(crate) fn record_outcome(&self, obj: &DynamicObject, outcome: Outcome) {
        self.shared.outcomes.record(
            &self.spec.connection,
            &self.spec.api,
            obj.metadata.namespace.as_deref(),
            &obj.name_any(),
            outcome,
        );
    }

    /// Tells the outcome registry what the consumer watch saw.
    fn follow_listing(&self, event: &watcher::Event<DynamicObject>) {
        let (connection, api) = (&self.spec.connection, &self.spec.api);
        match event {
            watcher::Event::Init => self.shared.outcomes.listing_started(connection, api),
            watcher::Event::InitApply(obj) => self.shared.outcomes.listed(
                connection,
                api,
                obj.metadata.namespace.as_deref(),
                &obj.name_any(),
            ),
            watcher::Event::InitDone => self.shared.outcomes.listing_done(connection, api),
            watcher::Event::Delete(obj) => self.forget_outcome(obj),
            watcher::Event::Apply(_) => {}
        }
    }

    /// A reconcile of `obj` failed before it had an outcome to record.
    pub(crate) fn attempted(&self, obj: &DynamicObject) {
        self.shared.outcomes.attempted(
            &self.spec.connection,
            &self.spec.api,
            obj.metadata.namespace.as_deref(),
            &obj.name_any(),
        );
    }

    /// Removes `obj` from the outcome registry: deleted, or no longer selected.
    pub(crate) fn forget_outcome(&self, obj: &DynamicObject) {
        self.shared.outcomes.forget(
            &self.spec.connection,
            &self.spec.api,
            obj.metadata.namespace.as_deref(),
            &obj.name_any(),
        );
    }
}

fn failure_key(obj: &DynamicObject) -> (Option<String>, String) {
    (obj.metadata.namespace.clone(), obj.name_any())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The guarded maps stay consistent even if a holder panicked.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Caches keep no managedFields: nothing read from a cache needs them, and they are often
/// larger than the object they describe.
fn drop_managed_fields(obj: &mut DynamicObject) {
    obj.metadata.managed_fields = None;
}

/// Per-object backoff on failure, written down once: the delay doubles per consecutive
/// failure of the same object, capped; a success resets it.
fn error_policy(obj: Arc<DynamicObject>, err: &Error, ctx: Arc<SyncContext>) -> Action {
    let delay = ctx.failures.failed(failure_key(&obj));
    // Conflicts (409) are expected under concurrency and are not worth a warning.
    let quiet = matches!(err, Error::ApplyToProvider(e) | Error::CreateOnProvider(e) | Error::RemoveFinalizer(e) | Error::AddFinalizer(e) if e.is_conflict() || e.is_already_exists() || matches!(e, kube::Error::Api(s) if s.is_invalid()));
    if quiet {
        debug!(name = %obj.name_any(), error = %err, ?delay, "reconcile retry");
    } else {
        warn!(
            connection = %ctx.spec.connection,
            api = %ctx.spec.api,
            namespace = obj.metadata.namespace.as_deref().unwrap_or(""),
            name = %obj.name_any(),
            error = %err,
            ?delay,
            "instance reconcile failed"
        );
    }
    Action::requeue(delay)
}

/// What the provider said when it refused the watch of `api` (403); `None` for other errors,
/// which the watcher retries without them concerning permissions.
fn watch_denial(api: &str, error: &watcher::Error) -> Option<String> {
    let message = match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e)
            if e.is_forbidden() =>
        {
            e.to_string()
        }
        watcher::Error::WatchError(status) if status.is_forbidden() => status.message.clone(),
        _ => return None,
    };
    Some(format!(
        "the provider refuses to list/watch {api}: {message}"
    ))
}

/// Runs one syncer until `shutdown`. Binding changes re-reconcile the instances whose
/// selection they changed, so newly selected namespaces are picked up without a resync.
pub async fn run(
    spec: SyncerSpec,
    shared: Shared,
    settings: SyncSettings,
    shutdown: CancellationToken,
) {
    let ar = spec.target.api_resource();
    let writer = reflector::store::Writer::new(ar.clone());
    let provider_store = writer.as_reader();
    let own_copies = watcher::Config::default().labels(&format!(
        "{CONSUMER_CLUSTER_LABEL}={}",
        spec.consumer_cluster_uid
    ));
    // The provider refusing this watch is the binding's PermissionDenied: nothing of this API
    // can sync until the provider identity may list and watch it.
    let access = (
        shared.outcomes.clone(),
        spec.connection.clone(),
        spec.api.clone(),
    );
    let provider_events = reflector(
        writer,
        watcher(
            Api::<DynamicObject>::all_with(spec.provider.clone(), &ar),
            own_copies,
        )
        .modify(drop_managed_fields)
        .map(move |event| {
            let (outcomes, connection, api) = &access;
            match &event {
                Ok(_) => outcomes.set_denied(connection, api, None),
                Err(error) => {
                    if let Some(message) = watch_denial(api, error) {
                        outcomes.set_denied(connection, api, Some(message));
                    }
                }
            }
            event
        }),
    )
    .default_backoff()
    .touched_objects();
    let ctx = Arc::new(SyncContext {
        ar: ar.clone(),
        provider_store,
        recent_writes: RecentWrites::default(),
        recent_instances: RecentWrites::default(),
        conditions_pruned: AtomicBool::new(false),
        known_namespaces: Mutex::default(),
        failures: Backoff::new(settings.error_backoff_base, settings.error_backoff_max),
        settings,
        spec,
        shared,
    });
    info!(connection = %ctx.spec.connection, api = %ctx.spec.api, version = %ar.version, "syncer started");
    let consumer_api = Api::<DynamicObject>::all_with(ctx.shared.consumer.clone(), &ar);
    let consumer_writer = reflector::store::Writer::new(ar.clone());
    let consumer_store = consumer_writer.as_reader();
    // The outcome registry follows the consumer listing: what is listed holds the API's first
    // pass back until reconciled, and a deleted instance leaves (the controller does not
    // reconcile deletions it did not hold open with a finalizer).
    let listing = ctx.clone();
    let instances = reflector(
        consumer_writer,
        watcher(consumer_api, watcher::Config::default()).modify(drop_managed_fields),
    )
    .map(move |event| {
        if let Ok(event) = &event {
            listing.follow_listing(event);
        }
        event
    })
    .applied_objects();
    let selections = super::coverage::selection_changes(
        ctx.shared.index.clone(),
        ctx.spec.connection.clone(),
        ctx.spec.api.clone(),
        consumer_store.clone(),
        ar.clone(),
    );
    let mapper_ar = ar.clone();
    let selection_ar = ar.clone();
    Controller::for_stream_with(instances, consumer_store, ar.clone())
        .with_config(ControllerConfig::default().concurrency(ctx.settings.concurrency))
        // A provider event concerns the consumer object with the same namespace and name.
        .watches_stream_with(
            provider_events,
            move |provider_obj: DynamicObject| key_of(provider_obj, mapper_ar.clone()),
            ar.clone(),
        )
        // A binding change concerns the instances whose selection it changed.
        .watches_stream_with(
            selections,
            move |obj: DynamicObject| key_of(obj, selection_ar.clone()),
            ar.clone(),
        )
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(super::reconcile::reconcile, error_policy, ctx.clone())
        .for_each(|result| async move {
            if let Err(e) = result {
                debug!(error = %e, "syncer controller event");
            }
        })
        .await;
    info!(connection = %ctx.spec.connection, api = %ctx.spec.api, "syncer stopped");
}

/// The queue key of the consumer object with the same namespace and name as `obj`.
fn key_of(obj: DynamicObject, ar: ApiResource) -> Option<ObjectRef<DynamicObject>> {
    let mut key = ObjectRef::new_with(&obj.name_any(), ar);
    key.namespace = obj.metadata.namespace;
    Some(key)
}
