//! The operator's whole journey with `kubectl kbind`: connect → bind → status (naming a
//! conflicting instance) → a refused disconnect → unbind → disconnect, then nothing of kbind
//! is left behind on either cluster; and the guard on unbinding an API's last ClusterBinding.

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition as Crd;
use kbind_tests::fixtures::http_get;
use kbind_tests::syncenv::related::{secret_value, wait_secret};
use kbind_tests::syncenv::remains::Left::{self, Gone, Kept, Released};
use kbind_tests::syncenv::remains::{delete_gone, expect_left, kind, wait_left};
use kbind_tests::syncenv::{delete, wait_for};
use konnector::api::{Binding, ClusterBinding, Connection};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use super::{Cli, WAIT};

#[test]
fn connect_bind_status_unbind_disconnect_leaves_nothing_behind() -> Result<()> {
    Cli::run("lc", async |c| {
        let (api, widget) = (c.api.name(), c.api.resource());
        let taken = |client| c.api.create(client, Some("lc"), "taken", json!({}));
        // A provider object nobody owns, for the conflict the status must name.
        taken(&c.provider).await?;

        let connected = c.connect(c.pair.provider.admin(), &[]).await?;
        let connected = connected.expect(0, &["Ready=True", &api])?;
        // The provider admin's credentials are stored, with a warning saying what to use.
        let warning = "is a cluster administrator on the provider";
        ensure!(connected.stderr.contains(warning), "{connected:?}");
        ensure!(
            connected.stderr.contains("kubectl kbind provider-rbac"),
            "{connected:?}"
        );
        let secret = wait_secret(&c.consumer, "kbind", "lc-kubeconfig").await?;
        assert!(secret_value(&secret, "kubeconfig").is_some());

        c.bind(&["-n", "lc"]).await?;
        c.create_synced("g1", json!({"size": 1})).await?;
        taken(&c.consumer).await?;

        // status: the tree names the conflicting instance and exits 1 while it conflicts.
        let counts = "1 synced, 1 conflicting, 0 failing";
        let status = wait_for("status to count the conflict", WAIT, || async {
            let run = c.kbind(&["status", "lc"]).await?;
            ensure!(run.stdout.contains(counts), "{run:?}");
            Ok(Some(run))
        })
        .await?;
        ensure!(status.code == 1, "a conflict exits 1: {status:?}");
        for line in ["Binding lc/widgets", "✗ lc/taken  ForeignObjectExists"] {
            ensure!(status.stdout.contains(line), "{line}: {status:?}");
        }
        let json = c.kbind(&["status", "lc", "-o", "json"]).await?;
        let report: Value = serde_json::from_str(&json.stdout)?;
        let apis = report["connections"][0]["apis"].as_array();
        let ours = apis.into_iter().flatten().find(|a| a["name"] == *api);
        let node = &ours.context("the API not in the report")?["bindings"][0];
        let counts = json!({"synced": 1, "conflicting": 1, "failing": 0, "pending": 0});
        assert_eq!(node["counts"], counts);
        assert_eq!(node["failing"][0]["name"], "taken");

        // The Conflicts column's source: the binding's total over its APIs.
        let bindings = Api::<Binding>::namespaced(c.consumer.clone(), "lc");
        wait_for("the binding's conflictCount 1", WAIT, || async {
            let b = bindings.get("widgets").await?;
            Ok((b.status.map(|s| s.conflict_count) == Some(1)).then_some(()))
        })
        .await?;

        // The running konnector exports what the dashboard charts for this sync.
        let (_, exposition) = http_get(c.metrics, "/metrics").await?;
        for sample in [
            "kbind_instances_synced_total{",
            "kbind_sync_lag_seconds_bucket{",
            "kbind_conflicts_total{",
            "kbind_engaged_connections ",
        ] {
            ensure!(exposition.contains(sample), "{sample}:\n{exposition}");
        }

        // Resolving the conflict makes status healthy.
        delete(&c.instances, "taken").await?;
        wait_for("status exit 0", WAIT, || async {
            Ok((c.kbind(&["status", "lc"]).await?.code == 0).then_some(()))
        })
        .await?;

        // disconnect refuses while an explicit binding uses the Connection, deleting nothing.
        let refused = c.kbind(&["disconnect", "lc"]).await?;
        refused.expect(1, &["kubectl kbind unbind widgets -n lc"])?;
        expect_left(&[(&c.consumer, kind::<Connection>(), "lc", Kept)]).await?;

        c.ok(&["unbind", "widgets", "-n", "lc"], &["deleted"])
            .await?;
        c.ok(&["disconnect", "lc"], &[]).await?;
        expect_left(&[
            (&c.consumer, kind::<Connection>(), "lc", Gone),
            (&c.consumer, kind::<Secret>(), "kbind/lc-kubeconfig", Gone),
            (&c.consumer, kind::<Binding>(), "lc/widgets", Gone),
            (&c.consumer, widget.clone(), "lc/g1", Released),
            (&c.provider, widget.clone(), "lc/g1", Gone),
            // The foreign provider object is not kbind's to delete.
            (&c.provider, widget, "lc/taken", Kept),
        ])
        .await
    })
}

#[test]
fn unbinding_the_last_cluster_binding_of_an_api_needs_yes_and_removes_its_crd() -> Result<()> {
    Cli::run("lastcb", async |c| {
        let api = c.api.name();
        let crd = |left: Left| (&c.consumer, kind::<Crd>(), &*api, left);
        let binding = |left: Left| (&c.consumer, kind::<ClusterBinding>(), "lastcb", left);
        c.connect(c.pair.provider.admin(), &[]).await?;
        c.bind(&["--cluster", "--name", "lastcb"]).await?;
        expect_left(&[crd(Kept)]).await?;

        // Without --yes nothing is deleted: the CRD and its instances would go with it.
        let refused = c.kbind(&["unbind", "lastcb", "--cluster"]).await?;
        refused.expect(1, &["--yes", &api])?;
        expect_left(&[binding(Kept)]).await?;

        c.ok(&["unbind", "lastcb", "--cluster", "--yes"], &[])
            .await?;
        expect_left(&[binding(Gone)]).await?;
        wait_left(&[crd(Gone)]).await?;
        c.ok(&["disconnect", "lastcb"], &[]).await?;
        Ok(())
    })
}

#[test]
fn disconnect_keeps_a_credential_secret_connect_did_not_create() -> Result<()> {
    Cli::run("handmade", async |c| {
        c.connect(c.pair.provider.admin(), &[]).await?;
        // The Secret now looks like one an operator made by hand: no created-by label.
        let secrets = Api::<Secret>::namespaced(c.consumer.clone(), "kbind");
        let unmark = json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": null}}});
        let (name, params) = ("handmade-kubeconfig", PatchParams::default());
        secrets.patch(name, &params, &Patch::Merge(&unmark)).await?;

        let run = c.ok(&["disconnect", "handmade"], &[]).await?;
        let kept = "kept: `kubectl kbind connect` did not create it";
        ensure!(run.stderr.contains(kept), "{run:?}");
        expect_left(&[
            (&c.consumer, kind::<Connection>(), "handmade", Gone),
            (
                &c.consumer,
                kind::<Secret>(),
                "kbind/handmade-kubeconfig",
                Released,
            ),
        ])
        .await?;
        delete_gone(&c.consumer, kind::<Secret>(), "kbind/handmade-kubeconfig").await
    })
}
