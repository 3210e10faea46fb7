//! The outcomes of one API's instances in one namespace, with their counts kept as they
//! change: a summary reads the counts of its namespaces instead of visiting every instance,
//! so a binding's status costs the same at 100 000 instances as at 10.
//!
//! ```text
//! set / remove / retain ─▶ outcomes (name ─▶ outcome)
//!                       └▶ synced, conflicting, failing counts; names not in sync per reason
//! ```

use std::collections::{BTreeMap, BTreeSet};

use crate::api::Reason;

use super::summary::Outcome;

/// One namespace's outcomes and their running counts.
#[derive(Debug, Default)]
pub struct Tally {
    outcomes: BTreeMap<String, Outcome>,
    synced: u64,
    conflicting: u64,
    failing: u64,
    /// The instances not in sync, per reason, in name order (a summary's examples).
    not_in_sync: BTreeMap<Reason, BTreeSet<String>>,
}

impl Tally {
    /// The outcome recorded for `name`.
    pub fn get(&self, name: &str) -> Option<&Outcome> {
        self.outcomes.get(name)
    }

    /// Records `outcome` for `name`; returns the one it replaces.
    pub fn set(&mut self, name: &str, outcome: Outcome) -> Option<Outcome> {
        let previous = self.outcomes.insert(name.to_string(), outcome);
        if previous != Some(outcome) {
            if let Some(previous) = previous {
                self.uncount(name, previous);
            }
            self.count(name, outcome);
        }
        previous
    }

    /// Forgets `name`; returns its outcome, if it had one.
    pub fn remove(&mut self, name: &str) -> Option<Outcome> {
        let removed = self.outcomes.remove(name);
        if let Some(outcome) = removed {
            self.uncount(name, outcome);
        }
        removed
    }

    /// Keeps only the names `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        let gone: Vec<String> = self
            .outcomes
            .keys()
            .filter(|name| !keep(name))
            .cloned()
            .collect();
        for name in gone {
            self.remove(&name);
        }
    }

    /// Whether no outcome is recorded.
    pub fn is_empty(&self) -> bool {
        self.outcomes.is_empty()
    }

    /// Instances in sync.
    pub fn synced(&self) -> u64 {
        self.synced
    }

    /// Instances whose target belongs to someone else.
    pub fn conflicting(&self) -> u64 {
        self.conflicting
    }

    /// Instances that failed for any other reason.
    pub fn failing(&self) -> u64 {
        self.failing
    }

    /// The instances not in sync, per reason, in name order.
    pub fn not_in_sync(&self) -> impl Iterator<Item = (Reason, &BTreeSet<String>)> {
        self.not_in_sync
            .iter()
            .map(|(reason, names)| (*reason, names))
    }

    fn count(&mut self, name: &str, outcome: Outcome) {
        let reason = match outcome {
            Outcome::InSync => {
                self.synced += 1;
                return;
            }
            Outcome::Conflict(reason) => {
                self.conflicting += 1;
                reason
            }
            Outcome::Failed(reason) => {
                self.failing += 1;
                reason
            }
        };
        self.not_in_sync
            .entry(reason)
            .or_default()
            .insert(name.to_string());
    }

    fn uncount(&mut self, name: &str, outcome: Outcome) {
        let reason = match outcome {
            Outcome::InSync => {
                self.synced = self.synced.saturating_sub(1);
                return;
            }
            Outcome::Conflict(reason) => {
                self.conflicting = self.conflicting.saturating_sub(1);
                reason
            }
            Outcome::Failed(reason) => {
                self.failing = self.failing.saturating_sub(1);
                reason
            }
        };
        if let Some(names) = self.not_in_sync.get_mut(&reason) {
            names.remove(name);
            if names.is_empty() {
                self.not_in_sync.remove(&reason);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counts as a tuple, and the names not in sync per reason.
    fn counts(tally: &Tally) -> (u64, u64, u64, Vec<(Reason, Vec<String>)>) {
        let names = tally
            .not_in_sync()
            .map(|(reason, names)| (reason, names.iter().cloned().collect()))
            .collect();
        (tally.synced(), tally.conflicting(), tally.failing(), names)
    }

    #[test]
    fn counts_follow_every_change_of_outcome() {
        let mut tally = Tally::default();
        tally.set("a", Outcome::InSync);
        tally.set("b", Outcome::Failed(Reason::ProviderRejected));
        tally.set("c", Outcome::Conflict(Reason::OwnedByAnother));
        let mut not_in_sync = vec![
            (Reason::ProviderRejected, vec!["b".to_string()]),
            (Reason::OwnedByAnother, vec!["c".to_string()]),
        ];
        not_in_sync.sort();
        assert_eq!(counts(&tally), (1, 1, 1, not_in_sync));
        tally.set("b", Outcome::InSync);
        tally.set("c", Outcome::InSync);
        assert_eq!(counts(&tally), (3, 0, 0, vec![]));
    }

    #[test]
    fn the_same_outcome_again_counts_once() {
        let mut tally = Tally::default();
        for _ in 0..3 {
            tally.set("a", Outcome::Failed(Reason::Forbidden));
        }
        assert_eq!(
            counts(&tally),
            (0, 0, 1, vec![(Reason::Forbidden, vec!["a".to_string()])])
        );
    }

    #[test]
    fn removed_and_pruned_names_leave_the_counts() {
        let mut tally = Tally::default();
        tally.set("a", Outcome::InSync);
        tally.set("b", Outcome::Failed(Reason::Forbidden));
        tally.set("c", Outcome::InSync);
        assert_eq!(tally.remove("a"), Some(Outcome::InSync));
        assert_eq!(tally.remove("a"), None);
        tally.retain(|name| name != "b");
        assert_eq!(counts(&tally), (1, 0, 0, vec![]));
        tally.retain(|_| false);
        assert!(tally.is_empty());
        assert_eq!(counts(&tally), (0, 0, 0, vec![]));
    }
}
