//! The coordinator: one loop per replica that renews what it holds, then computes which
//! shards are its own (rendezvous hashing; under leader election, the one leader shard), takes,
//! releases and collects Leases, and publishes what it holds to `Shared::shards`, the hold
//! registry and, for leadership, the `leading` channel.
//!
//! Renewals come first each tick, in parallel, from the Leases as last written: listing,
//! assignment and garbage collection come after and never delay one. Each renewal is good
//! from its own request's start, not the tick's.
//!
//! A shard moves in two steps: its holder, no longer assigned, first stops the work (drops it
//! from ownership, waits for its syncer to finish) and only then releases the Lease; the new
//! owner takes a released or expired Lease on its next tick. A holder that cannot renew drops
//! the shard at the renew deadline, before the Lease can expire.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::decision::{Decision, Hold, decide};
use super::leases::{Leases, live_holder};
mod reads;
use super::{Config, Plan, SHARD_ANNOTATION, SHARD_KIND_LABEL, Shard};
use crate::fencing::Holds;
use crate::k8s::ApiErrorExt as _;
use crate::shared::Shared;
use crate::telemetry::{HandoverLabels, ShardKindLabels, metrics};
use reads::World;

/// A shard this replica holds.
#[derive(Debug)]
pub(super) struct HeldShard {
    /// When its work must have stopped: the start of its last successful renewal plus the
    /// renew deadline.
    valid_until: Instant,
    /// No longer assigned here: its work is stopping and its Lease is released once it has.
    releasing: bool,
    /// The Lease as last written.
    lease: Lease,
}

/// The coordinator's state between ticks.
pub(super) struct Coordinator {
    pub(super) shared: Shared,
    pub(super) config: Config,
    pub(super) leases: Leases,
    pub(super) held: BTreeMap<Shard, HeldShard>,
    pub(super) member: Option<Lease>,
    pub(super) member_valid_until: Option<Instant>,
    /// Ticks so far, to collect Leases left behind every [`GARBAGE_EVERY`] ticks.
    pub(super) ticks: u64,
    /// Until when each hold is good, read by every write.
    pub(super) holds: Arc<Holds>,
    /// Whether this replica leads (leader election only).
    pub(super) leading: watch::Sender<bool>,
}

/// Every this many ticks (about a minute at the default retry period) a replica deletes the
/// Leases left behind.
const GARBAGE_EVERY: u64 = 30;

/// Runs the coordinator until `shutdown`, then releases every Lease it holds (the caller stops
/// the controllers first, so no work of a released shard is left running). `lease_client`
/// reaches the consumer without the hold check, so a lapsed hold can be renewed; `leading`
/// says, under leader election, whether this replica leads.
pub async fn run(
    shared: Shared,
    config: Config,
    lease_client: kube::Client,
    leading: watch::Sender<bool>,
    shutdown: CancellationToken,
) {
    let duration = i32::try_from(config.lease_duration.as_secs()).unwrap_or(i32::MAX);
    let leases = Leases::new(lease_client, &config.namespace, &config.identity, duration);
    let mut coordinator = Coordinator {
        shared,
        config,
        leases,
        held: BTreeMap::new(),
        member: None,
        member_valid_until: None,
        ticks: 0,
        holds: crate::fencing::holds(),
        leading,
    };
    loop {
        let started = Instant::now();
        // A tick stuck on a slow apiserver must not keep a shard past its deadline: it is cut
        // off there, and the shards that lapsed are dropped.
        match coordinator.earliest_deadline() {
            Some(deadline) => {
                if tokio::time::timeout_at(deadline, coordinator.tick())
                    .await
                    .is_err()
                {
                    coordinator.publish();
                }
            }
            None => coordinator.tick().await,
        }
        let next = started + coordinator.config.retry_period;
        // Wake early when a held shard reaches its deadline, so it is dropped on time.
        let wake = coordinator
            .held
            .values()
            .map(|h| h.valid_until)
            .filter(|deadline| *deadline > Instant::now())
            .min()
            .map_or(next, |deadline| deadline.min(next));
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep_until(wake) => coordinator.publish(),
        }
    }
    coordinator.release_all().await;
}

/// Runs `request` with the coordinator's bound: a Lease request that outlasts the retry period
/// counts as failed.
pub(super) async fn bounded<T>(
    period: Duration,
    request: impl Future<Output = kube::Result<T>>,
) -> Option<kube::Result<T>> {
    tokio::time::timeout(period, request).await.ok()
}

/// What a bounded Lease request that did not succeed came to, for the log.
pub(super) fn failure<T>(result: Option<kube::Result<T>>) -> String {
    match result {
        None => "no answer within its bound".to_string(),
        Some(Err(error)) => error.to_string(),
        Some(Ok(_)) => "answered, but not as expected".to_string(),
    }
}

impl Coordinator {
    pub(super) fn me(&self) -> &str {
        &self.config.identity
    }

    /// When the first held shard must stop, if any is held.
    fn earliest_deadline(&self) -> Option<Instant> {
        self.held.values().map(|h| h.valid_until).min()
    }

    async fn tick(&mut self) {
        // The reads that assignment needs go out beside the renewals, so a slow consumer
        // delays neither by the other; the renewals are recorded first.
        let (renewals, membership, world) = futures::join!(
            self.renewals(),
            self.membership_renewal(),
            self.read_world()
        );
        if let Some((start, written)) = membership {
            self.record_membership(start, written);
        }
        let renewed = self.record_renewals(renewals);
        self.publish();
        match world {
            Ok(world) => self.assign(world, &renewed).await,
            Err(failed) => {
                warn!(%failed, "shard assignment skipped this tick; the shards held stay until their deadline");
            }
        }
        self.publish();
    }

    /// Renews every Lease held, all at once, each from the Lease as last written and bounded
    /// by the time its hold has left (at least a read's bound): a slow answer that still comes
    /// in time keeps the shard.
    async fn renewals(&self) -> Vec<(Shard, Instant, Option<kube::Result<Lease>>)> {
        let period = self.read_bound();
        let leases = &self.leases;
        join_all(self.held.iter().map(|(shard, held)| async move {
            let start = Instant::now();
            let bound = held
                .valid_until
                .saturating_duration_since(start)
                .max(period);
            let result = bounded(bound, leases.renew(&held.lease)).await;
            (shard.clone(), start, result)
        }))
        .await
    }

    /// Records what the renewals came to; returns the shards renewed. A renewal refused
    /// because the Lease changed since is left to the listing (lost, or renewed from the
    /// listed Lease).
    fn record_renewals(
        &mut self,
        results: Vec<(Shard, Instant, Option<kube::Result<Lease>>)>,
    ) -> BTreeSet<Shard> {
        let mut renewed = BTreeSet::new();
        for (shard, start, result) in results {
            match result {
                Some(Ok(lease)) => {
                    let valid_until = start + self.config.renew_deadline;
                    if let Some(held) = self.held.get_mut(&shard) {
                        held.valid_until = valid_until;
                        held.lease = lease;
                        self.holds.renewed(&shard.key(), valid_until);
                    }
                    renewed.insert(shard);
                }
                Some(Err(error)) if error.is_http_conflict() => {
                    debug!(shard = %shard.key(), "the shard Lease changed since it was written; the listing decides");
                }
                failed => {
                    warn!(shard = %shard.key(), error = %failure(failed), "renewing a shard Lease failed; its work stops at the renew deadline");
                }
            }
        }
        renewed
    }

    /// Which shards are this replica's now, and the Lease requests that follow; then, now and
    /// then, the Leases left behind are collected.
    async fn assign(&mut self, world: World, renewed: &BTreeSet<Shard>) {
        let World {
            members,
            shards,
            recorded,
        } = world;
        let now = Timestamp::now();
        if let Plan::Leader { .. } = self.config.plan {
            self.step(now, &shards, &recorded, renewed).await;
            return;
        }
        let mut live: BTreeSet<String> = members
            .values()
            .filter_map(|lease| live_holder(lease, now).map(str::to_string))
            .collect();
        // A replica whose own membership lapsed is not a member: it takes nothing new.
        let member = self.member_valid_until.is_some_and(|t| t > Instant::now());
        if member {
            live.insert(self.me().to_string());
        } else {
            live.remove(self.me());
        }
        let assigned: BTreeSet<Shard> = shards
            .iter()
            .filter(|shard| {
                member
                    && super::rendezvous::owner(live.iter().map(String::as_str), &shard.key())
                        == Some(self.me())
            })
            .cloned()
            .collect();
        self.step(now, &assigned, &recorded, renewed).await;
        self.ticks = self.ticks.wrapping_add(1);
        if self.ticks.is_multiple_of(GARBAGE_EVERY) {
            self.collect_garbage(&members, &recorded, &shards, now)
                .await;
        }
    }

    /// One pass over the shards assigned here and the shards held here.
    async fn step(
        &mut self,
        now: Timestamp,
        assigned: &BTreeSet<Shard>,
        recorded: &BTreeMap<String, Lease>,
        renewed: &BTreeSet<Shard>,
    ) {
        let mut work = Vec::new();
        let everything: BTreeSet<Shard> =
            assigned.iter().chain(self.held.keys()).cloned().collect();
        for shard in everything {
            let lease = recorded.get(&shard.lease_name());
            let hold = self.held.get(&shard).map(|held| Hold {
                releasing: held.releasing,
                stopped: held.releasing && self.stopped(&shard),
            });
            work.push(
                match (
                    decide(self.me(), hold, lease, assigned.contains(&shard), now),
                    lease,
                ) {
                    (Decision::Lost, _) => Action::Lost(shard),
                    // Renewed first thing this tick: nothing more to send.
                    (Decision::Renew | Decision::Stop, _) if renewed.contains(&shard) => {
                        if let Some(held) = self.held.get_mut(&shard) {
                            held.releasing |= !assigned.contains(&shard);
                        }
                        continue;
                    }
                    (Decision::Renew, Some(lease)) => Action::Renew(shard, lease.clone()),
                    (Decision::Stop, Some(lease)) => Action::Stop(shard, lease.clone()),
                    // The Lease as this replica last wrote it: the listing went out beside
                    // this tick's renewal and may be older.
                    (Decision::Release, Some(lease)) => {
                        let written = self.held.get(&shard).map(|held| held.lease.clone());
                        Action::Release(shard, written.unwrap_or_else(|| lease.clone()))
                    }
                    (Decision::Take, Some(lease)) => Action::Take(shard, lease.clone()),
                    (Decision::Create, _) => Action::Create(shard),
                    // A decision that needs a Lease is only ever taken with one.
                    (
                        Decision::Renew | Decision::Stop | Decision::Release | Decision::Take,
                        None,
                    )
                    | (Decision::Wait, _) => continue,
                },
            );
        }
        // A shard whose work has stopped is given up here, before its Lease is: from this line
        // on this replica does not count it as held, so its log never shows it held after the
        // next holder took the Lease. A release that fails leaves the Lease to expire.
        for action in &work {
            if let Action::Release(shard, _) = action {
                self.held.remove(shard);
                self.holds.dropped(&shard.key());
                info!(shard = %shard.key(), identity = %self.config.identity, "shard released");
                handover(shard, "released");
            }
        }
        let leases = &self.leases;
        let period = self.config.retry_period;
        let results = join_all(work.into_iter().map(|action| async move {
            let start = Instant::now();
            let result = match &action {
                Action::Lost(_) => None,
                Action::Renew(_, lease) | Action::Stop(_, lease) => {
                    bounded(period, leases.renew(lease)).await
                }
                Action::Release(_, lease) => bounded(period, leases.release(lease)).await,
                Action::Take(_, lease) => bounded(period, leases.take(lease)).await,
                Action::Create(shard) => {
                    let labels = BTreeMap::from([(SHARD_KIND_LABEL.into(), shard.kind().into())]);
                    let annotations = BTreeMap::from([(SHARD_ANNOTATION.into(), shard.key())]);
                    bounded(
                        period,
                        leases.create(&shard.lease_name(), labels, annotations),
                    )
                    .await
                }
            };
            (action, start, result)
        }))
        .await;
        for (action, start, result) in results {
            self.apply(action, result, start, assigned);
        }
    }

    /// Records what one Lease request, sent at `start`, came to.
    fn apply(
        &mut self,
        action: Action,
        result: Option<kube::Result<Lease>>,
        start: Instant,
        assigned: &BTreeSet<Shard>,
    ) {
        let valid_until = start + self.config.renew_deadline;
        let identity = self.config.identity.clone();
        match (action, result) {
            (Action::Lost(shard), _) => {
                self.held.remove(&shard);
                self.holds.dropped(&shard.key());
                warn!(shard = %shard.key(), %identity, "shard lost: another replica holds its Lease");
                handover(&shard, "lost");
            }
            (Action::Renew(shard, _) | Action::Stop(shard, _), Some(Ok(lease))) => {
                if let Some(held) = self.held.get_mut(&shard) {
                    held.valid_until = valid_until;
                    held.lease = lease;
                    held.releasing |= !assigned.contains(&shard);
                    self.holds.renewed(&shard.key(), valid_until);
                }
            }
            (Action::Release(..), Some(Ok(_))) => {}
            (Action::Release(shard, _), failed) => {
                warn!(shard = %shard.key(), error = %failure(failed), "releasing a shard Lease failed; it expires instead");
            }
            (Action::Take(shard, _) | Action::Create(shard), Some(Ok(lease))) => {
                info!(shard = %shard.key(), %identity, "shard acquired");
                handover(&shard, "acquired");
                self.holds.renewed(&shard.key(), valid_until);
                self.held.insert(
                    shard,
                    HeldShard {
                        valid_until,
                        releasing: false,
                        lease,
                    },
                );
            }
            (Action::Take(..) | Action::Create(..), _) => {
                // Another replica was faster, or the write failed: try again next tick.
            }
            (action, failed) => {
                warn!(shard = %action.shard().key(), error = %failure(failed), "renewing a shard Lease failed; its work stops at the renew deadline");
            }
        }
    }

    /// Whether a shard's work has stopped here: an API shard's syncer has finished; a
    /// Connection shard's reconciles that started while it was held have ended.
    fn stopped(&self, shard: &Shard) -> bool {
        match shard {
            // Given up only on shutdown, once the controllers have stopped.
            Shard::Leader(_) => false,
            Shard::Connection(connection) => !self.shared.shards.connection_busy(connection),
            Shard::Api { connection, api } => !self.shared.syncers.contains(connection, api),
        }
    }

    /// Publishes the shards held, renewed within their deadline and not being given up.
    fn publish(&mut self) {
        let now = Instant::now();
        let lapsed: Vec<Shard> = self
            .held
            .iter()
            .filter(|(_, held)| held.valid_until <= now)
            .map(|(shard, _)| shard.clone())
            .collect();
        for shard in lapsed {
            // Dropped for good: it is taken again (by whoever it is assigned to) through its
            // Lease, never resumed on a stale renewal.
            self.held.remove(&shard);
            self.holds.dropped(&shard.key());
            warn!(shard = %shard.key(), identity = %self.config.identity, "shard lost: no renewal within the renew deadline; its work stops");
            handover(&shard, "lost");
        }
        if let Plan::Leader { .. } = self.config.plan {
            let leads = !self.held.is_empty();
            self.leading.send_if_modified(|leading| {
                let changed = *leading != leads;
                *leading = leads;
                changed
            });
            return;
        }
        let mut connections = BTreeSet::new();
        let mut apis = BTreeSet::new();
        for (shard, held) in &self.held {
            if held.releasing {
                continue;
            }
            match shard {
                Shard::Leader(_) => {}
                Shard::Connection(c) => {
                    connections.insert(c.clone());
                }
                Shard::Api { connection, api } => {
                    apis.insert((connection.clone(), api.clone()));
                }
            }
        }
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let owned = &metrics().shards_owned;
        owned
            .get_or_create(&ShardKindLabels { kind: "connection" })
            .set(gauge(connections.len()));
        owned
            .get_or_create(&ShardKindLabels { kind: "api" })
            .set(gauge(apis.len()));
        self.shared.shards.publish(connections, apis);
    }

    /// On shutdown: gives every Lease up so the other replicas take the shards at once.
    async fn release_all(&mut self) {
        if let Plan::Shards = self.config.plan {
            self.shared.shards.publish(BTreeSet::new(), BTreeSet::new());
        }
        self.leading.send_replace(false);
        for shard in self.held.keys() {
            self.holds.dropped(&shard.key());
        }
        self.holds.dropped(crate::fencing::hold::MEMBER);
        let period = self.config.retry_period;
        let held = std::mem::take(&mut self.held);
        let leases = &self.leases;
        let identity = &self.config.identity;
        join_all(held.iter().map(|(shard, held)| async move {
            // As in a tick: given up here first, then its Lease.
            info!(shard = %shard.key(), %identity, "shard released");
            handover(shard, "released");
            match bounded(period, leases.release(&held.lease)).await {
                Some(Ok(_)) => {}
                failed => {
                    warn!(shard = %shard.key(), error = %failure(failed), "releasing a shard Lease failed; it expires instead")
                }
            }
        }))
        .await;
        if let Some(member) = self.member.take()
            && let Some(Err(error)) = bounded(period, leases.release(&member)).await
        {
            warn!(%error, "releasing the membership Lease failed; it expires instead");
        }
    }
}

/// One shard's Lease request this tick, as [`decide`] chose it.
#[derive(Debug)]
enum Action {
    /// Held here but the Lease names another holder (or is gone).
    Lost(Shard),
    /// Held and assigned: renew.
    Renew(Shard, Lease),
    /// Held, no longer assigned, work still stopping: renew until it has.
    Stop(Shard, Lease),
    /// Held, no longer assigned, work stopped: release.
    Release(Shard, Lease),
    /// Assigned and free: take.
    Take(Shard, Lease),
    /// Assigned and no Lease yet: create it held.
    Create(Shard),
}

impl Action {
    fn shard(&self) -> &Shard {
        match self {
            Self::Lost(s)
            | Self::Renew(s, _)
            | Self::Stop(s, _)
            | Self::Release(s, _)
            | Self::Take(s, _)
            | Self::Create(s) => s,
        }
    }
}

fn handover(shard: &Shard, change: &'static str) {
    metrics()
        .shard_handovers
        .get_or_create(&HandoverLabels {
            kind: shard.kind(),
            change,
        })
        .inc();
}
