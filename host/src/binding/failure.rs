//! What a failed related-resource pass or teardown tells the operator: the binding error as a
//! condition with a reason to tell cases apart and a message saying what to do.
//!
//! ```text
//! Error ─▶ 403 anywhere ──────────────▶ Forbidden            (grant RBAC)
//!       ─▶ no answer from a cluster ──▶ ProviderUnreachable  (retrying; check the network)
//!       ─▶ related-selection policy ──▶ PolicyFailed         (fix or replace the module)
//!       ─▶ anything else ─────────────▶ CopyFailed / DeleteFailed
//! ```
//!
//! Both are retried with backoff; the condition stays until a pass succeeds.

use crate::api::{ConditionType, Reason};
use crate::conditions::Desired;
use crate::k8s::ApiErrorExt;

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
    let (reason, advice) = match classify(error) {
        Class::Forbidden => (
            Reason::Forbidden,
            "grant the identity that was refused list/get/create/patch/delete on that kind: the \
             Connection's provider identity on the provider (see `kubectl kbind provider-rbac`), \
             the konnector on the consumer (the chart's `rbac.related`)",
        ),
        Class::Unreachable => (
            Reason::ProviderUnreachable,
            "the cluster did not answer; retrying — check the provider endpoint and network",
        ),
        Class::Policy => (
            Reason::PolicyFailed,
            "the related-selection policy module failed; see the konnector log, and fix or \
             replace the module",
        ),
        Class::Other => (
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

/// `TeardownFailed=True` for a teardown attempt that failed with `error`: the cleanup finalizer
/// stays and the teardown is retried.
pub fn teardown_failed(error: &Error) -> Desired {
    let (reason, advice) = match classify(error) {
        Class::Forbidden => (
            Reason::Forbidden,
            "grant the refused identity delete on that kind (the Connection's provider identity \
             for provider copies), or set core.kbind.io/deletion-policy=Orphan on instances whose \
             provider copy should stay",
        ),
        Class::Unreachable => (
            Reason::ProviderUnreachable,
            "the cluster did not answer; retrying — the binding stays until its copies can be \
             deleted",
        ),
        Class::Policy | Class::Other => (
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
pub fn drain_failed(error: &Error) -> Desired {
    let (reason, advice) = match classify(error) {
        Class::Forbidden => (
            Reason::Forbidden,
            "grant the refused identity get and delete on that kind (the Connection's provider \
             identity for provider copies), or set core.kbind.io/deletion-policy=Orphan on \
             instances whose provider copy should stay",
        ),
        Class::Unreachable => (
            Reason::ProviderUnreachable,
            "the cluster did not answer; retrying — instances keep their finalizer until their \
             copies are checked",
        ),
        Class::Policy | Class::Other => (
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

enum Class {
    Forbidden,
    Unreachable,
    Policy,
    Other,
}

fn classify(error: &Error) -> Class {
    match error {
        Error::RelatedPolicy(_) => return Class::Policy,
        Error::DrainIncomplete { first, .. } => return classify(first),
        Error::ProviderIdentity { source, .. } if source.is_forbidden() => {
            return Class::Forbidden;
        }
        _ => {}
    }
    match kube_error(error) {
        Some(e) if e.is_forbidden() => Class::Forbidden,
        Some(kube::Error::Api(_)) | None => Class::Other,
        Some(_) => Class::Unreachable,
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
        | Error::ListRelated { source: e, .. }
        | Error::ApplyRelated { source: e, .. }
        | Error::ReadRelated { source: e, .. }
        | Error::DeleteRelated { source: e, .. }
        | Error::CreateNamespace { source: e, .. }
        | Error::ListInstances { source: e, .. }
        | Error::DeleteProviderCopy { source: e, .. }
        | Error::ReadProviderCopy { source: e, .. }
        | Error::ReleaseFinalizer { source: e, .. }
        | Error::DeleteCrd { source: e, .. } => Some(e),
        Error::ProviderIdentity { source, .. } => source.kube_error(),
        Error::MissingName
        | Error::WaitingForSyncers(_)
        | Error::ShardLost(_)
        | Error::DrainIncomplete { .. }
        | Error::RelatedPolicy(_)
        | Error::BuildRequest(_)
        | Error::Finalizer(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure("refused", reason).with_code(code),
        ))
    }

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
