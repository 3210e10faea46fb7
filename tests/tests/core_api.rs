//! The core.kbind.io CRDs on a real apiserver: installable with the Rust client, defaults
//! applied by the server, status through its subresource, and the CEL immutability rules
//! enforced.

use anyhow::Context;
use kbind_tests::access::expect_refused;
use kbind_tests::fixtures::install_core_crds;
use kbind_tests::testenv::shared_pair;
use konnector::api::Connection;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

const MANAGER: &str = "kbind-tests";
const INVALID: (u16, &str) = (422, "Invalid");

#[tokio::test]
async fn core_crds_install_and_connection_defaults_apply() -> anyhow::Result<()> {
    let pair = shared_pair()?;
    pair.diagnose(async {
        let client = pair.consumer.client().await?;
        install_core_crds(&client).await?;

        let name = "defaults-apply";
        let connections: Api<Connection> = Api::all(client.clone());
        let params = PatchParams::default();
        // Only what a user must write: defaults come from the server, not from Rust's serde.
        let minimal = json!({
            "apiVersion": "core.kbind.io/v1alpha1",
            "kind": "Connection",
            "metadata": { "name": name },
            "spec": { "kubeconfigSecretRef": { "namespace": "kbind-system", "name": "provider" } },
        });
        connections
            .patch(name, &PatchParams::apply(MANAGER), &Patch::Apply(&minimal))
            .await
            .context("creating a minimal Connection")?;

        // As stored by the server (untyped, so client-side serde defaults cannot hide a gap),
        // and as the typed client reads it.
        let defaulted = json!({
            "kubeconfigSecretRef": { "namespace": "kbind-system", "name": "provider", "key": "kubeconfig" },
            "schema": { "source": "Auto", "pullPolicy": "Bound", "updatePolicy": "Always" },
            "autoBind": false,
        });
        let raw: Api<DynamicObject> =
            Api::all_with(client.clone(), &ApiResource::erase::<Connection>(&()));
        assert_eq!(raw.get(name).await?.data["spec"], defaulted);
        let typed = connections.get(name).await?;
        assert_eq!(serde_json::to_value(&typed.spec)?, defaulted);

        // Status goes through the status subresource...
        let status = json!({ "status": {
            "localClusterUID": "consumer-uid-1",
            "activeSchemaSource": "CRD",
        }});
        connections
            .patch_status(name, &params, &Patch::Merge(&status))
            .await
            .context("writing status")?;
        let written = connections.get_status(name).await?.status.unwrap_or_default();
        assert_eq!(
            (written.local_cluster_uid.as_deref(), written.active_schema_source.as_deref()),
            (Some("consumer-uid-1"), Some("CRD"))
        );
        // ...and only there: status in a main-resource write is ignored.
        let via_main = json!({ "status": { "activeSchemaSource": "OpenAPI" } });
        connections
            .patch(name, &params, &Patch::Merge(&via_main))
            .await?;
        let after = connections.get(name).await?.status.unwrap_or_default();
        assert_eq!(after.active_schema_source.as_deref(), Some("CRD"));

        // CEL: kubeconfigSecretRef is immutable.
        let repoint = json!({ "spec": { "kubeconfigSecretRef": { "name": "other" } } });
        let denied = connections
            .patch(name, &params, &Patch::Merge(&repoint))
            .await;
        expect_refused(denied, INVALID, "kubeconfigSecretRef is immutable")?;

        // CEL: localClusterUID is set once, then neither changed nor removed.
        for change in [json!("consumer-uid-2"), Value::Null] {
            let patch = json!({ "status": { "localClusterUID": change } });
            let denied = connections
                .patch_status(name, &params, &Patch::Merge(&patch))
                .await;
            expect_refused(denied, INVALID, "localClusterUID is immutable once set")?;
        }
        let kept = connections.get_status(name).await?.status.unwrap_or_default();
        assert_eq!(kept.local_cluster_uid.as_deref(), Some("consumer-uid-1"));

        connections.delete(name, &Default::default()).await?;
        anyhow::Ok(())
    })
    .await
}
