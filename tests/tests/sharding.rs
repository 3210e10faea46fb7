//! Active-active replicas (`konnector run --sharding`), as real processes on one shared cluster
//! pair: 30 APIs over two Connections make 32 shards (2 Connection shards, 30 API shards), each
//! held through its own Lease by the replica rendezvous hashing picks. Each test binds the APIs
//! in namespaces of its own, counts its own instances on both clusters (nothing lost, nothing
//! written twice), and reads three records side by side: the shard Leases (polled every 200 ms
//! while the membership changes), each replica's JSON log (shards acquired, released and lost,
//! syncers started and stopped, with timestamps) and each replica's metrics; and `kubectl kbind
//! status` names the same holders as the Leases.
//!
//! Binding status from many writers: every replica's `boundAPIs` entries are read back whole,
//! and none outlives a rollout (every replica replaced) or an API removed from a binding,
//! whose drain runs once.
//!
//! The tests take turns on the pair (every replica shards every Connection of the consumer)
//! and run with 6 s Leases, a 4 s renew deadline and a 1 s retry period.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kbind_tests::eventually;
use kbind_tests::fixtures::served_requests;
use kbind_tests::sharding::lab::{Lab, SETTLE};
use kbind_tests::sharding::leases::{Poller, shard_leases, shares};
use kbind_tests::sharding::logs::Event;
use kbind_tests::sharding::replicas::TIMINGS;
use kbind_tests::sharding::status;
use kbind_tests::sharding::world::{
    CONNECTIONS, LEASE_NAMESPACE, converged_everywhere, create_everywhere, grant_replica,
    revoke_lease_writes,
};
use kbind_tests::syncenv::wait_for;
use konnector::api::Binding;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;

/// How much later than a bound a change may be *seen*: one poll of the Leases, and the Lease
/// requests of the tick that made the change on a machine busy with other tests.
const OBSERVED_WITHIN: Duration = Duration::from_secs(2);
/// No replica holds more than this share of the shards.
const MAX_SHARE_PERCENT: usize = 60;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_share_thirty_apis_over_two_connections() -> anyhow::Result<()> {
    let lab = Lab::start(kbind_tests::konnector_binary!(), "share", 3).await?;
    let result = async {
        let sides = lab.world.bind(lab.pair, "share").await?;
        create_everywhere(&sides, 0..3, Arc::default()).await?;
        converged_everywhere(&sides, 3).await?;

        let holders = lab.settled().await?;
        let total = lab.world.shard_keys().len();
        let shares = shares(&holders);
        println!("{total} shards held: {shares:?}");
        for identity in lab.replicas.running() {
            let share = shares.get(&identity).copied().unwrap_or(0);
            anyhow::ensure!(
                share >= 1 && share * 100 <= total * MAX_SHARE_PERCENT,
                "{identity} holds {share} of {total} shards: {shares:?}"
            );
        }
        lab.syncers_follow_the_shards().await?;
        let kubectl_kbind = kbind_tests::kubectl_kbind_binary!();
        lab.status_names_the_holders(&kubectl_kbind, &holders)
            .await?;
        lab.replicas.never_two_at_once()
    }
    .await;
    lab.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_s_shards_resume_elsewhere_within_the_lease_duration() -> anyhow::Result<()>
{
    const PER_API: usize = 10;
    let mut lab = Lab::start(kbind_tests::konnector_binary!(), "kill", 3).await?;
    let result = async {
        let sides = lab.world.bind(lab.pair, "kill").await?;
        let before = lab.settled().await?;
        // The replica with the most API shards, so the kill cuts off the most syncers.
        let api_keys = lab.world.api_keys();
        let victim = lab
            .replicas
            .running()
            .into_iter()
            .max_by_key(|id| Lab::held_by(&before, id).intersection(&api_keys).count())
            .ok_or_else(|| anyhow::anyhow!("no replica runs"))?;
        let victims = Lab::held_by(&before, &victim);

        let poller = Poller::start(lab.consumer.clone(), LEASE_NAMESPACE);
        let created = Arc::new(AtomicUsize::new(0));
        let third = sides.len() * PER_API / 3;
        let replicas = &mut lab.replicas;
        // The kill strikes while the instances are being created.
        let kill = async {
            wait_for("a third of the instances created", SETTLE, || async {
                Ok((created.load(Ordering::Relaxed) >= third).then_some(()))
            })
            .await?;
            replicas.get_mut(&victim)?.kill_hard()
        };
        let creating = create_everywhere(&sides, 0..PER_API, created.clone());
        let (killed_at, ()) = tokio::try_join!(kill, creating)?;

        let after = lab.settled().await?;
        let history = poller.finish().await?;
        converged_everywhere(&sides, PER_API).await?;
        // The killed replica gave nothing up; once its membership Lease has expired, each
        // Connection shard's holder prunes its status fields, and every entry is its holder's.
        entries_read_back(&lab, "kill", PER_API as u64).await?;

        let bound = TIMINGS.takeover_bound() + OBSERVED_WITHIN;
        let mut slowest = Duration::ZERO;
        for key in &victims {
            let taken = history.first_held_by_another(key, &victim, killed_at);
            let taken = taken.ok_or_else(|| anyhow::anyhow!("{key} never seen taken"))?;
            let took = taken.duration_since(killed_at).unsigned_abs();
            anyhow::ensure!(
                took <= bound,
                "{key} of killed {victim} held by another only {took:?} after the kill (bound {bound:?})"
            );
            slowest = slowest.max(took);
        }
        println!(
            "{victim} killed holding {} shards; all held elsewhere within {slowest:?} (bound {bound:?})",
            victims.len()
        );
        // Only the killed replica's shards moved.
        for (key, holder) in &before {
            if holder.as_deref() != Some(victim.as_str()) {
                anyhow::ensure!(after.get(key) == Some(holder), "{key} moved from {holder:?}");
            }
        }
        lab.replicas.never_two_at_once()
    }
    .await;
    lab.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_replica_takes_only_its_share() -> anyhow::Result<()> {
    let mut lab = Lab::start(kbind_tests::konnector_binary!(), "join", 3).await?;
    let result = async {
        let sides = lab.world.bind(lab.pair, "join").await?;
        create_everywhere(&sides, 0..2, Arc::default()).await?;
        converged_everywhere(&sides, 2).await?;
        let before = lab.settled().await?;

        let poller = Poller::start(lab.consumer.clone(), LEASE_NAMESPACE);
        let newcomer = "join-3";
        lab.start_replica(newcomer, None).await?;
        let after = lab.settled().await?;
        // A few more readings of the settled state, so the last hand-over is seen whole.
        tokio::time::sleep(TIMINGS.retry_period * 2).await;
        let history = poller.finish().await?;

        let taken = Lab::held_by(&after, newcomer);
        anyhow::ensure!(!taken.is_empty(), "{newcomer} acquired no shard");
        let assignment = lab.assignment(&lab.replicas.running());
        for (key, holder) in &after {
            let was = before.get(key).cloned().flatten();
            if *holder != was {
                anyhow::ensure!(
                    holder.as_deref() == Some(newcomer),
                    "{key} moved from {was:?} to {holder:?}, not to {newcomer}"
                );
            }
            anyhow::ensure!(
                assignment.get(key) == Some(holder),
                "{key} held by {holder:?}, rendezvous says {:?}",
                assignment.get(key)
            );
        }
        // Every change seen while the newcomer joined: a release, or a take by the newcomer.
        for (at, key, from, to) in history.changes() {
            anyhow::ensure!(
                to.is_none() || to.as_deref() == Some(newcomer),
                "at {at}, {key} went from {from:?} to {to:?}"
            );
        }
        let keys = lab.world.shard_keys();
        let bound = TIMINGS.takeover_bound();
        let longest = history.longest_without_holder(&keys);
        if let Some((key, gap)) = &longest {
            anyhow::ensure!(*gap <= bound, "{key} without a holder for {gap:?} (bound {bound:?})");
        }
        println!(
            "{newcomer} took {} of {} shards; longest seen without a holder: {longest:?} ({} readings, {} changes)",
            taken.len(),
            keys.len(),
            history.0.len(),
            history.changes().len()
        );
        lab.replicas.never_two_at_once()?;
        lab.syncers_follow_the_shards().await?;

        // The moved APIs sync on their new owner.
        create_everywhere(&sides, 2..4, Arc::default()).await?;
        converged_everywhere(&sides, 4).await
    }
    .await;
    lab.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_renewals_are_refused_stops_its_syncers_first() -> anyhow::Result<()> {
    let mut lab = Lab::start(kbind_tests::konnector_binary!(), "refused", 2).await?;
    let result = async {
        let admin = lab.consumer.clone();
        let (refused, user) = ("refused-2", "kbind-sharded-replica");
        let identity = lab.pair.consumer.mint_user(user, &[])?;
        grant_replica(&admin, &lab.world, user).await?;
        let leases: Api<Lease> = Api::namespaced(identity.client().await?, LEASE_NAMESPACE);
        let all = ListParams::default();
        eventually(SETTLE, || leases.list(&all)).await?;
        lab.start_replica(refused, Some(identity.kubeconfig_path()))
            .await?;

        let sides = lab.world.bind(lab.pair, "refused").await?;
        create_everywhere(&sides, 0..2, Arc::default()).await?;
        converged_everywhere(&sides, 2).await?;
        let before = lab.settled().await?;
        lab.syncers_follow_the_shards().await?;
        let its = Lab::held_by(&before, refused);
        let its_apis: BTreeSet<String> = its.intersection(&lab.world.api_keys()).cloned().collect();
        anyhow::ensure!(!its_apis.is_empty(), "{refused} holds no API shard: {its:?}");

        let revoked_at = Timestamp::now();
        revoke_lease_writes(&admin).await?;
        let what = format!("{refused}'s shards held by the others");
        wait_for(&what, SETTLE, || async {
            let now = shard_leases(&admin, LEASE_NAMESPACE).await?;
            let moved = its.iter().all(|key| {
                now.get(key)
                    .and_then(|l| l.holder.as_deref())
                    .is_some_and(|h| h != refused)
            });
            Ok(moved.then_some(()))
        })
        .await?;

        // Its log: every shard of its own dropped and every syncer stopped...
        let mine = lab.replicas.get(refused)?.events()?;
        let after_revoke = |at: &Timestamp| *at > revoked_at;
        let mut last_stop = revoked_at;
        for key in &its {
            let stopped = mine.iter().find(|l| {
                after_revoke(&l.at) && matches!(&l.event, Event::Lost(k) | Event::Released(k) if k == key)
            });
            let stopped = stopped.ok_or_else(|| anyhow::anyhow!("{refused} never dropped {key}"))?;
            last_stop = last_stop.max(stopped.at);
        }
        for key in &its_apis {
            let stopped = mine.iter().find(|l| {
                after_revoke(&l.at) && matches!(&l.event, Event::SyncerStopping(k) if k == key)
            });
            let stopped = stopped.ok_or_else(|| anyhow::anyhow!("{refused} never stopped {key}"))?;
            last_stop = last_stop.max(stopped.at);
        }
        // ...before any other replica acquired one of them.
        let mut first_taken: Option<Timestamp> = None;
        for identity in lab.replicas.running().into_iter().filter(|id| id != refused) {
            for logged in lab.replicas.get(&identity)?.events()? {
                if let Event::Acquired(key) = &logged.event
                    && its.contains(key)
                    && after_revoke(&logged.at)
                {
                    anyhow::ensure!(
                        logged.at > last_stop,
                        "{identity} acquired {key} at {}, before {refused} had stopped everything ({last_stop})",
                        logged.at
                    );
                    first_taken = Some(first_taken.map_or(logged.at, |t| t.min(logged.at)));
                }
            }
        }
        let first_taken = first_taken.ok_or_else(|| anyhow::anyhow!("nobody acquired {its:?}"))?;
        println!(
            "{refused}: {} shards ({} API) all stopped {:?} after the revocation, first taken {:?} after",
            its.len(),
            its_apis.len(),
            last_stop.duration_since(revoked_at).unsigned_abs(),
            first_taken.duration_since(revoked_at).unsigned_abs()
        );
        lab.replicas.never_two_at_once()?;

        // The moved APIs sync on their new owners.
        create_everywhere(&sides, 2..3, Arc::default()).await?;
        converged_everywhere(&sides, 3).await
    }
    .await;
    lab.finish(result).await
}

/// The log line of a replica's apply of its `boundAPIs` entries that the apiserver refused.
const APPLY_FAILED: &str =
    "applying this replica's boundAPIs entries failed; retried on the next change";
/// The log line of the drain of an API a binding stopped listing.
const DRAINING: &str = "API no longer listed by the binding; draining its instances";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_s_status_entries_read_back_whole_and_none_outlives_a_rollout()
-> anyhow::Result<()> {
    let mut lab = Lab::start(kbind_tests::konnector_binary!(), "rollout", 3).await?;
    let result = async {
        let sides = lab.world.bind(lab.pair, "rollout").await?;
        create_everywhere(&sides, 0..1, Arc::default()).await?;
        converged_everywhere(&sides, 1).await?;
        entries_read_back(&lab, "rollout", 1).await?;

        // A rollout: each replica stopped as a Pod is, and a new one with a new name started.
        for i in 0..3 {
            lab.replicas
                .get_mut(&format!("rollout-{i}"))?
                .stop()
                .await?;
            lab.start_replica(&format!("rollout-{}", i + 3), None)
                .await?;
            lab.settled().await?;
        }
        entries_read_back(&lab, "rollout", 1).await?;

        // An API removed from the east binding: drained once, its entry gone for good.
        let namespace = "rollout-east";
        let bindings: Api<Binding> = Api::namespaced(lab.consumer.clone(), namespace);
        let binding = status::binding(&lab.consumer, namespace).await?;
        let mut apis = binding.spec.apis.clone();
        let removed = apis.pop().context("the binding lists no API")?.name;
        let group = removed
            .split_once('.')
            .map(|(_, group)| group.to_string())
            .context("an API name is <plural>.<group>")?;
        let provider = lab.pair.provider.client().await?;
        let provider_reads = || async {
            let gets = served_requests(&provider, "GET", &group, "widgets").await?;
            let lists = served_requests(&provider, "LIST", &group, "widgets").await?;
            anyhow::Ok(gets + lists)
        };
        bindings
            .patch(
                "widgets",
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "apis": apis } })),
            )
            .await?;
        wait_for(
            &format!("no boundAPIs entry of {removed}"),
            SETTLE,
            || async {
                let binding = status::binding(&lab.consumer, namespace).await?;
                let names = status::entry_names(binding.status.as_ref());
                Ok((!names.contains(&removed)).then_some(()))
            },
        )
        .await?;
        let reads = provider_reads().await?;
        // Longer than the status interval: the periodic reconcile of the binding and every
        // replica's periodic apply of its entries come by.
        tokio::time::sleep(STATUS_INTERVAL + Duration::from_secs(5)).await;
        let binding = status::binding(&lab.consumer, namespace).await?;
        let names = status::entry_names(binding.status.as_ref());
        anyhow::ensure!(
            !names.contains(&removed),
            "the entry of {removed} came back: {names:?}"
        );
        let after = provider_reads().await?;
        anyhow::ensure!(
            after == reads,
            "the provider served {} more GET/LIST of {removed} after its drain",
            after - reads
        );
        let mut drains = 0;
        let mut failures = Vec::new();
        for replica in lab.replicas.replicas.values() {
            drains += status::logged(&replica.log, DRAINING, Some(&removed))?;
            let failed = status::logged(&replica.log, APPLY_FAILED, None)?;
            if failed > 0 {
                failures.push(format!("{}: {failed}", replica.identity));
            }
        }
        anyhow::ensure!(drains == 1, "{removed} drained {drains} times, once wanted");
        anyhow::ensure!(
            failures.is_empty(),
            "replicas' boundAPIs applies failed: {failures:?}"
        );
        lab.replicas.never_two_at_once()
    }
    .await;
    lab.finish(result).await
}

/// The replicas' default binding status interval (`--binding-resync`).
const STATUS_INTERVAL: Duration = Duration::from_secs(30);

/// Waits until both bindings of test `prefix` carry, for every API, the entry its shard's
/// holder applied, read back whole with `per_api` instances synced, and no field manager of
/// another replica.
async fn entries_read_back(lab: &Lab, prefix: &str, per_api: u64) -> anyhow::Result<()> {
    let holders = lab.settled().await?;
    for connection in CONNECTIONS {
        let namespace = format!("{prefix}-{connection}");
        let what = format!("every replica's entries in {namespace} read back");
        wait_for(&what, SETTLE, || async {
            let binding = status::binding(&lab.consumer, &namespace).await?;
            let wrong = status::entries_of_the_holders(&binding, connection, &holders, per_api);
            anyhow::ensure!(wrong.is_empty(), "{}", wrong.join("\n"));
            Ok(Some(()))
        })
        .await?;
    }
    Ok(())
}
