//! A syncer's work queue, in front of kube-runtime's applier. Every trigger (the consumer
//! watch, a provider event, a selection change, the resync sweep, a wake) adds its object's
//! key; a key triggered again before its reconcile starts is one entry, timed from its first
//! trigger. The applier is fed the waiting keys oldest first, and only as fast as their
//! reconciles start: at most `capacity` keys are handed over and not yet started.
//!
//! Why it is not the applier's own queue: the applier's scheduler keeps each key it is given
//! in a hash map and a delay queue, each with its own copies of the key's strings, and its
//! tables keep their size afterwards. A first sync lists every instance at once, so every
//! listed instance was queued there at once (0.87 KB per instance at the heap's peak at 2 000
//! instances per API). Here a waiting key is one shared string.
//!
//! The queue is counted at its edges (`kbind_workqueue_*`); retries the error policy
//! schedules are the applier's own and are counted as retries, not as entries: they wait out
//! a backoff on purpose.
//!
//! ```text
//! trigger ─▶ added(key) ── new: waits in turn (depth +1, adds +1); already waiting: adds +1
//! Feed ────▶ applier: the oldest waiting keys, while fewer than `capacity` are handed over
//! reconcile ─▶ started(key) ── depth −1, queue_duration observes now − first trigger;
//!                              a handed-over key frees its place
//! object gone ─▶ dropped(key) ── depth −1 (the applier found nothing to reconcile)
//! failure ───▶ retried() ── retries +1
//! ```

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::ObjectRef;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use super::cache::CacheType;
use super::cache::instance::CachedInstance;
use crate::telemetry::{WorkQueueLabels, metrics};

/// A waiting key: `namespace/name`, or `name` for a cluster-scoped object (neither may
/// contain `/`), in one allocation shared by the table and the turn order.
type Key = Arc<str>;

/// Entries the queue's tables keep room for once empty; a burst's larger tables are freed.
const KEPT_CAPACITY: usize = 64;

/// The key of `namespace/name`.
fn key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// The namespace and name of `key`.
fn parts(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, key),
    }
}

/// One syncer's queue.
#[derive(Debug)]
pub(crate) struct WorkQueue {
    state: Mutex<State>,
    /// Keys handed to the applier and not yet started, at most.
    capacity: usize,
    depth: Gauge,
    adds: Counter,
    retries: Counter,
    duration: Histogram,
}

#[derive(Debug, Default)]
struct State {
    waiting: HashMap<Key, Waiting>,
    /// Waiting keys not handed over yet, oldest first. A key whose reconcile started
    /// another way (a retry) stays here until its turn and is skipped then.
    turn: VecDeque<Key>,
    /// Keys handed over whose reconcile has not started.
    handed: usize,
    /// The feed, waiting for a key or a free place.
    feed: Option<Waker>,
}

#[derive(Debug)]
struct Waiting {
    since: Instant,
    handed: bool,
}

impl State {
    /// Lets the feed run again.
    fn wake_feed(&mut self) {
        if let Some(feed) = self.feed.take() {
            feed.wake();
        }
    }
}

impl WorkQueue {
    /// The queue of `controller` for `api`, handing at most `capacity` keys to the applier
    /// ahead of their reconciles; several syncers of one API (one per Connection) add to the
    /// same series.
    pub(crate) fn new(controller: &'static str, api: &str, capacity: usize) -> Self {
        let labels = WorkQueueLabels {
            controller,
            api: api.to_string(),
        };
        let m = metrics();
        Self {
            state: Mutex::default(),
            capacity: capacity.max(1),
            depth: m.workqueue_depth.get_or_create(&labels).clone(),
            adds: m.workqueue_adds.get_or_create(&labels).clone(),
            retries: m.workqueue_retries.get_or_create(&labels).clone(),
            duration: m.workqueue_duration.get_or_create(&labels).clone(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An event triggered the object `namespace/name`.
    pub(crate) fn added(&self, namespace: Option<&str>, name: &str) {
        self.adds.inc();
        let key = key(namespace, name);
        let mut state = self.state();
        if state.waiting.contains_key(key.as_str()) {
            return;
        }
        let key = Key::from(key);
        state.waiting.insert(
            key.clone(),
            Waiting {
                since: Instant::now(),
                handed: false,
            },
        );
        state.turn.push_back(key);
        self.depth.inc();
        state.wake_feed();
    }

    /// The reconcile of `namespace/name` starts: it leaves the queue, if an event put it there.
    pub(crate) fn started(&self, namespace: Option<&str>, name: &str) {
        if let Some(since) = self.leave(namespace, name) {
            self.duration.observe(since.elapsed().as_secs_f64());
        }
    }

    /// The applier found no object `namespace/name` to reconcile (it was deleted): the key
    /// leaves the queue unreconciled.
    pub(crate) fn dropped(&self, namespace: Option<&str>, name: &str) {
        self.leave(namespace, name);
    }

    /// Takes `namespace/name` out of the queue; when it had been handed over, its place is
    /// free for the next. The time it was first triggered, if it waited.
    fn leave(&self, namespace: Option<&str>, name: &str) -> Option<Instant> {
        let mut state = self.state();
        let left = state.waiting.remove(key(namespace, name).as_str())?;
        self.depth.dec();
        if left.handed {
            state.handed -= 1;
            state.wake_feed();
        }
        if state.waiting.is_empty() && state.waiting.capacity() > KEPT_CAPACITY {
            // A burst (a first sync, a re-list) is over: its tables go, not just its keys.
            state.waiting.shrink_to(KEPT_CAPACITY);
            state.turn.shrink_to(KEPT_CAPACITY);
        }
        Some(left.since)
    }

    /// An event triggered the object `meta` names.
    pub(crate) fn added_object(&self, meta: &ObjectMeta) {
        self.added(
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        );
    }

    /// The reconcile of the object `meta` names starts.
    pub(crate) fn started_object(&self, meta: &ObjectMeta) {
        self.started(
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        );
    }

    /// A reconcile failed and is scheduled again.
    pub(crate) fn retried(&self) {
        self.retries.inc();
    }

    /// How many keys wait, handed over or not.
    pub(crate) fn len(&self) -> usize {
        self.state().waiting.len()
    }

    /// The next key to hand over: the oldest waiting one, when fewer than `capacity` are
    /// handed over and not started.
    fn poll_turn(&self, cx: &mut Context<'_>) -> Poll<Key> {
        let mut state = self.state();
        while state.handed < self.capacity {
            let Some(key) = state.turn.pop_front() else {
                break;
            };
            let Some(waiting) = state.waiting.get_mut(&key) else {
                continue; // started by a retry before its turn
            };
            if waiting.handed {
                continue; // left and triggered again: this is its older turn
            }
            waiting.handed = true;
            state.handed += 1;
            return Poll::Ready(key);
        }
        state.feed = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for WorkQueue {
    /// A stopped syncer's waiting keys leave the shared depth with it.
    fn drop(&mut self) {
        let left = self.len();
        self.depth.dec_by(i64::try_from(left).unwrap_or(i64::MAX));
    }
}

/// The applier's input. It drives `triggers` (each adds its key to the queue as it passes, in
/// the syncer) to their end of what is ready, so the watches behind them never wait on the
/// queue, and yields the queue's keys in turn. It ends when the triggers end (shutdown).
pub(crate) struct Feed<S> {
    triggers: S,
    queue: Arc<WorkQueue>,
    cache_type: CacheType,
}

impl<S> Feed<S> {
    /// The feed of `queue`, driving `triggers`; keys are of objects of `cache_type`.
    pub(crate) fn new(triggers: S, queue: Arc<WorkQueue>, cache_type: CacheType) -> Self {
        Self {
            triggers,
            queue,
            cache_type,
        }
    }
}

impl<S: Stream + Unpin> Stream for Feed<S> {
    type Item = Result<ObjectRef<CachedInstance>, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            match self.triggers.poll_next_unpin(cx) {
                Poll::Ready(Some(_)) => {}
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => break,
            }
        }
        self.queue.poll_turn(cx).map(|key| {
            let (namespace, name) = parts(&key);
            let mut obj_ref = ObjectRef::new_with(name, self.cache_type.clone());
            obj_ref.namespace = namespace.map(str::to_string);
            Some(Ok(obj_ref))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::task::noop_waker_ref;

    fn series(api: &str) -> WorkQueueLabels {
        WorkQueueLabels {
            controller: "sync",
            api: api.to_string(),
        }
    }

    /// Every key the queue hands over now, as `namespace/name`.
    fn turns(queue: &WorkQueue) -> Vec<String> {
        let mut cx = Context::from_waker(noop_waker_ref());
        let mut keys = Vec::new();
        while let Poll::Ready(key) = queue.poll_turn(&mut cx) {
            keys.push(key.to_string());
        }
        keys
    }

    #[test]
    fn a_key_triggered_twice_before_its_reconcile_waits_once() {
        let api = "twice.workqueue.test";
        let queue = WorkQueue::new("sync", api, 8);
        queue.added(Some("ns"), "a");
        queue.added(Some("ns"), "a");
        queue.added(None, "a");
        let m = metrics();
        assert_eq!(m.workqueue_adds.get_or_create(&series(api)).get(), 3);
        assert_eq!(m.workqueue_depth.get_or_create(&series(api)).get(), 2);
        assert_eq!(turns(&queue), ["ns/a", "a"]);
        queue.started(Some("ns"), "a");
        assert_eq!(m.workqueue_depth.get_or_create(&series(api)).get(), 1);
        assert_eq!(queue.len(), 1);
    }

    #[test]
    fn a_reconcile_no_event_queued_leaves_the_depth_alone() {
        let api = "requeued.workqueue.test";
        let queue = WorkQueue::new("sync", api, 8);
        queue.started(Some("ns"), "scheduled");
        queue.retried();
        let m = metrics();
        assert_eq!(m.workqueue_depth.get_or_create(&series(api)).get(), 0);
        assert_eq!(m.workqueue_retries.get_or_create(&series(api)).get(), 1);
    }

    #[test]
    fn a_dropped_queue_takes_its_waiting_keys_out_of_the_shared_depth() {
        let api = "dropped.workqueue.test";
        let kept = WorkQueue::new("sync", api, 8);
        kept.added(Some("ns"), "kept");
        let stopped = WorkQueue::new("sync", api, 8);
        stopped.added(Some("ns"), "x");
        stopped.added(Some("ns"), "y");
        let depth = || metrics().workqueue_depth.get_or_create(&series(api)).get();
        assert_eq!(depth(), 3);
        drop(stopped);
        assert_eq!(depth(), 1);
    }

    #[test]
    fn keys_are_handed_over_oldest_first_only_as_fast_as_reconciles_start() {
        let queue = WorkQueue::new("sync", "fed.workqueue.test", 2);
        for name in ["a", "b", "c", "d"] {
            queue.added(Some("ns"), name);
        }
        assert_eq!(turns(&queue), ["ns/a", "ns/b"]);
        queue.started(Some("ns"), "b");
        assert_eq!(turns(&queue), ["ns/c"]);
        // A deleted object the applier could not find frees its place as a start does.
        queue.dropped(Some("ns"), "a");
        assert_eq!(turns(&queue), ["ns/d"]);
        assert_eq!(queue.len(), 2);
    }

    #[test]
    fn a_handed_over_key_triggered_again_is_not_handed_over_twice() {
        let queue = WorkQueue::new("sync", "again.workqueue.test", 4);
        queue.added(Some("ns"), "a");
        assert_eq!(turns(&queue), ["ns/a"]);
        queue.added(Some("ns"), "a");
        assert!(turns(&queue).is_empty());
        // Triggered after its reconcile started: it waits and is handed over again.
        queue.started(Some("ns"), "a");
        queue.added(Some("ns"), "a");
        assert_eq!(turns(&queue), ["ns/a"]);
    }

    #[test]
    fn a_key_a_retry_started_before_its_turn_is_skipped() {
        let queue = WorkQueue::new("sync", "skipped.workqueue.test", 1);
        queue.added(Some("ns"), "a");
        queue.added(Some("ns"), "b");
        assert_eq!(turns(&queue), ["ns/a"]);
        // The applier's own retry of b starts before b's turn came.
        queue.started(Some("ns"), "b");
        queue.started(Some("ns"), "a");
        assert!(turns(&queue).is_empty());
        assert_eq!(queue.len(), 0);
    }

    #[test]
    fn a_drained_queue_frees_the_room_a_burst_took() {
        let queue = WorkQueue::new("sync", "burst.workqueue.test", 4096);
        let names: Vec<String> = (0..2000).map(|i| format!("w{i}")).collect();
        for name in &names {
            queue.added(Some("ns"), name);
        }
        assert_eq!(turns(&queue).len(), 2000);
        for name in &names {
            queue.started(Some("ns"), name);
        }
        let state = queue.state();
        assert!(
            state.waiting.capacity() <= 2 * KEPT_CAPACITY,
            "{}",
            state.waiting.capacity()
        );
        assert!(
            state.turn.capacity() <= 2 * KEPT_CAPACITY,
            "{}",
            state.turn.capacity()
        );
    }

    #[test]
    fn cluster_scoped_and_namespaced_keys_are_told_apart() {
        assert_eq!(parts(&key(Some("ns"), "a")), (Some("ns"), "a"));
        assert_eq!(parts(&key(None, "a")), (None, "a"));
    }

    #[tokio::test]
    async fn the_feed_drives_its_triggers_and_yields_keys_as_places_free() {
        let queue = Arc::new(WorkQueue::new("sync", "feed.workqueue.test", 1));
        let adding = queue.clone();
        let triggers = futures::stream::iter(["a", "b"])
            .inspect(move |name| adding.added(Some("ns"), name))
            .chain(futures::stream::pending());
        let ar = kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let mut feed = Feed::new(Box::pin(triggers), queue.clone(), CacheType::new(ar));
        let first = feed.next().await.and_then(Result::ok).map(|r| r.name);
        assert_eq!(first.as_deref(), Some("a"));
        // Both triggers were taken in, though only one key could be handed over.
        assert_eq!(queue.len(), 2);
        let mut cx = Context::from_waker(noop_waker_ref());
        assert!(feed.poll_next_unpin(&mut cx).is_pending());
        queue.started(Some("ns"), "a");
        let second = feed.next().await.and_then(Result::ok);
        assert_eq!(
            second.map(|r| (r.namespace, r.name)),
            Some((Some("ns".into()), "b".into()))
        );
    }
}
