//! The core.kbind.io CRDs on a real apiserver: installable with the Rust client, defaults
//! applied by the server, status through its subresource, and the CEL immutability rules
//! enforced.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_tests::testenv::shared_pair;
use konnector::api::{Connection, PullPolicy, SchemaSource, UpdatePolicy, core_crds};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const MANAGER: &str = "kbind-tests";

#[tokio::test]
async fn core_crds_install_and_connection_defaults_apply() -> anyhow::Result<()> {
    let pair = shared_pair()?;
    pair.diagnose(async {
        let client = pair.consumer.client().await?;
        install_core_crds(&client).await?;

        let name = "defaults-apply";
        let connections: Api<Connection> = Api::all(client.clone());
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

        // As stored by the server (untyped, so client-side serde defaults cannot hide a gap).
        let raw: Api<DynamicObject> =
            Api::all_with(client.clone(), &ApiResource::erase::<Connection>(&()));
        let stored = raw.get(name).await?.data;
        let spec = &stored["spec"];
        assert_eq!(spec["kubeconfigSecretRef"]["key"], "kubeconfig", "{stored}");
        assert_eq!(spec["schema"]["source"], "Auto", "{stored}");
        assert_eq!(spec["schema"]["pullPolicy"], "Bound", "{stored}");
        assert_eq!(spec["schema"]["updatePolicy"], "Always", "{stored}");
        assert_eq!(spec["autoBind"], false, "{stored}");

        let typed = connections.get(name).await?;
        assert_eq!(typed.spec.kubeconfig_secret_ref.key, "kubeconfig");
        assert_eq!(typed.spec.schema.source, SchemaSource::Auto);
        assert_eq!(typed.spec.schema.pull_policy, PullPolicy::Bound);
        assert_eq!(typed.spec.schema.update_policy, UpdatePolicy::Always);
        assert!(!typed.spec.auto_bind);

        // Status goes through the status subresource...
        let status = json!({ "status": {
            "localClusterUID": "consumer-uid-1",
            "activeSchemaSource": "CRD",
        }});
        connections
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .context("writing status")?;
        let written = connections.get_status(name).await?;
        let written_status = written.status.clone().unwrap_or_default();
        assert_eq!(
            written_status.local_cluster_uid.as_deref(),
            Some("consumer-uid-1")
        );
        assert_eq!(written_status.active_schema_source.as_deref(), Some("CRD"));
        // ...and only there: status in a main-resource write is ignored.
        let via_main = json!({ "status": { "activeSchemaSource": "OpenAPI" } });
        connections
            .patch(name, &PatchParams::default(), &Patch::Merge(&via_main))
            .await?;
        let after = connections.get(name).await?.status.unwrap_or_default();
        assert_eq!(after.active_schema_source.as_deref(), Some("CRD"));

        // CEL: kubeconfigSecretRef is immutable.
        let repoint = json!({ "spec": { "kubeconfigSecretRef": { "name": "other" } } });
        let denied = connections
            .patch(name, &PatchParams::default(), &Patch::Merge(&repoint))
            .await;
        expect_invalid(denied, "kubeconfigSecretRef is immutable")?;

        // CEL: localClusterUID is set once, then neither changed nor removed.
        for change in [json!("consumer-uid-2"), Value::Null] {
            let patch = json!({ "status": { "localClusterUID": change } });
            let denied = connections
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            expect_invalid(denied, "localClusterUID is immutable once set")?;
        }
        let kept = connections
            .get_status(name)
            .await?
            .status
            .unwrap_or_default();
        assert_eq!(kept.local_cluster_uid.as_deref(), Some("consumer-uid-1"));

        connections.delete(name, &Default::default()).await?;
        anyhow::Ok(())
    })
    .await
}

/// Server-side applies the three core CRDs and waits until each is Established.
async fn install_core_crds(client: &Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (file, crd) in core_crds() {
        let name = crd.name_any();
        crds.patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&crd),
        )
        .await
        .with_context(|| format!("applying {file}"))?;
        tokio::time::timeout(
            Duration::from_secs(30),
            await_condition(crds.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .with_context(|| format!("{name} not Established in 30s"))??;
    }
    Ok(())
}

/// Asserts the write was rejected as 422 Invalid with `message` in the API's answer.
fn expect_invalid<T: std::fmt::Debug>(
    result: Result<T, kube::Error>,
    message: &str,
) -> anyhow::Result<()> {
    match result {
        Err(kube::Error::Api(status)) => {
            ensure!(
                status.code == 422 && status.reason == "Invalid",
                "expected 422 Invalid, got {status:?}"
            );
            ensure!(
                status.message.contains(message),
                "expected {message:?} in {:?}",
                status.message
            );
            Ok(())
        }
        other => bail!("expected 422 Invalid ({message}), got {other:?}"),
    }
}
