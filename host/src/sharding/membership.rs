//! A replica's membership in the sharded set: its own membership Lease, renewed every tick
//! before anything else the tick does, and the Leases that replicas and shards long gone left
//! behind, collected now and then.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::coordinator::{Coordinator, bounded};
use super::leases::long_abandoned;
use super::{MEMBER_LABEL, Shard, member_lease_name};
use crate::telemetry::metrics;

impl Coordinator {
    /// Renews (or creates) this replica's membership Lease.
    pub(super) async fn renew_membership(&mut self, started: Instant) {
        let name = member_lease_name(self.me());
        let period = self.config.retry_period;
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
        metrics()
            .shard_lease_renew
            .observe(started.elapsed().as_secs_f64());
        match written {
            Some(Ok(lease)) if lease.metadata.name.is_some() => {
                self.member = Some(lease);
                self.member_valid_until = Some(started + self.config.renew_deadline);
            }
            failed => {
                // A conflict or a refusal: read it again next time.
                self.member = None;
                warn!(error = ?failed.and_then(|r| r.err()), "renewing the membership Lease failed");
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
        for lease in left_behind {
            match bounded(
                self.config.retry_period,
                self.leases.delete_unchanged(lease),
            )
            .await
            {
                Some(Ok(())) => info!(lease = ?lease.metadata.name, "deleted a Lease left behind"),
                failed => {
                    debug!(lease = ?lease.metadata.name, error = ?failed.and_then(|r| r.err()), "a Lease left behind stays for now")
                }
            }
        }
    }
}
