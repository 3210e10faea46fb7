//! When is a binding Ready, and if not, which reason says why. Pure: the controller gathers
//! the facts (Connection, engagement, consumer CRDs, the index's pin) and this module judges.
//!
//! ```text
//! Connection exists? ── no ──▶ ConnectionNotFound
//!   │ lets this namespace bind (bindingNamespaceSelector)? ── no ──▶ NamespaceNotAllowed
//!   │ engaged (Ready)? ── no ──▶ ConnectionNotReady
//!   ▼ for every listed API:
//!   in a group kbind never touches (core.kbind.io, built-in)? ── yes ──▶ CRDNotManaged
//!   exported by it? ── no ──▶ consumer CRD kbind's for this Connection? ── yes ──▶ released
//!                                                                 └ no ──▶ APINotExported
//!   served by this Connection (CRD annotation, oldest binding)? ── no ──▶ APIBoundElsewhere
//!   consumer CRD there without kbind's annotation? ── yes ──▶ CRDNotManaged
//!   installed (pullPolicy Bound)? ── no ──▶ SchemaInstallFailed / SchemaNotEstablished
//!   consumer CRD there? ── no ──▶ Pending;  Established? ── no ──▶ SchemaNotEstablished
//!   ▼
//! Ready=True, with the resolved target of every API that is not released (and, in the
//! message, the versions a consumer CRD leaves out and why)
//! ```
//!
//! Judged API by API: an API that passes every check keeps its target, and so keeps syncing
//! (with the binding's related resources), while another listed API fails; the binding is then
//! `Ready=False`, reason `APIsNotReady`, naming each failing API and its reason. Each API's
//! own state ([`ApiVerdict`]) goes to its `boundAPIs` entry, where the teardown rule
//! ([`super::teardown::coverage`]) reads whether the binding still counts for it.
//!
//! A released API (the provider stopped exporting an API bound here) is not a problem the
//! binding's author must fix: it has no target (its syncer stops) but stays listed, so it
//! stays pinned to this Connection, and the binding's other APIs keep syncing. Only when
//! every listed API is released is the binding `Ready=False` with reason `APIReleased`.

use std::collections::BTreeMap;

use crate::api::{ApiState, ConditionType, ExportedApi, Reason};
use crate::conditions::Desired;
use crate::schema::ApiTarget;
use crate::schema::Refusal;
use crate::schema::managed::{api_group, is_protected_api};

/// What the engagement registry and the consumer say about the referenced Connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum ConnectionState {
    /// No Connection object of that name.
    NotFound,
    /// The Connection exists but its `bindingNamespaceSelector` leaves this binding's
    /// namespace out; the message says why.
    NamespaceNotAllowed {
        /// What the operator reads in the condition.
        message: String,
    },
    /// The Connection exists but is not engaged (not Ready).
    NotReady,
    /// The Connection is engaged; these are the APIs its provider exports.
    Engaged {
        /// Exported APIs as last discovered.
        exported: Vec<ExportedApi>,
    },
}

/// What the consumer cluster has for one listed API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct CrdFacts {
    /// The CRD has `Established=True`.
    pub established: bool,
    /// Its `core.kbind.io/connection` annotation, if any.
    pub pinned_to: Option<String>,
    /// The resolved target, when a served version is also exported.
    pub target: Option<ApiTarget>,
    /// Which provider versions the CRD leaves out and why (`schema::versions`), if any.
    pub versions_note: Option<String>,
}

/// The facts about one listed API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ApiFacts {
    /// `<plural>.<group>`.
    pub name: String,
    /// The consumer CRD, if it exists.
    pub crd: Option<CrdFacts>,
    /// The Connection that the binding index says serves this API (this binding included).
    pub index_pin: Option<String>,
    /// Why installing its consumer CRD (`pullPolicy: Bound`) failed, if it did.
    pub install_problem: Option<(Reason, String)>,
}

/// The judgement on one listed API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ApiVerdict {
    /// Syncing, waiting, released or failed.
    pub state: ApiState,
    /// Why it is not syncing (`AsExpected` when it is).
    pub reason: Reason,
    /// What the operator reads about it.
    pub message: String,
}

/// The judgement on one binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Verdict {
    /// The `Ready` condition to set.
    pub ready: Desired,
    /// Every listed API with its target, resolved for the APIs that sync (a released or
    /// failing API has none).
    pub targets: BTreeMap<String, Option<ApiTarget>>,
    /// The listed APIs that are released (see [`released`]), sorted.
    pub released: Vec<String>,
    /// Every listed API's own state.
    pub apis: BTreeMap<String, ApiVerdict>,
}

impl Verdict {
    /// Whether the binding is Ready.
    pub(super) fn is_ready(&self) -> bool {
        self.ready.status
    }

    /// Whether at least one listed API syncs (then related resources run too).
    pub(super) fn syncs_any(&self) -> bool {
        self.targets.values().any(Option::is_some)
    }

    /// The listed APIs with no syncer: released, waiting or failed.
    pub(super) fn not_syncing(&self) -> Vec<String> {
        let idle = self.targets.iter().filter(|(_, t)| t.is_none());
        idle.map(|(name, _)| name.clone()).collect()
    }

    /// The listed APIs that failed definitively: the binding neither pins them to its
    /// Connection nor counts as covering them.
    pub(super) fn failed(&self) -> impl Iterator<Item = &str> {
        let failed = self
            .apis
            .iter()
            .filter(|(_, v)| v.state == ApiState::Failed);
        failed.map(|(name, _)| name.as_str())
    }
}

/// Whether a binding that is not Ready for `reason` can never sync the API as written: its
/// author (or the provider's, or the Connection's) must change something. Waiting reasons
/// (`Pending`, `SchemaNotEstablished`, `ConnectionNotReady`, `APIReleased`) are not.
pub fn is_definitive(reason: Reason) -> bool {
    matches!(
        reason,
        Reason::APINotExported
            | Reason::CRDNotManaged
            | Reason::APIBoundElsewhere
            | Reason::PinnedConnectionGone
            | Reason::SchemaInstallFailed
            | Reason::NameCollision
            | Reason::NamespaceNotAllowed
            | Reason::ConnectionNotFound
    )
}

/// The state of an API not syncing for `reason`.
fn state_for(reason: Reason) -> ApiState {
    if is_definitive(reason) {
        ApiState::Failed
    } else {
        ApiState::Waiting
    }
}

/// Whether `api` is released: the engaged Connection `connection` no longer exports it, yet its
/// consumer CRD is kbind's for that Connection (it was bound through it). A listed API that
/// was never exported (a typo, or a CRD of the consumer's own) is not released: that is
/// `APINotExported`, for the binding's author to fix.
pub(super) fn released(connection: &str, exported: &[ExportedApi], api: &ApiFacts) -> bool {
    !is_protected_api(&api.name)
        && !exported.iter().any(|e| e.name == api.name)
        && api
            .crd
            .as_ref()
            .is_some_and(|c| c.pinned_to.as_deref() == Some(connection))
}

/// Judges a binding that references `connection`.
pub(super) fn evaluate(connection: &str, state: &ConnectionState, apis: &[ApiFacts]) -> Verdict {
    // The Connection itself stops every API alike.
    let whole = |reason: Reason, message: String| Verdict {
        targets: apis.iter().map(|a| (a.name.clone(), None)).collect(),
        released: Vec::new(),
        apis: apis
            .iter()
            .map(|a| {
                let verdict = ApiVerdict {
                    state: state_for(reason),
                    reason,
                    message: message.clone(),
                };
                (a.name.clone(), verdict)
            })
            .collect(),
        ready: Desired::falsy(ConditionType::Ready, reason, message),
    };
    let exported = match state {
        ConnectionState::NotFound => {
            let message = format!("Connection {connection} does not exist");
            return whole(Reason::ConnectionNotFound, message);
        }
        ConnectionState::NamespaceNotAllowed { message } => {
            return whole(Reason::NamespaceNotAllowed, message.clone());
        }
        ConnectionState::NotReady => {
            let message = format!("Connection {connection} is not Ready");
            return whole(Reason::ConnectionNotReady, message);
        }
        ConnectionState::Engaged { exported } => exported,
    };
    let mut problems: Vec<(String, Reason, String)> = Vec::new();
    let mut notes = Vec::new();
    let mut targets = BTreeMap::new();
    let mut released_apis = Vec::new();
    let mut judged = BTreeMap::new();
    for api in apis {
        let name = &api.name;
        let mut target = None;
        let problem = problem(connection, exported, api);
        if released(connection, exported, api) {
            released_apis.push(name.clone());
            judged.insert(
                name.clone(),
                ApiVerdict {
                    state: ApiState::Released,
                    reason: Reason::APIReleased,
                    message: format!("{name} is no longer exported by Connection {connection}"),
                },
            );
        } else if let Some((reason, message)) = problem {
            judged.insert(
                name.clone(),
                ApiVerdict {
                    state: state_for(reason),
                    reason,
                    message: message.clone(),
                },
            );
            problems.push((name.clone(), reason, message));
        } else if let Some(CrdFacts {
            target: Some(t),
            versions_note,
            ..
        }) = &api.crd
        {
            target = Some(t.clone());
            notes.extend(versions_note.iter().map(|note| format!("{name}: {note}")));
            judged.insert(
                name.clone(),
                ApiVerdict {
                    state: ApiState::Syncing,
                    reason: Reason::AsExpected,
                    message: format!("bound through Connection {connection}"),
                },
            );
        }
        targets.insert(name.clone(), target);
    }
    released_apis.sort();
    released_apis.dedup();
    let syncing = targets.values().filter(|t| t.is_some()).count();
    let ready = match problems.first() {
        None if !apis.is_empty() && released_apis.len() == targets.len() => Desired::falsy(
            ConditionType::Ready,
            Reason::APIReleased,
            format!(
                "every listed API is released (no longer exported by Connection {connection}): {}; nothing syncs, nothing is deleted, sync resumes when the provider exports them again",
                released_apis.join(", ")
            ),
        ),
        None if !released_apis.is_empty() => Desired::truthy(
            ConditionType::Ready,
            Reason::AsExpected,
            format!(
                "the APIs are bound through Connection {connection}, except the released {}",
                released_apis.join(", ")
            ),
        ),
        None => Desired::truthy(
            ConditionType::Ready,
            Reason::AsExpected,
            std::iter::once(format!(
                "all APIs are bound through Connection {connection}"
            ))
            .chain(notes)
            .collect::<Vec<_>>()
            .join("; "),
        ),
        // Some APIs sync: they go on, and the binding names every one that does not.
        Some(_) if syncing > 0 => Desired::falsy(
            ConditionType::Ready,
            Reason::APIsNotReady,
            format!(
                "{} of {} listed API(s) not ready, the others sync through Connection {connection}: {}",
                problems.len(),
                targets.len(),
                problems
                    .iter()
                    .map(|(api, reason, message)| format!("{api} ({}): {message}", reason.as_str()))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        ),
        Some((_, reason, _)) => Desired::falsy(
            ConditionType::Ready,
            *reason,
            problems
                .iter()
                .map(|(_, _, m)| m.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        ),
    };
    Verdict {
        ready,
        targets,
        released: released_apis,
        apis: judged,
    }
}

/// Why `api` cannot sync through the engaged `connection` exporting `exported`, if it cannot
/// (a released API aside, which [`released`] tells).
fn problem(connection: &str, exported: &[ExportedApi], api: &ApiFacts) -> Option<(Reason, String)> {
    let name = &api.name;
    if is_protected_api(name) {
        let refusal = Refusal::ProtectedGroup {
            api: name.clone(),
            group: api_group(name).to_string(),
        };
        return Some((Reason::CRDNotManaged, refusal.to_string()));
    }
    if !exported.iter().any(|e| e.name == *name) {
        let message = format!("{name} is not exported by Connection {connection}");
        return Some((Reason::APINotExported, message));
    }
    let pinned_to = api.crd.as_ref().map(|c| c.pinned_to.as_deref());
    if let Some(Some(other)) = pinned_to.filter(|p| p.is_some_and(|o| o != connection)) {
        // Pinned to a Connection that is gone, and not taken over: the handover says how.
        if let Some(gone @ (Reason::PinnedConnectionGone, _)) = &api.install_problem {
            return Some(gone.clone());
        }
        let message = format!("{name} is installed for Connection {other}");
        return Some((Reason::APIBoundElsewhere, message));
    }
    if pinned_to == Some(None) {
        let refusal = Refusal::NotManaged {
            crd: name.clone(),
            connection: connection.to_string(),
        };
        return Some((Reason::CRDNotManaged, refusal.to_string()));
    }
    if let Some(other) = api.index_pin.as_deref().filter(|o| *o != connection) {
        let message = format!("{name} is already bound through Connection {other}");
        return Some((Reason::APIBoundElsewhere, message));
    }
    if let Some(problem) = &api.install_problem {
        return Some(problem.clone());
    }
    match &api.crd {
        None => Some((
            Reason::Pending,
            format!("waiting for CustomResourceDefinition {name} on the consumer"),
        )),
        Some(crd) if !crd.established => Some((
            Reason::SchemaNotEstablished,
            format!("CustomResourceDefinition {name} is not Established yet"),
        )),
        Some(CrdFacts { target: None, .. }) => Some((
            Reason::APINotExported,
            format!("no served version of {name} is exported by Connection {connection}"),
        )),
        Some(CrdFacts {
            target: Some(_), ..
        }) => None,
    }
}

#[cfg(test)]
mod tests {
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
}
