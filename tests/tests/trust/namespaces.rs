//! `Connection.spec.bindingNamespaceSelector`: a Binding in a namespace the Connection does not
//! select is `NamespaceNotAllowed` and syncs nothing, until the namespace is relabelled;
//! ClusterBindings are not limited.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kbind_tests::faults::{Sides, count_copies};
use kbind_tests::syncenv::related::{entry, put_configmap};
use kbind_tests::syncenv::{
    BINDING, Scenario, TestApi, WAIT, holds_syncer_finalizer, stays, wait_for,
};
use konnector::api::RelatedDirection::FromConsumer;
use konnector::api::RelatedResourceKind::Configmaps;
use konnector::api::{ConflictPolicy, Connection, Reason};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;

use super::{STAYS, ready_is, refused};

const LABEL: &str = "trust.kbind.test/may-bind";

#[test]
fn binding_outside_the_namespace_selector_syncs_nothing_until_relabelled() -> anyhow::Result<()> {
    let cluster_api = TestApi::namespaced("trust-ns-cluster.e2e.kbind.io");
    let scenario = Scenario::unbound("trust-ns").namespace("trust-ns-team");
    scenario.with_api(cluster_api).run(async |s| {
        let (api, cluster_api, ns) = (&s.api, &s.extra[0], s.ns());
        let selector =
            json!({"spec": {"bindingNamespaceSelector": {"matchLabels": {LABEL: "true"}}}});
        Api::<Connection>::all(s.consumer.clone())
            .patch(&s.name, &PatchParams::default(), &Patch::Merge(selector))
            .await?;
        s.export().await?;
        // The consumer CRD exists (installed for this Connection earlier), so the namespace's
        // author can create instances.
        api.install_on_consumer(&s.consumer, Some(&s.name)).await?;
        s.engage();
        put_configmap(&s.consumer, ns, "settings", &[], &[("k", "v")]).await?;
        let mut binding = s.binding(ns, BINDING, &[api], ConflictPolicy::Fail);
        binding.spec.related_resources = vec![entry(Configmaps, FromConsumer, &["settings"], &[])];
        s.create_binding(&binding).await?;
        let message = refused(s, false, Reason::NamespaceNotAllowed).await?;
        anyhow::ensure!(
            message.contains(ns) && message.contains("label the namespace"),
            "{message}"
        );

        for i in 0..2 {
            s.create(&format!("w-{i}"), json!({"i": i})).await?;
        }
        let provider_configmaps = Api::<ConfigMap>::namespaced(s.provider.clone(), ns);
        stays("nothing synced from there", STAYS, || async {
            let copies = count_copies(api, &s.provider, ns).await?;
            let instances = s.instances().list(&ListParams::default()).await?.items;
            let finalized = instances.iter().any(holds_syncer_finalizer);
            let related = provider_configmaps.get_opt("settings").await?.is_some();
            Ok(copies == 0 && !finalized && !related)
        })
        .await?;

        // ClusterBindings are cluster-admin objects: the selector does not limit them.
        let cluster_binding = s.cluster_binding(&s.name, &[cluster_api], ConflictPolicy::Fail);
        s.create_ready_cluster_binding(&cluster_binding).await?;

        // The Connection's owner labels the namespace: the Binding follows by itself.
        let label = json!({"metadata": {"labels": {LABEL: "true"}}});
        Api::<Namespace>::all(s.consumer.clone())
            .patch(ns, &PatchParams::default(), &Patch::Merge(label))
            .await?;
        ready_is(s, false, "True", Reason::AsExpected).await?;
        Sides::of(s).wait_copies(2).await?;
        wait_for("the related ConfigMap copied", WAIT, || async {
            Ok(provider_configmaps.get_opt("settings").await?)
        })
        .await?;
        Ok(())
    })
}
