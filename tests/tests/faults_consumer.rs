//! Faults on the consumer side.
//!
//! - The consumer kube-apiserver (and its etcd) restarted under a running konnector stack,
//!   which is never restarted or re-engaged: instances created and changed after the restart
//!   reach the provider (only a recovered consumer watch can deliver them), and both sides
//!   converge one to one.
//! - The consumer answering the Connection's identity read with 503: shorter than the grace
//!   period it is ridden out as a provider blip is; longer, the reason names the consumer.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::Method;
use kbind_tests::faults::refusals::Refusals;
use kbind_tests::faults::{FAULT_WAIT, Sides, instance_name, restart};
use kbind_tests::fixtures::{self, condition, start_konnector_through};
use kbind_tests::syncenv::{Scenario, TestApi, merge, wait_for};
use kbind_tests::testenv::ClusterPair;
use konnector::api::{Connection, Reason};
use konnector::telemetry::{ApiLabels, WatchLabels, metrics};
use kube::Api;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const BEFORE: usize = 20;
const AFTER: usize = 20;

#[test]
fn consumer_restart_recovers_watches_without_restarting_the_konnector() -> anyhow::Result<()> {
    Scenario::bound("consumer-restart")
        .private_pair()
        .run(async |s| {
            let sides = Sides::of(s);
            sides.create_many("before", 0..BEFORE).await?;
            sides.wait_copies(BEFORE).await?;
            restart(&s.pair().consumer, Duration::from_secs(3)).await?;

            let consumer = s.pair().consumer.client().await?;
            let sides = Sides { consumer, ..sides };
            sides.create_many("after", 0..AFTER).await?;
            let (changed, spec) = (instance_name("before", 0), json!({ "index": "changed" }));
            merge(&sides.instances(), &changed, json!({ "spec": spec })).await?;
            wait_for("the change made after the restart", FAULT_WAIT, || async {
                let copy = s.copies().get_opt(&changed).await?;
                Ok(copy.filter(|o| o.data["spec"] == spec))
            })
            .await?;
            sides.converged(BEFORE + AFTER).await
        })
}

/// The Connection's (Ready status, Ready reason) as seen every 200 ms.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// A consumer that answers the Connection's identity read with 503 for 10 s (shorter than the
/// grace period) from a single konnector: the Connection stays Ready and engaged, its syncer is
/// neither restarted nor lists the consumer again, and instances made after the blip sync. The
/// same failure lasting past the grace period makes it not Ready with a reason naming the
/// consumer side, and it is Ready again once the consumer answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_identity_blip_is_ridden_out_and_a_long_one_names_the_consumer()
-> anyhow::Result<()> {
    const GRACE: Duration = Duration::from_secs(30);
    const BLIP: Duration = Duration::from_secs(10);
    const INSTANCES: usize = 10;
    let pair = ClusterPair::start_private()?;
    let refusals = Refusals::of(Method::GET, "/api/v1/namespaces/kube-system");
    let konnector = start_konnector_through(
        &pair.consumer,
        konnector::connection::Config {
            provider_grace_period: GRACE,
            ..fixtures::test_connection_config()
        },
        Some(refusals.clone()),
    )?;
    let result = pair.diagnose(async {
        let api = TestApi::namespaced("identity.faults.kbind.io");
        let sides = Sides::on(&pair, api, "identity").await?;
        sides.connect(&pair.provider, "provider").await?;
        sides.create_many("before", 0..INSTANCES).await?;
        sides.wait_copies(INSTANCES).await?;
        let engaged = || konnector.engagements.get("provider").map(|e| e.epoch);
        let epoch = engaged();
        anyhow::ensure!(epoch.is_some(), "a Ready Connection is engaged");
        let api_name = sides.api.name();
        let starts = || syncer_starts(&api_name);
        let started = starts();
        let lists = || watch_lists(&api_name, "consumer");
        wait_for("the consumer watch's first list", FAULT_WAIT, || async {
            Ok((lists() >= 1).then_some(()))
        })
        .await?;
        let listed = lists();

        let (seen, watching) = (Seen::default(), CancellationToken::new());
        let connections: Api<Connection> = Api::all(sides.consumer.clone());
        let watcher = tokio::spawn(record_ready(
            connections.clone(),
            seen.clone(),
            watching.clone(),
        ));
        let began = Instant::now();
        refusals.switch(true);
        tokio::time::sleep(BLIP).await;
        refusals.switch(false);
        let blip = began.elapsed();
        let refused = refusals.refused();
        anyhow::ensure!(
            refused > 0,
            "the consumer identity read was never refused during {blip:?}: nothing was tested"
        );
        sides.create_many("after", 0..INSTANCES).await?;
        sides.converged(2 * INSTANCES).await?;
        // A few more reconciles after the blip.
        tokio::time::sleep(Duration::from_secs(3)).await;
        watching.cancel();
        watcher.await??;
        let seen = seen
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .clone();
        let mut not_ready: Vec<_> = seen.iter().filter(|(ready, _)| ready != "True").collect();
        not_ready.dedup();
        anyhow::ensure!(
            not_ready.is_empty(),
            "Ready flapped during a {blip:?} consumer blip ({refused} identity reads refused): {not_ready:?}"
        );
        anyhow::ensure!(
            engaged() == epoch,
            "the Connection was engaged again after a {blip:?} consumer blip"
        );
        anyhow::ensure!(
            starts() == started,
            "the syncer was started again after a {blip:?} consumer blip"
        );
        let after = lists();
        anyhow::ensure!(
            after == listed,
            "the consumer's instances were listed again ({listed} full lists before, {after} after a {blip:?} blip)"
        );

        // Past the grace period: not Ready, and the reason says which side failed.
        refusals.switch(true);
        let failed = wait_for(
            "Ready=False, ConsumerUnreachable",
            GRACE + FAULT_WAIT,
            || async {
                let connection = connections.get("provider").await?;
                let ready = condition(&connection, "Ready");
                let named = ready.is_some_and(|c| {
                    c.status == "False" && c.reason == Reason::ConsumerUnreachable.as_str()
                });
                Ok(named.then_some(connection))
            },
        )
        .await;
        refusals.switch(false);
        let failed = failed?;
        let connected = condition(&failed, "Connected");
        anyhow::ensure!(
            connected.is_some_and(|c| c.status == "False"
                && c.reason == Reason::ConsumerUnreachable.as_str()
                && c.message.starts_with("consumer:")),
            "Connected does not name the consumer: {connected:?}"
        );
        anyhow::ensure!(
            engaged().is_none(),
            "a failure past the grace period disengages"
        );
        wait_for("Ready again once the consumer answers", FAULT_WAIT, || async {
            let connection = connections.get("provider").await?;
            Ok(condition(&connection, "Ready")
                .is_some_and(|c| c.status == "True")
                .then_some(()))
        })
        .await
    });
    let result = result.await;
    konnector.stop().await?;
    result
}

/// Records the Connection's Ready status and reason until `stop`.
async fn record_ready(
    connections: Api<Connection>,
    seen: Seen,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    while !stop.is_cancelled() {
        if let Some(connection) = connections.get_opt("provider").await? {
            let ready = condition(&connection, "Ready");
            let entry = (
                ready.map(|c| c.status.clone()).unwrap_or_default(),
                ready.map(|c| c.reason.clone()).unwrap_or_default(),
            );
            seen.lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .push(entry);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// How many full lists the konnector of this process made of `api` on `cluster`.
fn watch_lists(api: &str, cluster: &'static str) -> u64 {
    let labels = WatchLabels {
        api: api.into(),
        cluster,
    };
    metrics().watch_lists.get_or_create(&labels).get()
}

/// How many times the konnector of this process started a syncer for `api`.
fn syncer_starts(api: &str) -> u64 {
    let labels = ApiLabels { api: api.into() };
    metrics().syncer_starts.get_or_create(&labels).get()
}
