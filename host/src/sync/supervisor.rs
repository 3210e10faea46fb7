//! The syncer supervisor: the one owner of syncer lifetimes.
//!
//! ```text
//! engagement registry (Ready Connections, epoch) ─┐
//! binding index (Ready bindings, resolved APIs) ──┴▶ desired: (Connection, API) → (epoch, target)
//!                                                        │ compare with running handles
//!                                                        ▼
//!                         start missing · stop unwanted · rebuild on a new epoch or target
//! ```
//!
//! A handle records what its syncer was built for (the engagement epoch and the resolved
//! target), a cancellation token and a join handle; lifetimes never hang off a reconcile call
//! (house style). Spec: "When a Connection becomes not Ready, the provider cache is
//! disengaged and its per-API instance syncers stop. When it becomes Ready again, syncers are
//! rebuilt against the newly engaged provider." Stopping a syncer deletes nothing.
//!
//! The pairs with a running syncer are published as `RunningSyncers`; a pair leaves it
//! only once its syncer has finished, so a drain waiting on it never races the syncer.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::fencing::hold;
use crate::registry::{BindingIndex, Engaged, Engagement, Held};
use crate::schema::ApiTarget;
use crate::shared::Shared;
use crate::telemetry::{ApiLabels, metrics};

use super::SyncConfig;
use super::context::SyncerSpec;
use super::syncer;

/// What one syncer was built for; any difference means a rebuild.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Identity {
    epoch: u64,
    provider_uid: String,
    consumer_uid: String,
    target: ApiTarget,
}

/// The (Connection, API) pairs that should have a syncer, with what to build each for.
type Desired = BTreeMap<(String, String), (Identity, Engagement)>;

/// Which syncers the engaged Connections and the Ready bindings call for, of the API shards
/// this replica holds (all of them without sharding).
fn desired(engaged: &Engaged, index: &BindingIndex, owned: &Held) -> Desired {
    index
        .active()
        .into_iter()
        .filter(|((connection, api), _)| owned.api(connection, api))
        .filter_map(|((connection, api), target)| {
            let engagement = engaged.get(&connection)?.clone();
            let identity = Identity {
                epoch: engagement.epoch,
                provider_uid: engagement.provider_uid.clone(),
                consumer_uid: engagement.consumer_uid.clone(),
                target,
            };
            Some(((connection, api), (identity, engagement)))
        })
        .collect()
}

struct Handle {
    identity: Identity,
    token: CancellationToken,
    join: JoinHandle<()>,
}

/// Starts, stops and rebuilds syncers as engagements and bindings change.
pub struct Supervisor {
    shared: Shared,
    settings: SyncConfig,
    handles: HashMap<(String, String), Handle>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("syncers", &self.handles.len())
            .finish_non_exhaustive()
    }
}

impl Supervisor {
    /// A supervisor with no syncers yet. It publishes the syncers it runs to the shared
    /// `syncers`, and forgets a stopped syncer's instance outcomes.
    pub fn new(shared: Shared, settings: SyncConfig) -> Self {
        Self {
            shared,
            settings,
            handles: HashMap::new(),
        }
    }

    /// Runs until `shutdown`, then stops every syncer (deleting nothing).
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut engagements = self.shared.engagements.subscribe();
        let mut index = self.shared.index.subscribe();
        let mut shards = self.shared.shards.subscribe();
        let mut tick = tokio::time::interval(self.settings.supervisor_tick);
        loop {
            // Both values are read (and marked seen) before converging, so a change made
            // while converging wakes the loop again.
            let desired = desired(
                &engagements.borrow_and_update(),
                &index.borrow_and_update(),
                &shards.borrow_and_update(),
            );
            self.converge(desired).await;
            tokio::select! {
                () = shutdown.cancelled() => break,
                changed = engagements.changed() => if changed.is_err() { break },
                // Running syncers follow selection changes themselves (see `selection_changes`).
                changed = index.changed() => if changed.is_err() { break },
                // A shard acquired or given up (sharded replicas only).
                changed = shards.changed() => if changed.is_err() { break },
                _ = tick.tick() => {}
            }
        }
        let keys: Vec<_> = self.handles.keys().cloned().collect();
        self.stop_all(keys).await;
        self.shared.syncers.publish(BTreeSet::new());
    }

    async fn converge(&mut self, desired: Desired) {
        let stale: Vec<_> = self
            .handles
            .iter()
            .filter(|(key, handle)| {
                handle.join.is_finished()
                    || desired
                        .get(*key)
                        .is_none_or(|(identity, _)| *identity != handle.identity)
            })
            .map(|(key, _)| key.clone())
            .collect();
        self.stop_all(stale).await;
        for (key, (identity, engagement)) in desired {
            if self.handles.contains_key(&key) {
                continue;
            }
            let (connection, api) = key.clone();
            info!(%connection, %api, epoch = identity.epoch, "starting syncer");
            metrics()
                .syncer_starts
                .get_or_create(&ApiLabels { api: api.clone() })
                .inc();
            let spec = SyncerSpec {
                connection,
                api,
                target: identity.target.clone(),
                provider: engagement.provider,
                consumer_cluster_uid: engagement.consumer_uid,
                isolation: engagement.isolation,
                heartbeat_namespace: engagement.heartbeat_namespace,
            };
            let token = CancellationToken::new();
            // Its writes need its API shard's hold (with sharding; leadership with election).
            let hold = hold::api_key(&spec.connection, &spec.api);
            let run = syncer::run(
                spec,
                self.shared.clone(),
                self.settings.clone(),
                token.clone(),
            );
            let join = tokio::spawn(async move { hold::within(&hold, run).await });
            self.handles.insert(
                key,
                Handle {
                    identity,
                    token,
                    join,
                },
            );
        }
        // After the stops above have joined: a pair leaves the set only once its syncer is done.
        self.shared
            .syncers
            .publish(self.handles.keys().cloned().collect());
    }

    /// Stops the syncers of `keys` together: every one is cancelled first, then all are
    /// joined at once, each given the stop grace before it is aborted. A lapsed shard's work
    /// is gone within one grace, however many shards lapsed.
    async fn stop_all(&mut self, keys: Vec<(String, String)>) {
        let handles: Vec<_> = keys
            .into_iter()
            .filter_map(|key| self.handles.remove(&key).map(|handle| (key, handle)))
            .collect();
        for ((connection, api), handle) in &handles {
            info!(%connection, %api, epoch = handle.identity.epoch, "stopping syncer");
            handle.token.cancel();
        }
        let grace = self.settings.stop_grace;
        let joined = handles
            .into_iter()
            .map(|((connection, api), handle)| async move {
                let abort = handle.join.abort_handle();
                match tokio::time::timeout(grace, handle.join).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        warn!(%connection, %api, error = %e, "syncer task ended abnormally")
                    }
                    Err(_) => {
                        warn!(%connection, %api, "syncer did not stop in time; aborting it");
                        abort.abort();
                    }
                }
                (connection, api)
            });
        for (connection, api) in futures::future::join_all(joined).await {
            // After the syncer is done, so no late reconcile writes an entry back.
            self.shared.outcomes.forget_api(&connection, &api);
        }
    }
}
