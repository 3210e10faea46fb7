//! A binding's status as a value: built from the readiness verdict, the sync engine's summary
//! of the instances in scope and the related-resource pass, compared as a whole with the stored
//! one, written only when different (house style: compare normalised structs, never a
//! hand-picked list of fields).
//!
//! Spec: "Conflicts=True does not necessarily make Ready or Synced false" — so `Conflicts` is
//! its own condition and never feeds `Ready`.

pub(super) mod events;
pub(super) mod failure;
pub(super) mod prune;
pub(super) mod publish;
pub(super) mod shard_status;
pub(super) mod summary;

use std::collections::BTreeMap;

use crate::api::{ApiState, BindingStatus, BoundApi, ConditionType};
use crate::conditions::{self, Desired};
use crate::registry::Summary;

use crate::binding::readiness::Verdict;

/// What the related-resource pass of this reconcile says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Related {
    /// The binding declares no related resources: no condition.
    NotDeclared,
    /// Declared but not run (the binding is not Ready): the stored condition stands.
    NotRun,
    /// Run: the `RelatedResourcesSynced` condition it came to.
    Ran(Desired),
}

/// Everything one reconcile observed that the status reports.
#[derive(Clone, Debug)]
pub(super) struct Observed<'a> {
    /// The readiness verdict.
    pub verdict: &'a Verdict,
    /// The binding's listed APIs.
    pub listed: &'a [String],
    /// Consumer CRD hashes of the listed APIs that exist.
    pub hashes: &'a BTreeMap<String, String>,
    /// The instances in scope, as the syncers know them.
    pub summary: &'a Summary,
    /// The related-resource pass.
    pub related: &'a Related,
}

/// Builds the status to store, starting from the stored one so that condition transition
/// times only move when a condition flips (and conditions set elsewhere, `Drained` and
/// `TeardownFailed`, are kept). While the instance summary is not current (the binding waits,
/// or the sync engine's first pass is not done), the stored instance conditions and counts
/// stand.
pub(super) fn build(
    old: Option<&BindingStatus>,
    observed: &Observed<'_>,
    generation: Option<i64>,
) -> BindingStatus {
    let ready = &observed.verdict.ready;
    let current = summary::is_current(ready, observed.summary);
    // While the counts are not current, the stored ones stand with the stored conditions.
    let conflicts = match (current, old) {
        (false, Some(old)) => old
            .bound_apis
            .iter()
            .map(|b| (b.name.clone(), b.conflict_count))
            .collect(),
        _ => observed.summary.conflicts_per_api(),
    };
    let mut names: Vec<&String> = observed.listed.iter().collect();
    names.sort();
    names.dedup();
    // Current counts when the summary is; otherwise the stored ones stand (a restart or a
    // Connection blip does not flap them), and a Ready binding without any yet shows how its
    // first sync goes, pending included.
    let instances = |name: &String| {
        let stored = old
            .and_then(|old| old.bound_apis.iter().find(|b| &b.name == name))
            .and_then(|b| b.instances);
        let counted = observed.summary.per_api.get(name).copied();
        match (current, stored) {
            (true, _) => counted,
            (false, Some(stored)) => Some(stored),
            (false, None) if summary::syncs(ready) => counted,
            (false, None) => None,
        }
    };
    // Sharded replicas: what the replica running the API's syncer reported stays as it is.
    let reported = |name: &String| {
        old.and_then(|old| old.bound_apis.iter().find(|b| &b.name == name))
            .map(|b| (b.syncer.clone(), b.report.clone()))
            .unwrap_or_default()
    };
    // An entry for every API with a consumer CRD, and for every API that failed definitively
    // without one (its schema refused, say): the entry names what is wrong, and the teardown
    // rule reads from it that this binding does not count for that API.
    let failed = |name: &String| {
        let judged = observed.verdict.apis.get(name);
        judged.is_some_and(|v| v.state == ApiState::Failed)
    };
    let bound_apis = names
        .into_iter()
        .filter(|name| observed.hashes.contains_key(*name) || failed(name))
        .map(|name| {
            let (syncer, report) = reported(name);
            let judged = observed.verdict.apis.get(name);
            let not_syncing = judged.filter(|v| v.state != ApiState::Syncing);
            BoundApi {
                name: name.clone(),
                crd_hash: observed.hashes.get(name).cloned(),
                conflict_count: conflicts.get(name).copied().unwrap_or(0),
                released: observed.verdict.released.contains(name),
                instances: instances(name),
                state: judged.map(|v| v.state),
                reason: not_syncing.map(|v| v.reason.as_str().to_string()),
                message: not_syncing.map(|v| v.message.clone()),
                syncer,
                report,
            }
        })
        .collect();
    let conflict_count = match (current, old) {
        (false, Some(old)) => old.conflict_count,
        _ => observed.summary.conflicts(),
    };
    let mut conds = old.map(|s| s.conditions.clone()).unwrap_or_default();
    conditions::set(&mut conds, ready.clone(), generation);
    let related = match observed.related {
        Related::Ran(condition) => Some(condition),
        Related::NotDeclared | Related::NotRun => None,
    };
    let instance_conditions = [
        (
            ConditionType::Synced,
            summary::synced(ready, observed.summary),
        ),
        (
            ConditionType::Conflicts,
            summary::conflicts(observed.summary),
        ),
        (
            ConditionType::PermissionDenied,
            summary::permission_denied(observed.summary, related),
        ),
    ];
    for (type_, computed) in instance_conditions {
        let stored = conds.iter().any(|c| c.type_ == type_.as_str());
        match (current, stored) {
            (true, _) => conditions::set(&mut conds, computed, generation),
            (false, true) => {}
            (false, false) if type_ == ConditionType::Synced => {
                conditions::set(&mut conds, summary::synced_unknown(), generation)
            }
            (false, false) => conditions::set(&mut conds, computed, generation),
        }
    }
    match observed.related {
        Related::Ran(condition) => conditions::set(&mut conds, condition.clone(), generation),
        Related::NotDeclared => {
            conditions::remove(&mut conds, ConditionType::RelatedResourcesSynced)
        }
        Related::NotRun => {}
    }
    BindingStatus {
        bound_apis,
        conditions: conds,
        observed_generation: generation,
        conflict_count,
        // The caller knows which Connection this reconcile bound through.
        bound_connection: None,
    }
}

/// Keeps the stored `boundAPIs` entries of dropped APIs whose drain is still pending, so the
/// next reconcile still sees them as dropped (a restart included).
pub(super) fn keep_pending_drains(
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
    use crate::api::Reason;
    use crate::binding::readiness::{ConnectionState, evaluate};
    use crate::registry::{Outcome, Outcomes};

    fn verdict(ready: bool) -> Verdict {
        let state = if ready {
            ConnectionState::Engaged { exported: vec![] }
        } else {
            ConnectionState::NotReady
        };
        evaluate("p", &state, &[])
    }

    fn observed<'a>(
        verdict: &'a Verdict,
        listed: &'a [String],
        hashes: &'a BTreeMap<String, String>,
        summary: &'a Summary,
    ) -> Observed<'a> {
        Observed {
            verdict,
            listed,
            hashes,
            summary,
            related: &Related::NotDeclared,
        }
    }

    #[test]
    fn conflicts_are_counted_per_api_and_in_total_without_touching_ready() {
        let listed = vec!["b.x".to_string(), "a.x".to_string()];
        let hashes = BTreeMap::from([("a.x".into(), "h1".into()), ("b.x".into(), "h2".into())]);
        let registry = Outcomes::default();
        for api in ["a.x", "b.x"] {
            registry.listing_started("p", api);
            registry.listing_done("p", api);
        }
        for name in ["one", "two"] {
            registry.record(
                "p",
                "a.x",
                Some("ns"),
                name,
                Outcome::failure(Reason::ForeignObjectExists),
            );
        }
        registry.record("p", "b.x", Some("ns"), "fine", Outcome::InSync);
        let summary = registry.summarise("p", ["a.x", "b.x"], Some("ns"));
        let v = verdict(true);
        let s = build(None, &observed(&v, &listed, &hashes, &summary), Some(3));
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
        assert!(!conditions::is_true(&s.conditions, ConditionType::Synced));
        assert!(!conditions::is_true(
            &s.conditions,
            ConditionType::PermissionDenied
        ));
        assert_eq!(s.observed_generation, Some(3));
    }

    #[test]
    fn an_api_that_failed_without_a_consumer_crd_has_an_entry_saying_why() {
        use crate::binding::readiness::ApiFacts;
        let listed = vec!["typos.example.org".to_string()];
        let facts = |name: &str| ApiFacts {
            name: name.into(),
            crd: None,
            index_pin: None,
            install_problem: None,
        };
        let engaged = ConnectionState::Engaged { exported: vec![] };
        let failed = evaluate("p", &engaged, &[facts("typos.example.org")]);
        let summary = Outcomes::default().summarise("p", ["typos.example.org"], Some("ns"));
        let none = BTreeMap::new();
        let s = build(None, &observed(&failed, &listed, &none, &summary), Some(1));
        let entry = s.bound_apis.first().map(|b| {
            let b = b.clone();
            (b.name, b.crd_hash, b.state, b.reason)
        });
        assert_eq!(
            entry,
            Some((
                "typos.example.org".to_string(),
                None,
                Some(ApiState::Failed),
                Some("APINotExported".to_string())
            ))
        );
        assert!(
            s.bound_apis[0]
                .message
                .as_deref()
                .is_some_and(|m| m.contains("typos.example.org"))
        );
        // Waiting without a consumer CRD (the Connection not Ready): no entry yet.
        let waiting = evaluate(
            "p",
            &ConnectionState::NotReady,
            &[facts("typos.example.org")],
        );
        let s = build(None, &observed(&waiting, &listed, &none, &summary), Some(1));
        assert!(s.bound_apis.is_empty(), "{:?}", s.bound_apis);
    }

    #[test]
    fn stored_instance_conditions_stand_while_the_sync_engine_settles() {
        let listed = vec!["a.x".to_string()];
        let hashes = BTreeMap::from([("a.x".into(), "h".into())]);
        let registry = Outcomes::default();
        registry.listing_started("p", "a.x");
        registry.listing_done("p", "a.x");
        registry.record(
            "p",
            "a.x",
            Some("ns"),
            "taken",
            Outcome::failure(Reason::ForeignObjectExists),
        );
        let v = verdict(true);
        let known = registry.summarise("p", ["a.x"], Some("ns"));
        let before = build(None, &observed(&v, &listed, &hashes, &known), Some(1));
        assert_eq!(before.conflict_count, 1);
        // A restarted konnector: nothing known yet.
        let restarted = Outcomes::default().summarise("p", ["a.x"], Some("ns"));
        let after = build(
            Some(&before),
            &observed(&v, &listed, &hashes, &restarted),
            Some(1),
        );
        assert_eq!(after, before, "no flap to \"all in sync\"");
        // Waiting for the Connection: the same.
        let waiting = verdict(false);
        let after = build(
            Some(&before),
            &observed(&waiting, &listed, &hashes, &restarted),
            Some(1),
        );
        assert_eq!(after.conflict_count, 1);
        let synced = after.conditions.iter().find(|c| c.type_ == "Synced");
        assert_eq!(
            synced.map(|c| c.reason.as_str()),
            Some("ForeignObjectExists")
        );
        // Nothing stored yet: Synced says it waits.
        let first = build(None, &observed(&v, &listed, &hashes, &restarted), None);
        let synced = first.conditions.iter().find(|c| c.type_ == "Synced");
        assert_eq!(synced.map(|c| c.reason.as_str()), Some("Pending"));
    }

    #[test]
    fn the_conflict_total_is_always_serialised() {
        let json = serde_json::to_value(BindingStatus::default()).expect("serialisable");
        assert_eq!(json["conflictCount"], 0);
    }

    #[test]
    fn rebuilding_an_unchanged_status_compares_equal() {
        let listed = vec!["a.x".to_string()];
        let hashes = BTreeMap::from([("a.x".into(), "h".into())]);
        let summary = Summary::default();
        let (ready, not_ready) = (verdict(true), verdict(false));
        let first = build(None, &observed(&ready, &listed, &hashes, &summary), Some(1));
        let again = build(
            Some(&first),
            &observed(&ready, &listed, &hashes, &summary),
            Some(1),
        );
        assert_eq!(first, again, "no write when nothing changed");
        let flipped = build(
            Some(&first),
            &observed(&not_ready, &listed, &hashes, &summary),
            Some(1),
        );
        assert_ne!(first, flipped);
    }

    #[test]
    fn the_related_condition_follows_the_pass() {
        let listed = vec!["a.x".to_string()];
        let hashes = BTreeMap::new();
        let summary = Summary::default();
        let v = verdict(true);
        let failed = Related::Ran(Desired::falsy(
            ConditionType::RelatedResourcesSynced,
            Reason::Forbidden,
            "listing related secrets: forbidden",
        ));
        let mut o = observed(&v, &listed, &hashes, &summary);
        o.related = &failed;
        let s = build(None, &o, None);
        let has = |s: &BindingStatus, t: ConditionType| {
            s.conditions.iter().any(|c| c.type_ == t.as_str())
        };
        assert!(has(&s, ConditionType::RelatedResourcesSynced));
        assert!(conditions::is_true(
            &s.conditions,
            ConditionType::PermissionDenied
        ));
        o.related = &Related::NotRun;
        let kept = build(Some(&s), &o, None);
        assert!(has(&kept, ConditionType::RelatedResourcesSynced), "kept");
        o.related = &Related::NotDeclared;
        let removed = build(Some(&kept), &o, None);
        assert!(!has(&removed, ConditionType::RelatedResourcesSynced));
    }

    #[test]
    fn a_dropped_api_stays_bound_while_its_drain_is_pending() {
        let hashes = BTreeMap::from([("a.x".into(), "h".into()), ("b.x".into(), "h".into())]);
        let listed = vec!["a.x".to_string(), "b.x".to_string()];
        let summary = Summary::default();
        let v = verdict(true);
        let old = build(None, &observed(&v, &listed, &hashes, &summary), Some(1));
        // b.x is no longer listed.
        let mut new = build(
            Some(&old),
            &observed(&v, &listed[..1], &hashes, &summary),
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
        let v = verdict(false);
        let summary = Summary::default();
        let s = build(
            None,
            &observed(&v, &["a.x".into()], &BTreeMap::new(), &summary),
            None,
        );
        assert!(s.bound_apis.is_empty());
        assert!(!conditions::is_true(
            &s.conditions,
            ConditionType::Conflicts
        ));
    }
}
