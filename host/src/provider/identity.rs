//! Cluster identity: which cluster a client really talks to.
//!
//! A kcp logical cluster is identified by the UID of `logicalclusters.core.kcp.io/cluster`
//! where that API is served (a Forbidden answer there is an error, never a fallback, or a
//! restricted identity could make two workspaces look alike); any other cluster by the UID of
//! Namespace `kube-system`.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};

use super::{ApiFailure, classify};
use crate::k8s::ApiErrorExt;

/// The kcp group-version that serves logical clusters.
const KCP_GROUP_VERSION: &str = "core.kcp.io/v1alpha1";

/// Why a cluster identity could not be read.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// RBAC refused the read.
    #[error(
        "reading the cluster identity ({what}) was forbidden: {message}; grant get on it to the credentials"
    )]
    Forbidden {
        /// The object that could not be read.
        what: &'static str,
        /// The API server's message.
        message: String,
    },
    /// The identity object is missing.
    #[error("the cluster has no {what} to identify it by")]
    Missing {
        /// The object that is missing.
        what: &'static str,
    },
    /// Any other failure (network, server error); retried with backoff.
    #[error("reading the cluster identity ({what}) failed: {source}")]
    Read {
        /// The object being read.
        what: &'static str,
        /// The client error.
        source: kube::Error,
    },
}

impl IdentityError {
    fn from_kube(what: &'static str, source: kube::Error) -> Self {
        match classify(&source) {
            ApiFailure::Forbidden(message) => Self::Forbidden { what, message },
            ApiFailure::NotFound => Self::Missing { what },
            ApiFailure::Other => Self::Read { what, source },
        }
    }

    /// Whether the failure is an RBAC denial (PermissionDenied rather than a retry).
    pub fn is_forbidden(&self) -> bool {
        matches!(self, Self::Forbidden { .. })
    }

    /// Whether the failure may pass on its own (no answer, 429, 5xx): an engaged Connection
    /// rides it out for a while instead of disengaging.
    pub fn is_transient(&self) -> bool {
        self.kube_error().is_some_and(ApiErrorExt::is_transient)
    }

    /// The client error underneath a failed read, if any (to tell a timeout from a 5xx).
    pub fn kube_error(&self) -> Option<&kube::Error> {
        match self {
            Self::Read { source, .. } => Some(source),
            Self::Forbidden { .. } | Self::Missing { .. } => None,
        }
    }
}

/// Reads the UID that identifies the cluster behind `client`.
pub async fn cluster_uid(client: &kube::Client) -> Result<String, IdentityError> {
    if serves_logical_clusters(client).await? {
        let what = "logicalclusters.core.kcp.io/cluster";
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("core.kcp.io", "v1alpha1", "LogicalCluster"),
            "logicalclusters",
        );
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let cluster = api
            .get("cluster")
            .await
            .map_err(|e| IdentityError::from_kube(what, e))?;
        return cluster.metadata.uid.ok_or(IdentityError::Missing { what });
    }
    let what = "Namespace kube-system";
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = namespaces
        .get("kube-system")
        .await
        .map_err(|e| IdentityError::from_kube(what, e))?;
    namespace
        .metadata
        .uid
        .ok_or(IdentityError::Missing { what })
}

async fn serves_logical_clusters(client: &kube::Client) -> Result<bool, IdentityError> {
    let what = "discovery of core.kcp.io";
    match client.list_api_group_resources(KCP_GROUP_VERSION).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == "logicalclusters")),
        Err(e) => match classify(&e) {
            ApiFailure::NotFound => Ok(false),
            _ => Err(IdentityError::from_kube(what, e)),
        },
    }
}
