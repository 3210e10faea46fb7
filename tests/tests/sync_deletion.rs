//! Deleting consumer instances (required: "instance deletion waiting for a provider finalizer;
//! Orphan").

use std::time::Duration;

use anyhow::Context as _;
use kbind_tests::syncenv::{Stack, TestApi, delete, merge, stays, wait_for};
use kbind_tests::testenv::shared_pair;
use konnector::api::ConflictPolicy;
use konnector::api::names::{
    CONSUMER_CLUSTER_UID_ANNOTATION, CONSUMER_OBJECT_UID_ANNOTATION, DELETION_POLICY_ANNOTATION,
    DELETION_POLICY_ORPHAN, MANAGED_LABEL, SYNCER_FINALIZER,
};
use kube::ResourceExt;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

async fn bound(name: &str) -> anyhow::Result<(Stack, TestApi)> {
    let pair = shared_pair()?;
    let stack = Stack::start(pair, name).await?;
    let api = TestApi::namespaced(&format!("{name}.e2e.kbind.io"));
    api.export(&stack).await?;
    stack.engage(&[&api]);
    stack
        .create_ready_binding(&stack.binding(name, "widgets", &[&api], ConflictPolicy::Fail))
        .await?;
    Ok((stack, api))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_instance_deletes_its_provider_copy() -> anyhow::Result<()> {
    let ns = "delete-owned";
    let (stack, api) = bound(ns).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            api.create(&stack.consumer, Some(ns), "w", json!({}))
                .await?;
            let provider = api.api(&stack.provider, Some(ns));
            wait_for("the copy", WAIT, || async {
                Ok(provider.get_opt("w").await?)
            })
            .await?;
            delete(&api.api(&stack.consumer, Some(ns)), "w").await?;
            wait_for("the copy deleted", WAIT, || async {
                Ok(provider.get_opt("w").await?.is_none().then_some(()))
            })
            .await?;
            wait_for("the consumer instance gone", WAIT, || async {
                Ok(api
                    .api(&stack.consumer, Some(ns))
                    .get_opt("w")
                    .await?
                    .is_none()
                    .then_some(()))
            })
            .await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_deletion_waits_for_provider_finalizer() -> anyhow::Result<()> {
    let ns = "delete-waits";
    let (stack, api) = bound(ns).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            let consumer = api.api(&stack.consumer, Some(ns));
            let provider = api.api(&stack.provider, Some(ns));
            api.create(&stack.consumer, Some(ns), "w", json!({}))
                .await?;
            wait_for("the copy", WAIT, || async {
                Ok(provider.get_opt("w").await?)
            })
            .await?;
            // A provider-side controller holds its own finalizer on the copy.
            merge(
                &provider,
                "w",
                json!({ "metadata": { "finalizers": ["provider.example.org/hold"] } }),
            )
            .await?;
            delete(&consumer, "w").await?;
            wait_for("the copy terminating", WAIT, || async {
                Ok(provider
                    .get("w")
                    .await?
                    .metadata
                    .deletion_timestamp
                    .map(|_| ()))
            })
            .await?;
            stays(
                "the consumer instance held open by its finalizer",
                Duration::from_secs(4),
                || async {
                    let obj = consumer.get_opt("w").await?;
                    Ok(obj.is_some_and(|o| {
                        o.metadata.deletion_timestamp.is_some()
                            && o.finalizers().iter().any(|f| f == SYNCER_FINALIZER)
                    }))
                },
            )
            .await?;
            // The provider controller finishes; only then does the consumer instance go.
            merge(
                &provider,
                "w",
                json!({ "metadata": { "finalizers": null } }),
            )
            .await?;
            wait_for("the consumer instance gone", WAIT, || async {
                Ok(consumer.get_opt("w").await?.is_none().then_some(()))
            })
            .await?;
            assert!(provider.get_opt("w").await?.is_none());
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_keeps_provider_copy() -> anyhow::Result<()> {
    let ns = "delete-orphan";
    let (stack, api) = bound(ns).await?;
    let result = shared_pair()?.diagnose(stack.diagnose(&[&api], async {
        let consumer = api.api(&stack.consumer, Some(ns));
        let provider = api.api(&stack.provider, Some(ns));
        let created = api.create(&stack.consumer, Some(ns), "w", json!({ "keep": "me" })).await?;
        wait_for("the copy", WAIT, || async { Ok(provider.get_opt("w").await?) }).await?;
        merge(&consumer, "w", json!({ "metadata": { "annotations": { DELETION_POLICY_ANNOTATION: DELETION_POLICY_ORPHAN } } })).await?;
        delete(&consumer, "w").await?;
        wait_for("the consumer instance gone", WAIT, || async { Ok(consumer.get_opt("w").await?.is_none().then_some(())) }).await?;
        let kept = provider.get_opt("w").await?.context("the provider copy is kept")?;
        assert!(kept.metadata.deletion_timestamp.is_none());
        assert_eq!(kept.data["spec"], json!({ "keep": "me" }));
        // Its ownership markers stay as they were.
        assert_eq!(kept.labels().get(MANAGED_LABEL).map(String::as_str), Some("true"));
        assert_eq!(kept.annotations().get(CONSUMER_CLUSTER_UID_ANNOTATION), Some(&stack.consumer_uid));
        assert_eq!(kept.annotations().get(CONSUMER_OBJECT_UID_ANNOTATION), created.uid().as_ref());
        anyhow::Ok(())
    }))
    .await;
    stack.finish(result).await
}
