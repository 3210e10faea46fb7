//! A release that survives itself: with `crds.keep` (the default), `helm uninstall` leaves
//! the core CRDs and every Connection and Binding in them (with their finalizers, which only
//! a running konnector releases), and installing the same release again takes the CRDs back
//! into it; the konnector started from the new release resumes syncing the same objects.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_tests::faults::Sides;
use kbind_tests::syncenv::TestApi;
use kbind_tests::testenv::{ClusterPair, tail};
use konnector::api::{Binding, Connection};
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::installed::{free_ports_values, helm_install, helm_on, run_as_deployment};
use super::registry::{bind_and_sync, wait_copy};
use super::*;

/// The API group this test binds.
const GROUP: &str = "reinstall.chart.kbind.io";
/// The namespace of the binding and its instances.
const TEAM: &str = "team-u";

#[test]
fn uninstall_keeps_core_crds_and_objects_and_reinstalling_the_release_resumes_syncing() -> Result<()>
{
    let pair = ClusterPair::start_private()?;
    let log = pair.root().join("konnector.log");
    let result = kbind_tests::runtime()?.block_on(pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let values = free_ports_values()?;
        helm_install(&pair, &consumer, &[CHART], &values).await?;
        let binary = kbind_tests::konnector_binary!();
        let mut konnector = run_as_deployment(&pair, &consumer, &log, &binary).await?;
        konnector.wait_ready(Duration::from_secs(45)).await?;
        let sides = Sides::on(&pair, TestApi::namespaced(GROUP), TEAM).await?;
        bind_and_sync(&sides, &pair, "w", json!({"size": 1})).await?;

        // The Pod goes with the release; then the release goes.
        konnector.terminate(Duration::from_secs(10)).await?;
        helm_on(&pair, &["uninstall", RELEASE, "--wait"], "")?;
        let crds = Api::<CustomResourceDefinition>::all(consumer.clone());
        for (_, crd) in konnector::api::core_crds() {
            let name = crd.name_any();
            let kept = crds.get_opt(&name).await?;
            let kept = kept.with_context(|| format!("uninstall deleted CRD {name}"))?;
            ensure!(
                kept.metadata.deletion_timestamp.is_none(),
                "CRD {name} is being deleted"
            );
        }
        let connections = Api::<Connection>::all(consumer.clone());
        let connection = connections.get("provider").await?;
        ensure!(
            connection.metadata.deletion_timestamp.is_none(),
            "{connection:?}"
        );
        let bindings = Api::<Binding>::namespaced(consumer.clone(), TEAM);
        let binding = bindings.get("widgets").await?;
        ensure!(
            !binding.finalizers().is_empty(),
            "the binding lost its finalizer"
        );
        ensure!(
            sides.instances().get_opt("w").await?.is_some(),
            "the instance is gone"
        );
        // Nothing else of the release is left.
        let deployments =
            Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(consumer.clone(), NAMESPACE);
        ensure!(
            deployments.get_opt(FULLNAME).await?.is_none(),
            "the Deployment stayed"
        );

        // While nothing runs, the instance changes; the same release is installed again.
        let changed = json!({"size": 5});
        let patch = json!({"spec": changed});
        sides
            .instances()
            .patch("w", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        let values = free_ports_values()?;
        helm_install(&pair, &consumer, &[CHART], &values).await?;
        // The kept CRDs are the release's again (an upgrade or uninstall manages them).
        let manifest = helm_on(&pair, &["get", "manifest", RELEASE], "")?;
        for (_, crd) in konnector::api::core_crds() {
            let name = format!("name: {}", crd.name_any());
            ensure!(manifest.contains(&name), "the release does not hold {name}");
        }
        let konnector = run_as_deployment(&pair, &consumer, &log, &binary).await?;
        konnector.wait_ready(Duration::from_secs(45)).await?;
        // The change made while no konnector ran reaches the provider, and a new instance
        // syncs.
        wait_copy(&sides, "w", &changed).await?;
        let new = json!({"size": 7});
        sides.create("w2", new.clone()).await?;
        wait_copy(&sides, "w2", &new).await
    }));
    result.map_err(|e| anyhow!("{e:?}\n--- konnector log (tail)\n{}", tail(&log, 60)))
}
