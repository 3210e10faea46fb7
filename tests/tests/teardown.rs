//! Binding teardown (spec, "Delete a binding", its cleanup limits, and "Delete the
//! Connection last") on real clusters; the full three-command sequence is in
//! `teardown_sequence.rs`.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_tests::syncenv::{Stack, TestApi, ensure_namespace, merge, stays, wait_for};
use kbind_tests::testenv::shared_pair;
use konnector::api::names::{DELETION_POLICY_ANNOTATION, DELETION_POLICY_ORPHAN, SYNCER_FINALIZER};
use konnector::api::{Binding, ClusterBinding, ConflictPolicy};
use kube::api::{DeleteParams, DynamicObject};
use kube::{Api, ResourceExt};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

async fn gone(api: &Api<DynamicObject>, name: &str, what: &str) -> anyhow::Result<()> {
    wait_for(what, WAIT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaced_binding_teardown_deletes_owned_copies_keeps_crd_and_instances()
-> anyhow::Result<()> {
    let ns = "td-binding";
    let stack = Stack::start(shared_pair()?, ns).await?;
    let api = TestApi::namespaced(&format!("{ns}.e2e.kbind.io"));
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            api.export(&stack).await?;
            stack.engage(&[&api]);
            stack
                .create_ready_binding(&stack.binding(ns, "b", &[&api], ConflictPolicy::Fail))
                .await?;
            api.create(&stack.consumer, Some(ns), "w", json!({"size": 1}))
                .await?;
            let provider = api.api(&stack.provider, Some(ns));
            wait_for("the provider copy", WAIT, || async {
                Ok(provider.get_opt("w").await?)
            })
            .await?;
            let bindings = Api::<Binding>::namespaced(stack.consumer.clone(), ns);
            bindings.delete("b", &DeleteParams::default()).await?;
            wait_for("the Binding gone", WAIT, || async {
                Ok(bindings.get_opt("b").await?.is_none().then_some(()))
            })
            .await?;
            gone(&provider, "w", "the owned provider copy deleted").await?;
            let instance = api.api(&stack.consumer, Some(ns)).get("w").await?;
            assert!(
                !instance.finalizers().iter().any(|f| f == SYNCER_FINALIZER),
                "syncer finalizer released: {:?}",
                instance.finalizers()
            );
            let crds = Api::<CustomResourceDefinition>::all(stack.consumer.clone());
            assert!(crds.get_opt(&api.name()).await?.is_some(), "CRD kept");
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_cluster_binding_teardown_deletes_crd_and_instances() -> anyhow::Result<()> {
    let name = "td-cluster";
    let ns = "td-cluster-ns";
    let stack = Stack::start(shared_pair()?, name).await?;
    let api = TestApi::namespaced(&format!("{name}.e2e.kbind.io"));
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            api.export(&stack).await?;
            stack.engage(&[&api]);
            stack
                .create_ready_cluster_binding(&stack.cluster_binding(
                    name,
                    &[&api],
                    ConflictPolicy::Fail,
                ))
                .await?;
            ensure_namespace(&stack.consumer, ns).await?;
            api.create(&stack.consumer, Some(ns), "w", json!({}))
                .await?;
            let provider = api.api(&stack.provider, Some(ns));
            wait_for("the provider copy", WAIT, || async {
                Ok(provider.get_opt("w").await?)
            })
            .await?;
            let cbs = Api::<ClusterBinding>::all(stack.consumer.clone());
            cbs.delete(name, &DeleteParams::default()).await?;
            wait_for("the ClusterBinding gone", WAIT, || async {
                Ok(cbs.get_opt(name).await?.is_none().then_some(()))
            })
            .await?;
            gone(&provider, "w", "the provider copy deleted").await?;
            let crds = Api::<CustomResourceDefinition>::all(stack.consumer.clone());
            wait_for("the consumer CRD deleted", WAIT, || async {
                Ok(crds.get_opt(&api.name()).await?.is_none().then_some(()))
            })
            .await?;
            // The provider's CRD is the provider's: untouched.
            let provider_crds = Api::<CustomResourceDefinition>::all(stack.provider.clone());
            assert!(provider_crds.get_opt(&api.name()).await?.is_some());
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_binding_skips_the_api_on_teardown() -> anyhow::Result<()> {
    let name = "td-overlap";
    let (ns_a, ns_b) = ("td-overlap-a", "td-overlap-b");
    let stack = Stack::start(shared_pair()?, name).await?;
    let api = TestApi::namespaced(&format!("{name}.e2e.kbind.io"));
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            api.export(&stack).await?;
            stack.engage(&[&api]);
            for ns in [ns_a, ns_b] {
                stack
                    .create_ready_binding(&stack.binding(ns, "b", &[&api], ConflictPolicy::Fail))
                    .await?;
            }
            api.create(&stack.consumer, Some(ns_a), "w", json!({}))
                .await?;
            let provider = api.api(&stack.provider, Some(ns_a));
            wait_for("the provider copy", WAIT, || async {
                Ok(provider.get_opt("w").await?)
            })
            .await?;
            let bindings = Api::<Binding>::namespaced(stack.consumer.clone(), ns_a);
            bindings.delete("b", &DeleteParams::default()).await?;
            wait_for("the Binding gone", WAIT, || async {
                Ok(bindings.get_opt("b").await?.is_none().then_some(()))
            })
            .await?;
            // Spec: the other binding lists the API, so cleanup skips it as a whole — even
            // though that binding does not cover ns_a.
            let consumer = api.api(&stack.consumer, Some(ns_a));
            stays(
                "copy and finalizer kept",
                Duration::from_secs(3),
                || async {
                    let copy = provider.get_opt("w").await?;
                    let instance = consumer.get("w").await?;
                    Ok(copy.is_some()
                        && instance.finalizers().iter().any(|f| f == SYNCER_FINALIZER))
                },
            )
            .await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_instance_keeps_its_copy_on_binding_teardown() -> anyhow::Result<()> {
    let ns = "td-orphan";
    let stack = Stack::start(shared_pair()?, ns).await?;
    let api = TestApi::namespaced(&format!("{ns}.e2e.kbind.io"));
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            api.export(&stack).await?;
            stack.engage(&[&api]);
            stack
                .create_ready_binding(&stack.binding(ns, "b", &[&api], ConflictPolicy::Fail))
                .await?;
            for name in ["kept", "dropped"] {
                api.create(&stack.consumer, Some(ns), name, json!({}))
                    .await?;
            }
            let provider = api.api(&stack.provider, Some(ns));
            for name in ["kept", "dropped"] {
                wait_for("the provider copy", WAIT, || async {
                    Ok(provider.get_opt(name).await?)
                })
                .await?;
            }
            merge(
                &api.api(&stack.consumer, Some(ns)),
                "kept",
                json!({"metadata": {"annotations": {
                    DELETION_POLICY_ANNOTATION: DELETION_POLICY_ORPHAN
                }}}),
            )
            .await?;
            let bindings = Api::<Binding>::namespaced(stack.consumer.clone(), ns);
            bindings.delete("b", &DeleteParams::default()).await?;
            wait_for("the Binding gone", WAIT, || async {
                Ok(bindings.get_opt("b").await?.is_none().then_some(()))
            })
            .await?;
            gone(&provider, "dropped", "the unannotated copy deleted").await?;
            anyhow::ensure!(
                provider.get_opt("kept").await?.is_some(),
                "Orphan copy deleted"
            );
            let kept = api.api(&stack.consumer, Some(ns)).get("kept").await?;
            anyhow::ensure!(
                !kept.finalizers().iter().any(|f| f == SYNCER_FINALIZER),
                "Orphan instance still holds its finalizer"
            );
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}
