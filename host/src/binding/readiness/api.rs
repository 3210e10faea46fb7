//! One listed API's own rules: why it cannot sync through an engaged Connection, whether it is
//! released, and which reasons are definitive (a person must change something) rather than
//! waiting.

use crate::api::{ApiState, ExportedApi, Reason};
use crate::schema::Refusal;
use crate::schema::managed::{api_group, is_protected_api};

use super::{ApiFacts, CrdFacts};

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
pub(super) fn state_for(reason: Reason) -> ApiState {
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

/// Why `api` cannot sync through the engaged `connection` exporting `exported`, if it cannot
/// (a released API aside, which [`released`] tells).
pub(super) fn problem(
    connection: &str,
    exported: &[ExportedApi],
    api: &ApiFacts,
) -> Option<(Reason, String)> {
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
