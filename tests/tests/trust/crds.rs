//! Consumer CRDs kbind does not own: the consumer's own CRD, one pinned to another
//! Connection, and kbind's own `clusterbindings.core.kbind.io`. A binding listing them is not
//! Ready, and deleting the last ClusterBinding leaves the CRD and its objects.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_tests::syncenv::{
    Scenario, TestApi, ensure_namespace, holds_syncer_finalizer, merge, stays,
};
use konnector::api::names::{
    CONNECTION_ANNOTATION, CONSUMER_CLUSTER_UID_ANNOTATION, CONSUMER_OBJECT_UID_ANNOTATION,
    MANAGED_LABEL, SYNCER_FINALIZER,
};
use konnector::api::{ApiReference, ConflictPolicy, ExportedApi, Reason, ResourceScope};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::{STAYS, cluster_binding_refused, warning_event};

const OBJECTS: usize = 3;

async fn count(api: &TestApi, client: &kube::Client, ns: &str) -> anyhow::Result<usize> {
    let list = api
        .api(client, Some(ns))
        .list_metadata(&ListParams::default())
        .await?;
    Ok(list.items.len())
}

fn crds(s: &Scenario) -> Api<CustomResourceDefinition> {
    Api::all(s.consumer.clone())
}

#[test]
fn last_cluster_binding_of_a_crd_the_consumer_made_leaves_it_and_its_objects() -> anyhow::Result<()>
{
    let scenario = Scenario::unbound("trust-own-crd")
        .namespace("trust-own-crd-ns")
        .cluster_binding();
    scenario.run(async |s| {
        let (api, ns, name) = (&s.api, s.ns(), s.name.as_str());
        // The provider exports the API, and the consumer already has a CRD of that name of its
        // own (no kbind annotation), with objects.
        s.export().await?;
        api.install_on_consumer(&s.consumer, None).await?;
        for i in 0..OBJECTS {
            s.create(&format!("own-{i}"), json!({"i": i})).await?;
        }
        // One object carries kbind's finalizer (left from an older konnector), and the
        // provider has a copy of it with this consumer's ownership markers.
        let finalizer = json!({"metadata": {"finalizers": [SYNCER_FINALIZER]}});
        let marked = merge(&s.instances(), "own-0", finalizer).await?;
        let mut copy = api.object(Some(ns), "own-0", json!({"i": 0}));
        copy.metadata.labels = Some([(MANAGED_LABEL.to_string(), "true".to_string())].into());
        copy.metadata.annotations = Some(
            [
                (CONSUMER_CLUSTER_UID_ANNOTATION.to_string(), s.consumer_uid.clone()),
                (CONSUMER_OBJECT_UID_ANNOTATION.to_string(), marked.uid().unwrap_or_default()),
            ]
            .into(),
        );
        ensure_namespace(&s.provider, ns).await?;
        s.copies().create(&PostParams::default(), &copy).await?;
        s.engage();

        s.create_cluster_binding(&s.new_cluster_binding()).await?;
        let message = cluster_binding_refused(s, name, Reason::CRDNotManaged).await?;
        anyhow::ensure!(
            message.contains("not installed by kbind") && message.contains(CONNECTION_ANNOTATION),
            "the condition says what to do: {message}"
        );
        warning_event(s, None, name, Reason::CRDNotManaged).await?;
        // Not Ready: nothing of the consumer's own objects reaches the provider.
        s.create("own-late", json!({})).await?;
        stays("no new provider copy", STAYS, || async {
            Ok(count(api, &s.provider, ns).await? == 1)
        })
        .await?;

        s.unbind().await?;
        let crd = crds(s).get_opt(&api.name()).await?;
        let survivors = count(api, &s.consumer, ns).await?;
        let provider_copies = count(api, &s.provider, ns).await?;
        let finalizer_left = holds_syncer_finalizer(&s.instances().get("own-0").await?);
        println!(
            "survived: CRD {}, {survivors} consumer objects, {provider_copies} provider copy; kbind finalizer left: {finalizer_left}",
            crd.is_some()
        );
        anyhow::ensure!(crd.is_some(), "the consumer's own CRD was deleted");
        anyhow::ensure!(
            crd.is_some_and(|c| !c.annotations().contains_key(CONNECTION_ANNOTATION)),
            "the consumer's own CRD was annotated by kbind"
        );
        anyhow::ensure!(survivors == OBJECTS + 1, "{survivors} consumer objects left");
        anyhow::ensure!(provider_copies == 1, "provider copy deleted through it");
        anyhow::ensure!(!finalizer_left, "kbind's finalizer was not released");
        Ok(())
    })
}

#[test]
fn crd_pinned_to_another_connection_is_left_untouched_by_teardown() -> anyhow::Result<()> {
    let scenario = Scenario::unbound("trust-pinned")
        .namespace("trust-pinned-ns")
        .cluster_binding();
    scenario.run(async |s| {
        let (api, ns) = (&s.api, s.ns());
        s.export().await?;
        api.install_on_consumer(&s.consumer, Some("someone-else"))
            .await?;
        for i in 0..OBJECTS {
            s.create(&format!("theirs-{i}"), json!({})).await?;
        }
        let before = crds(s).get(&api.name()).await?;
        s.engage();
        s.create_cluster_binding(&s.new_cluster_binding()).await?;
        cluster_binding_refused(s, &s.name, Reason::APIBoundElsewhere).await?;
        s.unbind().await?;

        let after = crds(s).get_opt(&api.name()).await?;
        let survivors = count(api, &s.consumer, ns).await?;
        println!(
            "survived: CRD {}, {survivors} consumer objects",
            after.is_some()
        );
        let after = after.ok_or_else(|| anyhow::anyhow!("the pinned CRD was deleted"))?;
        anyhow::ensure!(after.uid() == before.uid(), "the CRD was replaced");
        anyhow::ensure!(
            after.metadata.generation == before.metadata.generation,
            "the CRD's spec was changed"
        );
        let pin = after
            .annotations()
            .get(CONNECTION_ANNOTATION)
            .map(String::as_str);
        anyhow::ensure!(pin == Some("someone-else"), "the pin was changed: {pin:?}");
        anyhow::ensure!(survivors == OBJECTS, "{survivors} consumer objects left");
        Ok(())
    })
}

#[test]
fn cluster_binding_listing_kbinds_own_crd_never_deletes_it() -> anyhow::Result<()> {
    let core = "clusterbindings.core.kbind.io";
    Scenario::unbound("trust-core")
        .cluster_binding()
        .run(async |s| {
            let name = s.name.as_str();
            s.export().await?;
            // A provider (or a discovery bug) offering kbind's own API, and a ClusterBinding that
            // lists it: the host must refuse it whatever the export says.
            let mut engagement = s.engage();
            engagement.exported.push(ExportedApi {
                name: core.into(),
                group: "core.kbind.io".into(),
                resource: "clusterbindings".into(),
                scope: ResourceScope::Cluster,
                versions: vec!["v1alpha1".into()],
            });
            s.engagements.engage(engagement);
            // A ClusterBinding no stack handles: it must outlive everything below.
            let bystander_name = format!("{name}-bystander");
            let mut bystander = s.cluster_binding(&bystander_name, &[&s.api], ConflictPolicy::Fail);
            bystander.metadata.labels = None;
            bystander.spec.spec.connection_ref.name = format!("{name}-nobody");
            s.create_cluster_binding(&bystander).await?;

            let mut listing = s.new_cluster_binding();
            listing
                .spec
                .spec
                .apis
                .push(ApiReference { name: core.into() });
            s.create_cluster_binding(&listing).await?;
            let message = cluster_binding_refused(s, name, Reason::CRDNotManaged).await?;
            anyhow::ensure!(
                message.contains(core) && message.contains("belongs to kbind or Kubernetes"),
                "{message}"
            );
            s.unbind().await?;

            let core_crd = crds(s).get_opt(core).await?;
            let bystanders = s.cluster_bindings().get_opt(&bystander_name).await?;
            let core_kept = core_crd.is_some_and(|c| c.metadata.deletion_timestamp.is_none());
            println!(
                "survived: {core} CRD {core_kept}, bystander ClusterBinding {}",
                bystanders.is_some()
            );
            anyhow::ensure!(core_kept, "kbind's own CRD was deleted");
            anyhow::ensure!(bystanders.is_some(), "another ClusterBinding was deleted");
            // The bystander is left for no controller; take it away without teardown.
            s.cluster_bindings()
                .delete(&bystander_name, &DeleteParams::default())
                .await?;
            Ok(())
        })
}
