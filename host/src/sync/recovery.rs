//! Coming back from a provider outage without waiting out every backoff. An instance whose
//! reconcile fails because the provider did not answer (no answer, 429, 5xx) waits on the
//! provider; its delay doubles per failure like any other, up to minutes. So that the whole
//! set does not wait minutes after the provider is back, one of them, the probe, retries at
//! least every `recovery_probe`; and the first waiting instance to reconcile successfully
//! wakes all the others at once.
//!
//! ```text
//! transient provider failure ─▶ waiting; the first one waiting is the probe
//!                                 probe: retry in min(backoff, recovery_probe) (Retry-After wins)
//!                                 others: retry in backoff
//! a waiting instance succeeds ─▶ every other waiting instance is queued now
//! the probe is deleted, in sync or unselected ─▶ the next waiting one becomes the probe, now
//! ```
//!
//! A success of any waiting instance counts as the provider answering. Woken instances that
//! fail again go back to waiting with their backoff grown, so a provider that answers one
//! request and fails the next costs one retry per instance per success, not a loop.

use std::collections::BTreeSet;

/// An instance as the syncer's backoff knows it: namespace and name.
pub(super) type Key = (Option<String>, String);

/// The instances waiting on the provider, and which of them probes.
#[derive(Debug, Default)]
pub(super) struct Waiting {
    keys: BTreeSet<Key>,
    probe: Option<Key>,
}

impl Waiting {
    /// Records that `key` failed transiently on the provider. True when `key` is the probe.
    pub(super) fn failed(&mut self, key: Key) -> bool {
        if self.probe.is_none() {
            self.probe = Some(key.clone());
        }
        let probe = self.probe.as_ref() == Some(&key);
        self.keys.insert(key);
        probe
    }

    /// `key` reconciled successfully. When it was waiting, the provider answers again: every
    /// other waiting instance is returned to be queued now, and nothing waits any more.
    pub(super) fn succeeded(&mut self, key: &Key) -> Vec<Key> {
        if !self.keys.remove(key) {
            return Vec::new();
        }
        self.probe = None;
        std::mem::take(&mut self.keys).into_iter().collect()
    }

    /// `key` no longer needs a retry (deleted, found in sync, no longer selected). When it was
    /// the probe, the next waiting instance takes over and is returned to be queued now.
    pub(super) fn forget(&mut self, key: &Key) -> Option<Key> {
        if !self.keys.remove(key) {
            return None;
        }
        if self.probe.as_ref() != Some(key) {
            return None;
        }
        self.probe = self.keys.first().cloned();
        self.probe.clone()
    }

    /// Whether nothing waits (the common case, checked without further work).
    pub(super) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Forgets everything: the syncer stopped.
    pub(super) fn clear(&mut self) {
        self.keys.clear();
        self.probe = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        (Some("ns".into()), name.into())
    }

    #[test]
    fn the_first_instance_to_wait_on_the_provider_probes() {
        let mut waiting = Waiting::default();
        assert!(waiting.failed(key("a")), "the first one probes");
        assert!(!waiting.failed(key("b")), "the others wait their backoff");
        assert!(waiting.failed(key("a")), "the probe stays the probe");
    }

    #[test]
    fn a_waiting_instance_that_gets_through_wakes_every_other() {
        let mut waiting = Waiting::default();
        for name in ["a", "b", "c"] {
            waiting.failed(key(name));
        }
        assert_eq!(waiting.succeeded(&key("b")), vec![key("a"), key("c")]);
        assert!(waiting.is_empty(), "nothing waits any more");
        assert!(
            waiting.failed(key("c")),
            "the next failure starts a new probe"
        );
    }

    #[test]
    fn a_success_of_an_instance_that_was_not_waiting_wakes_nothing() {
        let mut waiting = Waiting::default();
        waiting.failed(key("a"));
        assert!(waiting.succeeded(&key("other")).is_empty());
        assert!(!waiting.is_empty());
    }

    #[test]
    fn a_gone_probe_hands_over_to_the_next_waiting_instance() {
        let mut waiting = Waiting::default();
        for name in ["a", "b", "c"] {
            waiting.failed(key(name));
        }
        assert_eq!(waiting.forget(&key("c")), None, "c was not the probe");
        assert_eq!(waiting.forget(&key("a")), Some(key("b")), "b probes now");
        assert!(waiting.failed(key("b")));
        assert_eq!(waiting.forget(&key("b")), None, "nothing left to probe");
        assert!(waiting.is_empty());
    }
}
