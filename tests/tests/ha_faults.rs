//! Both HA modes under the faults a Lease cannot see: a replica cut off from its consumer
//! while the provider still answers, a replica paused past its Lease (SIGSTOP) and resumed, a
//! slow consumer link. The replicas are real `konnector run` processes on one shared cluster
//! pair (ten APIs over two Connections); each replica reaches the consumer
//! through its own toxiproxy link, so one can be hung, slowed or cut while the others are not.
//! Each test counts what was written twice, lost or stranded: the provider copies (never an
//! old spec again), the replicas' JSON logs (no provider write from a replica after another
//! took its work over), and, after the bindings are deleted, no copy left on the provider.
//!
//! The tests take turns on the pair with the sharding tests' timings: 6 s Leases, a 4 s renew
//! deadline, a 1 s retry period. The slow-link test, which mostly waits, runs beside them on a
//! second pair and with the konnector's default timings: a link at 1.2 s per request (a new
//! TLS connection costs two round trips) is what a 10 s renew deadline must ride out, while
//! against a 4 s one it leaves no margin for a loaded machine.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kbind_tests::faultproxy::{FaultProxy, Link, kubeconfig_through};
use kbind_tests::faults::Sides;
use kbind_tests::sharding::lab::{Lab, Lane, Setup};
use kbind_tests::sharding::leases::{holders, shard_leases};
use kbind_tests::sharding::logs::Event;
use kbind_tests::sharding::replicas::{DEFAULT_TIMINGS, HaMode, TIMINGS};
use kbind_tests::sharding::world::{
    LEASE_NAMESPACE, World, converged_everywhere, create_everywhere,
};
use kbind_tests::syncenv::wait_for;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

/// Instances per API.
const PER_API: usize = 2;
/// APIs bound, alternately through the two Connections.
const APIS: usize = 10;
/// The leader Lease (`--leader-election-id`'s default).
const LEADER_LEASE: &str = "konnector.kbind.io";
/// How long a takeover may take to be seen: the Lease expires, the other replica's next tick
/// takes it, and a busy machine adds its share.
const TAKEOVER: Duration = Duration::from_secs(30);
/// How long the provider copies are watched for an old spec after the last change.
const WATCHED: Duration = Duration::from_secs(10);

/// A pair of replicas, each reaching the consumer through its own proxy link.
struct Proxied {
    proxy: FaultProxy,
    links: BTreeMap<String, Link>,
}

impl Proxied {
    /// Starts a proxy with one link per identity; returns it and each identity's kubeconfig.
    async fn start(
        lane: Lane,
        name: &str,
        identities: &[&str],
    ) -> anyhow::Result<(Self, Vec<(String, Option<PathBuf>)>)> {
        let pair = lane.pair()?;
        let dir = pair.root().join("ha").join(name);
        let proxy = FaultProxy::start(&dir).await?;
        let server = pair.consumer.server();
        let upstream = server.trim_start_matches("https://");
        let mut links = BTreeMap::new();
        let mut replicas = Vec::new();
        for identity in identities {
            let link = proxy.link(identity, upstream).await?;
            let kubeconfig = kubeconfig_through(
                pair.consumer.admin().kubeconfig_path(),
                &link,
                &dir.join(format!("{identity}.kubeconfig")),
            )?;
            links.insert(identity.to_string(), link);
            replicas.push((identity.to_string(), Some(kubeconfig)));
        }
        Ok((Self { proxy, links }, replicas))
    }

    fn link(&self, identity: &str) -> anyhow::Result<&Link> {
        self.links
            .get(identity)
            .ok_or_else(|| anyhow::anyhow!("no link for {identity}"))
    }
}

/// The holder of the leader Lease now, if it is held.
async fn leader(consumer: &kube::Client) -> anyhow::Result<Option<String>> {
    let lease = Api::<Lease>::namespaced(consumer.clone(), LEASE_NAMESPACE)
        .get_opt(LEADER_LEASE)
        .await?;
    Ok(lease
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty()))
}

/// Sets `round` in the spec of every instance of `sides`.
async fn change_specs(sides: &[Sides], round: u32) -> anyhow::Result<()> {
    for s in sides {
        for i in 0..PER_API {
            let name = kbind_tests::faults::instance_name("w", i);
            let patch = json!({"spec": {"index": i, "round": round}});
            s.instances()
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
    }
    Ok(())
}

/// The `round` of every provider copy of `sides`, by `<api>/<name>`.
async fn provider_rounds(sides: &[Sides]) -> anyhow::Result<BTreeMap<String, Option<u64>>> {
    let mut rounds = BTreeMap::new();
    for s in sides {
        for copy in s.copies().list(&ListParams::default()).await?.items {
            let name = copy.metadata.name.clone().unwrap_or_default();
            let round = copy.data["spec"]["round"].as_u64();
            rounds.insert(format!("{}/{name}", s.api.name()), round);
        }
    }
    Ok(rounds)
}

/// Waits until every provider copy of `sides` carries `round`.
async fn copies_at(sides: &[Sides], round: u64) -> anyhow::Result<()> {
    wait_for(
        &format!("every provider copy at round {round}"),
        Duration::from_secs(90),
        || async {
            let rounds = provider_rounds(sides).await?;
            let behind: Vec<_> = rounds.iter().filter(|(_, r)| **r != Some(round)).collect();
            anyhow::ensure!(
                rounds.len() == sides.len() * PER_API && behind.is_empty(),
                "{} copies, behind: {behind:?}",
                rounds.len()
            );
            Ok(Some(()))
        },
    )
    .await
}

/// Edits every provider copy's spec on the provider (`round` 0, as nobody's spec), then
/// watches the copies for [`WATCHED`]: once back at `round`, none may show an older round.
async fn provider_edits_never_bring_back_an_old_spec(
    sides: &[Sides],
    round: u64,
) -> anyhow::Result<()> {
    for s in sides {
        for copy in s.copies().list(&ListParams::default()).await?.items {
            let name = copy.metadata.name.clone().unwrap_or_default();
            let patch = json!({"spec": {"round": 0}});
            s.copies()
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
    }
    copies_at(sides, round).await?;
    let began = std::time::Instant::now();
    while began.elapsed() < WATCHED {
        let rounds = provider_rounds(sides).await?;
        let old: Vec<_> = rounds
            .iter()
            .filter(|(_, r)| r.is_some_and(|r| r != 0 && r < round) || r.is_none())
            .collect();
        anyhow::ensure!(
            old.is_empty(),
            "provider copies back at an old spec: {old:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

/// Provider writes `identity` logged after `since`.
fn writes_after(lab: &Lab, identity: &str, since: Timestamp) -> anyhow::Result<Vec<String>> {
    let replica = lab.replicas.get(identity)?;
    Ok(replica
        .events()?
        .into_iter()
        .filter(|logged| logged.at > since)
        .filter_map(|logged| match logged.event {
            Event::Wrote(key) => Some(format!("{} {key}", logged.at)),
            _ => None,
        })
        .collect())
}

/// Fails unless `identity`'s syncers, stopped when its API shards lapsed, were all told to
/// stop within one stop grace of each other (together, not one after another), at least four.
fn lapsed_syncers_stopped_together(lab: &Lab, identity: &str) -> anyhow::Result<()> {
    let events = lab.replicas.get(identity)?.events()?;
    let lapsed = events
        .iter()
        .filter(|e| matches!(e.event, Event::Lost(_)))
        .map(|e| e.at)
        .min()
        .ok_or_else(|| anyhow::anyhow!("{identity} lost no shard"))?;
    let stopping: Vec<Timestamp> = events
        .iter()
        .filter(|e| e.at >= lapsed && matches!(e.event, Event::SyncerStopping(_)))
        .map(|e| e.at)
        .collect();
    anyhow::ensure!(
        stopping.len() >= 4,
        "{identity} stopped {} syncers after its shards lapsed; the test needs at least 4",
        stopping.len()
    );
    let (first, last) = (stopping.iter().min(), stopping.iter().max());
    let spread = match (first, last) {
        (Some(first), Some(last)) => last.duration_since(*first).unsigned_abs(),
        _ => Duration::ZERO,
    };
    // The stop grace is half the margin between the renew deadline and the Lease duration.
    let grace = (TIMINGS.lease_duration - TIMINGS.renew_deadline) / 2;
    anyhow::ensure!(
        spread < grace,
        "{identity}'s {} lapsed syncers were stopped over {spread:?}, one after another (grace {grace:?})",
        stopping.len()
    );
    Ok(())
}

/// Deletes the test's two Bindings and waits until no copy of `sides` is left on the provider.
async fn unbind_leaves_nothing(lab: &Lab, prefix: &str, sides: &[Sides]) -> anyhow::Result<()> {
    for connection in ["east", "west"] {
        let namespace = format!("{prefix}-{connection}");
        Api::<konnector::api::Binding>::namespaced(lab.consumer.clone(), &namespace)
            .delete("widgets", &DeleteParams::default())
            .await?;
    }
    wait_for(
        "no copy left on the provider",
        Duration::from_secs(120),
        || async {
            let left = provider_rounds(sides).await?;
            anyhow::ensure!(left.is_empty(), "left on the provider: {:?}", left.keys());
            Ok(Some(()))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_its_consumer_writes_nothing_after_the_takeover() -> anyhow::Result<()>
{
    let (proxied, replicas) =
        Proxied::start(Lane::Shared, "leader-cut", &["lcut-a", "lcut-b"]).await?;
    let binary = kbind_tests::konnector_binary!();
    let lab = Lab::start_in(
        Setup {
            world: World::of(APIS),
            mode: HaMode::Leader,
            ..Setup::default()
        },
        binary,
        "lcut",
        replicas,
    )
    .await?;
    let result = async {
        let sides = lab.world.bind(lab.pair, "lcut").await?;
        create_everywhere(&sides, 0..PER_API, Arc::default()).await?;
        converged_everywhere(&sides, PER_API).await?;
        change_specs(&sides, 1).await?;
        copies_at(&sides, 1).await?;

        let old = leader(&lab.consumer)
            .await?
            .ok_or_else(|| anyhow::anyhow!("nobody leads"))?;
        // Its consumer connections hang; the provider still answers it.
        proxied.proxy.hang(proxied.link(&old)?).await?;
        let new = wait_for("the standby to take the leader Lease", TAKEOVER, || async {
            Ok(leader(&lab.consumer).await?.filter(|h| *h != old))
        })
        .await?;
        let taken_at = Timestamp::now();
        println!("{old} cut off; {new} leads from {taken_at}");

        change_specs(&sides, 2).await?;
        copies_at(&sides, 2).await?;
        provider_edits_never_bring_back_an_old_spec(&sides, 2).await?;
        let stray = writes_after(&lab, &old, taken_at)?;
        anyhow::ensure!(
            stray.is_empty(),
            "{old} wrote to the provider after {new} took over:\n{}",
            stray.join("\n")
        );
        unbind_leaves_nothing(&lab, "lcut", &sides).await
    }
    .await;
    lab.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_replica_cut_off_from_its_consumer_writes_nothing_after_its_shards_move()
-> anyhow::Result<()> {
    let (proxied, replicas) =
        Proxied::start(Lane::Shared, "shard-cut", &["scut-a", "scut-b"]).await?;
    let binary = kbind_tests::konnector_binary!();
    let lab = Lab::start_in(
        Setup {
            world: World::of(APIS),
            mode: HaMode::Sharded,
            ..Setup::default()
        },
        binary,
        "scut",
        replicas,
    )
    .await?;
    let result = async {
        let sides = lab.world.bind(lab.pair, "scut").await?;
        create_everywhere(&sides, 0..PER_API, Arc::default()).await?;
        converged_everywhere(&sides, PER_API).await?;
        let before = lab.settled().await?;
        let cut = "scut-a";
        let victims = Lab::held_by(&before, cut);
        anyhow::ensure!(!victims.is_empty(), "{cut} holds no shard: {before:?}");
        proxied.proxy.hang(proxied.link(cut)?).await?;
        wait_for("the cut-off replica's shards to move", TAKEOVER, || async {
            let now = holders(&shard_leases(&lab.consumer, LEASE_NAMESPACE).await?);
            let still: Vec<_> = victims
                .iter()
                .filter(|key| now.get(*key).cloned().flatten().as_deref() == Some(cut))
                .collect();
            Ok(still.is_empty().then_some(()))
        })
        .await?;
        let taken_at = Timestamp::now();
        lapsed_syncers_stopped_together(&lab, cut)?;

        change_specs(&sides, 2).await?;
        copies_at(&sides, 2).await?;
        provider_edits_never_bring_back_an_old_spec(&sides, 2).await?;
        let stray = writes_after(&lab, cut, taken_at)?;
        anyhow::ensure!(
            stray.is_empty(),
            "{cut} wrote to the provider after its shards moved:\n{}",
            stray.join("\n")
        );
        lab.replicas.never_two_at_once()?;
        unbind_leaves_nothing(&lab, "scut", &sides).await
    }
    .await;
    lab.finish(result).await
}

/// Pauses the replica holding the work past its Lease while the specs keep changing, resumes
/// it, and checks from its log that it wrote nothing to the provider from the moment it
/// resumed until it held work again (under leader election it never does: it lost).
async fn a_paused_replica_writes_nothing_before_it_holds_again(
    mode: HaMode,
    name: &str,
) -> anyhow::Result<()> {
    let identities = [format!("{name}-a"), format!("{name}-b")];
    let replicas = identities.iter().map(|i| (i.clone(), None)).collect();
    let binary = kbind_tests::konnector_binary!();
    let mut lab = Lab::start_in(
        Setup {
            world: World::of(APIS),
            mode,
            ..Setup::default()
        },
        binary,
        name,
        replicas,
    )
    .await?;
    let result = async {
        let sides = lab.world.bind(lab.pair, name).await?;
        create_everywhere(&sides, 0..PER_API, Arc::default()).await?;
        converged_everywhere(&sides, PER_API).await?;
        let paused = match mode {
            HaMode::Leader => leader(&lab.consumer)
                .await?
                .ok_or_else(|| anyhow::anyhow!("nobody leads"))?,
            HaMode::Sharded => {
                lab.settled().await?;
                identities[0].clone()
            }
        };
        let paused_at = lab.replicas.get(&paused)?.pause()?;
        // Under load while it sleeps: the others take over and write the new specs.
        tokio::time::sleep(TIMINGS.lease_duration + TIMINGS.retry_period * 2).await;
        change_specs(&sides, 3).await?;
        copies_at(&sides, 3).await?;
        change_specs(&sides, 4).await?;
        let resumed_at = lab.replicas.get(&paused)?.resume()?;
        copies_at(&sides, 4).await?;
        provider_edits_never_bring_back_an_old_spec(&sides, 4).await?;
        let replica = lab.replicas.get(&paused)?;
        let events = replica.events()?;
        // When it held work again after resuming, if it did.
        let held_again = events
            .iter()
            .filter(|e| e.at > resumed_at && matches!(e.event, Event::Acquired(_)))
            .map(|e| e.at)
            .min();
        let stray: Vec<String> = events
            .iter()
            .filter(|e| e.at > paused_at && held_again.is_none_or(|held| e.at < held))
            .filter_map(|e| match &e.event {
                Event::Wrote(key) => Some(format!("{} {key}", e.at)),
                _ => None,
            })
            .collect();
        anyhow::ensure!(
            stray.is_empty(),
            "{paused} wrote to the provider after resuming, before it held work again:\n{}",
            stray.join("\n")
        );
        if mode == HaMode::Leader {
            let began = std::time::Instant::now();
            while !lab.replicas.get_mut(&paused)?.exited()? {
                anyhow::ensure!(
                    began.elapsed() < TAKEOVER,
                    "the paused leader {paused} still runs {TAKEOVER:?} after it lost its Lease"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        unbind_leaves_nothing(&lab, name, &sides).await
    }
    .await;
    lab.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_writes_nothing_after_resuming() -> anyhow::Result<()> {
    a_paused_replica_writes_nothing_before_it_holds_again(HaMode::Leader, "lpause").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_sharded_replica_writes_nothing_before_it_holds_again() -> anyhow::Result<()> {
    a_paused_replica_writes_nothing_before_it_holds_again(HaMode::Sharded, "spause").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_link_slowed_for_a_minute_loses_no_shard_and_restarts_no_syncer()
-> anyhow::Result<()> {
    /// The consumer's answer to each request of the slowed replica comes this much later.
    const LATENCY: Duration = Duration::from_millis(1200);
    /// How long the link stays slow.
    const SLOW_FOR: Duration = Duration::from_secs(60);
    let (proxied, replicas) = Proxied::start(Lane::Second, "slow", &["slow-a", "slow-b"]).await?;
    let binary = kbind_tests::konnector_binary!();
    let lab = Lab::start_in(
        Setup {
            world: World::of(APIS),
            mode: HaMode::Sharded,
            lane: Lane::Second,
            timings: DEFAULT_TIMINGS,
        },
        binary,
        "slow",
        replicas,
    )
    .await?;
    let result = async {
        let sides = lab.world.bind(lab.pair, "slow").await?;
        create_everywhere(&sides, 0..PER_API, Arc::default()).await?;
        converged_everywhere(&sides, PER_API).await?;
        let before = lab.settled().await?;
        let slowed = "slow-a";
        anyhow::ensure!(
            !Lab::held_by(&before, slowed).is_empty(),
            "{slowed} holds no shard: {before:?}"
        );
        let link = proxied.link(slowed)?;
        let from = Timestamp::now();
        proxied.proxy.slow(link, LATENCY).await?;
        tokio::time::sleep(SLOW_FOR).await;
        let until = Timestamp::now();
        proxied.proxy.heal(link).await?;
        for identity in ["slow-a", "slow-b"] {
            let moved: Vec<String> = lab
                .replicas
                .get(identity)?
                .events()?
                .into_iter()
                .filter(|e| e.at >= from && e.at <= until)
                .filter_map(|e| match e.event {
                    Event::Lost(key) => Some(format!("{} lost {key}", e.at)),
                    Event::Released(key) => Some(format!("{} released {key}", e.at)),
                    Event::SyncerStarted(key) => Some(format!("{} started syncer {key}", e.at)),
                    _ => None,
                })
                .collect();
            anyhow::ensure!(
                moved.is_empty(),
                "{identity} moved work while {slowed}'s consumer link was slow:\n{}",
                moved.join("\n")
            );
        }
        let after = lab.settled().await?;
        anyhow::ensure!(before == after, "the shards moved: {before:?} → {after:?}");
        unbind_leaves_nothing(&lab, "slow", &sides).await
    }
    .await;
    lab.finish(result).await
}
