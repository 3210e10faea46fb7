//! How the CLI marks what it writes: its field manager, and the label on a credential Secret
//! `connect` created, so `disconnect` deletes only what it made.

use k8s_openapi::api::core::v1::Secret;

/// Field manager of the CLI's writes.
pub const FIELD_MANAGER: &str = "kubectl-kbind";

/// The label `connect` puts on a credential Secret it creates (value [`FIELD_MANAGER`]):
/// `disconnect` deletes only a Secret so marked, never one somebody else made.
pub const CREATED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// Whether `connect` created this Secret.
pub fn created_by_connect(secret: &Secret) -> bool {
    secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(CREATED_BY_LABEL))
        .is_some_and(|v| v == FIELD_MANAGER)
}
