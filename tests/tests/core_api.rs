//! The core.kbind.io CRDs on a real apiserver: installable with the Rust client, defaults
//! applied by the server, status through its subresource, and the CEL immutability rules
//! enforced.

use kbind_tests::access::expect_refused;
use kbind_tests::fixtures::install_core_crds;
use kbind_tests::testenv::shared_pair;
use konnector::api::Connection;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

const INVALID: (u16, &str) = (422, "Invalid");

#[tokio::test]
async fn core_crds_install_and_connection_defaults_apply() -> anyhow::Result<()> {
    let pair = shared_pair()?;
    pair.diagnose(async {
        let client = pair.consumer.client().await?;
        install_core_crds(&client).await?;

        let name = "defaults-apply";
        let connections: Api<Connection> = Api::all(client.clone());
        // As stored by the server: untyped, so client-side serde defaults cannot hide a gap.
        let raw: Api<DynamicObject> =
            Api::all_with(client.clone(), &ApiResource::erase::<Connection>(&()));
        let params = PatchParams::default();
        // Only what a user must write: defaults come from the server, not from Rust's serde.
        let minimal = Patch::Apply(json!({
            "apiVersion": "core.kbind.io/v1alpha1", "kind": "Connection",
            "metadata": { "name": name },
            "spec": { "kubeconfigSecretRef": { "namespace": "kbind-system", "name": "provider" } },
        }));
        let apply = PatchParams::apply("kbind-tests");
        connections.patch(name, &apply, &minimal).await?;
        let defaulted = json!({
            "kubeconfigSecretRef":
                { "namespace": "kbind-system", "name": "provider", "key": "kubeconfig" },
            "schema": { "source": "Auto", "pullPolicy": "Bound", "updatePolicy": "Always" },
            "autoBind": false,
        });
        assert_eq!(raw.get(name).await?.data["spec"], defaulted);
        let typed = connections.get(name).await?;
        assert_eq!(
            serde_json::to_value(&typed.spec)?,
            defaulted,
            "as the typed client reads it"
        );

        // Status goes through the status subresource...
        let written = json!({ "localClusterUID": "consumer-uid-1", "activeSchemaSource": "CRD" });
        let status = Patch::Merge(json!({ "status": written }));
        connections.patch_status(name, &params, &status).await?;
        assert_eq!(raw.get(name).await?.data["status"], written);
        // ...and only there: status in a main-resource write is ignored.
        let via_main = Patch::Merge(json!({ "status": { "activeSchemaSource": "OpenAPI" } }));
        connections.patch(name, &params, &via_main).await?;
        assert_eq!(raw.get(name).await?.data["status"], written);

        // CEL: kubeconfigSecretRef is immutable.
        let repoint =
            Patch::Merge(json!({ "spec": { "kubeconfigSecretRef": { "name": "other" } } }));
        let denied = connections.patch(name, &params, &repoint).await;
        expect_refused(denied, INVALID, "kubeconfigSecretRef is immutable")?;
        // CEL: localClusterUID is set once, then neither changed nor removed.
        for change in [json!("consumer-uid-2"), Value::Null] {
            let patch = Patch::Merge(json!({ "status": { "localClusterUID": change } }));
            let denied = connections.patch_status(name, &params, &patch).await;
            expect_refused(denied, INVALID, "localClusterUID is immutable once set")?;
        }
        assert_eq!(raw.get(name).await?.data["status"], written);

        connections.delete(name, &Default::default()).await?;
        anyhow::Ok(())
    })
    .await
}
