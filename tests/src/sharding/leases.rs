//! The shard and membership Leases as the replicas leave them on the consumer, read the way
//! an operator would: which replica holds which shard now, whether that is the one rendezvous
//! hashing assigns, and (polled every [`POLL`]) how long a shard went without a holder.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use konnector::sharding::{SHARD_ANNOTATION, SHARD_KIND_LABEL, live_holder, rendezvous};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How often a [`Poller`] reads the Leases.
pub const POLL: Duration = Duration::from_millis(200);

/// One shard Lease: its key (from its annotation), kind and live holder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardLease {
    /// `<connection>` or `<connection>/<api>`.
    pub key: String,
    /// `connection` or `api`.
    pub kind: String,
    /// The holder while the Lease is held; `None` when released or expired.
    pub holder: Option<String>,
}

/// The shard Leases in `namespace` by key, as read at `now`.
pub async fn shard_leases(
    consumer: &Client,
    namespace: &str,
) -> anyhow::Result<BTreeMap<String, ShardLease>> {
    let listed = Api::<Lease>::namespaced(consumer.clone(), namespace)
        .list(&ListParams::default().labels(SHARD_KIND_LABEL))
        .await?;
    let now = Timestamp::now();
    let mut shards = BTreeMap::new();
    for lease in &listed.items {
        let Some(key) = lease.annotations().get(SHARD_ANNOTATION) else {
            anyhow::bail!("shard Lease {} has no {SHARD_ANNOTATION}", lease.name_any());
        };
        let kind = lease.labels().get(SHARD_KIND_LABEL).cloned();
        let shard = ShardLease {
            key: key.clone(),
            kind: kind.unwrap_or_default(),
            holder: live_holder(lease, now).map(str::to_string),
        };
        shards.insert(key.clone(), shard);
    }
    Ok(shards)
}

/// Holder by shard key.
pub type Holders = BTreeMap<String, Option<String>>;

/// The holders of `shards`.
pub fn holders(shards: &BTreeMap<String, ShardLease>) -> Holders {
    shards
        .iter()
        .map(|(key, lease)| (key.clone(), lease.holder.clone()))
        .collect()
}

/// How many shards each replica holds.
pub fn shares(holders: &Holders) -> BTreeMap<String, usize> {
    let mut shares = BTreeMap::new();
    for holder in holders.values().flatten() {
        *shares.entry(holder.clone()).or_default() += 1;
    }
    shares
}

/// The member rendezvous hashing gives `key`, as every replica computes it.
pub fn assigned<'a>(members: &'a BTreeSet<String>, key: &str) -> Option<&'a str> {
    rendezvous::owner(members.iter().map(String::as_str), key)
}

/// The shards among `keys` that are not (yet) held by the member rendezvous hashing assigns
/// them among `members`, each with its holder: empty once the assignment is in force.
pub fn misplaced(
    holders: &Holders,
    keys: &BTreeSet<String>,
    members: &BTreeSet<String>,
) -> Vec<(String, Option<String>)> {
    keys.iter()
        .filter_map(|key| {
            let holder = holders.get(key).cloned().flatten();
            (holder.as_deref() != assigned(members, key)).then(|| (key.clone(), holder))
        })
        .collect()
}

/// One reading of every shard Lease.
#[derive(Clone, Debug)]
pub struct Sample {
    /// When it was read.
    pub at: Timestamp,
    /// The live holder of each shard.
    pub holders: Holders,
}

/// The readings a [`Poller`] took, in order.
#[derive(Clone, Debug, Default)]
pub struct History(pub Vec<Sample>);

impl History {
    /// The longest time any of `keys` went without a live holder while polled, with the key: from
    /// the last reading that saw it held (or the first reading) to the next that saw it held
    /// again (or the last reading). Over-estimates by at most one poll interval.
    pub fn longest_without_holder(&self, keys: &BTreeSet<String>) -> Option<(String, Duration)> {
        let mut longest: Option<(String, Duration)> = None;
        for key in keys {
            let mut held_at: Option<Timestamp> = self.0.first().map(|s| s.at);
            let mut gap_since: Option<Timestamp> = None;
            let mut record = |from: Timestamp, to: Timestamp| {
                let gap = to.duration_since(from).unsigned_abs();
                if longest.as_ref().is_none_or(|(_, l)| gap > *l) {
                    longest = Some((key.clone(), gap));
                }
            };
            for sample in &self.0 {
                let held = sample.holders.get(key).is_some_and(Option::is_some);
                match (held, gap_since) {
                    (true, Some(from)) => {
                        record(from, sample.at);
                        gap_since = None;
                    }
                    (false, None) => gap_since = held_at.or(Some(sample.at)),
                    _ => {}
                }
                if held {
                    held_at = Some(sample.at);
                }
            }
            if let (Some(from), Some(last)) = (gap_since, self.0.last()) {
                record(from, last.at);
            }
        }
        longest
    }

    /// When `key` was first seen held by someone other than `not` after `after`.
    pub fn first_held_by_another(
        &self,
        key: &str,
        not: &str,
        after: Timestamp,
    ) -> Option<Timestamp> {
        self.0
            .iter()
            .filter(|s| s.at > after)
            .find(|s| {
                let holder = s.holders.get(key).cloned().flatten();
                holder.is_some_and(|h| h != not)
            })
            .map(|s| s.at)
    }

    /// Every holder change of every shard, as `(when, key, from, to)`.
    pub fn changes(&self) -> Vec<(Timestamp, String, Option<String>, Option<String>)> {
        let mut changes = Vec::new();
        for pair in self.0.windows(2) {
            let [before, after] = pair else { continue };
            for (key, holder) in &after.holders {
                let was = before.holders.get(key).cloned().flatten();
                if was != *holder {
                    changes.push((after.at, key.clone(), was, holder.clone()));
                }
            }
        }
        changes
    }
}

/// Reads every shard Lease every [`POLL`] in the background until [`Poller::finish`].
pub struct Poller {
    stop: CancellationToken,
    task: JoinHandle<anyhow::Result<History>>,
}

impl Poller {
    /// Starts polling the shard Leases in `namespace`.
    pub fn start(consumer: Client, namespace: &str) -> Self {
        let stop = CancellationToken::new();
        let (token, namespace) = (stop.clone(), namespace.to_string());
        let task = tokio::spawn(async move {
            let mut history = History::default();
            loop {
                let at = Timestamp::now();
                let shards = shard_leases(&consumer, &namespace).await?;
                history.0.push(Sample {
                    at,
                    holders: holders(&shards),
                });
                // One last reading after the stop: the history ends no earlier than the
                // moment it was asked for (a check that just saw a change sees it recorded).
                if token.is_cancelled() {
                    break;
                }
                tokio::select! {
                    () = token.cancelled() => {}
                    () = tokio::time::sleep(POLL) => {}
                }
            }
            Ok(history)
        });
        Self { stop, task }
    }

    /// Stops polling and returns what was read, a last reading taken after the call.
    pub async fn finish(self) -> anyhow::Result<History> {
        self.stop.cancel();
        self.task.await?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::SignedDuration;

    fn sample(secs: i64, holder: Option<&str>) -> Sample {
        let at = Timestamp::UNIX_EPOCH
            .checked_add(SignedDuration::from_secs(secs))
            .unwrap_or(Timestamp::UNIX_EPOCH);
        Sample {
            at,
            holders: BTreeMap::from([("k".to_string(), holder.map(str::to_string))]),
        }
    }

    #[test]
    fn the_longest_gap_runs_from_the_last_held_reading_to_the_next_held_one() {
        let history = History(vec![
            sample(0, Some("a")),
            sample(1, Some("a")),
            sample(2, None),
            sample(3, None),
            sample(4, Some("b")),
            sample(5, Some("b")),
        ]);
        let keys = BTreeSet::from(["k".to_string()]);
        assert_eq!(
            history.longest_without_holder(&keys),
            Some(("k".to_string(), Duration::from_secs(3)))
        );
        let changes = history.changes();
        assert_eq!(changes.len(), 2);
        assert_eq!(
            history.first_held_by_another("k", "a", Timestamp::UNIX_EPOCH),
            Some(sample(4, None).at)
        );
    }

    #[test]
    fn a_shard_is_misplaced_until_its_rendezvous_owner_holds_it() {
        let members: BTreeSet<String> = ["a", "b"].map(String::from).into();
        let keys = BTreeSet::from(["east/x".to_string()]);
        let owner = assigned(&members, "east/x").map(str::to_string);
        let right = Holders::from([("east/x".to_string(), owner.clone())]);
        assert!(misplaced(&right, &keys, &members).is_empty());
        let other = members.iter().find(|m| Some(*m) != owner.as_ref()).cloned();
        let wrong = Holders::from([("east/x".to_string(), other)]);
        assert_eq!(misplaced(&wrong, &keys, &members).len(), 1);
    }
}
