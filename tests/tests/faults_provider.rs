//! Fault: the provider kube-apiserver (and its etcd) stopped while instances are created and
//! synced, then started on the same data, ports and credentials.
//!
//! - Under the sync machinery alone (5 s, 1 000 instances): the syncer's watches and writes
//!   ride out the outage on their own (error backoff, watch re-list), and both sides converge
//!   one to one.
//! - Under the real Connection controller (10 s, shorter than the grace period): the
//!   Connection stays Ready and engaged throughout, says `ProviderDegraded` while it lasts, and
//!   its syncer is never restarted (so the consumer is not listed again), nothing lost.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kbind_tests::faults::{Sides, restart};
use kbind_tests::fixtures::{condition, served_requests, start_konnector};
use kbind_tests::syncenv::{Scenario, TestApi};
use kbind_tests::testenv::ClusterPair;
use konnector::api::Connection;
use konnector::telemetry::{ApiLabels, metrics};
use kube::Api;
use tokio_util::sync::CancellationToken;

const INSTANCES: usize = 1000;
const STOP_AFTER: usize = 200;

#[test]
fn provider_outage_mid_sync_loses_and_duplicates_nothing() -> anyhow::Result<()> {
    Scenario::bound("outage").private_pair().run(async |s| {
        let sides = Sides::of(s);
        let outage = async || restart(&s.pair().provider, Duration::from_secs(5)).await;
        sides.fault_mid_sync(INSTANCES, STOP_AFTER, outage).await?;
        let provider = s.pair().provider.client().await?;
        Sides { provider, ..sides }.converged(INSTANCES).await
    })
}

/// The Connection's (Ready, ProviderDegraded) statuses, as seen every 200 ms.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_shorter_than_the_grace_period_keeps_the_connection_ready_and_engaged()
-> anyhow::Result<()> {
    const BLIP_INSTANCES: usize = 300;
    let pair = ClusterPair::start_private()?;
    let konnector = start_konnector(&pair.consumer)?;
    let result = pair.diagnose(async {
        let sides = Sides::on(&pair, TestApi::namespaced("blip.faults.kbind.io"), "blip").await?;
        sides.connect(&pair.provider, "provider").await?;
        let engaged = || konnector.engagements.get("provider").map(|e| e.epoch);
        let epoch = engaged();
        anyhow::ensure!(epoch.is_some(), "a Ready Connection is engaged");
        let api_name = sides.api.name();
        let starts = || syncer_starts(&api_name);
        let started = starts();
        let group = sides.api.group.clone();
        let lists = served_requests(&sides.consumer, "LIST", &group, "widgets").await?;

        let (seen, watching) = (Seen::default(), CancellationToken::new());
        let watcher = tokio::spawn(record_conditions(
            Api::all(sides.consumer.clone()),
            seen.clone(),
            watching.clone(),
        ));
        let outage = async || restart(&pair.provider, Duration::from_secs(10)).await;
        sides.fault_mid_sync(BLIP_INSTANCES, 50, outage).await?;
        let provider = pair.provider.client().await?;
        let sides = Sides { provider, ..sides };
        sides.converged(BLIP_INSTANCES).await?;
        kbind_tests::fixtures::wait_connection(&sides.consumer, "provider", "healed", |c| {
            condition(c, "ProviderDegraded").is_some_and(|c| c.status == "False")
        })
        .await?;
        watching.cancel();
        watcher.await??;

        let seen = seen.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
        let not_ready: Vec<_> = seen.iter().filter(|(ready, _)| ready != "True").collect();
        anyhow::ensure!(not_ready.is_empty(), "Ready flapped: {not_ready:?}");
        anyhow::ensure!(
            seen.iter().any(|(_, degraded)| degraded == "True"),
            "ProviderDegraded never said the provider was failing: {seen:?}"
        );
        anyhow::ensure!(engaged() == epoch, "the Connection was engaged again");
        anyhow::ensure!(starts() == started, "the syncer was started again");
        // kube-controller-manager's garbage collector lists every new resource once, on its own
        // 30 s discovery period: at most that one LIST may come from elsewhere.
        let after = served_requests(&sides.consumer, "LIST", &group, "widgets").await?;
        anyhow::ensure!(
            after - lists <= 1.0,
            "the consumer's instances were listed again ({lists} LIST requests before, {after} after)"
        );
        anyhow::Ok(())
    });
    let result = result.await;
    konnector.stop().await?;
    result
}

/// How many times the konnector of this process started a syncer for `api`.
fn syncer_starts(api: &str) -> u64 {
    let labels = ApiLabels { api: api.into() };
    metrics().syncer_starts.get_or_create(&labels).get()
}

/// Records the Connection's Ready and ProviderDegraded statuses until `stop`.
async fn record_conditions(
    connections: Api<Connection>,
    seen: Seen,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    while !stop.is_cancelled() {
        if let Some(connection) = connections.get_opt("provider").await? {
            let status = |type_| {
                condition(&connection, type_)
                    .map(|c| c.status.clone())
                    .unwrap_or_default()
            };
            let entry = (status("Ready"), status("ProviderDegraded"));
            seen.lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .push(entry);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}
