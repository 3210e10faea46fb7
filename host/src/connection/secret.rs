//! The credential Secret's cleanup finalizer: placed while a Connection uses the Secret, so
//! the credentials outlive the teardown that needs them; released by the last Connection.

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{Error, Result};
use crate::api::SecretReference;
use crate::api::names::CLEANUP_FINALIZER;

/// Adds the cleanup finalizer to a Secret that is not being deleted.
pub(super) async fn ensure_finalizer(client: &kube::Client, secret: &Secret) -> Result<()> {
    if secret.metadata.deletion_timestamp.is_some()
        || secret.finalizers().iter().any(|f| f == CLEANUP_FINALIZER)
    {
        return Ok(());
    }
    let mut finalizers = secret.finalizers().to_vec();
    finalizers.push(CLEANUP_FINALIZER.to_string());
    patch_finalizers(client, secret, finalizers).await
}

/// Removes the cleanup finalizer from the referenced Secret, if the Secret still exists.
/// Releasing the finalizer does not delete the Secret.
pub(super) async fn release(client: &kube::Client, reference: &SecretReference) -> Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &reference.namespace);
    let id = format!("{}/{}", reference.namespace, reference.name);
    let Some(secret) = secrets
        .get_opt(&reference.name)
        .await
        .map_err(|e| Error::ReadSecret(id, e))?
    else {
        return Ok(());
    };
    if !secret.finalizers().iter().any(|f| f == CLEANUP_FINALIZER) {
        return Ok(());
    }
    let finalizers = secret
        .finalizers()
        .iter()
        .filter(|f| *f != CLEANUP_FINALIZER)
        .cloned()
        .collect();
    patch_finalizers(client, &secret, finalizers).await
}

/// A merge patch carrying the resourceVersion, so a concurrent change of the finalizer list
/// fails (and is retried) instead of being overwritten.
async fn patch_finalizers(
    client: &kube::Client,
    secret: &Secret,
    finalizers: Vec<String>,
) -> Result<()> {
    let namespace = secret.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let patch = json!({
        "metadata": {
            "finalizers": finalizers,
            "resourceVersion": secret.resource_version(),
        }
    });
    secrets
        .patch(
            &secret.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(|e| Error::SecretFinalizer(format!("{namespace}/{}", secret.name_any()), e))?;
    Ok(())
}
