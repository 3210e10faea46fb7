//! Many instances: 1 000 instances reach the provider through the syncer's work queue, which
//! drains, and the test reports the time taken;
//! instances in sync cost no API request when nothing changes, however often they resync, nor
//! do the binding's periodic reconciles read its CRDs again; a
//! watch that cannot resume (`410 Gone`) lists again at a few thousand instances and neither
//! loses an instance nor writes an unchanged one again.

use std::time::{Duration, Instant};

use kbind_tests::faults::{Sides, force_relists, instance_name};
use kbind_tests::fixtures::served_requests;
use kbind_tests::syncenv::{Scenario, WAIT, wait_for};
use konnector::telemetry::{ApiLabels, WatchLabels, WorkQueueLabels, metrics};
use serde_json::json;

const INSTANCES: usize = 1000;

#[test]
fn thousand_instances_reach_the_provider() -> anyhow::Result<()> {
    Scenario::bound("scale").run(async |s| {
        let sides = Sides::of(s);
        let start = Instant::now();
        sides.create_many("w", 0..INSTANCES).await?;
        let created = start.elapsed().as_secs_f64();
        sides.wait_copies(INSTANCES).await?;
        let synced = start.elapsed().as_secs_f64();
        let rate = INSTANCES as f64 / synced;
        println!(
            "{INSTANCES} instances: created on the consumer in {created:.1}s, all on the \
             provider after {synced:.1}s ({rate:.0} instances/s)"
        );
        let last = INSTANCES - 1;
        let spec = json!({ "index": last });
        s.copy_with_spec(&instance_name("w", last), spec).await?;
        // Every instance went through the syncer's queue, and the queue drains.
        let queue = WorkQueueLabels {
            controller: "sync",
            api: s.api.name(),
        };
        let adds = metrics().workqueue_adds.get_or_create(&queue).get();
        anyhow::ensure!(
            adds >= INSTANCES as u64,
            "{adds} keys queued for {INSTANCES} instances"
        );
        let depth = || metrics().workqueue_depth.get_or_create(&queue).get();
        wait_for("the syncer's queue drained", WAIT, || async {
            Ok((depth() == 0).then_some(()))
        })
        .await?;
        println!("work queue: {adds} adds, drained");
        Ok(())
    })
}

/// Requests for `api`'s objects that both apiservers served, reads and writes alike; lists
/// and watches (the informers' own) left out.
async fn object_requests(s: &Scenario) -> anyhow::Result<f64> {
    let mut total = 0.0;
    for client in [&s.consumer, &s.provider] {
        for verb in ["GET", "POST", "PUT", "PATCH", "DELETE", "APPLY"] {
            total += served_requests(client, verb, &s.api.group, "widgets").await?;
        }
    }
    Ok(total)
}

#[test]
fn instances_in_sync_cost_no_request_when_idle() -> anyhow::Result<()> {
    const IDLE: usize = 100;
    Scenario::bound("scale-idle").run(async |s| {
        // As the Connection controller engages: with the provider schema's revision, which
        // tells an unchanged schema without reading it again.
        s.stack.engage_with_revisions(&s.apis()).await?;
        let sides = Sides::of(s);
        sides.create_many("w", 0..IDLE).await?;
        sides.converged(IDLE).await?;
        // Each instance's Synced=True is written once it is in sync; let the last ones land.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (requests, checks) = (object_requests(s).await?, in_sync_checks(&s.api.name()));
        let crd_reads = consumer_crd_reads(s).await?;
        // The test's resync interval is 5 s: every instance comes back at least twice.
        tokio::time::sleep(Duration::from_secs(13)).await;
        let resynced = in_sync_checks(&s.api.name()) - checks;
        anyhow::ensure!(
            resynced >= IDLE as u64,
            "only {resynced} resyncs of {IDLE} instances: the idle phase tested nothing"
        );
        let sent = object_requests(s).await? - requests;
        anyhow::ensure!(sent == 0.0, "{sent} requests for {resynced} idle resyncs");
        // The binding's periodic reconciles (every 2 s here) read its installed CRD from the
        // konnector's watch, not from the cluster.
        let read = consumer_crd_reads(s).await? - crd_reads;
        anyhow::ensure!(
            read == 0.0,
            "{read} reads of consumer CRDs while nothing changed"
        );
        println!("{resynced} resyncs of {IDLE} idle instances sent no request");
        Ok(())
    })
}

/// Single-object reads of consumer CRDs that the consumer's apiserver served.
async fn consumer_crd_reads(s: &Scenario) -> anyhow::Result<f64> {
    served_requests(
        &s.consumer,
        "GET",
        "apiextensions.k8s.io",
        "customresourcedefinitions",
    )
    .await
}

/// Instance reconciles of `api` that found its copy in sync, in this process.
fn in_sync_checks(api: &str) -> u64 {
    let labels = ApiLabels { api: api.into() };
    metrics().in_sync_checks.get_or_create(&labels).get()
}

/// Full lists the konnector's watches of `api` made on `cluster`, in this process.
fn watch_lists(api: &str, cluster: &'static str) -> u64 {
    let labels = WatchLabels {
        api: api.into(),
        cluster,
    };
    metrics().watch_lists.get_or_create(&labels).get()
}

#[test]
fn a_forced_relist_loses_nothing_and_writes_nothing_again() -> anyhow::Result<()> {
    const MANY: usize = 2000;
    Scenario::bound("scale-relist")
        .private_pair()
        .run(async |s| {
            let sides = Sides::of(s);
            sides.create_many("w", 0..MANY).await?;
            sides.converged(MANY).await?;
            tokio::time::sleep(Duration::from_secs(1)).await;
            let api = s.api.name();
            let lists = |cluster| watch_lists(&api, cluster);
            let (consumer_lists, provider_lists) = (lists("consumer"), lists("provider"));
            // Other writes move both clusters' revisions past what the syncers' quiet watches
            // last saw; restarted apiservers then hold no events that old (`410 Gone`), so
            // both watches must list everything again.
            force_relists(s.pair(), Duration::from_secs(2)).await?;
            let requests = object_requests(s).await?;
            kbind_tests::syncenv::wait_for(
                "both watches listed again",
                Duration::from_secs(90),
                || async {
                    let again =
                        lists("consumer") > consumer_lists && lists("provider") > provider_lists;
                    Ok(again.then_some(()))
                },
            )
            .await?;
            // Let the re-listed objects' reconciles run.
            tokio::time::sleep(Duration::from_secs(4)).await;
            let sent = object_requests(s).await? - requests;
            anyhow::ensure!(
                sent == 0.0,
                "{sent} object requests after re-lists of {MANY} unchanged instances"
            );
            sides.converged(MANY).await?;
            println!(
                "re-lists: consumer {consumer_lists} → {}, provider {provider_lists} → {}; \
                 {MANY} instances, none lost, nothing written",
                lists("consumer"),
                lists("provider")
            );
            Ok(())
        })
}
