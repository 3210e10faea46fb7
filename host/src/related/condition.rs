//! What a related pass tells the operator: `RelatedResourcesSynced`, with a reason that tells
//! the cases apart and a message saying what to do.
//!
//! ```text
//! Error ─▶ 403 anywhere ──────────────▶ Forbidden            (grant RBAC)
//!       ─▶ no answer from a cluster ──▶ ProviderUnreachable  (retrying; check the network)
//!       ─▶ related-selection policy ──▶ PolicyFailed         (fix or replace the module)
//!       ─▶ anything else ─────────────▶ CopyFailed
//! ```
//!
//! A failed pass is retried with the binding's backoff; the condition stays until a pass
//! succeeds.

use crate::api::{ConditionType, Reason};
use crate::conditions::Desired;
use crate::k8s::{RequestFailure, request_failure};

use super::Error;

/// `RelatedResourcesSynced=True` after a related pass that copied, skipped and deleted what it
/// should.
pub fn related_synced(entries: usize) -> Desired {
    Desired::truthy(
        ConditionType::RelatedResourcesSynced,
        Reason::AsExpected,
        format!("{entries} related resource entr(y/ies) copied; stale copies removed"),
    )
}

/// `RelatedResourcesSynced=False` for a related pass in which `failed` copies (or entries)
/// failed, the first with `error`; the others were copied.
pub fn related_partly_failed(failed: usize, error: &Error) -> Desired {
    let mut condition = related_failed(error);
    condition.message = format!(
        "{failed} related cop(y/ies) failed, the others were copied; first: {}",
        condition.message
    );
    condition
}

/// `RelatedResourcesSynced=False` for a related pass that failed with `error`.
pub fn related_failed(error: &Error) -> Desired {
    let (reason, advice) = match (error.is_policy(), request_failure(error.kube_error())) {
        (true, _) => (
            Reason::PolicyFailed,
            "the related-selection policy module failed; see the konnector log, and fix or \
             replace the module",
        ),
        (false, RequestFailure::Forbidden) => (
            Reason::Forbidden,
            "grant the identity that was refused list/get/create/patch/delete on that kind: the \
             Connection's provider identity on the provider (see `kubectl kbind provider-rbac`), \
             the konnector on the consumer (the chart's `rbac.related`)",
        ),
        (false, RequestFailure::Unreachable) => (
            Reason::ProviderUnreachable,
            "the cluster did not answer; retrying — check the provider endpoint and network",
        ),
        (false, RequestFailure::Other) => (
            Reason::CopyFailed,
            "retrying; see the konnector log if it persists",
        ),
    };
    Desired::falsy(
        ConditionType::RelatedResourcesSynced,
        reason,
        format!("{error}; {advice}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::testing::api_error;

    #[test]
    fn a_refused_related_copy_is_forbidden_and_says_what_to_grant() {
        let c = related_failed(&Error::ApplyRelated {
            resource: "secrets",
            object: "ns/s".into(),
            source: api_error(403, "Forbidden"),
        });
        assert!(!c.status);
        assert_eq!(c.type_, ConditionType::RelatedResourcesSynced);
        assert_eq!(c.reason, Reason::Forbidden);
        assert!(c.message.starts_with("applying related secrets copy"));
        assert!(c.message.contains("grant"));
    }

    #[test]
    fn other_related_failures_are_told_apart() {
        let unreachable = related_failed(&Error::ListRelated {
            resource: "configmaps",
            source: kube::Error::LinesCodecMaxLineLengthExceeded,
        });
        assert_eq!(unreachable.reason, Reason::ProviderUnreachable);
        let invalid = related_failed(&Error::ApplyRelated {
            resource: "configmaps",
            object: "ns/c".into(),
            source: api_error(422, "Invalid"),
        });
        assert_eq!(invalid.reason, Reason::CopyFailed);
    }
}
