//! Consumer CRDs kbind does not own: the consumer's own CRD, one pinned to another
//! Connection, and kbind's own `clusterbindings.core.kbind.io`. A binding listing them is not
//! Ready, and deleting the last ClusterBinding leaves the CRD and its objects.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_tests::syncenv::{Scenario, ensure_namespace, holds_syncer_finalizer, merge, stays};
use konnector::api::names::{
    CONNECTION_ANNOTATION, CONSUMER_CLUSTER_UID_ANNOTATION, CONSUMER_OBJECT_UID_ANNOTATION,
    MANAGED_LABEL, SYNCER_FINALIZER,
};
use konnector::api::{ApiReference, ConflictPolicy, ExportedApi, Reason, ResourceScope};
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use super::{STAYS, refused};

const OBJECTS: usize = 3;

async fn count(objects: Api<DynamicObject>) -> anyhow::Result<usize> {
    let list = objects.list_metadata(&ListParams::default()).await?;
    Ok(list.items.len())
}

/// What identifies the state of the scenario's CRD: its UID, spec generation and Connection
/// pin (`null` once deleted).
async fn crd_state(s: &Scenario) -> anyhow::Result<Value> {
    let crd = Api::<CustomResourceDefinition>::all(s.consumer.clone());
    let crd = crd.get_opt(&s.api.name()).await?;
    let state = |c: &CustomResourceDefinition| {
        let pin = c.annotations().get(CONNECTION_ANNOTATION);
        json!({ "uid": c.uid(), "generation": c.metadata.generation, "pin": pin })
    };
    Ok(crd.as_ref().map(state).unwrap_or_default())
}

/// Fails unless the scenario's CRD is left as it was `before` ([`crd_state`]), with
/// `[consumer, provider]` objects on the two sides.
async fn left_as(s: &Scenario, before: &Value, objects: [usize; 2]) -> anyhow::Result<()> {
    let counts = [count(s.instances()).await?, count(s.copies()).await?];
    let left = json!({ "crd": crd_state(s).await?, "objects": counts });
    let expected = json!({ "crd": before, "objects": objects });
    assert_eq!(left, expected, "what is left of the CRD and its objects");
    Ok(())
}

#[test]
fn last_cluster_binding_of_a_crd_the_consumer_made_leaves_it_and_its_objects() -> anyhow::Result<()>
{
    let scenario = Scenario::unbound("trust-own-crd")
        .namespace("trust-own-crd-ns")
        .cluster_binding();
    scenario.run(async |s| {
        let (api, ns) = (&s.api, s.ns());
        // The provider exports the API, and the consumer already has a CRD of that name of its
        // own (no kbind annotation), with objects.
        s.export().await?;
        api.install_on_consumer(&s.consumer, None).await?;
        let before = crd_state(s).await?;
        for i in 0..OBJECTS {
            s.create(&format!("own-{i}"), json!({"i": i})).await?;
        }
        // One object carries kbind's finalizer (left from an older konnector), and the
        // provider has a copy of it with this consumer's ownership markers.
        let finalizer = json!({"metadata": {"finalizers": [SYNCER_FINALIZER]}});
        let marked = merge(&s.instances(), "own-0", finalizer).await?;
        let mut copy = api.object(Some(ns), "own-0", json!({"i": 0}));
        copy.metadata = serde_json::from_value(json!({
            "name": "own-0", "namespace": ns, "labels": {MANAGED_LABEL: "true"},
            "annotations": {
                CONSUMER_CLUSTER_UID_ANNOTATION: s.consumer_uid,
                CONSUMER_OBJECT_UID_ANNOTATION: marked.uid(),
            },
        }))?;
        ensure_namespace(&s.provider, ns).await?;
        s.copies().create(&PostParams::default(), &copy).await?;
        s.engage();

        s.create_cluster_binding(&s.new_cluster_binding()).await?;
        let message = refused(s, true, Reason::CRDNotManaged).await?;
        anyhow::ensure!(
            message.contains("not installed by kbind") && message.contains(CONNECTION_ANNOTATION),
            "the condition says what to do: {message}"
        );
        // Not Ready: nothing of the consumer's own objects reaches the provider.
        s.create("own-late", json!({})).await?;
        stays("no new provider copy", STAYS, || async {
            Ok(count(s.copies()).await? == 1)
        })
        .await?;

        s.unbind().await?;
        left_as(s, &before, [OBJECTS + 1, 1]).await?;
        let finalizer_left = holds_syncer_finalizer(&s.instances().get("own-0").await?);
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
        s.export().await?;
        s.api
            .install_on_consumer(&s.consumer, Some("someone-else"))
            .await?;
        for i in 0..OBJECTS {
            s.create(&format!("theirs-{i}"), json!({})).await?;
        }
        let before = crd_state(s).await?;
        s.engage();
        s.create_cluster_binding(&s.new_cluster_binding()).await?;
        // Pinned to a Connection that does not exist, from no recorded provider: not taken
        // over, and the binding says how to hand it over.
        refused(s, true, Reason::PinnedConnectionGone).await?;
        s.unbind().await?;
        left_as(s, &before, [OBJECTS, 0]).await
    })
}

#[test]
fn cluster_binding_listing_kbinds_own_crd_never_deletes_it() -> anyhow::Result<()> {
    let core = "clusterbindings.core.kbind.io";
    let scenario = Scenario::unbound("trust-core").cluster_binding();
    scenario.run(async |s| {
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
        let core_api = ApiReference { name: core.into() };
        listing.spec.spec.apis.push(core_api);
        s.create_cluster_binding(&listing).await?;
        // Its other API syncs; the refused one is named with its reason.
        let message = refused(s, true, Reason::APIsNotReady).await?;
        anyhow::ensure!(
            message.contains(&format!("{core} (CRDNotManaged)"))
                && message.contains("belongs to kbind or Kubernetes"),
            "{message}"
        );
        s.unbind().await?;

        let core_crd = Api::<CustomResourceDefinition>::all(s.consumer.clone())
            .get_opt(core)
            .await?;
        let core_kept = core_crd.is_some_and(|c| c.metadata.deletion_timestamp.is_none());
        let bystanders = s.cluster_bindings();
        let bystander_kept = bystanders.get_opt(&bystander_name).await?.is_some();
        // The bystander is left for no controller; take it away without teardown.
        bystanders
            .delete(&bystander_name, &DeleteParams::default())
            .await?;
        assert!(core_kept, "kbind's own CRD was deleted");
        assert!(bystander_kept, "another ClusterBinding was deleted");
        Ok(())
    })
}
