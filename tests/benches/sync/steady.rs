//! Spec updates to random instances at a fixed rate, and the latency of each update reaching
//! the provider copy and of the provider's status reaching the consumer. The bench runs it
//! twice: over the first minute after the initial sync, then as the steady state.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use kbind_tests::faults::instance_name;
use kbind_tests::syncenv::{TestApi, wait_for};
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::Semaphore;

use crate::report::{Report, percentile_ms};
use crate::{Config, NS, lock};

/// How long a phase waits for its watches' initial lists.
const LIST_WAIT: Duration = Duration::from_secs(600);

/// The objects a watch applies, with a permit added to `listed` when its initial list is done.
fn listed_then_applied<K>(
    events: impl Stream<Item = watcher::Result<watcher::Event<K>>>,
    listed: Arc<Semaphore>,
) -> impl Stream<Item = watcher::Result<K>> {
    events.filter_map(move |event| {
        let object = match event {
            Ok(watcher::Event::InitDone) => {
                listed.add_permits(1);
                None
            }
            Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => Some(Ok(obj)),
            Ok(watcher::Event::Delete(_) | watcher::Event::Init) => None,
            Err(error) => Some(Err(error)),
        };
        futures::future::ready(object)
    })
}

/// Pending writes: (api index, name) → (sequence number, when it was written).
type Pending = Arc<Mutex<HashMap<(usize, String), (u64, Instant)>>>;

/// The latencies of one phase of updates.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Latencies {
    pub updates: usize,
    pub spec_p50_ms: f64,
    pub spec_p99_ms: f64,
    pub status_p50_ms: f64,
    pub status_p99_ms: f64,
}

/// Updates random instances at `update_rate` for `period`; watches measure when the provider
/// copy shows each spec update, and (after the bench writes the provider status) when the
/// consumer instance shows that status.
pub async fn updates(
    config: &Config,
    apis: &[TestApi],
    consumer: &Client,
    provider: &Client,
    period: Duration,
) -> anyhow::Result<Latencies> {
    let spec_pending: Pending = Arc::default();
    let status_pending: Pending = Arc::default();
    let spec_samples = Arc::new(Mutex::new(Vec::new()));
    let status_samples = Arc::new(Mutex::new(Vec::new()));
    let mut watches = Vec::new();
    // One permit per watch once its initial list is done.
    let listed = Arc::new(Semaphore::new(0));
    for (k, api) in apis.iter().enumerate() {
        // Provider side: the copy reflects a spec update → record, then write its status.
        let (pending, samples, next) = (
            spec_pending.clone(),
            spec_samples.clone(),
            status_pending.clone(),
        );
        let copies = api.api(provider, Some(&config.provider_ns()));
        let stream = listed_then_applied(
            watcher(api.all(provider), watcher::Config::default()),
            listed.clone(),
        );
        watches.push(tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(obj)) = stream.next().await {
                let Some(seq) = obj.data["spec"]["seq"].as_u64() else {
                    continue;
                };
                if let Some(latency) = take_if_reached(&pending, k, &obj.name_any(), seq) {
                    lock(&samples).push(latency);
                    lock(&next).insert((k, obj.name_any()), (seq, Instant::now()));
                    let body = json!({ "status": { "seq": seq } });
                    let _ = copies
                        .patch_status(
                            &obj.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(&body),
                        )
                        .await;
                }
            }
        }));
        // Consumer side: the instance shows the provider status.
        let (pending, samples) = (status_pending.clone(), status_samples.clone());
        let stream = listed_then_applied(
            watcher(api.all(consumer), watcher::Config::default()),
            listed.clone(),
        );
        watches.push(tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(obj)) = stream.next().await {
                if let Some(seq) = obj.data["status"]["seq"].as_u64()
                    && let Some(latency) = take_if_reached(&pending, k, &obj.name_any(), seq)
                {
                    lock(&samples).push(latency);
                }
            }
        }));
    }
    // No update is sent before every watch has listed: at 100 000 instances the lists take
    // the bench seconds, and an update sent meanwhile would be timed with them.
    let listing = Instant::now();
    let watch_count = u32::try_from(watches.len())?;
    tokio::time::timeout(LIST_WAIT, listed.acquire_many(watch_count))
        .await
        .map_err(|_| anyhow::anyhow!("the phase's watches did not list within {LIST_WAIT:?}"))??
        .forget();
    eprintln!(
        "bench: the phase's {watch_count} watches listed in {:.1} s",
        listing.elapsed().as_secs_f64()
    );

    let updates = (config.update_rate * period.as_secs_f64()) as usize;
    let interval = Duration::from_secs_f64(1.0 / config.update_rate);
    let mut ticker = tokio::time::interval(interval);
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    for seq in 1..=updates as u64 {
        ticker.tick().await;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let i = (rng % config.instances as u64) as usize;
        let (k, name) = (i % config.apis, instance_name("w", i));
        lock(&spec_pending).insert((k, name.clone()), (seq, Instant::now()));
        let body = json!({ "spec": { "seq": seq } });
        apis[k]
            .api(consumer, Some(NS))
            .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await?;
    }
    // Bounded drain: at most 30 s for the last updates to arrive.
    let _ = wait_for(
        "steady-state updates delivered",
        Duration::from_secs(30),
        || async {
            Ok((lock(&spec_pending).is_empty() && lock(&status_pending).is_empty()).then_some(()))
        },
    )
    .await;
    watches.iter().for_each(|w| w.abort());
    let mut spec = lock(&spec_samples).clone();
    let mut status = lock(&status_samples).clone();
    Ok(Latencies {
        updates,
        spec_p50_ms: percentile_ms(&mut spec, 0.50),
        spec_p99_ms: percentile_ms(&mut spec, 0.99),
        status_p50_ms: percentile_ms(&mut status, 0.50),
        status_p99_ms: percentile_ms(&mut status, 0.99),
    })
}

/// The steady phase's figures in `report`, with their ratios to the baselines.
pub fn steady_figures(report: &mut Report, steady: &Latencies, rate: f64) {
    report.steady_updates = steady.updates;
    report.steady_update_rate_per_s = rate;
    report.spec_latency_p50_ms = steady.spec_p50_ms;
    report.spec_latency_p99_ms = steady.spec_p99_ms;
    report.status_latency_p50_ms = steady.status_p50_ms;
    report.status_latency_p99_ms = steady.status_p99_ms;
    report.spec_latency_p50_ratio_to_round_trip =
        report.spec_latency_p50_ms / report.baseline_round_trip_p50_ms;
    report.status_latency_p50_ratio_to_round_trip =
        report.status_latency_p50_ms / report.baseline_round_trip_p50_ms;
    report.spec_latency_p99_ratio_to_round_trip =
        report.spec_latency_p99_ms / report.baseline_round_trip_p99_ms;
    report.status_latency_p99_ratio_to_round_trip =
        report.status_latency_p99_ms / report.baseline_round_trip_p99_ms;
    report.two_watch_round_trips_p99_ms = 2.0 * report.baseline_watch_round_trip_p99_ms;
}

/// Removes and returns the latency of a pending write once `seq` (or a later one) is seen.
fn take_if_reached(pending: &Pending, k: usize, name: &str, seq: u64) -> Option<Duration> {
    let mut pending = lock(pending);
    let key = (k, name.to_string());
    match pending.get(&key) {
        Some((wanted, at)) if seq >= *wanted => {
            let latency = at.elapsed();
            pending.remove(&key);
            Some(latency)
        }
        _ => None,
    }
}
