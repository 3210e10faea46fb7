//! A binding's status as a value: built from the readiness verdict and the conflict counts,
//! compared as a whole with the stored one, written only when different (house style:
//! compare normalised structs, never a hand-picked list of fields).
//!
//! Spec: "Bindings count conflict annotations on a periodic reconciliation ... Conflicts=True
//! does not necessarily make Ready or Synced false" — so `Conflicts` is its own condition and
//! never feeds `Ready`.

use std::collections::BTreeMap;

use crate::api::{BindingStatus, BoundApi, ConditionType, Reason};
use crate::conditions::{self, Desired};

use super::readiness::Verdict;

/// Builds the status to store, starting from the stored one so that condition transition
/// times only move when a condition flips. `listed` are the binding's APIs; `hashes` the
/// consumer CRD hashes of those that exist; `conflicts` the conflict counts of those that
/// could be counted.
pub fn build(
    old: Option<&BindingStatus>,
    verdict: &Verdict,
    listed: &[String],
    hashes: &BTreeMap<String, String>,
    conflicts: &BTreeMap<String, i64>,
    generation: Option<i64>,
) -> BindingStatus {
    let mut names: Vec<&String> = listed.iter().collect();
    names.sort();
    names.dedup();
    let bound_apis = names
        .into_iter()
        .filter(|name| hashes.contains_key(*name))
        .map(|name| BoundApi {
            name: name.clone(),
            crd_hash: hashes.get(name).cloned(),
            conflict_count: conflicts.get(name).copied().unwrap_or(0),
        })
        .collect();
    let mut conds = old.map(|s| s.conditions.clone()).unwrap_or_default();
    conditions::set(&mut conds, verdict.ready.clone(), generation);
    let total: i64 = conflicts.values().sum();
    let conflict_condition = if total > 0 {
        let per_api = conflicts
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(api, n)| format!("{api}: {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        Desired::truthy(
            ConditionType::Conflicts,
            Reason::ConflictsFound,
            format!(
                "{total} instance(s) have a provider target owned by someone else ({per_api}); see their core.kbind.io/conflict annotation"
            ),
        )
    } else {
        Desired::falsy(ConditionType::Conflicts, Reason::AsExpected, "no conflicts")
    };
    conditions::set(&mut conds, conflict_condition, generation);
    BindingStatus {
        bound_apis,
        conflict_count: total,
        conditions: conds,
        observed_generation: generation,
    }
}

/// Keeps the stored `boundAPIs` entries of dropped APIs whose drain is still pending, so the
/// next reconcile still sees them as dropped (a restart included).
pub fn keep_pending_drains(
    new: &mut BindingStatus,
    old: Option<&BindingStatus>,
    pending: &[String],
) {
    let kept = old
        .iter()
        .flat_map(|s| s.bound_apis.iter())
        .filter(|b| pending.contains(&b.name))
        .filter(|b| !new.bound_apis.iter().any(|n| n.name == b.name));
    new.bound_apis.extend(kept.cloned().collect::<Vec<_>>());
    new.bound_apis.sort_by(|a, b| a.name.cmp(&b.name));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binding::readiness::{ConnectionState, evaluate};

    fn verdict(ready: bool) -> Verdict {
        let state = if ready {
            ConnectionState::Engaged { exported: vec![] }
        } else {
            ConnectionState::NotReady
        };
        evaluate("p", &state, &[])
    }

    #[test]
    fn conflicts_are_counted_per_api_without_touching_ready() {
        let listed = vec!["b.x".to_string(), "a.x".to_string()];
        let hashes = BTreeMap::from([("a.x".into(), "h1".into()), ("b.x".into(), "h2".into())]);
        let counts = BTreeMap::from([("a.x".into(), 2), ("b.x".into(), 0)]);
        let s = build(None, &verdict(true), &listed, &hashes, &counts, Some(3));
        assert_eq!(
            s.bound_apis
                .iter()
                .map(|b| (b.name.as_str(), b.conflict_count))
                .collect::<Vec<_>>(),
            vec![("a.x", 2), ("b.x", 0)]
        );
        assert_eq!(s.conflict_count, 2, "the total over every bound API");
        assert!(conditions::is_true(&s.conditions, ConditionType::Conflicts));
        assert!(conditions::is_true(&s.conditions, ConditionType::Ready));
        assert_eq!(s.observed_generation, Some(3));
    }

    #[test]
    fn rebuilding_an_unchanged_status_compares_equal() {
        let listed = vec!["a.x".to_string()];
        let hashes = BTreeMap::from([("a.x".into(), "h".into())]);
        let counts = BTreeMap::new();
        let first = build(None, &verdict(true), &listed, &hashes, &counts, Some(1));
        let again = build(
            Some(&first),
            &verdict(true),
            &listed,
            &hashes,
            &counts,
            Some(1),
        );
        assert_eq!(first, again, "no write when nothing changed");
        let flipped = build(
            Some(&first),
            &verdict(false),
            &listed,
            &hashes,
            &counts,
            Some(1),
        );
        assert_ne!(first, flipped);
    }

    #[test]
    fn a_dropped_api_stays_bound_while_its_drain_is_pending() {
        let hashes = BTreeMap::from([("a.x".into(), "h".into()), ("b.x".into(), "h".into())]);
        let listed = vec!["a.x".to_string(), "b.x".to_string()];
        let old = build(
            None,
            &verdict(true),
            &listed,
            &hashes,
            &BTreeMap::new(),
            Some(1),
        );
        // b.x is no longer listed.
        let mut new = build(
            Some(&old),
            &verdict(true),
            &listed[..1],
            &hashes,
            &BTreeMap::new(),
            Some(2),
        );
        let names = |s: &BindingStatus| {
            s.bound_apis
                .iter()
                .map(|b| b.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&new), vec!["a.x"]);
        keep_pending_drains(&mut new, Some(&old), &["b.x".to_string()]);
        assert_eq!(names(&new), vec!["a.x", "b.x"]);
        keep_pending_drains(&mut new, Some(&old), &["b.x".to_string()]);
        assert_eq!(names(&new), vec!["a.x", "b.x"], "kept once");
    }

    #[test]
    fn apis_without_a_crd_are_not_listed_as_bound() {
        let s = build(
            None,
            &verdict(false),
            &["a.x".into()],
            &BTreeMap::new(),
            &BTreeMap::new(),
            None,
        );
        assert!(s.bound_apis.is_empty());
        assert!(!conditions::is_true(
            &s.conditions,
            ConditionType::Conflicts
        ));
    }
}
