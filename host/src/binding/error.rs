//! Why reconciling a binding failed: one variant per operation, so conditions and Events can
//! tell the cases apart (`status::failure`).

/// Why reconciling a binding failed. Each variant names the operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The binding has no name (or no namespace for a Binding).
    #[error("binding has no name")]
    MissingName,
    /// A deleted binding waits for the syncers of these APIs to stop (the previous
    /// Connection's, or with sharded replicas those another replica runs) before draining.
    #[error("waiting for the syncers of {0:?} to stop before draining them")]
    WaitingForSyncers(Vec<String>),
    /// This replica stopped holding the binding's Connection shard during the reconcile; the
    /// replica that holds it now does the work.
    #[error("stopped: this replica no longer holds Connection {0}'s shard")]
    ShardLost(String),
    /// Reading the referenced Connection.
    #[error("reading the Connection: {0}")]
    ReadConnection(#[source] kube::Error),
    /// Reading the Connection's credential Secret to drain without an engaged Connection.
    #[error("reading credential Secret {secret}: {source}")]
    ReadCredentials {
        /// `namespace/name` of the Secret.
        secret: String,
        /// What the consumer said.
        #[source]
        source: kube::Error,
    },
    /// Reading a Binding's Namespace (its labels decide `bindingNamespaceSelector`).
    #[error("reading Namespace {namespace}: {source}")]
    ReadNamespace {
        /// The namespace.
        namespace: String,
        /// What the consumer said.
        #[source]
        source: kube::Error,
    },
    /// Reading a listed API's consumer CRD.
    #[error("reading CustomResourceDefinition {name}: {source}")]
    ReadCrd {
        /// The CRD (API) name.
        name: String,
        /// What the consumer said.
        #[source]
        source: kube::Error,
    },
    /// Reading or re-pinning a consumer CRD whose Connection is gone.
    #[error(transparent)]
    Handover(#[from] crate::schema::handover::HandoverError),
    /// Writing the binding status.
    #[error("writing binding status: {0}")]
    WriteStatus(#[source] kube::Error),
    /// Building a request body (a status patch) from JSON.
    #[error("building a request body: {0}")]
    BuildRequest(#[from] serde_json::Error),
    /// Copying related Secrets/ConfigMaps (its own error, with the same texts).
    #[error(transparent)]
    Related(#[from] crate::related::Error),
    /// Listing Bindings and ClusterBindings to find overlapping ones.
    #[error("listing bindings: {0}")]
    ListBindings(#[source] kube::Error),
    /// Listing consumer instances to drain them.
    #[error("listing instances of {api}: {source}")]
    ListInstances {
        /// The API's plural.
        api: String,
        /// What the consumer said.
        #[source]
        source: kube::Error,
    },
    /// Deleting an owned provider instance copy during teardown.
    #[error("deleting provider copy {name}: {source}")]
    DeleteProviderCopy {
        /// The instance name.
        name: String,
        /// What the provider said.
        #[source]
        source: kube::Error,
    },
    /// Reading a provider copy during a drain: it may still exist, so the instance keeps its
    /// finalizer.
    #[error("reading provider copy {name}: {source}")]
    ReadProviderCopy {
        /// The instance name.
        name: String,
        /// What the provider said.
        #[source]
        source: kube::Error,
    },
    /// Reading the provider's identity for a drain through the Connection's credentials
    /// failed in a way that may pass (network, 5xx, 429, RBAC): retried, never a reason to
    /// release finalizers without checking the copies.
    #[error(
        "checking that Connection {connection}'s credentials still reach the pinned provider: {source}"
    )]
    ProviderIdentity {
        /// The Connection.
        connection: String,
        /// Why the identity read failed.
        #[source]
        source: crate::provider::identity::IdentityError,
    },
    /// A provider copy read as absent while the provider does not serve its resource: a 404
    /// then says nothing about the copy, so the instance keeps its finalizer.
    #[error(
        "checking provider copies of {api}: the provider does not serve {api} version {version}, so a missing copy cannot be told from a missing resource; the finalizers stay and the drain is retried (to keep the copies and let go, annotate the instances core.kbind.io/deletion-policy=Orphan)"
    )]
    CopiesNotServed {
        /// The API (`<plural>.<group>`).
        api: String,
        /// The version the drain reads.
        version: String,
    },
    /// Some instances of an API could not be drained: their finalizers stay and the drain is
    /// retried; the others were drained.
    #[error("{first} ({failed} instance(s) of {api} not drained yet; their finalizers stay)")]
    DrainIncomplete {
        /// The API's plural.
        api: String,
        /// How many instances failed.
        failed: usize,
        /// The first failure.
        first: Box<Error>,
    },
    /// Releasing `core.kbind.io/syncer` from a consumer instance during teardown.
    #[error("releasing the syncer finalizer of {name}: {source}")]
    ReleaseFinalizer {
        /// The instance name.
        name: String,
        /// What the consumer said.
        #[source]
        source: kube::Error,
    },
    /// Deleting the consumer CRD for the last ClusterBinding.
    #[error("deleting CustomResourceDefinition {name}: {source}")]
    DeleteCrd {
        /// The CRD name.
        name: String,
        /// What the consumer said.
        #[source]
        source: kube::Error,
    },
    /// Adding or removing `core.kbind.io/cleanup`, or the apply/cleanup wrapped by it.
    #[error("binding finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

/// Result of binding operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error() -> kube::Error {
        kube::Error::LinesCodecMaxLineLengthExceeded
    }

    #[test]
    fn error_texts_name_their_operation() {
        let read = Error::ReadCrd {
            name: "widgets.example.org".into(),
            source: api_error(),
        };
        assert!(
            read.to_string()
                .starts_with("reading CustomResourceDefinition widgets.example.org")
        );
        assert!(
            Error::ReadConnection(api_error())
                .to_string()
                .starts_with("reading the Connection")
        );
        assert!(
            Error::WriteStatus(api_error())
                .to_string()
                .starts_with("writing binding status")
        );
    }

    #[test]
    fn teardown_error_texts_name_their_operation() {
        let cases = [
            (Error::ListBindings(api_error()), "listing bindings"),
            (
                Error::ReadCredentials {
                    secret: "kbind/p".into(),
                    source: api_error(),
                },
                "reading credential Secret kbind/p",
            ),
            (
                Error::ListInstances {
                    api: "widgets".into(),
                    source: api_error(),
                },
                "listing instances of widgets",
            ),
            (
                Error::DeleteProviderCopy {
                    name: "w".into(),
                    source: api_error(),
                },
                "deleting provider copy w",
            ),
            (
                Error::ReleaseFinalizer {
                    name: "w".into(),
                    source: api_error(),
                },
                "releasing the syncer finalizer of w",
            ),
            (
                Error::DeleteCrd {
                    name: "widgets.example.org".into(),
                    source: api_error(),
                },
                "deleting CustomResourceDefinition widgets.example.org",
            ),
        ];
        for (error, prefix) in cases {
            assert!(error.to_string().starts_with(prefix), "{error} vs {prefix}");
        }
    }
}
