//! The periodic resync (spec: "There are periodic resyncs as a backstop"), as one sweep per
//! syncer over its consumer cache instead of a timer per instance.
//!
//! ```text
//! each interval: the consumer cache's instances ──▶ a slice per tick ──▶ in sync? yes ──▶ counted, nothing sent
//!                                                                              no  ──▶ the controller's queue
//! ```
//!
//! Every selected instance comes back once per interval, the interval's instances spread
//! evenly over its ticks. One still in sync (the instance and its copy are the versions a
//! reconcile found in sync) costs a cache lookup and the in-sync check, here; only the others
//! are queued, for a full reconcile. The controller holds no timer for an instance it is done
//! with: a queue entry and a spawned reconcile per resync were most of an idle konnector's CPU
//! and a part of its memory per instance.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt, stream};
use kube::runtime::reflector::{Lookup, Store};
use tokio::time::{Interval, MissedTickBehavior};

use super::cache::instance::CachedInstance;
use super::context::SyncContext;
use super::reconcile::selected_still_in_sync;
use super::recovery::Key;

/// How often a slice of the interval's instances is checked.
const TICK: Duration = Duration::from_secs(1);

/// One syncer's sweep between ticks.
struct Sweep {
    store: Store<CachedInstance>,
    ctx: Arc<SyncContext>,
    ticker: Interval,
    /// Ticks in one interval.
    ticks: u32,
    /// This interval's instances not checked yet, as the cache held them when it began (each
    /// slice is split off, so a checked instance's old version is not kept to the end).
    round: Vec<Arc<CachedInstance>>,
    /// Ticks left in this interval.
    ticks_left: u32,
}

impl Sweep {
    /// The next tick's instances that need a reconcile, as work-queue keys.
    fn next_slice(&mut self) -> Vec<Key> {
        if self.ticks_left == 0 {
            self.round = self.store.state();
            self.ticks_left = self.ticks;
        }
        let due = slice_len(self.round.len(), self.ticks_left);
        let slice = self.round.split_off(self.round.len() - due);
        self.ticks_left -= 1;
        let mut triggers = Vec::new();
        for cached in &slice {
            // An instance no binding selects has nothing to sync; a selection change queues
            // it (`super::selection_changes`).
            if !self.ctx.selects(cached.metadata.namespace.as_deref()) {
                continue;
            }
            // The cache's current version: the one taken when the interval began may have
            // changed (its watch event queued it already) or gone.
            let key = cached.to_object_ref(self.ctx.cache_type.clone());
            let Some(current) = self.store.get(&key) else {
                continue;
            };
            let current = self.ctx.newer_instance(&current).map_or(current, Arc::new);
            if selected_still_in_sync(&current, &self.ctx) {
                continue;
            }
            triggers.extend(current.key());
        }
        triggers
    }
}

/// The instances of `store` that their periodic resync finds not in sync, spread over the
/// syncer's resync interval, for the syncer's work queue.
pub(super) fn sweep(
    store: Store<CachedInstance>,
    ctx: Arc<SyncContext>,
) -> impl Stream<Item = Key> + Send + 'static {
    let interval = ctx.settings.resync_interval;
    let tick = TICK.min(interval).max(Duration::from_millis(10));
    let mut ticker = tokio::time::interval(tick);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let state = Sweep {
        store,
        ctx,
        ticker,
        ticks: ticks_per_interval(interval, tick),
        round: Vec::new(),
        ticks_left: 0,
    };
    stream::unfold(state, |mut sweep| async move {
        sweep.ticker.tick().await;
        let triggers = sweep.next_slice();
        Some((stream::iter(triggers), sweep))
    })
    .flatten()
}

/// Ticks in one interval (at least one).
fn ticks_per_interval(interval: Duration, tick: Duration) -> u32 {
    let ticks = interval.as_millis() / tick.as_millis().max(1);
    u32::try_from(ticks).unwrap_or(u32::MAX).max(1)
}

/// How many of the `remaining` instances the next of `ticks_left` ticks checks: an even share,
/// rounded up so the last tick of the interval finishes it.
fn slice_len(remaining: usize, ticks_left: u32) -> usize {
    let ticks = usize::try_from(ticks_left).unwrap_or(usize::MAX).max(1);
    remaining.div_ceil(ticks)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slices a whole interval of `ticks` ticks takes from `instances`.
    fn slices(instances: usize, ticks: u32) -> Vec<usize> {
        let (mut remaining, mut out) = (instances, Vec::new());
        for left in (1..=ticks).rev() {
            let n = slice_len(remaining, left);
            remaining -= n;
            out.push(n);
        }
        out
    }

    #[test]
    fn every_instance_comes_back_once_per_interval() {
        for (instances, ticks) in [(0, 300), (1, 300), (299, 300), (100_000, 300), (7, 3)] {
            let taken = slices(instances, ticks);
            assert_eq!(taken.len(), ticks as usize);
            assert_eq!(
                taken.iter().sum::<usize>(),
                instances,
                "{instances} over {ticks}"
            );
        }
    }

    #[test]
    fn resyncs_spread_evenly_over_the_interval() {
        let taken = slices(100_000, 300);
        let (least, most) = (
            taken.iter().min().copied().unwrap_or_default(),
            taken.iter().max().copied().unwrap_or_default(),
        );
        assert!(most - least <= 1, "between {least} and {most} per tick");
    }

    #[test]
    fn an_interval_has_a_tick_per_second_and_at_least_one() {
        assert_eq!(
            ticks_per_interval(Duration::from_secs(300), Duration::from_secs(1)),
            300
        );
        assert_eq!(
            ticks_per_interval(Duration::from_millis(10), Duration::from_millis(10)),
            1
        );
    }
}
