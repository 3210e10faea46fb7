//! The operator's whole journey with `kubectl kbind`: connect → bind → status (naming a
//! conflicting instance) → a refused disconnect → unbind → disconnect, then nothing of kbind
//! is left behind on either cluster; and the guard on unbinding an API's last ClusterBinding.

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_tests::fixtures::{SECRET_NAMESPACE, http_get};
use kbind_tests::syncenv::related::secret_value;
use kbind_tests::syncenv::remains::Left::{self, Gone, Kept, Released};
use kbind_tests::syncenv::remains::{expect_left, kind, wait_left};
use kbind_tests::syncenv::{delete, wait_for};
use konnector::api::{Binding, ClusterBinding, Connection};
use kube::Api;
use serde_json::{Value, json};

use super::{Cli, WAIT, shared_konnector};

#[test]
fn connect_bind_status_unbind_disconnect_leaves_nothing_behind() -> Result<()> {
    Cli::run("lc", async |c| {
        let (ns, api, widget) = (c.ns(), c.api.name(), c.api.resource());
        // A provider object nobody owns, for the conflict the status must name.
        c.api
            .create(&c.provider, Some(ns), "taken", json!({}))
            .await?;

        let kubeconfig = c.pair.provider.admin().kubeconfig_path();
        c.connect(kubeconfig, &[])
            .await?
            .expect(0, &["Ready=True", &api])?;
        let secret = Api::<Secret>::namespaced(c.consumer.clone(), SECRET_NAMESPACE)
            .get("lc-kubeconfig")
            .await?;
        ensure!(
            secret_value(&secret, "kubeconfig").is_some(),
            "no key kubeconfig"
        );

        c.bind(&["-n", ns]).await?;
        c.create_synced("g1", json!({"size": 1})).await?;
        c.api
            .create(&c.consumer, Some(ns), "taken", json!({}))
            .await?;

        // status: the tree names the conflicting instance and exits 1 while it conflicts.
        let status = wait_for("status to count the conflict", WAIT, || async {
            let run = c.kbind(&["status", "lc"]).await?;
            ensure!(
                run.stdout.contains("1 synced, 1 conflicting, 0 failing"),
                "{run:?}"
            );
            Ok(Some(run))
        })
        .await?;
        ensure!(
            status.code == 1,
            "a conflict makes status exit 1: {status:?}"
        );
        for line in [
            format!("Binding {ns}/widgets"),
            format!("✗ {ns}/taken  ForeignObjectExists"),
        ] {
            ensure!(status.stdout.contains(&line), "{line} missing: {status:?}");
        }
        let json = c.kbind(&["status", "lc", "-o", "json"]).await?;
        let report: Value = serde_json::from_str(&json.stdout)?;
        let apis = report["connections"][0]["apis"]
            .as_array()
            .context("no apis")?;
        let ours = apis.iter().find(|a| a["name"] == api.as_str());
        let node = &ours.context("the API not in the report")?["bindings"][0];
        let counts = json!({"synced": 1, "conflicting": 1, "failing": 0, "pending": 0});
        assert_eq!(node["counts"], counts);
        assert_eq!(node["failing"][0]["name"], "taken");

        // The Conflicts column's source: the binding's total over its APIs.
        let bindings = Api::<Binding>::namespaced(c.consumer.clone(), ns);
        wait_for("the binding's conflictCount 1", WAIT, || async {
            let b = bindings.get("widgets").await?;
            Ok((b.status.map(|s| s.conflict_count) == Some(1)).then_some(()))
        })
        .await?;

        // The running konnector exports what the dashboard charts for this sync.
        let (_, exposition) = http_get(shared_konnector(c.pair).await?, "/metrics").await?;
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
        delete(&c.instances(), "taken").await?;
        wait_for("status exit 0", WAIT, || async {
            Ok((c.kbind(&["status", "lc"]).await?.code == 0).then_some(()))
        })
        .await?;

        // disconnect refuses while an explicit binding uses the Connection, deleting nothing.
        let unbind = format!("kubectl kbind unbind widgets -n {ns}");
        c.kbind(&["disconnect", "lc"])
            .await?
            .expect(1, &[&unbind])?;
        expect_left(&[(&c.consumer, kind::<Connection>(), None, "lc", Kept)]).await?;

        c.ok(&["unbind", "widgets", "-n", ns], &["deleted"]).await?;
        c.ok(&["disconnect", "lc"], &[]).await?;
        expect_left(&[
            (&c.consumer, kind::<Connection>(), None, "lc", Gone),
            (
                &c.consumer,
                kind::<Secret>(),
                Some(SECRET_NAMESPACE),
                "lc-kubeconfig",
                Gone,
            ),
            (&c.consumer, kind::<Binding>(), Some(ns), "widgets", Gone),
            (&c.consumer, widget.clone(), Some(ns), "g1", Released),
            (&c.provider, widget.clone(), Some(ns), "g1", Gone),
            // The foreign provider object is not kbind's to delete.
            (&c.provider, widget, Some(ns), "taken", Kept),
        ])
        .await
    })
}

#[test]
fn unbinding_the_last_cluster_binding_of_an_api_needs_yes_and_removes_its_crd() -> Result<()> {
    Cli::run("lastcb", async |c| {
        let api = c.api.name();
        let crd = |left: Left| {
            (
                &c.consumer,
                kind::<CustomResourceDefinition>(),
                None,
                &*api,
                left,
            )
        };
        let cluster_binding =
            |left: Left| (&c.consumer, kind::<ClusterBinding>(), None, "lastcb", left);
        c.connect(c.pair.provider.admin().kubeconfig_path(), &[])
            .await?;
        c.bind(&["--cluster", "--name", "lastcb"]).await?;
        expect_left(&[crd(Kept)]).await?;

        // Without --yes nothing is deleted: the CRD and its instances would go with it.
        c.kbind(&["unbind", "lastcb", "--cluster"])
            .await?
            .expect(1, &["--yes", &api])?;
        expect_left(&[cluster_binding(Kept)]).await?;

        c.ok(&["unbind", "lastcb", "--cluster", "--yes"], &[])
            .await?;
        expect_left(&[cluster_binding(Gone)]).await?;
        wait_left(&[crd(Gone)]).await?;
        c.ok(&["disconnect", "lastcb"], &[]).await?;
        Ok(())
    })
}
