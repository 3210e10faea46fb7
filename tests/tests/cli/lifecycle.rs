//! The operator's whole journey with `kubectl kbind`: connect → bind → status (naming a
//! conflicting instance) → a refused disconnect → unbind → disconnect, then nothing of kbind
//! is left behind on either cluster; and the guard on unbinding an API's last ClusterBinding.

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::Secret;
use kbind_tests::fixtures::{SECRET_NAMESPACE, ensure_namespace, http_get, install_crd};
use kbind_tests::syncenv::wait_for;
use konnector::api::names::SYNCER_FINALIZER;
use konnector::api::{Binding, Connection};
use kube::api::{DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use super::{TIMEOUT, WAIT, bind, connect, diagnose, disconnect, kbind, setup};

fn gadget(group: &str, ns: &str, name: &str) -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "Gadget",
        "metadata": {"name": name, "namespace": ns}, "spec": {"size": 1},
    }))?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_bind_status_unbind_disconnect_leaves_nothing_behind() -> Result<()> {
    let pair = setup().await?;
    let group = "lifecycle.e2e.kbind.io";
    let api = format!("gadgets.{group}");
    let ns = "lc-ns";
    diagnose(pair, async {
        let provider = pair.provider.client().await?;
        let consumer = pair.consumer.client().await?;
        install_crd(&provider, &super::crd_with_conditions(group, "Gadget")?).await?;
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", "Gadget"));
        let consumer_gadgets = Api::<DynamicObject>::namespaced_with(consumer.clone(), ns, &ar);
        let provider_gadgets = Api::<DynamicObject>::namespaced_with(provider.clone(), ns, &ar);
        // A provider object nobody owns, for the conflict the status must name.
        ensure_namespace(&provider, ns).await?;
        provider_gadgets
            .create(&PostParams::default(), &gadget(group, ns, "taken")?)
            .await?;

        let kubeconfig = pair.provider.admin().kubeconfig_path();
        let connected = connect(pair, "lc", kubeconfig, &[]).await?;
        ensure!(
            connected.stdout.contains("Ready=True") && connected.stdout.contains(&api),
            "{connected:?}"
        );
        let secret = Api::<Secret>::namespaced(consumer.clone(), SECRET_NAMESPACE)
            .get("lc-kubeconfig")
            .await?;
        ensure!(
            secret.data.is_some_and(|d| d.contains_key("kubeconfig")),
            "the Secret holds key kubeconfig"
        );

        bind(pair, &api, "lc", &["-n", ns]).await?;
        consumer_gadgets
            .create(&PostParams::default(), &gadget(group, ns, "g1")?)
            .await?;
        consumer_gadgets
            .create(&PostParams::default(), &gadget(group, ns, "taken")?)
            .await?;
        wait_for("the provider copy of g1", WAIT, || async {
            Ok(provider_gadgets.get_opt("g1").await?)
        })
        .await?;

        // status: the tree names the conflicting instance and exits 1 while it conflicts.
        let status = wait_for(
            "status to show one synced and one conflicting instance",
            WAIT,
            || async {
                let run = kbind(pair, &["status", "lc"]).await?;
                ensure!(
                    run.stdout.contains("1 synced, 1 conflicting, 0 failing"),
                    "status said:\n{}{}",
                    run.stdout,
                    run.stderr
                );
                Ok(Some(run))
            },
        )
        .await?;
        ensure!(
            status.code == 1,
            "a conflict makes status exit 1: {status:?}"
        );
        ensure!(
            status.stdout.contains(&format!("Binding {ns}/gadgets")),
            "{}",
            status.stdout
        );
        ensure!(
            status
                .stdout
                .contains(&format!("✗ {ns}/taken  ForeignObjectExists")),
            "{}",
            status.stdout
        );
        let json = kbind(pair, &["status", "lc", "-o", "json"]).await?;
        let report: Value = serde_json::from_str(&json.stdout)?;
        let node = report["connections"][0]["apis"]
            .as_array()
            .and_then(|apis| apis.iter().find(|a| a["name"] == api.as_str()))
            .map(|a| a["bindings"][0].clone())
            .unwrap_or_default();
        assert_eq!(
            node["counts"],
            json!({"synced": 1, "conflicting": 1, "failing": 0, "pending": 0})
        );
        assert_eq!(node["failing"][0]["name"], "taken");

        // The Conflicts column's source: the binding's total over its APIs.
        let bindings = Api::<Binding>::namespaced(consumer.clone(), ns);
        wait_for("the binding's conflictCount 1", WAIT, || async {
            let b = bindings.get("gadgets").await?;
            Ok((b.status.map(|s| s.conflict_count) == Some(1)).then_some(()))
        })
        .await?;

        // The running konnector exports what the dashboard charts for this sync.
        let (_, exposition) = http_get(super::shared_konnector(pair).await?, "/metrics").await?;
        for sample in [
            "kbind_instances_synced_total{",
            "kbind_sync_lag_seconds_bucket{",
            "kbind_conflicts_total{",
            "kbind_engaged_connections ",
        ] {
            ensure!(
                exposition.contains(sample),
                "{sample} not exported:\n{exposition}"
            );
        }

        // Resolving the conflict makes status healthy.
        consumer_gadgets
            .delete("taken", &DeleteParams::default())
            .await?;
        wait_for("status exit 0", WAIT, || async {
            Ok((kbind(pair, &["status", "lc"]).await?.code == 0).then_some(()))
        })
        .await?;

        // disconnect refuses while an explicit binding uses the Connection, deleting nothing.
        let refused = kbind(pair, &["disconnect", "lc"]).await?.expect(1)?;
        ensure!(
            refused
                .stderr
                .contains(&format!("kubectl kbind unbind gadgets -n {ns}")),
            "{refused:?}"
        );
        let connections = Api::<Connection>::all(consumer.clone());
        ensure!(
            connections
                .get("lc")
                .await?
                .metadata
                .deletion_timestamp
                .is_none(),
            "nothing deleted"
        );

        let unbound = kbind(pair, &["unbind", "gadgets", "-n", ns, "--timeout", TIMEOUT])
            .await?
            .expect(0)?;
        ensure!(unbound.stdout.contains("deleted"), "{unbound:?}");
        disconnect(pair, "lc", &[]).await?;

        // Nothing left: Secret, Connection, Binding, instance finalizers, provider copies.
        ensure!(
            connections.get_opt("lc").await?.is_none(),
            "Connection left"
        );
        let secrets = Api::<Secret>::namespaced(consumer.clone(), SECRET_NAMESPACE);
        ensure!(
            secrets.get_opt("lc-kubeconfig").await?.is_none(),
            "credential Secret left"
        );
        ensure!(
            Api::<Binding>::namespaced(consumer.clone(), ns)
                .get_opt("gadgets")
                .await?
                .is_none(),
            "Binding left"
        );
        let g1 = consumer_gadgets.get("g1").await?;
        ensure!(
            !g1.finalizers().iter().any(|f| f == SYNCER_FINALIZER),
            "instance finalizer left"
        );
        ensure!(
            provider_gadgets.get_opt("g1").await?.is_none(),
            "provider copy left"
        );
        ensure!(
            provider_gadgets.get_opt("taken").await?.is_some(),
            "the foreign provider object is not kbind's to delete"
        );
        anyhow::Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbinding_the_last_cluster_binding_of_an_api_needs_yes_and_removes_its_crd() -> Result<()>
{
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use konnector::api::ClusterBinding;
    let pair = setup().await?;
    let group = "lastcb.e2e.kbind.io";
    let api = format!("gadgets.{group}");
    diagnose(pair, async {
        let provider = pair.provider.client().await?;
        let consumer = pair.consumer.client().await?;
        install_crd(&provider, &super::crd_with_conditions(group, "Gadget")?).await?;
        let kubeconfig = pair.provider.admin().kubeconfig_path();
        connect(pair, "lastcb", kubeconfig, &[]).await?;
        bind(pair, &api, "lastcb", &["--cluster", "--name", "lastcb"]).await?;
        let crds = Api::<CustomResourceDefinition>::all(consumer.clone());
        ensure!(
            crds.get_opt(&api).await?.is_some(),
            "the consumer CRD is installed"
        );

        // Without --yes nothing is deleted: the CRD and its instances would go with it.
        let refused = kbind(pair, &["unbind", "lastcb", "--cluster"])
            .await?
            .expect(1)?;
        ensure!(
            refused.stderr.contains("--yes") && refused.stderr.contains(&api),
            "{refused:?}"
        );
        let cluster_bindings = Api::<ClusterBinding>::all(consumer.clone());
        ensure!(
            cluster_bindings
                .get("lastcb")
                .await?
                .metadata
                .deletion_timestamp
                .is_none(),
            "the ClusterBinding was not deleted"
        );

        kbind(
            pair,
            &[
                "unbind",
                "lastcb",
                "--cluster",
                "--yes",
                "--timeout",
                TIMEOUT,
            ],
        )
        .await?
        .expect(0)?;
        ensure!(
            cluster_bindings.get_opt("lastcb").await?.is_none(),
            "ClusterBinding left"
        );
        wait_for("the consumer CRD removed", WAIT, || async {
            Ok(crds.get_opt(&api).await?.is_none().then_some(()))
        })
        .await?;
        disconnect(pair, "lastcb", &[]).await?;
        anyhow::Ok(())
    })
    .await
}
