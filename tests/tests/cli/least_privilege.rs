//! Least privilege, proven: the konnector's provider identity is a ServiceAccount bound to
//! exactly what `kubectl kbind provider-rbac` prints, and the whole happy path works with it:
//! connect, spec consumer → provider, status back, a related Secret copy, the heartbeat Lease,
//! and teardown.

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kbind_tests::fixtures::SECRET_NAMESPACE;
use kbind_tests::syncenv::related::put_secret;
use kbind_tests::syncenv::{cluster_uid, wait_for};
use konnector::api::names::{DEFAULT_HEARTBEAT_NAMESPACE, heartbeat_lease_name};
use konnector::api::{Binding, ConditionType, Connection};
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{
    WAIT, bind, connect, diagnose, disconnect, kbind, konnector_service_account,
    service_account_rbac, setup, write_file,
};

/// Server-side applies one document as the typed object `K`.
async fn apply<K>(api: Api<K>, doc: &Value) -> Result<()>
where
    K: kube::Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(doc.clone())?;
    let name = doc["metadata"]["name"].as_str().context("no name")?;
    api.patch(
        name,
        &PatchParams::apply("kbind-e2e").force(),
        &Patch::Apply(&obj),
    )
    .await?;
    Ok(())
}

/// Applies `kubectl kbind provider-rbac` output on the provider (`kubectl apply -f -`).
pub(super) async fn apply_all(provider: &Client, yaml: &str) -> Result<Vec<String>> {
    let mut kinds = Vec::new();
    for document in serde_yaml::Deserializer::from_str(yaml) {
        let doc: Value = serde::Deserialize::deserialize(document)?;
        if doc.is_null() {
            continue;
        }
        let ns = doc["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        match kind.as_str() {
            "Namespace" => apply(Api::<Namespace>::all(provider.clone()), &doc).await?,
            "ClusterRole" => apply(Api::<ClusterRole>::all(provider.clone()), &doc).await?,
            "ClusterRoleBinding" => {
                apply(Api::<ClusterRoleBinding>::all(provider.clone()), &doc).await?
            }
            "Role" => apply(Api::<Role>::namespaced(provider.clone(), &ns), &doc).await?,
            "RoleBinding" => {
                apply(Api::<RoleBinding>::namespaced(provider.clone(), &ns), &doc).await?
            }
            other => anyhow::bail!("provider-rbac printed an unexpected kind {other}"),
        }
        kinds.push(kind);
    }
    Ok(kinds)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_konnector_works_with_exactly_the_printed_provider_rbac() -> Result<()> {
    let pair = setup().await?;
    let group = "lp.e2e.kbind.io";
    let api = format!("widgets.{group}");
    let ns = "lp-ns";
    diagnose(pair, async {
        let (provider, identity) = konnector_service_account(pair, group, "lp-system").await?;
        let consumer = pair.consumer.client().await?;

        // Nothing but what provider-rbac prints.
        let rbac = service_account_rbac(
            pair,
            "lp-system",
            &api,
            &["--related", "secrets:FromProvider"],
            "kbind-lp",
        )
        .await?;
        let kinds = apply_all(&provider, &rbac.stdout).await?;
        assert_eq!(
            kinds,
            [
                "Namespace",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding"
            ]
        );

        // The identity really is restricted: no Secrets outside what related reads, no writes.
        let as_konnector = identity.client().await?;
        let denied = Api::<Secret>::namespaced(as_konnector.clone(), "lp-system")
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "x"}}))?,
            )
            .await;
        ensure!(
            matches!(&denied, Err(kube::Error::Api(s)) if s.code == 403),
            "secret create allowed: {denied:?}"
        );

        let kubeconfig = write_file(pair, "lp-sa.kubeconfig", &identity.kubeconfig_yaml()?)?;
        connect(pair, "lp", &kubeconfig, &["--schema-source", "CRD"]).await?;
        put_secret(
            &provider,
            ns,
            "lp-creds",
            &[],
            &[("password", "s3cret")],
            None,
        )
        .await?;
        bind(
            pair,
            &api,
            "lp",
            &["-n", ns, "--related", "secrets:FromProvider:names=lp-creds"],
        )
        .await?;

        // Spec consumer → provider.
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", "Widget"));
        let consumer_widgets = Api::<DynamicObject>::namespaced_with(consumer.clone(), ns, &ar);
        let provider_widgets = Api::<DynamicObject>::namespaced_with(provider.clone(), ns, &ar);
        let widget: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{group}/v1"), "kind": "Widget",
            "metadata": {"name": "w", "namespace": ns}, "spec": {"size": 3, "color": "blue"},
        }))?;
        consumer_widgets
            .create(&PostParams::default(), &widget)
            .await?;
        let copy = wait_for("the provider copy", WAIT, || async {
            Ok(provider_widgets.get_opt("w").await?)
        })
        .await?;
        assert_eq!(copy.data["spec"], json!({"size": 3, "color": "blue"}));

        // Status provider → consumer.
        provider_widgets
            .patch_status(
                "w",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Running"}})),
            )
            .await?;
        wait_for("the status back on the consumer", WAIT, || async {
            let w = consumer_widgets.get("w").await?;
            Ok((w.data["status"]["phase"] == "Running").then_some(()))
        })
        .await?;

        // A related Secret copied provider → consumer.
        let copied = wait_for("the related Secret copy", WAIT, || async {
            Ok(Api::<Secret>::namespaced(consumer.clone(), ns)
                .get_opt("lp-creds")
                .await?)
        })
        .await?;
        ensure!(
            copied.data.is_some_and(|d| d.contains_key("password")),
            "payload copied"
        );

        // The heartbeat Lease, renewed by the restricted identity.
        let lease_name = heartbeat_lease_name("lp", &cluster_uid(&consumer).await?);
        let lease = wait_for("the heartbeat Lease", WAIT, || async {
            Ok(
                Api::<Lease>::namespaced(provider.clone(), DEFAULT_HEARTBEAT_NAMESPACE)
                    .get_opt(&lease_name)
                    .await?,
            )
        })
        .await?;
        ensure!(
            lease.spec.and_then(|s| s.holder_identity).is_some(),
            "the Lease has a holder"
        );

        // Never refused along the way.
        let connection = Api::<Connection>::all(consumer.clone()).get("lp").await?;
        let conditions = connection.status.map(|s| s.conditions).unwrap_or_default();
        ensure!(
            !conditions
                .iter()
                .any(|c| c.type_ == ConditionType::PermissionDenied.as_str() && c.status == "True"),
            "PermissionDenied: {conditions:?}"
        );
        let status = kbind(pair, &["status", "lp"]).await?.expect(0)?;
        ensure!(
            status
                .stdout
                .contains("instances: 1 synced, 0 conflicting, 0 failing, 0 pending"),
            "{}",
            status.stdout
        );

        // Teardown with the same identity: the copies go, the sources stay.
        disconnect(pair, "lp", &["--cascade"]).await?;
        ensure!(
            provider_widgets.get_opt("w").await?.is_none(),
            "provider copy left"
        );
        ensure!(
            Api::<Secret>::namespaced(consumer.clone(), ns)
                .get_opt("lp-creds")
                .await?
                .is_none(),
            "related copy left"
        );
        ensure!(
            Api::<Secret>::namespaced(provider.clone(), ns)
                .get_opt("lp-creds")
                .await?
                .is_some(),
            "related source deleted"
        );
        ensure!(
            Api::<Binding>::namespaced(consumer.clone(), ns)
                .get_opt("widgets")
                .await?
                .is_none(),
            "Binding left"
        );
        ensure!(
            Api::<Connection>::all(consumer.clone())
                .get_opt("lp")
                .await?
                .is_none(),
            "Connection left"
        );
        ensure!(
            Api::<Secret>::namespaced(consumer.clone(), SECRET_NAMESPACE)
                .get_opt("lp-kubeconfig")
                .await?
                .is_none(),
            "credential Secret left"
        );
        anyhow::Ok(())
    })
    .await
}
