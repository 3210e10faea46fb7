//! The error-requeue policy, written down once for every controller (Connection, bindings,
//! instance syncers): a failure count per object and a delay that doubles with each
//! consecutive failure, capped; a success forgets the count, and so does the object's deletion
//! (or the end of the controller that kept the count), so entries never outlive their objects.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

/// Per-object failure counts and the delays they earn.
#[derive(Debug)]
pub struct Backoff<K> {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<K, u32>>,
}

impl<K: Eq + Hash> Backoff<K> {
    /// Delays start at `base` and never exceed `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            failures: Mutex::default(),
        }
    }

    /// Counts one more failure of `key` and returns how long to wait before retrying it.
    pub fn failed(&self, key: K) -> Duration {
        let mut failures = self.lock();
        let n = failures.entry(key).or_default();
        *n = n.saturating_add(1);
        delay(*n, self.base, self.max)
    }

    /// Forgets the failures of `key` after a success.
    pub fn succeeded(&self, key: &K) {
        self.lock().remove(key);
    }

    /// Forgets `key` because its object was deleted: a count of an object that failed and then
    /// went must not stay behind.
    pub fn forget(&self, key: &K) {
        self.lock().remove(key);
    }

    /// Forgets every count (the controller keeping them stopped).
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// How many objects have failures counted.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no object has failures counted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, u32>> {
        // The map stays consistent even if a holder panicked mid-update.
        self.failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Exponential backoff: `base * 2^(failures-1)`, capped at `max`.
pub fn delay(failures: u32, base: Duration, max: Duration) -> Duration {
    let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(20));
    base.saturating_mul(factor).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_doubles_and_caps() {
        let base = Duration::from_millis(500);
        let max = Duration::from_secs(10);
        assert_eq!(delay(1, base, max), Duration::from_millis(500));
        assert_eq!(delay(2, base, max), Duration::from_secs(1));
        assert_eq!(delay(4, base, max), Duration::from_secs(4));
        assert_eq!(delay(60, base, max), max);
    }

    #[test]
    fn failures_count_per_object_and_success_resets() {
        let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        assert_eq!(backoff.failed("a"), Duration::from_secs(1));
        assert_eq!(backoff.failed("a"), Duration::from_secs(2));
        assert_eq!(
            backoff.failed("b"),
            Duration::from_secs(1),
            "objects back off independently"
        );
        backoff.succeeded(&"a");
        assert_eq!(backoff.failed("a"), Duration::from_secs(1));
    }

    #[test]
    fn entries_go_with_their_objects_and_with_the_controller() {
        let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        for _ in 0..3 {
            backoff.failed("deleted-while-failing");
        }
        backoff.failed("other");
        assert_eq!(backoff.len(), 2);
        backoff.forget(&"deleted-while-failing");
        assert_eq!(backoff.len(), 1, "the deleted object's entry is gone");
        assert_eq!(
            backoff.failed("deleted-while-failing"),
            Duration::from_secs(1),
            "a new object of the same name starts afresh"
        );
        backoff.clear();
        assert!(backoff.is_empty(), "a stopped controller keeps nothing");
    }
}
