//! The registry's documented behaviour, one test each.

use super::*;
use crate::api::{InstanceCounts, Reason};

const C: &str = "provider";
const API: &str = "widgets.example.org";

fn registry() -> Outcomes {
    let outcomes = Outcomes::default();
    outcomes.listing_started(C, API);
    outcomes.listing_done(C, API);
    outcomes.record(C, API, Some("a"), "ok", Outcome::InSync);
    outcomes.record(
        C,
        API,
        Some("a"),
        "taken",
        Outcome::failure(Reason::ForeignObjectExists),
    );
    outcomes.record(
        C,
        API,
        Some("b"),
        "bad",
        Outcome::failure(Reason::ProviderRejected),
    );
    outcomes.record(C, API, None, "cluster-wide", Outcome::InSync);
    outcomes
}

#[test]
fn a_binding_summarises_its_namespace_and_a_cluster_binding_everything() {
    let outcomes = registry();
    let a = outcomes.summarise(C, [API], Some("a"));
    assert_eq!(a.in_sync(), 1);
    assert_eq!(a.conflicts(), 1);
    assert_eq!(a.failing_total(), 1);
    assert_eq!(
        a.failing[&Reason::ForeignObjectExists].examples,
        vec!["a/taken"]
    );
    let all = outcomes.summarise(C, [API], None);
    assert_eq!(all.in_sync(), 2);
    assert_eq!(all.failing_total(), 2);
    assert_eq!(all.conflicts_per_api()[API], 1);
    assert_eq!(all.failing[&Reason::ProviderRejected].count, 1);
}

#[test]
fn instances_are_counted_per_api_pending_included() {
    let outcomes = registry();
    // A re-list: "ok" keeps its outcome while it waits, "new" has none yet.
    outcomes.listing_started(C, API);
    outcomes.listed(C, API, Some("a"), "ok");
    outcomes.listed(C, API, Some("a"), "new");
    let a = outcomes.summarise(C, [API], Some("a"));
    let expected = InstanceCounts {
        synced: 1,
        conflicting: 1,
        failing: 0,
        pending: 1,
    };
    assert_eq!(a.per_api.get(API), Some(&expected));
    let all = outcomes.summarise(C, [API], None);
    assert_eq!(
        all.per_api.get(API).map(|c| (c.synced, c.failing)),
        Some((2, 1))
    );
}

#[test]
fn pending_falls_as_listed_objects_are_reconciled_attempted_or_forgotten() {
    let outcomes = Outcomes::default();
    outcomes.listing_started(C, API);
    for name in ["a", "b", "c", "d"] {
        outcomes.listed(C, API, Some("ns"), name);
    }
    outcomes.listed(C, API, Some("ns"), "a");
    outcomes.listing_done(C, API);
    let pending = |o: &Outcomes| {
        o.summarise(C, [API], Some("ns"))
            .per_api
            .get(API)
            .map(|c| c.pending)
    };
    assert_eq!(pending(&outcomes), Some(4), "listed twice counts once");
    outcomes.record(C, API, Some("ns"), "a", Outcome::InSync);
    outcomes.attempted(C, API, Some("ns"), "b");
    outcomes.forget(C, API, Some("ns"), "c");
    assert_eq!(pending(&outcomes), Some(1));
    outcomes.record(C, API, Some("ns"), "d", Outcome::Failed(Reason::Forbidden));
    let s = outcomes.summarise(C, [API], Some("ns"));
    assert_eq!(pending(&outcomes), Some(0));
    assert!(!s.settling);
    assert_eq!(
        s.forbidden().map(|f| f.examples.clone()),
        Some(vec!["ns/d".to_string()])
    );
}

#[test]
fn only_the_binding_s_connection_and_apis_count() {
    let outcomes = registry();
    let other = outcomes.summarise("other", [API], None);
    assert_eq!(other.in_sync() + other.failing_total(), 0);
    assert_eq!(
        other.conflicts_per_api(),
        BTreeMap::from([(API.to_string(), 0)])
    );
    let gadgets = outcomes.summarise(C, ["gadgets.example.org"], None);
    assert_eq!(gadgets.in_sync() + gadgets.failing_total(), 0);
    assert!(gadgets.settling, "no syncer for it");
}

#[test]
fn a_cleared_cause_and_a_deleted_instance_leave_the_summary() {
    let outcomes = registry();
    outcomes.record(C, API, Some("a"), "taken", Outcome::InSync);
    outcomes.forget(C, API, Some("b"), "bad");
    let all = outcomes.summarise(C, [API], None);
    assert_eq!(all.failing_total(), 0);
    assert_eq!(all.in_sync(), 3);
    assert_eq!(all.conflicts_per_api()[API], 0, "still listed, with zero");
}

#[test]
fn a_stopped_syncer_leaves_nothing_behind() {
    let outcomes = registry();
    outcomes.set_denied(C, API, DeniedBy::Provider, Some("forbidden".into()));
    outcomes.forget_api(C, API);
    let s = outcomes.summarise(C, [API], None);
    assert!(s.settling, "a restarted syncer starts over");
    assert_eq!(s.in_sync() + s.failing_total(), 0);
    assert!(s.denied_apis.is_empty());
}

#[test]
fn the_change_counter_moves_only_when_a_summary_can_change() {
    let outcomes = registry();
    let mut rx = outcomes.subscribe();
    rx.mark_unchanged();
    outcomes.record(C, API, Some("a"), "ok", Outcome::InSync);
    outcomes.forget(C, API, Some("a"), "never-seen");
    outcomes.set_denied(C, API, DeniedBy::Provider, None);
    assert!(!rx.has_changed().unwrap_or(true), "nothing changed");
    outcomes.record(C, API, Some("a"), "ok", Outcome::failure(Reason::Forbidden));
    assert!(rx.has_changed().unwrap_or(false));
    rx.mark_unchanged();
    outcomes.set_denied(C, API, DeniedBy::Provider, Some("no list".into()));
    assert!(rx.has_changed().unwrap_or(false));
}

#[test]
fn denials_are_reported_per_api_and_cleared() {
    let outcomes = registry();
    outcomes.set_denied(
        C,
        API,
        DeniedBy::Provider,
        Some("widgets is forbidden".into()),
    );
    let s = outcomes.summarise(C, [API], Some("a"));
    assert_eq!(s.denied_apis[API], "widgets is forbidden");
    outcomes.set_denied(C, API, DeniedBy::Provider, None);
    assert!(
        outcomes
            .summarise(C, [API], Some("a"))
            .denied_apis
            .is_empty()
    );
}

#[test]
fn an_api_settles_once_every_listed_object_was_reconciled() {
    let outcomes = Outcomes::default();
    assert!(outcomes.summarise(C, [API], None).settling, "no syncer yet");
    outcomes.listing_started(C, API);
    outcomes.listed(C, API, Some("a"), "one");
    outcomes.listed(C, API, Some("b"), "two");
    outcomes.listed(C, API, Some("c"), "failing");
    outcomes.listing_done(C, API);
    outcomes.record(C, API, Some("a"), "one", Outcome::InSync);
    outcomes.forget(C, API, Some("b"), "two");
    assert!(outcomes.summarise(C, [API], None).settling, "one left");
    let mut rx = outcomes.subscribe();
    rx.mark_unchanged();
    outcomes.attempted(C, API, Some("c"), "failing");
    assert!(!outcomes.summarise(C, [API], None).settling);
    assert!(rx.has_changed().unwrap_or(false), "settling is a change");
}

#[test]
fn a_relist_prunes_objects_that_disappeared_unseen() {
    let outcomes = registry();
    outcomes.listing_started(C, API);
    outcomes.listed(C, API, Some("a"), "ok");
    outcomes.listing_done(C, API);
    let s = outcomes.summarise(C, [API], None);
    assert!(s.settling, "ok is listed again and not yet reconciled");
    assert_eq!(s.failing_total(), 0, "taken and bad disappeared");
    outcomes.record(C, API, Some("a"), "ok", Outcome::InSync);
    let s = outcomes.summarise(C, [API], None);
    assert!(!s.settling);
    assert_eq!(s.in_sync(), 1);
}

#[test]
fn a_refused_watch_is_not_settling() {
    let outcomes = Outcomes::default();
    outcomes.set_denied(C, API, DeniedBy::Provider, Some("forbidden".into()));
    assert!(!outcomes.summarise(C, [API], None).settling);
}

#[test]
fn ownership_reasons_are_conflicts_and_the_rest_failures() {
    assert_eq!(
        Outcome::failure(Reason::OwnedByAnother),
        Outcome::Conflict(Reason::OwnedByAnother)
    );
    assert_eq!(
        Outcome::failure(Reason::PolicyFailed),
        Outcome::Failed(Reason::PolicyFailed)
    );
    assert_eq!(Outcome::InSync.reason(), None);
}
