//! The physical limit the konnector is held against, measured on the same apiservers and with
//! the same parallelism: plain server-side apply of N objects into the provider, its
//! round-trip, and an apply until a watch shows it. The other limit, the writes a first sync
//! requires, runs as a process of its own (`floor.rs`).

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kbind_tests::faults::instance_name;
use kbind_tests::syncenv::{TestApi, ensure_namespace};
use kube::Api;
use kube::Client;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use crate::report::{Report, percentile_ms};
use crate::{Config, NS};

/// Plain server-side apply into the provider: throughput at `Config::in_flight`, then sequential
/// round-trips of one object.
pub async fn baseline(
    config: &Config,
    provider: &Client,
    report: &mut Report,
) -> anyhow::Result<()> {
    let api = TestApi::namespaced("baseline.bench.kbind.io");
    api.install_on_provider(provider).await?;
    ensure_namespace(provider, NS).await?;
    let objects = api.api(provider, Some(NS));
    let params = PatchParams::apply("kbind-bench").force();
    let started = Instant::now();
    futures::stream::iter(0..config.instances)
        .map(|i| {
            let (objects, params, api) = (&objects, &params, &api);
            async move {
                let name = instance_name("b", i);
                let body = api.object(Some(NS), &name, json!({ "seq": 0 }));
                objects.patch(&name, params, &Patch::Apply(&body)).await
            }
        })
        .buffer_unordered(config.in_flight())
        .try_collect::<Vec<_>>()
        .await?;
    report.baseline_apply_objects_per_s = config.instances as f64 / started.elapsed().as_secs_f64();
    let mut samples = Vec::with_capacity(config.round_trips);
    for seq in 0..config.round_trips {
        let body = api.object(Some(NS), "round-trip", json!({ "seq": seq }));
        let started = Instant::now();
        objects
            .patch("round-trip", &params, &Patch::Apply(&body))
            .await?;
        samples.push(started.elapsed());
    }
    report.baseline_round_trip_p50_ms = percentile_ms(&mut samples, 0.50);
    report.baseline_round_trip_p99_ms = percentile_ms(&mut samples, 0.99);
    let mut seen = watch_round_trips(&objects, &api, &params, config.round_trips).await?;
    report.baseline_watch_round_trip_p50_ms = percentile_ms(&mut seen, 0.50);
    report.baseline_watch_round_trip_p99_ms = percentile_ms(&mut seen, 0.99);
    Ok(())
}

/// Sequential applies of one object, each timed until a watch on the same apiserver shows
/// it: the hop a spec change makes twice on its way through the konnector (the konnector's
/// consumer watch, then the watch that sees the provider copy), which a plain apply round
/// trip does not include.
async fn watch_round_trips(
    objects: &Api<DynamicObject>,
    api: &TestApi,
    params: &PatchParams,
    round_trips: usize,
) -> anyhow::Result<Vec<Duration>> {
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let events = watcher(
        objects.clone(),
        watcher::Config::default().fields("metadata.name=round-trip"),
    )
    .applied_objects();
    let watch = tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        while let Some(Ok(obj)) = events.next().await {
            if let Some(seq) = obj.data["spec"]["seq"].as_u64() {
                let _ = seen_tx.send(seq);
            }
        }
    });
    // The object as the watch first lists it.
    tokio::time::timeout(WATCH_WAIT, seen.recv()).await?;
    let mut samples = Vec::with_capacity(round_trips);
    for seq in (0..round_trips as u64).map(|i| 1_000_000 + i) {
        let body = api.object(Some(NS), "round-trip", json!({ "seq": seq }));
        let started = Instant::now();
        objects
            .patch("round-trip", params, &Patch::Apply(&body))
            .await?;
        loop {
            match tokio::time::timeout(WATCH_WAIT, seen.recv()).await? {
                Some(shown) if shown == seq => break,
                Some(_) => continue,
                None => anyhow::bail!("the round-trip watch ended"),
            }
        }
        samples.push(started.elapsed());
    }
    watch.abort();
    Ok(samples)
}

/// How long a watch may take to show one write before the bench gives up.
const WATCH_WAIT: Duration = Duration::from_secs(30);
