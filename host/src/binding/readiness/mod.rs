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

mod api;

pub use api::is_definitive;
use api::{problem, released, state_for};

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

#[cfg(test)]
mod tests;
