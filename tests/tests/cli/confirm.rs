//! `unbind` and `disconnect` ask for `--yes` exactly when the konnector's teardown will delete
//! a consumer CRD (and with it every instance): the CLI asks the konnector's own rule, over the
//! bindings left after its plan. Each case: refused without `--yes` with the CRD and the
//! instances kept, `--dry-run` prints the plan and the CRD it deletes, `--yes` does it.

use anyhow::Result;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition as Crd;
use kbind_tests::eventually;
use kbind_tests::fixtures::{CONVERGE, ensure_namespace, private_cluster};
use kbind_tests::syncenv::appears;
use kbind_tests::syncenv::remains::Left::{Gone, Kept};
use kbind_tests::syncenv::remains::{delete_gone, expect_left, kind, wait_left};
use konnector::api::{ClusterBinding, Connection};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use super::Cli;

/// What refusing, dry-running and confirming one teardown `args` must show, with the test's
/// instance `w1` and the consumer CRD kept until `--yes`.
async fn refused_then_dry_run_then_done(c: &Cli, args: &[&str]) -> Result<()> {
    let api = c.api.name();
    let instance = format!("{}/w1", c.name);
    let crd = |left| (&c.consumer, kind::<Crd>(), &*api, left);
    let w1 = |left| (&c.consumer, c.api.resource(), &*instance, left);

    let refused = c.kbind(args).await?;
    refused.expect(1, &["--yes", &api])?;
    expect_left(&[crd(Kept), w1(Kept)]).await?;

    let dry = c.kbind(&[args, &["--dry-run"]].concat()).await?;
    dry.expect(0, &["dry run", "deletes the consumer CRDs", &api])?;
    expect_left(&[crd(Kept), w1(Kept)]).await?;

    c.ok(&[args, &["--yes"]].concat(), &[]).await?;
    // Its instances go with the CRD (their resource is then not served at all).
    wait_left(&[crd(Gone)]).await
}

#[test]
fn disconnect_cascade_over_a_cluster_binding_and_a_binding_of_one_api_needs_yes() -> Result<()> {
    Cli::run("cfcascade", async |c| {
        c.connect(c.pair.provider.admin(), &[]).await?;
        c.bind(&["-n", "cfcascade"]).await?;
        let cb = format!("{}-all", c.name);
        c.bind(&["--cluster", "--name", &cb]).await?;
        c.create_synced("w1", json!({"size": 1})).await?;
        // The cascade deletes the Binding before the ClusterBinding: nothing is left to keep
        // the CRD, although the Binding is still there when the command starts.
        refused_then_dry_run_then_done(c, &["disconnect", "cfcascade", "--cascade"]).await?;
        expect_left(&[(&c.consumer, kind::<Connection>(), "cfcascade", Gone)]).await
    })
}

#[test]
fn unbinding_a_cluster_binding_beside_one_with_a_typod_connection_needs_yes() -> Result<()> {
    Cli::run("cftypo", async |c| {
        c.connect(c.pair.provider.admin(), &[]).await?;
        let cb = format!("{}-real", c.name);
        c.bind(&["--cluster", "--name", &cb]).await?;
        ensure_namespace(&c.consumer, &c.name).await?;
        c.create_synced("w1", json!({"size": 1})).await?;
        // A second ClusterBinding lists the API through a Connection that does not exist: it
        // can never sync it, so it keeps nothing.
        let typo_name = format!("{}-typo", c.name);
        let mut typo: ClusterBinding = serde_json::from_value(json!({
            "apiVersion": "core.kbind.io/v1alpha1",
            "kind": "ClusterBinding",
            "metadata": {"name": typo_name},
            "spec": {"connectionRef": {"name": "cftypo-nope"}, "apis": [{"name": c.api.name()}]},
        }))?;
        let cluster_bindings = Api::<ClusterBinding>::all(c.consumer.clone());
        typo = cluster_bindings
            .create(&PostParams::default(), &typo)
            .await?;
        refused_then_dry_run_then_done(c, &["unbind", &cb, "--cluster"]).await?;
        let typo_path = typo.metadata.name.unwrap_or(typo_name);
        delete_gone(&c.consumer, kind::<ClusterBinding>(), &typo_path).await?;
        c.ok(&["disconnect", "cftypo"], &[]).await?;
        Ok(())
    })
}

#[test]
fn disconnecting_an_auto_bind_connection_needs_yes_for_what_its_cluster_binding_installed()
-> Result<()> {
    Cli::run("cfauto", async |c| {
        // autoBind binds every export of its provider: this one has a provider of its own.
        let cluster = tokio::task::spawn_blocking(|| private_cluster("cfauto")).await??;
        let provider = cluster.client().await?;
        c.api.install_on_provider(&provider).await?;
        c.connect(cluster.admin(), &["--auto-bind"]).await?;
        ensure_namespace(&c.consumer, &c.name).await?;
        // The autoBind ClusterBinding installs the consumer CRD; the instance syncs.
        let create = || {
            c.api
                .create(&c.consumer, Some(&c.name), "w1", json!({"size": 1}))
        };
        eventually(CONVERGE, create).await?;
        appears(&c.api.api(&provider, Some(&c.name)), "w1").await?;

        refused_then_dry_run_then_done(c, &["disconnect", "cfauto"]).await?;
        expect_left(&[
            (&c.consumer, kind::<Connection>(), "cfauto", Gone),
            (&c.consumer, kind::<ClusterBinding>(), "cfauto", Gone),
        ])
        .await
    })
}
