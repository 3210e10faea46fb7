//! Consumer CRDs kbind does not own: the consumer's own CRD, one pinned to another
//! Connection, and kbind's own `clusterbindings.core.kbind.io`. A binding listing them is not
//! Ready, and deleting the last ClusterBinding leaves the CRD and its objects.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_tests::syncenv::{Stack, TestApi, merge, stays, wait_for};
use kbind_tests::testenv::shared_pair;
use konnector::api::names::{
    CONNECTION_ANNOTATION, CONSUMER_CLUSTER_UID_ANNOTATION, CONSUMER_OBJECT_UID_ANNOTATION,
    MANAGED_LABEL, SYNCER_FINALIZER,
};
use konnector::api::{ClusterBinding, ConflictPolicy, ExportedApi, Reason, ResourceScope};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::{STAYS, WAIT, cluster_binding_refused, warning_event};

const OBJECTS: usize = 3;

async fn delete_cluster_binding(stack: &Stack, name: &str) -> anyhow::Result<()> {
    let api = Api::<ClusterBinding>::all(stack.consumer.clone());
    api.delete(name, &DeleteParams::default()).await?;
    wait_for(&format!("ClusterBinding {name} gone"), WAIT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
}

async fn count(api: &TestApi, client: &kube::Client, ns: &str) -> anyhow::Result<usize> {
    Ok(api
        .api(client, Some(ns))
        .list_metadata(&ListParams::default())
        .await?
        .items
        .len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_cluster_binding_of_a_crd_the_consumer_made_leaves_it_and_its_objects()
-> anyhow::Result<()> {
    let pair = shared_pair()?;
    let name = "trust-own-crd";
    let ns = "trust-own-crd-ns";
    let stack = Stack::start(pair, name).await?;
    let api = TestApi::namespaced(&format!("{name}.e2e.kbind.io"));
    let result = pair
        .diagnose(stack.diagnose(&[&api], async {
            // The provider exports the API, and the consumer already has a CRD of that name
            // of its own (no kbind annotation), with objects.
            api.export(&stack).await?;
            api.install_on_consumer(&stack.consumer, None).await?;
            for i in 0..OBJECTS {
                api.create(&stack.consumer, Some(ns), &format!("own-{i}"), json!({"i": i}))
                    .await?;
            }
            // One object carries kbind's finalizer (left from an older konnector), and the
            // provider has a copy of it with this consumer's ownership markers.
            let consumer_objects = api.api(&stack.consumer, Some(ns));
            let marked = merge(
                &consumer_objects,
                "own-0",
                json!({"metadata": {"finalizers": [SYNCER_FINALIZER]}}),
            )
            .await?;
            let mut copy = api.object(Some(ns), "own-0", json!({"i": 0}));
            copy.metadata.labels = Some([(MANAGED_LABEL.to_string(), "true".to_string())].into());
            copy.metadata.annotations = Some(
                [
                    (
                        CONSUMER_CLUSTER_UID_ANNOTATION.to_string(),
                        stack.consumer_uid.clone(),
                    ),
                    (
                        CONSUMER_OBJECT_UID_ANNOTATION.to_string(),
                        marked.uid().unwrap_or_default(),
                    ),
                ]
                .into(),
            );
            kbind_tests::syncenv::ensure_namespace(&stack.provider, ns).await?;
            api.api(&stack.provider, Some(ns))
                .create(&PostParams::default(), &copy)
                .await?;
            stack.engage(&[&api]);

            stack
                .create_cluster_binding(&stack.cluster_binding(name, &[&api], ConflictPolicy::Fail))
                .await?;
            let message = cluster_binding_refused(&stack, name, Reason::CRDNotManaged).await?;
            anyhow::ensure!(
                message.contains("not installed by kbind") && message.contains(CONNECTION_ANNOTATION),
                "the condition says what to do: {message}"
            );
            warning_event(&stack, None, name, Reason::CRDNotManaged).await?;
            // Not Ready: nothing of the consumer's own objects reaches the provider.
            api.create(&stack.consumer, Some(ns), "own-late", json!({})).await?;
            stays("no new provider copy", STAYS, || async {
                Ok(count(&api, &stack.provider, ns).await? == 1)
            })
            .await?;

            delete_cluster_binding(&stack, name).await?;
            let crds = Api::<CustomResourceDefinition>::all(stack.consumer.clone());
            let crd = crds.get_opt(&api.name()).await?;
            let survivors = count(&api, &stack.consumer, ns).await?;
            let provider_copies = count(&api, &stack.provider, ns).await?;
            let finalizer_left = consumer_objects
                .get("own-0")
                .await?
                .finalizers()
                .iter()
                .any(|f| f == SYNCER_FINALIZER);
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
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_pinned_to_another_connection_is_left_untouched_by_teardown() -> anyhow::Result<()> {
    let pair = shared_pair()?;
    let name = "trust-pinned";
    let ns = "trust-pinned-ns";
    let stack = Stack::start(pair, name).await?;
    let api = TestApi::namespaced(&format!("{name}.e2e.kbind.io"));
    let result = pair
        .diagnose(stack.diagnose(&[&api], async {
            api.export(&stack).await?;
            api.install_on_consumer(&stack.consumer, Some("someone-else"))
                .await?;
            for i in 0..OBJECTS {
                api.create(&stack.consumer, Some(ns), &format!("theirs-{i}"), json!({}))
                    .await?;
            }
            let crds = Api::<CustomResourceDefinition>::all(stack.consumer.clone());
            let before = crds.get(&api.name()).await?;
            stack.engage(&[&api]);
            stack
                .create_cluster_binding(&stack.cluster_binding(name, &[&api], ConflictPolicy::Fail))
                .await?;
            cluster_binding_refused(&stack, name, Reason::APIBoundElsewhere).await?;
            delete_cluster_binding(&stack, name).await?;

            let after = crds.get_opt(&api.name()).await?;
            let survivors = count(&api, &stack.consumer, ns).await?;
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
            anyhow::ensure!(
                after
                    .annotations()
                    .get(CONNECTION_ANNOTATION)
                    .map(String::as_str)
                    == Some("someone-else"),
                "the pin was changed: {:?}",
                after.annotations()
            );
            anyhow::ensure!(survivors == OBJECTS, "{survivors} consumer objects left");
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_binding_listing_kbinds_own_crd_never_deletes_it() -> anyhow::Result<()> {
    let pair = shared_pair()?;
    let name = "trust-core";
    let stack = Stack::start(pair, name).await?;
    let api = TestApi::namespaced(&format!("{name}.e2e.kbind.io"));
    let core = "clusterbindings.core.kbind.io";
    let result = pair
        .diagnose(stack.diagnose(&[&api], async {
            api.export(&stack).await?;
            // A provider (or a discovery bug) offering kbind's own API, and a ClusterBinding
            // that lists it: the host must refuse it whatever the export says.
            let mut engagement = stack.engage(&[&api]);
            engagement.exported.push(ExportedApi {
                name: core.into(),
                group: "core.kbind.io".into(),
                resource: "clusterbindings".into(),
                scope: ResourceScope::Cluster,
                versions: vec!["v1alpha1".into()],
            });
            stack.engagements.engage(engagement);
            // A ClusterBinding no stack handles: it must outlive everything below.
            let mut bystander =
                stack.cluster_binding(&format!("{name}-bystander"), &[&api], ConflictPolicy::Fail);
            bystander.metadata.labels = None;
            bystander.spec.spec.connection_ref.name = format!("{name}-nobody");
            stack.create_cluster_binding(&bystander).await?;

            let mut listing = stack.cluster_binding(name, &[&api], ConflictPolicy::Fail);
            listing
                .spec
                .spec
                .apis
                .push(konnector::api::ApiReference { name: core.into() });
            stack.create_cluster_binding(&listing).await?;
            let message = cluster_binding_refused(&stack, name, Reason::CRDNotManaged).await?;
            anyhow::ensure!(
                message.contains(core) && message.contains("belongs to kbind or Kubernetes"),
                "{message}"
            );
            delete_cluster_binding(&stack, name).await?;

            let crds = Api::<CustomResourceDefinition>::all(stack.consumer.clone());
            let core_crd = crds.get_opt(core).await?;
            let bystanders = Api::<ClusterBinding>::all(stack.consumer.clone())
                .get_opt(&bystander.name_any())
                .await?;
            println!(
                "survived: {core} CRD {}, bystander ClusterBinding {}",
                core_crd
                    .as_ref()
                    .is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
                bystanders.is_some()
            );
            anyhow::ensure!(
                core_crd.is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
                "kbind's own CRD was deleted"
            );
            anyhow::ensure!(bystanders.is_some(), "another ClusterBinding was deleted");
            // The bystander is left for no controller; take it away without teardown.
            let cbs = Api::<ClusterBinding>::all(stack.consumer.clone());
            cbs.delete(&bystander.name_any(), &DeleteParams::default())
                .await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}
