//! A replica's membership in the sharded set: its own membership Lease, renewed every tick
//! beside the shard Leases, before anything else the tick does, and the Leases that replicas and shards long gone left
//! behind, collected now and then.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::coordinator::{Coordinator, bounded, failure};
use super::leases::long_abandoned;
use super::{MEMBER_LABEL, Plan, Shard, member_lease_name};
use crate::fencing::hold::MEMBER;
use crate::telemetry::metrics;

impl Coordinator {
    /// Renews (or creates) this replica's membership Lease, sharded replicas only: when the
    /// request started and what it came to.
    pub(super) async fn membership_renewal(
        &self,
    ) -> Option<(Instant, Option<kube::Result<Lease>>)> {
        if self.config.plan != Plan::Shards {
            return None;
        }
        let start = Instant::now();
        let name = member_lease_name(self.me());
        // As a shard's renewal: bounded by the time the membership has left, at least a read's
        // bound, so a slow answer that still comes in time keeps it, and a lapsed membership
        // comes back over a link slower than the retry period.
        let period = self
            .member_valid_until
            .map(|until| until.saturating_duration_since(start))
            .unwrap_or_default()
            .max(self.read_bound());
        let written = match &self.member {
            Some(lease) => bounded(period, self.leases.renew(lease)).await,
            None => {
                let existing = bounded(period, self.leases.list(MEMBER_LABEL)).await;
                match existing {
                    Some(Ok(mut found)) => match found.remove(&name) {
                        Some(lease) => bounded(period, self.leases.take(&lease)).await,
                        None => {
                            let labels = BTreeMap::from([(MEMBER_LABEL.into(), "true".into())]);
                            bounded(period, self.leases.create(&name, labels, BTreeMap::new()))
                                .await
                        }
                    },
                    other => other.map(|r| r.map(|_| Lease::default())),
                }
            }
        };
        Some((start, written))
    }

    /// Records what the membership renewal started at `start` came to.
    pub(super) fn record_membership(
        &mut self,
        start: Instant,
        written: Option<kube::Result<Lease>>,
    ) {
        metrics()
            .shard_lease_renew
            .observe(start.elapsed().as_secs_f64());
        match written {
            Some(Ok(lease)) if lease.metadata.name.is_some() => {
                let valid_until = start + self.config.renew_deadline;
                self.member = Some(lease);
                self.member_valid_until = Some(valid_until);
                self.holds.renewed(MEMBER, valid_until);
            }
            failed => {
                // A conflict or a refusal: read it again next time.
                self.member = None;
                let error = match failed {
                    Some(Err(error)) => error.to_string(),
                    Some(Ok(_)) => "the Lease came back without a name".to_string(),
                    None => "no answer in time".to_string(),
                };
                warn!(%error, "renewing the membership Lease failed");
            }
        }
    }

    /// Deletes the Leases left behind: membership Leases of replicas gone for long (a
    /// Deployment's Pods get new names), and released shard Leases of shards that no longer
    /// exist. Each delete is conditional on the Lease being as read, so it never races a take.
    pub(super) async fn collect_garbage(
        &self,
        members: &BTreeMap<String, Lease>,
        recorded: &BTreeMap<String, Lease>,
        shards: &BTreeSet<Shard>,
        now: Timestamp,
    ) {
        let current: BTreeSet<String> = shards.iter().map(Shard::lease_name).collect();
        let left_behind = members
            .values()
            .chain(recorded.values().filter(|l| {
                l.metadata
                    .name
                    .as_ref()
                    .is_some_and(|name| !current.contains(name))
            }))
            .filter(|lease| long_abandoned(lease, now));
        // All at once, each bounded: the collection never holds up the next tick for long.
        let period = self.config.retry_period;
        let leases = &self.leases;
        futures::future::join_all(left_behind.map(|lease| async move {
            match bounded(period, leases.delete_unchanged(lease)).await {
                Some(Ok(())) => info!(lease = ?lease.metadata.name, "deleted a Lease left behind"),
                failed => {
                    debug!(lease = ?lease.metadata.name, error = %failure(failed), "a Lease left behind stays for now")
                }
            }
        }))
        .await;
    }
}
