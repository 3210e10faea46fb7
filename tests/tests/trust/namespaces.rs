//! `Connection.spec.bindingNamespaceSelector`: a Binding in a namespace the Connection does not
//! select is `NamespaceNotAllowed` and syncs nothing, until the namespace is relabelled;
//! ClusterBindings are not limited.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kbind_tests::faults::count_copies;
use kbind_tests::syncenv::related::{entry, put_configmap};
use kbind_tests::syncenv::{Stack, TestApi, ensure_namespace, stays, wait_for};
use kbind_tests::testenv::shared_pair;
use konnector::api::names::SYNCER_FINALIZER;
use konnector::api::{ConflictPolicy, Connection, Reason, RelatedDirection, RelatedResourceKind};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::{STAYS, WAIT, binding_ready_is, warning_event};

const LABEL: &str = "trust.kbind.test/may-bind";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_outside_the_namespace_selector_syncs_nothing_until_relabelled()
-> anyhow::Result<()> {
    let pair = shared_pair()?;
    let name = "trust-ns";
    let ns = "trust-ns-team";
    let stack = Stack::start(pair, name).await?;
    let api = TestApi::namespaced(&format!("{name}.e2e.kbind.io"));
    let cluster_api = TestApi::namespaced(&format!("{name}-cluster.e2e.kbind.io"));
    let result = pair
        .diagnose(stack.diagnose(&[&api, &cluster_api], async {
            Api::<Connection>::all(stack.consumer.clone())
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"bindingNamespaceSelector": {
                        "matchLabels": {LABEL: "true"}
                    }}})),
                )
                .await?;
            api.export(&stack).await?;
            cluster_api.export(&stack).await?;
            // The consumer CRD exists (installed for this Connection earlier), so the
            // namespace's author can create instances.
            api.install_on_consumer(&stack.consumer, Some(name)).await?;
            stack.engage(&[&api, &cluster_api]);
            ensure_namespace(&stack.consumer, ns).await?;
            put_configmap(&stack.consumer, ns, "settings", &[], &[("k", "v")]).await?;
            let mut binding = stack.binding(ns, "widgets", &[&api], ConflictPolicy::Fail);
            binding.spec.related_resources = vec![entry(
                RelatedResourceKind::Configmaps,
                RelatedDirection::FromConsumer,
                &["settings"],
                &[],
            )];
            stack.create_binding(&binding).await?;
            let refused = binding_ready_is(
                &stack,
                ns,
                "widgets",
                "Ready=False NamespaceNotAllowed",
                |c| c.status == "False" && c.reason == Reason::NamespaceNotAllowed.as_str(),
            )
            .await?;
            anyhow::ensure!(
                refused.message.contains(ns) && refused.message.contains("label the namespace"),
                "{}",
                refused.message
            );
            warning_event(&stack, Some(ns), "widgets", Reason::NamespaceNotAllowed).await?;

            for i in 0..2 {
                api.create(
                    &stack.consumer,
                    Some(ns),
                    &format!("w-{i}"),
                    json!({"i": i}),
                )
                .await?;
            }
            let provider_configmaps = Api::<ConfigMap>::namespaced(stack.provider.clone(), ns);
            let consumer_widgets = api.api(&stack.consumer, Some(ns));
            stays(
                "nothing synced from the refused namespace",
                STAYS,
                || async {
                    let copies = count_copies(&api, &stack.provider, ns).await?;
                    let finalized = consumer_widgets
                        .list(&ListParams::default())
                        .await?
                        .items
                        .iter()
                        .filter(|w| w.finalizers().iter().any(|f| f == SYNCER_FINALIZER))
                        .count();
                    let related = provider_configmaps.get_opt("settings").await?.is_some();
                    Ok(copies == 0 && finalized == 0 && !related)
                },
            )
            .await?;

            // ClusterBindings are cluster-admin objects: the selector does not limit them.
            stack
                .create_ready_cluster_binding(&stack.cluster_binding(
                    name,
                    &[&cluster_api],
                    ConflictPolicy::Fail,
                ))
                .await?;

            // The Connection's owner labels the namespace: the Binding follows by itself.
            Api::<Namespace>::all(stack.consumer.clone())
                .patch(
                    ns,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {LABEL: "true"}}})),
                )
                .await?;
            binding_ready_is(&stack, ns, "widgets", "Ready=True after relabelling", |c| {
                c.status == "True"
            })
            .await?;
            wait_for("both instances copied", WAIT, || async {
                Ok((count_copies(&api, &stack.provider, ns).await? == 2).then_some(()))
            })
            .await?;
            wait_for("the related ConfigMap copied", WAIT, || async {
                Ok(provider_configmaps.get_opt("settings").await?)
            })
            .await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}
