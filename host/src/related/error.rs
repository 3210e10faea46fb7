//! Why copying related resources failed: one variant per operation, shown in the binding's
//! `RelatedResourcesSynced` condition (`condition`).

/// Why a related pass (or one copy of it) failed. Each variant names the operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Listing related sources or targets.
    #[error("listing related {resource}: {source}")]
    ListRelated {
        /// `secrets` or `configmaps`.
        resource: &'static str,
        /// What the cluster said.
        #[source]
        source: kube::Error,
    },
    /// The related-selection policy failed.
    #[error("related-selection policy: {0}")]
    RelatedPolicy(#[source] crate::policy::PolicyError),
    /// Writing (apply or create) a related copy.
    #[error("applying related {resource} copy {object}: {source}")]
    ApplyRelated {
        /// `secrets` or `configmaps`.
        resource: &'static str,
        /// `namespace/name` of the copy.
        object: String,
        /// What the target cluster said.
        #[source]
        source: kube::Error,
    },
    /// Reading a related source (or a changed copy) in full, to copy it.
    #[error("reading related {resource} {object}: {source}")]
    ReadRelated {
        /// `secrets` or `configmaps`.
        resource: &'static str,
        /// `namespace/name` of the object.
        object: String,
        /// What the cluster said.
        #[source]
        source: kube::Error,
    },
    /// Deleting a related copy.
    #[error("deleting related {resource} copy: {source}")]
    DeleteRelated {
        /// `secrets` or `configmaps`.
        resource: &'static str,
        /// What the target cluster said.
        #[source]
        source: kube::Error,
    },
    /// Creating a namespace for related copies.
    #[error("creating namespace {namespace}: {source}")]
    CreateNamespace {
        /// The namespace.
        namespace: String,
        /// What the target cluster said.
        #[source]
        source: kube::Error,
    },
    /// Building a request body (a copy, a patch) from JSON.
    #[error("building a request body: {0}")]
    BuildRequest(#[from] serde_json::Error),
}

/// Result of related operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A failed read of `namespace/name` of `resource`, for `map_err`.
    pub(super) fn read(
        resource: &'static str,
        namespace: &str,
        name: &str,
    ) -> impl FnOnce(kube::Error) -> Self {
        let object = format!("{namespace}/{name}");
        move |source| Self::ReadRelated {
            resource,
            object,
            source,
        }
    }

    /// Whether the related-selection module failed (rather than a cluster).
    pub fn is_policy(&self) -> bool {
        matches!(self, Self::RelatedPolicy(_))
    }

    /// The Kubernetes client error underneath, if there is one.
    pub fn kube_error(&self) -> Option<&kube::Error> {
        match self {
            Self::ListRelated { source: e, .. }
            | Self::ApplyRelated { source: e, .. }
            | Self::ReadRelated { source: e, .. }
            | Self::DeleteRelated { source: e, .. }
            | Self::CreateNamespace { source: e, .. } => Some(e),
            Self::RelatedPolicy(_) | Self::BuildRequest(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error() -> kube::Error {
        kube::Error::LinesCodecMaxLineLengthExceeded
    }

    #[test]
    fn related_error_texts_name_their_operation() {
        let cases = [
            (
                Error::ListRelated {
                    resource: "secrets",
                    source: api_error(),
                },
                "listing related secrets",
            ),
            (
                Error::ApplyRelated {
                    resource: "configmaps",
                    object: "ns/c".into(),
                    source: api_error(),
                },
                "applying related configmaps copy ns/c",
            ),
            (
                Error::ReadRelated {
                    resource: "secrets",
                    object: "ns/s".into(),
                    source: api_error(),
                },
                "reading related secrets ns/s",
            ),
            (
                Error::DeleteRelated {
                    resource: "secrets",
                    source: api_error(),
                },
                "deleting related secrets copy",
            ),
            (
                Error::CreateNamespace {
                    namespace: "ns".into(),
                    source: api_error(),
                },
                "creating namespace ns",
            ),
        ];
        for (error, prefix) in cases {
            assert!(error.to_string().starts_with(prefix), "{error} vs {prefix}");
        }
    }
}
