//! What a failed teardown or drain tells the operator: the binding error as a condition with a
//! reason to tell cases apart and a message saying what to do.
//!
//! ```text
//! Error ─▶ 403 anywhere ──────────────▶ Forbidden            (grant RBAC)
//!       ─▶ no answer from a cluster ──▶ ProviderUnreachable  (retrying; check the network)
//!       ─▶ anything else ─────────────▶ DeleteFailed
//! ```
//!
//! Both are retried with backoff; the condition stays until a pass succeeds.

use crate::api::{ConditionType, Reason};
use crate::conditions::Desired;
use crate::k8s::{RequestFailure, request_failure};

use crate::binding::Error;

/// `TeardownFailed=True` for a teardown attempt that failed with `error`: the cleanup finalizer
/// stays and the teardown is retried.
pub(crate) fn teardown_failed(error: &Error) -> Desired {
    let (reason, advice) = match classify(error) {
        RequestFailure::Forbidden => (
            Reason::Forbidden,
            "grant the refused identity delete on that kind (the Connection's provider identity \
             for provider copies), or set core.kbind.io/deletion-policy=Orphan on instances whose \
             provider copy should stay",
        ),
        RequestFailure::Unreachable => (
            Reason::ProviderUnreachable,
            "the cluster did not answer; retrying — the binding stays until its copies can be \
             deleted",
        ),
        RequestFailure::Other => (
            Reason::DeleteFailed,
            "retrying; see the konnector log if it persists",
        ),
    };
    Desired::truthy(
        ConditionType::TeardownFailed,
        reason,
        format!("teardown blocked: {error}; {advice}"),
    )
}

/// `Drained=False` for a drain of dropped APIs that failed with `error`: the instances not
/// drained keep their finalizer and the drain is retried.
pub(crate) fn drain_failed(error: &Error) -> Desired {
    let (reason, advice) = match classify(error) {
        RequestFailure::Forbidden => (
            Reason::Forbidden,
            "grant the refused identity get and delete on that kind (the Connection's provider \
             identity for provider copies), or set core.kbind.io/deletion-policy=Orphan on \
             instances whose provider copy should stay",
        ),
        RequestFailure::Unreachable => (
            Reason::ProviderUnreachable,
            "the cluster did not answer; retrying — instances keep their finalizer until their \
             copies are checked",
        ),
        RequestFailure::Other => (
            Reason::DeleteFailed,
            "retrying; see the konnector log if it persists",
        ),
    };
    Desired::falsy(
        ConditionType::Drained,
        reason,
        format!("drain not finished: {error}; {advice}"),
    )
}

/// How `error` reads to an operator: a related-selection policy failure reads as any other
/// failure here (a teardown retries it the same way).
fn classify(error: &Error) -> RequestFailure {
    match error {
        Error::DrainIncomplete { first, .. } => classify(first),
        Error::ProviderIdentity { source, .. } if source.is_forbidden() => {
            RequestFailure::Forbidden
        }
        _ => request_failure(kube_error(error)),
    }
}

/// The Kubernetes client error underneath a binding error, if there is one.
fn kube_error(error: &Error) -> Option<&kube::Error> {
    match error {
        Error::ReadConnection(e)
        | Error::WriteStatus(e)
        | Error::ListBindings(e)
        | Error::ReadCredentials { source: e, .. }
        | Error::ReadNamespace { source: e, .. }
        | Error::ReadCrd { source: e, .. }
        | Error::ListInstances { source: e, .. }
        | Error::DeleteProviderCopy { source: e, .. }
        | Error::ReadProviderCopy { source: e, .. }
        | Error::ReleaseFinalizer { source: e, .. }
        | Error::DeleteCrd { source: e, .. } => Some(e),
        Error::ProviderIdentity { source, .. } => source.kube_error(),
        Error::Related(e) => e.kube_error(),
        Error::MissingName
        | Error::WaitingForSyncers(_)
        | Error::ShardLost(_)
        | Error::DrainIncomplete { .. }
        | Error::CopiesNotServed { .. }
        | Error::Handover(_)
        | Error::BuildRequest(_)
        | Error::Finalizer(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::testing::api_error;

    #[test]
    fn a_blocked_teardown_names_the_failed_step() {
        let c = teardown_failed(&Error::DeleteProviderCopy {
            name: "w".into(),
            source: api_error(403, "Forbidden"),
        });
        assert!(c.status);
        assert_eq!(c.type_, ConditionType::TeardownFailed);
        assert_eq!(c.reason, Reason::Forbidden);
        assert!(c.message.contains("deleting provider copy w"));
        assert!(c.message.contains("deletion-policy=Orphan"));
        let c = teardown_failed(&Error::DeleteCrd {
            name: "widgets.example.org".into(),
            source: api_error(500, "Invalid"),
        });
        assert_eq!(c.reason, Reason::DeleteFailed);
    }
}
