//! Work-queue metrics for a syncer's controller. kube-runtime's `Controller` keeps its queue to
//! itself, so the syncer counts at the queue's two edges: a key enters when an event triggers
//! it (the consumer watch, a provider event, a selection change, the resync sweep, a wake) and
//! leaves when its reconcile starts. Like the controller's scheduler, a key triggered again
//! before its reconcile starts is one entry, timed from its first trigger. Retries scheduled by
//! the error policy are counted as retries, not as entries: they wait out a backoff on purpose.
//!
//! ```text
//! trigger ─▶ added(key) ── depth +1, adds +1 (a key already waiting: adds +1 only)
//!                │
//! reconcile ─▶ started(key) ── depth −1, queue_duration observes now − first trigger
//! failure ───▶ retried() ── retries +1
//! ```

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use super::labels::WorkQueueLabels;
use super::metrics::metrics;

/// A waiting key: namespace (none for a cluster-scoped object) and name.
type Key = (Option<Box<str>>, Box<str>);

/// One controller's queue, as seen from its edges.
#[derive(Debug)]
pub struct WorkQueue {
    waiting: Mutex<HashMap<Key, Instant>>,
    depth: Gauge,
    adds: Counter,
    retries: Counter,
    duration: Histogram,
}

impl WorkQueue {
    /// The queue of `controller` for `api`; several syncers of one API (one per Connection)
    /// add to the same series.
    pub fn new(controller: &'static str, api: &str) -> Self {
        let labels = WorkQueueLabels {
            controller,
            api: api.to_string(),
        };
        let m = metrics();
        Self {
            waiting: Mutex::default(),
            depth: m.workqueue_depth.get_or_create(&labels).clone(),
            adds: m.workqueue_adds.get_or_create(&labels).clone(),
            retries: m.workqueue_retries.get_or_create(&labels).clone(),
            duration: m.workqueue_duration.get_or_create(&labels).clone(),
        }
    }

    /// An event triggered the object `namespace/name`.
    pub fn added(&self, namespace: Option<&str>, name: &str) {
        self.adds.inc();
        let key = (namespace.map(Box::from), Box::from(name));
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        if let std::collections::hash_map::Entry::Vacant(entry) = waiting.entry(key) {
            entry.insert(Instant::now());
            self.depth.inc();
        }
    }

    /// The reconcile of `namespace/name` starts: it leaves the queue, if an event put it there.
    pub fn started(&self, namespace: Option<&str>, name: &str) {
        let key = (namespace.map(Box::from), Box::from(name));
        let since = self
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&key);
        if let Some(since) = since {
            self.depth.dec();
            self.duration.observe(since.elapsed().as_secs_f64());
        }
    }

    /// An event triggered the object `meta` names.
    pub fn added_object(&self, meta: &ObjectMeta) {
        self.added(
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        );
    }

    /// The reconcile of the object `meta` names starts.
    pub fn started_object(&self, meta: &ObjectMeta) {
        self.started(
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        );
    }

    /// A reconcile failed and is scheduled again.
    pub fn retried(&self) {
        self.retries.inc();
    }

    /// How many keys wait.
    pub fn len(&self) -> usize {
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no key waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for WorkQueue {
    /// A stopped syncer's waiting keys leave the shared depth with it.
    fn drop(&mut self) {
        let left = self.len();
        self.depth.dec_by(i64::try_from(left).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(api: &str) -> WorkQueueLabels {
        WorkQueueLabels {
            controller: "sync",
            api: api.to_string(),
        }
    }

    #[test]
    fn a_key_triggered_twice_before_its_reconcile_waits_once() {
        let api = "twice.workqueue.test";
        let queue = WorkQueue::new("sync", api);
        queue.added(Some("ns"), "a");
        queue.added(Some("ns"), "a");
        queue.added(None, "a");
        let m = metrics();
        assert_eq!(m.workqueue_adds.get_or_create(&series(api)).get(), 3);
        assert_eq!(m.workqueue_depth.get_or_create(&series(api)).get(), 2);
        queue.started(Some("ns"), "a");
        assert_eq!(m.workqueue_depth.get_or_create(&series(api)).get(), 1);
        assert_eq!(queue.len(), 1);
    }

    #[test]
    fn a_reconcile_no_event_queued_leaves_the_depth_alone() {
        let api = "requeued.workqueue.test";
        let queue = WorkQueue::new("sync", api);
        queue.started(Some("ns"), "scheduled");
        queue.retried();
        let m = metrics();
        assert_eq!(m.workqueue_depth.get_or_create(&series(api)).get(), 0);
        assert_eq!(m.workqueue_retries.get_or_create(&series(api)).get(), 1);
    }

    #[test]
    fn a_dropped_queue_takes_its_waiting_keys_out_of_the_shared_depth() {
        let api = "dropped.workqueue.test";
        let kept = WorkQueue::new("sync", api);
        kept.added(Some("ns"), "kept");
        let stopped = WorkQueue::new("sync", api);
        stopped.added(Some("ns"), "x");
        stopped.added(Some("ns"), "y");
        let depth = || metrics().workqueue_depth.get_or_create(&series(api)).get();
        assert_eq!(depth(), 3);
        drop(stopped);
        assert_eq!(depth(), 1);
    }
}
