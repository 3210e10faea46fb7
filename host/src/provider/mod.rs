//! Everything about talking to a provider cluster: turning a kubeconfig Secret into a client,
//! reading cluster identities, discovering exported APIs, and the engagement registry that
//! hands Ready Connections' clients to the binding and sync machinery; [`limits`] caps what a
//! provider can make the konnector read and hold.

pub mod discovery;
pub mod identity;
pub mod kubeconfig;
pub mod limits;

use crate::k8s::ApiErrorExt;

/// How a failed API call should be treated by a controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiFailure {
    /// RBAC refused it: report PermissionDenied, do not retry fast.
    Forbidden(String),
    /// The object or API does not exist.
    NotFound,
    /// Anything else: network, timeouts, server errors; retried with backoff.
    Other,
}

/// Sorts a client error into the cases controllers branch on.
pub fn classify(error: &kube::Error) -> ApiFailure {
    match error {
        kube::Error::Api(status) if error.is_http_forbidden() => {
            ApiFailure::Forbidden(status.message.clone())
        }
        _ if error.is_http_not_found() => ApiFailure::NotFound,
        _ => ApiFailure::Other,
    }
}
