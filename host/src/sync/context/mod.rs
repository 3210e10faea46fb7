//! What one syncer's reconciles share: the (Connection, API) it was built for, the provider
//! cache, the copies it wrote since that cache caught up, and what it remembers between
//! reconciles (namespaces seen on the provider, per-object backoff, the instances waiting on
//! the provider, whether the API's status schema keeps conditions). `tracking` is where a
//! reconcile leaves its backoff and tells the outcome registry what it came to.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource};
use prometheus_client::metrics::counter::Counter;

use crate::api::ResourceScope;
use crate::api::{IsolationInForce, IsolationStrategy};
use crate::backoff::Backoff;
use crate::policy::{Placement, PlacementApi, PlacementInput};

use super::cache::CacheType;
use super::cache::copy::CachedCopy;
use super::cache::instance::{CachedInstance, Confirmation};
use super::cache::watched::Watched;
use super::placement::{self, Placements, Refused, same_place};
use super::recovery::{self, Waiting};
use crate::k8s::dynamic_api;
use crate::markers::{InstanceKey, key_of};
use crate::registry::ApiKey;
use crate::schema::ApiTarget;
use crate::shared::Shared;
use crate::telemetry::{ApiLabels, metrics};

use super::queue::WorkQueue;

/// Keys the work queue hands the applier ahead of their reconciles, per reconcile that may run
/// at once: enough that a free slot always finds one ready, while every other waiting key stays
/// in the queue's compact table.
const QUEUE_AHEAD: usize = 4;

use super::{Error, Result, SyncConfig};
use crate::recent::RecentWrites;

mod tracking;

/// Everything one syncer's reconciles share.
pub(super) struct SyncContext {
    /// What this syncer was built for.
    pub spec: SyncerSpec,
    /// The consumer client, registries and policies every controller shares.
    pub shared: Shared,
    /// `spec.target` as a dynamic resource.
    pub ar: ApiResource,
    /// `ar`, as both caches' keys share it.
    pub cache_type: CacheType,
    /// The provider watch's cache: this consumer's copies only, as much of each as
    /// reconciles read.
    pub provider_store: Store<CachedCopy>,
    /// Copies written since the provider watch last caught up.
    pub recent_writes: RecentWrites<CachedCopy>,
    /// Where each instance's copy lives, when isolation places copies elsewhere.
    pub placements: Arc<Placements>,
    /// Instances as our own last write returned them, until the consumer watch catches up.
    pub recent_instances: RecentWrites<CachedInstance>,
    /// Where the outcome registry keeps this syncer's instances: (Connection, API).
    outcome_api: ApiKey,
    /// `kbind_in_sync_checks_total` of this API.
    in_sync_checks: Counter,
    /// The queue in front of the applier, counted at its edges (`kbind_workqueue_*`).
    pub(crate) queue: Arc<WorkQueue>,
    /// Whether this API's status schema prunes the instance `Synced` condition.
    conditions_pruned: AtomicBool,
    /// Timings.
    pub settings: SyncConfig,
    known_namespaces: Mutex<HashSet<String>>,
    /// Held while a provider namespace is being created.
    pub(super) namespace_creation: tokio::sync::Mutex<()>,
    failures: Backoff<recovery::Key>,
    /// Instances whose last reconcile failed because the provider did not answer.
    waiting: Mutex<Waiting>,
    /// Queues instances for a reconcile now (the controller reads the other end).
    wake: futures::channel::mpsc::UnboundedSender<recovery::Key>,
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
pub(super) struct SyncerSpec {
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
    /// Where copies go on the provider (the Connection's isolation in force).
    pub isolation: IsolationInForce,
    /// The provider namespace of the heartbeat Lease, where no copy may go.
    pub heartbeat_namespace: String,
}

impl SyncerSpec {
    /// What the placement policy is asked for `key`.
    fn placement_input(&self, key: &InstanceKey) -> PlacementInput {
        let spec = self;
        let target = &spec.target;
        PlacementInput {
            consumer_cluster_uid: spec.consumer_cluster_uid.clone(),
            connection: spec.connection.clone(),
            api: PlacementApi {
                group: target.group.clone(),
                resource: target.plural.clone(),
                kind: target.kind.clone(),
                scope: if target.namespaced {
                    ResourceScope::Namespaced
                } else {
                    ResourceScope::Cluster
                },
            },
            namespace: key.0.clone(),
            name: key.1.clone(),
            isolation: spec.isolation.clone(),
        }
    }
}

impl SyncContext {
    /// The context of a syncer for `spec`, reading provider copies from `provider_store`.
    pub(super) fn new(
        spec: SyncerSpec,
        shared: Shared,
        cache_type: CacheType,
        provider_store: Store<CachedCopy>,
        placements: Arc<Placements>,
        settings: SyncConfig,
        wake: futures::channel::mpsc::UnboundedSender<recovery::Key>,
    ) -> Self {
        let in_sync_checks = metrics()
            .in_sync_checks
            .get_or_create(&ApiLabels {
                api: spec.api.clone(),
            })
            .clone();
        Self {
            queue: Arc::new(WorkQueue::new(
                "sync",
                &spec.api,
                usize::from(settings.concurrency) * QUEUE_AHEAD,
            )),
            ar: spec.target.api_resource(),
            cache_type,
            outcome_api: (spec.connection.clone(), spec.api.clone()),
            in_sync_checks,
            provider_store,
            placements,
            recent_writes: RecentWrites::default(),
            recent_instances: RecentWrites::default(),
            conditions_pruned: AtomicBool::new(false),
            known_namespaces: Mutex::default(),
            namespace_creation: tokio::sync::Mutex::default(),
            failures: Backoff::new(settings.error_backoff_base, settings.error_backoff_max),
            waiting: Mutex::default(),
            wake,
            settings,
            spec,
            shared,
        }
    }

    /// The consumer `Api` of this syncer's resource in `ns` (or cluster-wide).
    pub(crate) fn consumer_api(&self, ns: Option<&str>) -> Api<DynamicObject> {
        dynamic_api(
            &self.shared.consumer,
            &self.ar,
            self.spec.target.namespaced,
            ns,
        )
    }

    /// The consumer `Api` for the writes whose answers only feed the instance cache: the
    /// answer is read without its managedFields (three entries or more on a synced instance),
    /// which the cache drops anyway.
    pub(crate) fn consumer_writes(&self, ns: Option<&str>) -> Api<Watched> {
        dynamic_api(
            &self.shared.consumer,
            &self.ar,
            self.spec.target.namespaced,
            ns,
        )
    }

    /// The provider `Api` for creating copies: the answer is read without its managedFields,
    /// which nothing after a create reads (the drift check reads an apply's answer).
    pub(crate) fn provider_creates(&self, ns: Option<&str>) -> Api<Watched> {
        dynamic_api(
            &self.spec.provider,
            &self.ar,
            self.spec.target.namespaced,
            ns,
        )
    }

    /// The provider `Api` of this syncer's resource in `ns` (or cluster-wide).
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

    /// This consumer's provider copy at `place`, from the cache or, newer, from our own last
    /// write. `None` says nothing about objects of other consumers: the cache does not hold
    /// them.
    /// An in-sync reconcile (every periodic resync) shares the cache's entry; only a newer
    /// remembered write is copied out.
    pub(crate) fn cached_target(&self, place: &Placement) -> Option<Arc<CachedCopy>> {
        let cached = self.cached_copy(place);
        match self
            .recent_writes
            .newer(place.namespace.as_deref(), &place.name, cached.as_deref())
        {
            Some(written) => Some(Arc::new(written)),
            None => cached,
        }
    }

    /// The provider cache's copy at `place`.
    fn cached_copy(&self, place: &Placement) -> Option<Arc<CachedCopy>> {
        let mut key = ObjectRef::new_with(&place.name, self.cache_type.clone());
        key.namespace = place.namespace.clone();
        self.provider_store.get(&key)
    }

    /// Where `obj`'s provider copy lives (see [`super::placement`]): where it is, unless
    /// isolation places copies elsewhere; then the place its copy was seen at or reserved
    /// before, or else the placement policy's answer once the host checked it and reserved it.
    /// A refused answer is reported (`PolicyFailed`) by the caller; nothing is written.
    pub(crate) async fn placement(&self, obj: &DynamicObject) -> Result<Placement> {
        let key = key_of(obj);
        let strategy = self.spec.isolation.strategy;
        if strategy == IsolationStrategy::None {
            return Ok(same_place(&key));
        }
        let policies = self.shared.policies.for_connection(&self.spec.connection);
        if let Some(place) = self.placements.get(&key) {
            return Ok(place);
        }
        let input = self.spec.placement_input(&key);
        let place = policies.place(&input).await.map_err(Error::Place)?;
        let object = || placement::display(key.0.as_deref(), &key.1);
        if let Some(ns) = place.namespace.as_deref()
            && let Some(why) = crate::markers::protected(ns, &self.spec.heartbeat_namespace)
        {
            return Err(Error::PlacementRefused(Refused::Protected {
                object: object(),
                namespace: ns.to_string(),
                why,
            }));
        }
        let taken = |holder: InstanceKey| {
            Error::PlacementRefused(Refused::Taken {
                object: object(),
                place: placement::display(place.namespace.as_deref(), &place.name),
                holder: placement::display(holder.0.as_deref(), &holder.1),
            })
        };
        if let Some(copy) = self.cached_copy(&place) {
            let holder = copy.origin(strategy);
            if holder != key {
                return Err(taken(holder));
            }
        }
        self.placements.reserve(&key, &place).map_err(taken)?;
        Ok(place)
    }

    /// The place recorded for `obj`, without asking the policy: where its copy is, if it has
    /// one (the provider cache shows every copy once it has listed, and this syncer's
    /// reservations the ones it is writing). For deletions: an instance without one never had
    /// a copy written, and its deletion does not wait on a module.
    pub(crate) fn recorded_placement(&self, obj: &impl Resource) -> Option<Placement> {
        let key = key_of(obj);
        if self.spec.isolation.strategy == IsolationStrategy::None {
            return Some(same_place(&key));
        }
        self.placements.get(&key)
    }

    /// The instance as our own last write to it returned it, when that is newer than `obj`
    /// (from the consumer cache). The reconcile that our finalizer patch triggers otherwise
    /// sees the instance without the status written since, and writes that status again.
    pub(crate) fn newer_instance(&self, obj: &CachedInstance) -> Option<CachedInstance> {
        let meta = &obj.metadata;
        self.recent_instances.newer_or_caught_up(
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
            Some(obj),
            |written| obj.take_confirmation_of(written),
        )
    }

    /// Remembers what a write to an instance returned, as the consumer cache keeps it;
    /// `settled`: the write left the instance in sync with that confirmation (see
    /// [`super::report`]), so the reconciles its watch events start need not decide again.
    pub(crate) fn wrote_instance(&self, stored: DynamicObject, settled: Option<Confirmation>) {
        let instance = CachedInstance::of(stored);
        if let Some(confirmation) = settled {
            instance.confirm(confirmation);
        }
        self.recent_instances.remember(&instance);
    }

    /// The provider object at `place`, read live.
    pub(crate) async fn live_object(&self, place: &Placement) -> Result<Option<DynamicObject>> {
        self.provider_api(place.namespace.as_deref())
            .get_opt(&place.name)
            .await
            .map_err(Error::ReadTarget)
    }

    /// The provider object at `place`, read live, as the cache would keep it.
    pub(crate) async fn live_target(&self, place: &Placement) -> Result<Option<CachedCopy>> {
        Ok(self.live_object(place).await?.as_ref().map(CachedCopy::of))
    }

    /// Whether this syncer already saw namespace `ns` exist on the provider.
    pub(crate) fn namespace_known(&self, ns: &str) -> bool {
        lock(&self.known_namespaces).contains(ns)
    }

    /// Records that namespace `ns` exists on the provider.
    pub(crate) fn remember_namespace(&self, ns: &str) {
        lock(&self.known_namespaces).insert(ns.to_string());
    }

    /// Forgets namespace `ns`, so the next write creates it again if needed.
    pub(crate) fn forget_provider_namespace(&self, ns: &str) {
        lock(&self.known_namespaces).remove(ns);
    }

    /// Whether the API's status schema was seen to prune the `Synced` condition.
    pub(crate) fn conditions_pruned(&self) -> bool {
        self.conditions_pruned.load(Ordering::Relaxed)
    }

    /// Records that the API's status schema prunes the `Synced` condition.
    pub(crate) fn set_conditions_pruned(&self) {
        self.conditions_pruned.store(true, Ordering::Relaxed);
    }
}

/// Locks `m`, also after a holder panicked.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The guarded maps stay consistent even if a holder panicked.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
