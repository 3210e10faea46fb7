//! The initial sync, observed through watches on both clusters (no polling lists that would
//! load the apiservers the konnector is measured on): when the first and the last provider
//! copy appear, and when the last instance says `Synced=True` for its current generation.
//! Also the requests both apiservers served meanwhile, from their own metrics.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kbind_tests::syncenv::TestApi;
use konnector::api::names::MANAGED_LABEL;
use kube::api::{DynamicObject, PartialObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::task::JoinHandle;

use crate::{NS, lock};

/// What the watches have seen so far: (API index, name) of provider copies and of instances
/// in sync.
#[derive(Default)]
struct Seen {
    copies: HashSet<(usize, String)>,
    synced: HashSet<(usize, String)>,
    first_copy: Option<Instant>,
    all_copies: Option<Instant>,
    all_synced: Option<Instant>,
}

/// When the initial sync's milestones were reached, measured from `started`.
pub struct Milestones {
    pub first_copy: Duration,
    pub all_copies: Duration,
    pub all_synced: Duration,
}

/// Watches on both clusters that note the initial sync's milestones; started before the
/// konnector so that their first list precedes its first write.
pub struct Progress {
    seen: Arc<Mutex<Seen>>,
    watches: Vec<JoinHandle<()>>,
    instances: usize,
}

impl Progress {
    /// Starts watching copies and instances of `apis` in the bench namespace.
    pub fn watch(
        apis: &[TestApi],
        consumer: &Client,
        provider: &Client,
        provider_ns: &str,
        instances: usize,
    ) -> Self {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let mut watches = Vec::new();
        for (k, api) in apis.iter().enumerate() {
            let copies = watcher(
                Api::<PartialObjectMeta<DynamicObject>>::namespaced_with(
                    provider.clone(),
                    provider_ns,
                    &api.resource(),
                ),
                watcher::Config::default().labels(MANAGED_LABEL),
            )
            .applied_objects();
            let seen_copies = seen.clone();
            watches.push(tokio::spawn(async move {
                let mut copies = std::pin::pin!(copies);
                while let Some(Ok(copy)) = copies.next().await {
                    let mut seen = lock(&seen_copies);
                    seen.copies.insert((k, copy.name_any()));
                    seen.first_copy.get_or_insert_with(Instant::now);
                    if seen.copies.len() == instances {
                        seen.all_copies.get_or_insert_with(Instant::now);
                    }
                }
            }));
            let objects =
                watcher(api.api(consumer, Some(NS)), watcher::Config::default()).applied_objects();
            let seen_synced = seen.clone();
            watches.push(tokio::spawn(async move {
                let mut objects = std::pin::pin!(objects);
                while let Some(Ok(obj)) = objects.next().await {
                    let mut seen = lock(&seen_synced);
                    if in_sync(&obj) {
                        seen.synced.insert((k, obj.name_any()));
                    } else {
                        seen.synced.remove(&(k, obj.name_any()));
                    }
                    if seen.synced.len() == instances {
                        seen.all_synced.get_or_insert_with(Instant::now);
                    }
                }
            }));
        }
        Self {
            seen,
            watches,
            instances,
        }
    }

    /// Waits until every copy exists and every instance is in sync, at most `timeout`.
    pub async fn finished(
        &self,
        started: Instant,
        timeout: Duration,
    ) -> anyhow::Result<Milestones> {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let seen = lock(&self.seen);
                if let (Some(first), Some(copies), Some(synced)) =
                    (seen.first_copy, seen.all_copies, seen.all_synced)
                {
                    return Ok(Milestones {
                        first_copy: first.saturating_duration_since(started),
                        all_copies: copies.saturating_duration_since(started),
                        all_synced: synced.saturating_duration_since(started),
                    });
                }
                if Instant::now() > deadline {
                    anyhow::bail!(
                        "initial sync not finished after {timeout:?}: {} of {} copies, {} instances in sync",
                        seen.copies.len(),
                        self.instances,
                        seen.synced.len()
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.watches.iter().for_each(JoinHandle::abort);
    }
}

/// Whether the instance's `Synced` condition is True for its current generation.
fn in_sync(obj: &DynamicObject) -> bool {
    obj.data["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c["type"] == "Synced"
                    && c["status"] == "True"
                    && c["observedGeneration"].as_i64() == obj.metadata.generation
            })
        })
}

/// Requests both apiservers have served so far, from their own `apiserver_request_total`,
/// keyed `<cluster> <verb> <resource>`; list and watch requests are left out (see the module
/// documentation).
pub async fn request_counts(
    consumer: &Client,
    provider: &Client,
) -> anyhow::Result<BTreeMap<String, f64>> {
    let mut counts = BTreeMap::new();
    for (cluster, client) in [("consumer", consumer), ("provider", provider)] {
        let request = http::Request::get("/metrics").body(Vec::new())?;
        let text = client.request_text(request).await?;
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once('}') else {
                continue;
            };
            let label = |name: &str| {
                labels
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                    .map(|v| v.trim_end_matches('"').to_string())
                    .unwrap_or_default()
            };
            let verb = label("verb");
            if matches!(verb.as_str(), "LIST" | "WATCH" | "WATCHLIST") {
                continue;
            }
            let value: f64 = value.trim().parse().unwrap_or(0.0);
            *counts
                .entry(format!("{cluster} {verb} {}", label("resource")))
                .or_insert(0.0) += value;
        }
    }
    Ok(counts)
}
