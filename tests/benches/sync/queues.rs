//! The konnector's work queues during a phase of the bench, from its own `kbind_workqueue_*`
//! metrics: per syncer (API) the deepest queue seen (sampled every 250 ms), the keys queued,
//! and how long they waited (mean, and the histogram bucket that holds the p99). A latency
//! figure printed beside these says whether its tail was waiting in the queue or elsewhere.

use std::collections::BTreeMap;
use std::time::Duration;

use kbind_tests::faults::process::KonnectorProcess;

/// How often the queue depth is sampled.
const SAMPLE: Duration = Duration::from_millis(250);

/// One syncer's queue over a phase.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct QueueFigures {
    /// `<plural>.<group>` of the syncer's API.
    pub api: String,
    /// Deepest the queue was at a sample.
    pub max_depth: f64,
    /// Events that queued a key (`kbind_workqueue_adds_total`).
    pub adds: f64,
    /// Keys that left the queue for their reconcile.
    pub waits: f64,
    pub mean_wait_ms: f64,
    /// Upper bound of the histogram bucket holding the p99 wait (the buckets grow ×4).
    pub p99_wait_at_most_ms: f64,
}

/// What one scrape of `/metrics` says of every work queue, keyed by API.
#[derive(Default)]
struct Scrape {
    depth: BTreeMap<String, f64>,
    adds: BTreeMap<String, f64>,
    /// Cumulative bucket counts as (upper bound in seconds, count), in exposition order.
    buckets: BTreeMap<String, Vec<(f64, f64)>>,
    sum: BTreeMap<String, f64>,
    count: BTreeMap<String, f64>,
}

impl Scrape {
    async fn take(konnector: &KonnectorProcess) -> anyhow::Result<Self> {
        Ok(Self::parse(&konnector.metrics().await?))
    }

    fn parse(text: &str) -> Self {
        let mut scrape = Self::default();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("kbind_workqueue_") else {
                continue;
            };
            let Some((name, rest)) = rest.split_once('{') else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once('}') else {
                continue;
            };
            let Ok(value) = value.trim().parse::<f64>() else {
                continue;
            };
            let label = |key: &str| {
                labels
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(&format!("{key}=\"")))
                    .map(|v| v.trim_end_matches('"').to_string())
            };
            let Some(api) = label("api") else {
                continue;
            };
            match name {
                "depth" => {
                    scrape.depth.insert(api, value);
                }
                "adds_total" => {
                    scrape.adds.insert(api, value);
                }
                "queue_duration_seconds_sum" => {
                    scrape.sum.insert(api, value);
                }
                "queue_duration_seconds_count" => {
                    scrape.count.insert(api, value);
                }
                "queue_duration_seconds_bucket" => {
                    let le = match label("le").as_deref() {
                        Some("+Inf") | None => f64::INFINITY,
                        Some(le) => le.parse().unwrap_or(f64::INFINITY),
                    };
                    scrape.buckets.entry(api).or_default().push((le, value));
                }
                _ => {}
            }
        }
        scrape
    }
}

/// Reconciles the konnector's syncers have started since it started: the keys their queues
/// handed out, over every API.
pub async fn reconciles_started(konnector: &KonnectorProcess) -> anyhow::Result<f64> {
    Ok(Scrape::take(konnector).await?.count.values().sum())
}

/// Runs `phase` while sampling the konnector's work queues; returns its output and each
/// queue's figures over the phase.
pub async fn during<T>(
    konnector: &KonnectorProcess,
    phase: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<(T, Vec<QueueFigures>)> {
    let before = Scrape::take(konnector).await?;
    let mut max_depth: BTreeMap<String, f64> = before.depth.clone();
    let mut phase = std::pin::pin!(phase);
    let mut ticker = tokio::time::interval(SAMPLE);
    let output = loop {
        tokio::select! {
            output = &mut phase => break output?,
            _ = ticker.tick() => {
                // A scrape that fails (the konnector busy) is a sample missed, not an error.
                if let Ok(now) = Scrape::take(konnector).await {
                    for (api, depth) in now.depth {
                        let max = max_depth.entry(api).or_default();
                        *max = max.max(depth);
                    }
                }
            }
        }
    };
    let after = Scrape::take(konnector).await?;
    Ok((output, figures(&before, &after, &max_depth)))
}

/// Each API's queue between two scrapes.
fn figures(
    before: &Scrape,
    after: &Scrape,
    max_depth: &BTreeMap<String, f64>,
) -> Vec<QueueFigures> {
    let delta = |map: &BTreeMap<String, f64>, then: &BTreeMap<String, f64>, api: &str| {
        map.get(api).copied().unwrap_or(0.0) - then.get(api).copied().unwrap_or(0.0)
    };
    after
        .count
        .keys()
        .map(|api| {
            let waits = delta(&after.count, &before.count, api);
            let sum = delta(&after.sum, &before.sum, api);
            let empty = Vec::new();
            let then = before.buckets.get(api).unwrap_or(&empty);
            let p99 = after
                .buckets
                .get(api)
                .unwrap_or(&empty)
                .iter()
                .map(|(le, n)| {
                    let earlier = then.iter().find(|(l, _)| l == le).map_or(0.0, |(_, n)| *n);
                    (*le, n - earlier)
                })
                .find(|(_, n)| waits > 0.0 && *n >= 0.99 * waits)
                .map_or(f64::NAN, |(le, _)| le * 1000.0);
            QueueFigures {
                api: api.clone(),
                max_depth: max_depth.get(api).copied().unwrap_or(0.0),
                adds: delta(&after.adds, &before.adds, api),
                waits,
                mean_wait_ms: if waits > 0.0 {
                    sum * 1000.0 / waits
                } else {
                    f64::NAN
                },
                p99_wait_at_most_ms: p99,
            }
        })
        .collect()
}
