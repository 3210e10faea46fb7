//! The condition vocabulary: types and reasons shared by every controller, so that an
//! operator reading `kubectl get -o yaml` sees the same words everywhere.

/// Condition types used on Connections, bindings and bound instances.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionType {
    /// The referenced kubeconfig Secret exists and holds a usable kubeconfig.
    SecretValid,
    /// Both cluster identities were read and match the pinned UIDs.
    Connected,
    /// Exported schemas are installed on the consumer as the schema policy asks.
    SchemaInSync,
    /// The provider credentials were refused by RBAC.
    PermissionDenied,
    /// The object is fully working.
    Ready,
    /// Bound instances are synchronised (bindings) or this instance is (instances).
    Synced,
    /// Some bound instances have a provider target owned by someone else.
    Conflicts,
    /// The instances of APIs a binding stopped covering were drained through the provider.
    Drained,
    /// A binding's related Secrets/ConfigMaps were copied (and stale copies removed).
    RelatedResourcesSynced,
    /// The last teardown attempt of a deleting binding failed; it is retried.
    TeardownFailed,
    /// The autoBind ClusterBinding lists the bindable exported APIs (only on Connections with
    /// `autoBind: true`).
    AutoBindInSync,
    /// Some listed APIs are released: the provider stopped exporting them, so their sync
    /// stopped and nothing of theirs is deleted on either side.
    Released,
    /// Provider reads fail transiently (or some API groups cannot be discovered) and the
    /// Connection rides it out: still Ready and engaged until the failures outlast the grace
    /// period.
    ProviderDegraded,
    /// The isolation strategy in force (`status.isolation`) is the one `spec.isolation` asks
    /// for (only on Connections that ask for one, or whose change is pending).
    IsolationInSync,
    /// The policy modules the Connection names (`spec.policies`) run as named (only on
    /// Connections that name any).
    PoliciesInSync,
}

impl ConditionType {
    /// Every condition type, for lookups by the string stored in a condition.
    pub const ALL: [Self; 15] = [
        Self::SecretValid,
        Self::Connected,
        Self::SchemaInSync,
        Self::PermissionDenied,
        Self::Ready,
        Self::Synced,
        Self::Conflicts,
        Self::Drained,
        Self::RelatedResourcesSynced,
        Self::TeardownFailed,
        Self::AutoBindInSync,
        Self::Released,
        Self::ProviderDegraded,
        Self::IsolationInSync,
        Self::PoliciesInSync,
    ];

    /// The condition type stored as `type_`, if it is one of ours.
    pub fn parse(type_: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == type_)
    }

    /// The step of the controller this condition reports on, used as the `action` of the
    /// Events announcing it. The Event recorder folds Events of one object with the same type,
    /// reason and action into one series that keeps the first note, so two conditions failing
    /// for the same reason (a `Forbidden` related copy and a `Forbidden` teardown) must differ
    /// in action for both notes to reach `kubectl describe`.
    pub const fn action(self) -> &'static str {
        match self {
            Self::SecretValid => "ReadCredentials",
            Self::Connected => "Connect",
            Self::SchemaInSync => "InstallSchemas",
            Self::PermissionDenied => "CheckPermissions",
            Self::Ready => "Reconcile",
            Self::Synced => "Sync",
            Self::Conflicts => "DetectConflicts",
            Self::Drained => "Drain",
            Self::RelatedResourcesSynced => "CopyRelated",
            Self::TeardownFailed => "Teardown",
            Self::AutoBindInSync => "AutoBind",
            Self::Released => "Release",
            Self::ProviderDegraded => "RideOutProviderFailures",
            Self::IsolationInSync => "PlaceCopies",
            Self::PoliciesInSync => "LoadPolicies",
        }
    }

    /// The string stored in `status.conditions[].type`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::SecretValid => "SecretValid",
            Self::Connected => "Connected",
            Self::SchemaInSync => "SchemaInSync",
            Self::PermissionDenied => "PermissionDenied",
            Self::Ready => "Ready",
            Self::Synced => "Synced",
            Self::Conflicts => "Conflicts",
            Self::Drained => "Drained",
            Self::RelatedResourcesSynced => "RelatedResourcesSynced",
            Self::TeardownFailed => "TeardownFailed",
            Self::AutoBindInSync => "AutoBindInSync",
            Self::Released => "Released",
            Self::ProviderDegraded => "ProviderDegraded",
            Self::IsolationInSync => "IsolationInSync",
            Self::PoliciesInSync => "PoliciesInSync",
        }
    }
}

/// Condition reasons. Each names one case an operator has to tell apart. Ordered as declared,
/// so summaries keyed by reason list them in a stable order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// Everything is as it should be.
    AsExpected,
    /// A referenced object is not there yet; the controller retries soon.
    Pending,
    /// The kubeconfig Secret does not exist.
    SecretNotFound,
    /// The Secret exists but lacks the referenced data key.
    SecretKeyMissing,
    /// The Secret is outside the konnector's designated namespace.
    SecretNamespaceNotAllowed,
    /// The kubeconfig is not valid YAML or not a kubeconfig.
    KubeconfigInvalid,
    /// The kubeconfig names no usable current context, cluster or user.
    KubeconfigIncomplete,
    /// The kubeconfig's credentials cannot be used (file paths, exec plugins, bad certificates).
    KubeconfigUnusable,
    /// The provider (or consumer) cluster UID differs from the pinned one.
    ClusterIdentityChanged,
    /// The cluster identity could not be read.
    IdentityUnavailable,
    /// The provider does not export the API a binding lists.
    APINotExported,
    /// The Connection a binding references does not exist.
    ConnectionNotFound,
    /// The Connection a binding references is not Ready.
    ConnectionNotReady,
    /// Another Connection already serves this API on the consumer.
    APIBoundElsewhere,
    /// The provider target exists without ownership markers (and the policy is Fail).
    ForeignObjectExists,
    /// The provider target carries another consumer's or object's markers.
    OwnedByAnother,
    /// RBAC refused a request.
    Forbidden,
    /// A deleting Connection waits for bindings that still reference it.
    DrainingBindings,
    /// Schema installation on the consumer failed.
    SchemaInstallFailed,
    /// The consumer CRD exists but is not Established yet.
    SchemaNotEstablished,
    /// A policy module failed (trap, timeout, bad output).
    PolicyFailed,
    /// A policy module the Connection names can be neither pulled nor found in the cache
    /// (or is refused) and none ran before: nothing runs in its place.
    PolicyUnavailable,
    /// A changed policy module of the Connection failed to load, check or configure; the
    /// module running before keeps running.
    PolicySwapFailed,
    /// Some instances conflict with foreign provider objects.
    ConflictsFound,
    /// The provider API server could not be reached.
    ProviderUnreachable,
    /// The provider API server refused an instance copy (invalid against its schema, too
    /// large).
    ProviderRejected,
    /// A drain had no provider client (Connection gone, credentials unusable, provider
    /// unreachable or another cluster): finalizers released, provider copies may remain.
    NoProviderClient,
    /// The consumer CRD of a listed API is not kbind's for this Connection (the consumer's
    /// own, or in a group kbind never touches): nothing is synced, installed or deleted.
    CRDNotManaged,
    /// The binding's namespace does not match its Connection's `bindingNamespaceSelector`.
    NamespaceNotAllowed,
    /// A related Secret/ConfigMap copy could not be listed, written or deleted for another
    /// reason than RBAC or an unreachable cluster.
    CopyFailed,
    /// A delete or finalizer release a binding's teardown needs failed for another reason than
    /// RBAC or an unreachable cluster.
    DeleteFailed,
    /// A ClusterBinding named after an autoBind Connection exists without the managed label:
    /// autoBind leaves it alone and binds nothing.
    AutoBindNameTaken,
    /// A bound API's plural, singular or kind is a name a built-in or aggregated consumer
    /// resource already answers to: its CRD is not installed.
    NameCollision,
    /// The provider stopped exporting an API a binding had bound: its sync stopped, its
    /// consumer CRD, instances and provider copies stay, and sync resumes when it is exported
    /// again.
    APIReleased,
    /// The binding's `connectionRef` was edited: what it bound through the previous Connection
    /// is being drained through that one before the new Connection selects anything.
    ConnectionChanged,
    /// Some API groups of the provider could not be discovered (an APIService whose backend
    /// is down answers 503): their last known exports are kept through the grace period.
    DiscoveryIncomplete,
    /// `spec.isolation` was changed while bindings use the Connection: copies are never moved,
    /// so the previous strategy stays in force until those bindings are deleted (and drained).
    IsolationChangePending,
    /// Some listed APIs sync and others do not: each `boundAPIs` entry says how its API
    /// stands, and the message names each failing API with its reason.
    APIsNotReady,
    /// The consumer API server (the cluster the konnector runs in) did not answer the
    /// Connection's identity read, or answered 429 or 5xx, for longer than the grace period.
    ConsumerUnreachable,
    /// A binding's teardown requested the deletion of owned provider copies that are still
    /// there, held by provider-side finalizers (binding cleanup does not wait for them).
    DeletionRequested,
    /// The consumer CRD of a listed API is pinned to a Connection that no longer exists and
    /// this binding's Connection cannot take it over (another provider cluster, or none
    /// recorded on the CRD).
    PinnedConnectionGone,
    /// A provider answer (discovery, the `/openapi/v3` index, a copy's status) is larger than
    /// the konnector's cap for it: it was not read.
    ResponseTooLarge,
    /// A deleting instance waits for its provider copy, whose deletion was requested and which
    /// finalizers of the provider's controllers still hold: the message names them.
    ProviderFinalizers,
}

impl Reason {
    /// The string stored in `status.conditions[].reason` and in Event reasons.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::AsExpected => "AsExpected",
            Self::Pending => "Pending",
            Self::SecretNotFound => "SecretNotFound",
            Self::SecretKeyMissing => "SecretKeyMissing",
            Self::SecretNamespaceNotAllowed => "SecretNamespaceNotAllowed",
            Self::KubeconfigInvalid => "KubeconfigInvalid",
            Self::KubeconfigIncomplete => "KubeconfigIncomplete",
            Self::KubeconfigUnusable => "KubeconfigUnusable",
            Self::ClusterIdentityChanged => "ClusterIdentityChanged",
            Self::IdentityUnavailable => "IdentityUnavailable",
            Self::APINotExported => "APINotExported",
            Self::ConnectionNotFound => "ConnectionNotFound",
            Self::ConnectionNotReady => "ConnectionNotReady",
            Self::APIBoundElsewhere => "APIBoundElsewhere",
            Self::ForeignObjectExists => "ForeignObjectExists",
            Self::OwnedByAnother => "OwnedByAnother",
            Self::Forbidden => "Forbidden",
            Self::DrainingBindings => "DrainingBindings",
            Self::SchemaInstallFailed => "SchemaInstallFailed",
            Self::SchemaNotEstablished => "SchemaNotEstablished",
            Self::PolicyFailed => "PolicyFailed",
            Self::PolicyUnavailable => "PolicyUnavailable",
            Self::PolicySwapFailed => "PolicySwapFailed",
            Self::ConflictsFound => "ConflictsFound",
            Self::ProviderUnreachable => "ProviderUnreachable",
            Self::ProviderRejected => "ProviderRejected",
            Self::NoProviderClient => "NoProviderClient",
            Self::CRDNotManaged => "CRDNotManaged",
            Self::NamespaceNotAllowed => "NamespaceNotAllowed",
            Self::CopyFailed => "CopyFailed",
            Self::DeleteFailed => "DeleteFailed",
            Self::AutoBindNameTaken => "AutoBindNameTaken",
            Self::NameCollision => "NameCollision",
            Self::APIReleased => "APIReleased",
            Self::DiscoveryIncomplete => "DiscoveryIncomplete",
            Self::ConnectionChanged => "ConnectionChanged",
            Self::IsolationChangePending => "IsolationChangePending",
            Self::APIsNotReady => "APIsNotReady",
            Self::ConsumerUnreachable => "ConsumerUnreachable",
            Self::DeletionRequested => "DeletionRequested",
            Self::PinnedConnectionGone => "PinnedConnectionGone",
            Self::ResponseTooLarge => "ResponseTooLarge",
            Self::ProviderFinalizers => "ProviderFinalizers",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_condition_type_parses_back_and_reports_a_distinct_action() {
        let mut actions = std::collections::BTreeSet::new();
        for type_ in ConditionType::ALL {
            assert_eq!(ConditionType::parse(type_.as_str()), Some(type_));
            assert!(
                actions.insert(type_.action()),
                "{type_:?} shares its action"
            );
        }
        assert_eq!(ConditionType::parse("SomethingNew"), None);
    }
}
