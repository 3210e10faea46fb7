//! The readiness table: each fact about a Connection and its APIs, and the verdict it gives.

use super::*;
use crate::api::ResourceScope;

const W: &str = "widgets.example.org";

fn exported(names: &[&str]) -> ConnectionState {
    ConnectionState::Engaged {
        exported: names
            .iter()
            .map(|n| ExportedApi {
                name: (*n).into(),
                group: "example.org".into(),
                resource: "widgets".into(),
                scope: ResourceScope::Namespaced,
                versions: vec!["v1".into()],
            })
            .collect(),
    }
}

fn target() -> ApiTarget {
    ApiTarget {
        group: "example.org".into(),
        version: "v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
        namespaced: true,
        status_subresource: true,
    }
}

fn established(name: &str) -> ApiFacts {
    ApiFacts {
        name: name.into(),
        crd: Some(CrdFacts {
            established: true,
            pinned_to: Some("p".into()),
            target: Some(target()),
            versions_note: None,
        }),
        index_pin: Some("p".into()),
        install_problem: None,
    }
}

/// The CRD facts of `facts`, which `established` always has.
fn crd(facts: &mut ApiFacts) -> &mut CrdFacts {
    facts
        .crd
        .get_or_insert_with(|| unreachable!("established facts have a CRD"))
}

/// The verdict on binding `W` through Connection `p`, engaged and exporting it, with
/// `established(W)` changed by `change`.
fn judged(change: impl FnOnce(&mut ApiFacts)) -> Verdict {
    let mut facts = established(W);
    change(&mut facts);
    evaluate("p", &exported(&[W]), &[facts])
}

/// Checks that `v` is not Ready for `reason`, with a message naming each of `mentions`.
fn not_ready(v: &Verdict, reason: Reason, mentions: &[&str]) {
    assert!(!v.is_ready(), "{v:?}");
    assert_eq!(v.ready.reason, reason, "{v:?}");
    for mention in mentions {
        assert!(
            v.ready.message.contains(mention),
            "{v:?} does not name {mention:?}"
        );
    }
}

#[test]
fn ready_when_connection_engaged_api_exported_and_crd_established() {
    let v = evaluate("p", &exported(&[W]), &[established(W)]);
    assert!(v.is_ready());
    assert_eq!(v.ready.reason, Reason::AsExpected);
    assert_eq!(v.targets.get(W), Some(&Some(target())));
}

#[test]
fn versions_left_out_are_named_in_the_ready_message() {
    let note = "versions v1beta1 left out: webhook; only v1 is served";
    let v = judged(|f| crd(f).versions_note = Some(note.into()));
    assert!(v.is_ready(), "{v:?}");
    assert!(v.ready.message.contains(&format!("{W}: {note}")), "{v:?}");
}

#[test]
fn missing_connection_says_so() {
    let v = evaluate("p", &ConnectionState::NotFound, &[established(W)]);
    assert_eq!(v.ready.reason, Reason::ConnectionNotFound);
    assert!(!v.is_ready());
    assert_eq!(v.targets.get(W), Some(&None));
}

#[test]
fn connection_not_ready_says_so() {
    let v = evaluate("p", &ConnectionState::NotReady, &[established(W)]);
    assert_eq!(v.ready.reason, Reason::ConnectionNotReady);
}

/// Facts of an API never bound through `p`: no consumer CRD yet.
fn never_installed(name: &str) -> ApiFacts {
    ApiFacts {
        crd: None,
        ..established(name)
    }
}

#[test]
fn a_binding_with_one_typod_api_syncs_the_other() {
    const TYPO: &str = "gadgetz.example.org";
    let v = evaluate(
        "p",
        &exported(&[W]),
        &[established(W), never_installed(TYPO)],
    );
    not_ready(&v, Reason::APIsNotReady, &[TYPO, "APINotExported"]);
    assert!(!v.ready.message.contains(&format!("{W} (")), "{v:?}");
    assert_eq!(
        v.targets.get(W),
        Some(&Some(target())),
        "the good API syncs"
    );
    assert_eq!(v.targets.get(TYPO), Some(&None));
    assert_eq!(v.apis[W].state, ApiState::Syncing);
    assert_eq!(v.apis[TYPO].state, ApiState::Failed);
    assert_eq!(v.apis[TYPO].reason, Reason::APINotExported);
    assert_eq!(v.failed().collect::<Vec<_>>(), [TYPO]);
    assert!(v.syncs_any());
    assert_eq!(v.not_syncing(), [TYPO]);
}

#[test]
fn a_waiting_api_beside_a_syncing_one_is_waiting_not_failed() {
    const G: &str = "gadgets.example.org";
    let mut pending = established(G);
    pending.crd = None;
    let v = evaluate("p", &exported(&[W, G]), &[established(W), pending]);
    not_ready(&v, Reason::APIsNotReady, &[G, "Pending"]);
    assert_eq!(v.apis[G].state, ApiState::Waiting);
    assert_eq!(v.failed().count(), 0, "a waiting API keeps its pin");
}

#[test]
fn when_no_api_syncs_the_first_failing_reason_stands() {
    let v = evaluate("p", &exported(&[]), &[never_installed(W)]);
    not_ready(&v, Reason::APINotExported, &[W]);
    assert!(!v.syncs_any());
}

#[test]
fn the_connection_decides_every_apis_state_alike() {
    let apis = [established(W)];
    let gone = evaluate("p", &ConnectionState::NotFound, &apis);
    assert_eq!(
        gone.apis[W].state,
        ApiState::Failed,
        "a Connection absent is definitive"
    );
    let down = evaluate("p", &ConnectionState::NotReady, &apis);
    assert_eq!(down.apis[W].state, ApiState::Waiting, "not Ready is a wait");
    let refused = ConnectionState::NamespaceNotAllowed {
        message: "no".into(),
    };
    let refused = evaluate("p", &refused, &apis);
    assert_eq!(refused.apis[W].state, ApiState::Failed);
}

#[test]
fn definitive_reasons_are_exactly_those_a_person_must_fix() {
    for reason in [
        Reason::APINotExported,
        Reason::CRDNotManaged,
        Reason::APIBoundElsewhere,
        Reason::SchemaInstallFailed,
        Reason::NameCollision,
        Reason::NamespaceNotAllowed,
        Reason::ConnectionNotFound,
    ] {
        assert!(is_definitive(reason), "{reason:?}");
    }
    for reason in [
        Reason::Pending,
        Reason::SchemaNotEstablished,
        Reason::ConnectionNotReady,
        Reason::APIReleased,
    ] {
        assert!(!is_definitive(reason), "{reason:?}");
    }
}

#[test]
fn api_pinned_to_another_connection_by_crd_annotation_is_bound_elsewhere() {
    let v = judged(|f| crd(f).pinned_to = Some("q".into()));
    not_ready(&v, Reason::APIBoundElsewhere, &["Connection q"]);
}

#[test]
fn api_bound_through_another_connection_by_an_older_binding_is_bound_elsewhere() {
    let v = judged(|f| f.index_pin = Some("q".into()));
    not_ready(&v, Reason::APIBoundElsewhere, &[]);
}

#[test]
fn failed_schema_installation_says_why() {
    let problem = (Reason::SchemaInstallFailed, "no provider CRD".into());
    let v = judged(|f| f.install_problem = Some(problem));
    not_ready(&v, Reason::SchemaInstallFailed, &["no provider CRD"]);
}

#[test]
fn missing_or_unestablished_crd_is_pending() {
    not_ready(&judged(|f| f.crd = None), Reason::Pending, &[]);
    let v = judged(|f| crd(f).established = false);
    not_ready(&v, Reason::SchemaNotEstablished, &[]);
}

#[test]
fn every_problem_is_in_the_message_and_the_first_gives_the_reason() {
    let mut pending = established("gadgets.example.org");
    pending.crd = None;
    let v = evaluate(
        "p",
        &exported(&["gadgets.example.org"]),
        &[never_installed(W), pending],
    );
    assert_eq!(v.ready.reason, Reason::APINotExported);
    assert!(
        v.ready
            .message
            .contains("waiting for CustomResourceDefinition gadgets")
    );
}

#[test]
fn crd_the_consumer_made_itself_is_not_managed_and_selects_nothing() {
    let v = judged(|f| crd(f).pinned_to = None);
    let mentions = ["not installed by kbind", "core.kbind.io/connection=p"];
    not_ready(&v, Reason::CRDNotManaged, &mentions);
    assert_eq!(v.targets.get(W), Some(&None));
}

#[test]
fn kbind_and_builtin_groups_are_not_managed_even_when_exported() {
    for api in ["clusterbindings.core.kbind.io", "deployments.apps", "pods"] {
        let v = evaluate("p", &exported(&[api]), &[established(api)]);
        assert_eq!(v.ready.reason, Reason::CRDNotManaged, "{api}");
        assert!(v.ready.message.contains("belongs to kbind or Kubernetes"));
    }
}

#[test]
fn an_unexported_api_bound_here_is_released_and_the_others_stay_ready() {
    const G: &str = "gadgets.example.org";
    let v = evaluate("p", &exported(&[W]), &[established(W), established(G)]);
    assert!(v.is_ready(), "{v:?}");
    assert_eq!(v.released, [G]);
    assert_eq!(v.targets.get(W), Some(&Some(target())));
    assert_eq!(
        v.targets.get(G),
        Some(&None),
        "a released API has no syncer"
    );
    assert!(v.ready.message.contains(G));
}

#[test]
fn every_api_released_is_not_ready_for_a_passing_reason() {
    let v = evaluate("p", &exported(&[]), &[established(W)]);
    not_ready(&v, Reason::APIReleased, &[W]);
    assert_eq!(v.released, [W]);
    assert!(
        crate::binding::status::summary::is_waiting(v.ready.reason.as_str()),
        "its author has nothing to fix"
    );
}

#[test]
fn an_api_never_bound_here_is_not_exported_rather_than_released() {
    let mut unpinned = established(W);
    crd(&mut unpinned).pinned_to = None;
    let mut elsewhere = established(W);
    crd(&mut elsewhere).pinned_to = Some("q".into());
    let mut absent = established(W);
    absent.crd = None;
    for facts in [unpinned, elsewhere, absent] {
        let v = evaluate("p", &exported(&[]), &[facts]);
        assert_eq!(v.ready.reason, Reason::APINotExported, "{v:?}");
        assert!(v.released.is_empty());
    }
}

#[test]
fn a_connection_not_ready_releases_nothing() {
    let v = evaluate("p", &ConnectionState::NotReady, &[established(W)]);
    assert!(v.released.is_empty(), "an outage is not an un-export");
}

#[test]
fn a_namespace_the_connection_does_not_allow_says_so_before_anything_else() {
    let state = ConnectionState::NamespaceNotAllowed {
        message: "namespace team-b does not match".into(),
    };
    let v = evaluate("p", &state, &[established(W)]);
    assert_eq!(v.ready.reason, Reason::NamespaceNotAllowed);
    assert!(!v.is_ready());
    assert!(v.ready.message.contains("team-b"));
    assert_eq!(v.targets.get(W), Some(&None));
}
