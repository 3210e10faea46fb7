//! What an operator should do about a condition reason, in one place, and which reasons no
//! amount of waiting fixes (a wait ends early on those instead of running into `--timeout`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use konnector::api::{ConditionType, Reason};

/// Every reason the konnector writes, for lookups by the string stored in a condition.
const REASONS: &[Reason] = &[
    Reason::AsExpected,
    Reason::Pending,
    Reason::SecretNotFound,
    Reason::SecretKeyMissing,
    Reason::SecretNamespaceNotAllowed,
    Reason::KubeconfigInvalid,
    Reason::KubeconfigIncomplete,
    Reason::KubeconfigUnusable,
    Reason::ClusterIdentityChanged,
    Reason::IdentityUnavailable,
    Reason::APINotExported,
    Reason::ConnectionNotFound,
    Reason::ConnectionNotReady,
    Reason::APIBoundElsewhere,
    Reason::ForeignObjectExists,
    Reason::OwnedByAnother,
    Reason::Forbidden,
    Reason::DrainingBindings,
    Reason::SchemaInstallFailed,
    Reason::SchemaNotEstablished,
    Reason::PolicyFailed,
    Reason::PolicyUnavailable,
    Reason::PolicySwapFailed,
    Reason::ConflictsFound,
    Reason::ProviderUnreachable,
    Reason::ProviderRejected,
    Reason::NoProviderClient,
    Reason::CRDNotManaged,
    Reason::NamespaceNotAllowed,
    Reason::CopyFailed,
    Reason::DeleteFailed,
    Reason::AutoBindNameTaken,
    Reason::NameCollision,
    Reason::APIReleased,
    Reason::DiscoveryIncomplete,
    Reason::ConnectionChanged,
    Reason::IsolationChangePending,
    Reason::APIsNotReady,
    Reason::ConsumerUnreachable,
    Reason::DeletionRequested,
    Reason::PinnedConnectionGone,
    Reason::ResponseTooLarge,
    Reason::ProviderFinalizers,
];

/// The reason stored as `reason`, if the konnector knows it.
pub fn parse(reason: &str) -> Option<Reason> {
    REASONS.iter().copied().find(|r| r.as_str() == reason)
}

/// Whether a condition with this reason stays until the operator changes something
/// (credentials, the object, provider exports): waiting longer cannot make it Ready.
pub fn needs_operator(reason: &str) -> bool {
    matches!(
        parse(reason),
        Some(
            Reason::SecretKeyMissing
                | Reason::SecretNamespaceNotAllowed
                | Reason::KubeconfigInvalid
                | Reason::KubeconfigIncomplete
                | Reason::KubeconfigUnusable
                | Reason::ClusterIdentityChanged
                | Reason::APIBoundElsewhere
                | Reason::CRDNotManaged
                | Reason::NamespaceNotAllowed
                | Reason::AutoBindNameTaken
                | Reason::NameCollision
                | Reason::IsolationChangePending
                | Reason::PinnedConnectionGone
                | Reason::ResponseTooLarge
                | Reason::PolicySwapFailed
        )
    )
}

/// What to do about a condition reason, one sentence for the terminal.
pub fn what_to_do(reason: &str) -> &'static str {
    let Some(reason) = parse(reason) else {
        return "read the condition message and the konnector log (kubectl -n kbind-system logs deploy/konnector)";
    };
    match reason {
        Reason::AsExpected => "nothing: it works",
        Reason::Pending => "wait: a referenced object is not there yet and the konnector retries",
        Reason::SecretNotFound => {
            "create the credential Secret the Connection references (kubectl kbind connect does this)"
        }
        Reason::SecretKeyMissing => {
            "store the kubeconfig under the key the Connection names (default `kubeconfig`)"
        }
        Reason::SecretNamespaceNotAllowed => {
            "put the Secret in the konnector's designated namespace (--secret-namespace, default kbind) and create a new Connection referencing it"
        }
        Reason::KubeconfigInvalid => {
            "the Secret does not hold a kubeconfig: re-create it from a working provider kubeconfig"
        }
        Reason::KubeconfigIncomplete => {
            "the kubeconfig needs a current-context naming a cluster and a user"
        }
        Reason::KubeconfigUnusable => {
            "embed credentials in the kubeconfig (no file paths, exec or auth-provider plugins) and keep TLS verification on"
        }
        Reason::ClusterIdentityChanged => {
            "the credentials now reach another cluster than the one pinned: restore the original credentials, or create a new Connection"
        }
        Reason::IdentityUnavailable => {
            "check the provider is reachable and the credentials may read Namespace kube-system (kubectl kbind provider-rbac)"
        }
        Reason::APINotExported => {
            "export the API on the provider (label its CRD core.kbind.io/exported=true) or fix the API name; see `kubectl kbind status`"
        }
        Reason::ConnectionNotFound => "create the Connection first (kubectl kbind connect)",
        Reason::ConnectionNotReady => {
            "fix the Connection first: `kubectl kbind status` shows why it is not Ready"
        }
        Reason::APIBoundElsewhere => {
            "another Connection already serves this API here: bind it through that Connection or unbind it there first"
        }
        Reason::ForeignObjectExists => {
            "a provider object of that name exists without kbind's markers: review it and use --conflict-policy Adopt, or rename the instance"
        }
        Reason::OwnedByAnother => {
            "the provider object belongs to another consumer or object: rename the instance or remove the other owner"
        }
        Reason::Forbidden => {
            "grant the provider identity the permissions kbind needs (kubectl kbind provider-rbac ... | kubectl --context provider apply -f -)"
        }
        Reason::DrainingBindings => {
            "bindings still reference the Connection: unbind them (kubectl kbind unbind NAME)"
        }
        Reason::SchemaInstallFailed => {
            "read the condition message: the consumer refused the CRD (konnector RBAC on CRDs, an invalid schema)"
        }
        Reason::SchemaNotEstablished => "wait: the consumer CRD is not Established yet",
        Reason::PolicyFailed => {
            "a policy module failed: check the konnector log and the module configured for that role"
        }
        Reason::PolicyUnavailable => {
            "a module spec.policies names cannot be had or refuses its settings: push it, fix the reference, its pull Secret or its settings, or remove it from spec.policies"
        }
        Reason::PolicySwapFailed => {
            "the changed module in spec.policies failed (the message says why) and the previous one keeps running: fix the reference or its settings"
        }
        Reason::ConflictsFound => {
            "instances conflict with foreign provider objects: `kubectl kbind status` names them"
        }
        Reason::ProviderUnreachable => {
            "check the provider endpoint is reachable from the konnector Pod (network, CA, DNS)"
        }
        Reason::ConsumerUnreachable => {
            "check the consumer API server's health and its API Priority and Fairness limits for the konnector (kubectl get --raw /readyz)"
        }
        Reason::CopyFailed => {
            "a related Secret/ConfigMap could not be copied: the binding's RelatedResourcesSynced condition and Events name the object and the error"
        }
        Reason::DeleteFailed => {
            "teardown could not delete a provider copy or release a finalizer: the binding's TeardownFailed condition names the object; fix the cause and the konnector retries"
        }
        Reason::ProviderRejected => {
            "the provider refused the copy: check the instance against the provider's schema and size limits"
        }
        Reason::NoProviderClient => {
            "provider copies may remain: delete copies labelled core.kbind.io/managed=true whose UID annotations are yours, on the provider"
        }
        Reason::CRDNotManaged => {
            "the consumer CRD is not kbind's for this Connection: annotate it core.kbind.io/connection=<Connection> if kbind should manage it, or remove it"
        }
        Reason::NamespaceNotAllowed => {
            "the Connection's bindingNamespaceSelector excludes this namespace: label the namespace or bind elsewhere"
        }
        Reason::AutoBindNameTaken => {
            "a ClusterBinding named after the Connection is not autoBind's (no core.kbind.io/managed=true label): delete or rename that ClusterBinding, or turn autoBind off"
        }
        Reason::NameCollision => {
            "the API's plural, singular or kind is a name the consumer already serves (the message names the resource): ask the provider to export it under another name, and remove it from the binding"
        }
        Reason::APIReleased => {
            "nothing was deleted: export the API again on the provider to resume sync, or remove it from the binding's apis (or delete the binding) to remove it for good"
        }
        Reason::DiscoveryIncomplete => {
            "some provider API groups could not be discovered (the message names them): fix or remove the APIService that serves them on the provider (kubectl get apiservices)"
        }
        Reason::ConnectionChanged => {
            "wait: the binding drains what it bound through its previous Connection, then binds through the new one"
        }
        Reason::APIsNotReady => {
            "the APIs not named still sync; fix each named API as its reason says (kubectl kbind status shows every boundAPIs entry), or remove it from the binding's apis"
        }
        Reason::IsolationChangePending => {
            "copies never move: delete the bindings using the Connection (their copies are drained) for the new isolation to apply, or set spec.isolation back"
        }
        Reason::DeletionRequested => {
            "nothing to do here: the provider copies named go when the provider's finalizers finish; if they stay, check those finalizers on the provider"
        }
        Reason::PinnedConnectionGone => {
            "the consumer CRD is pinned to a deleted Connection of another provider: once its instances are handled, annotate the CRD core.kbind.io/connection=<this Connection> (the message says how)"
        }
        Reason::ResponseTooLarge => {
            "a provider answer exceeded a konnector cap (the message names it and its --max-* flag): shrink it on the provider, or raise the flag"
        }
        Reason::ProviderFinalizers => {
            "wait: the instance goes once the provider's controllers named in the message release its copy; to finish now and keep the copy, annotate the instance core.kbind.io/deletion-policy=Orphan"
        }
    }
}

/// Whether a condition reports a problem: a False positive condition, or a True
/// `PermissionDenied` / `Conflicts`.
pub fn is_problem(condition: &Condition) -> bool {
    let negative = [
        ConditionType::PermissionDenied,
        ConditionType::Conflicts,
        ConditionType::ProviderDegraded,
    ]
    .iter()
    .any(|t| t.as_str() == condition.type_);
    if negative {
        condition.status == "True"
    } else {
        condition.status != "True"
    }
}

/// The problem conditions, each with its reason, message and what to do, one indented block
/// per condition; empty when nothing is wrong.
pub fn explain(conditions: &[Condition]) -> String {
    conditions
        .iter()
        .filter(|c| is_problem(c))
        .map(|c| {
            format!(
                "  {}={} reason {}: {}
    what to do: {}\n",
                c.type_,
                c.status,
                c.reason,
                c.message,
                what_to_do(&c.reason)
            )
        })
        .collect()
}

/// The reason of the first problem condition that waiting cannot fix, if any.
pub fn blocking_reason(conditions: &[Condition]) -> Option<&str> {
    conditions
        .iter()
        .filter(|c| is_problem(c))
        .map(|c| c.reason.as_str())
        .find(|r| needs_operator(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_round_trips_through_its_stored_string() {
        for reason in REASONS {
            assert_eq!(parse(reason.as_str()), Some(*reason));
            assert!(!what_to_do(reason.as_str()).is_empty());
        }
        assert_eq!(parse("SomethingNew"), None);
    }

    #[test]
    fn credential_mistakes_end_a_wait_but_transient_states_do_not() {
        assert!(needs_operator("KubeconfigInvalid"));
        assert!(needs_operator("ClusterIdentityChanged"));
        assert!(needs_operator("NamespaceNotAllowed"));
        assert!(!needs_operator("Pending"));
        assert!(!needs_operator("ProviderUnreachable"));
        assert!(
            !needs_operator("Forbidden"),
            "RBAC may be applied meanwhile"
        );
        assert!(!needs_operator("SomethingNew"));
    }

    fn cond(type_: &str, status: &str, reason: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: "the message".into(),
            observed_generation: None,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
        }
    }

    #[test]
    fn only_problem_conditions_are_explained_with_what_to_do() {
        let conditions = vec![
            cond("SecretValid", "False", "KubeconfigUnusable"),
            cond("Connected", "True", "AsExpected"),
            cond("PermissionDenied", "False", "AsExpected"),
            cond("Conflicts", "True", "ConflictsFound"),
        ];
        let text = explain(&conditions);
        assert!(text.contains("SecretValid=False reason KubeconfigUnusable: the message"));
        assert!(text.contains(what_to_do("KubeconfigUnusable")));
        assert!(text.contains("Conflicts=True reason ConflictsFound"));
        assert!(!text.contains("Connected"));
        assert!(!text.contains("PermissionDenied"));
        assert_eq!(blocking_reason(&conditions), Some("KubeconfigUnusable"));
        assert_eq!(blocking_reason(&conditions[1..]), None);
    }

    #[test]
    fn unknown_reasons_point_at_the_konnector_log() {
        assert!(what_to_do("SomethingNew").contains("logs"));
    }
}
