//! Losing the provider and getting it back (required: "provider stopped and restarted
//! (disengage, nothing deleted, sync resumes and catches up on changes made meanwhile)").
//! The only sync test with a private cluster pair: it stops a cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use kbind_tests::syncenv::{Stack, TestApi, delete, merge, stays, wait_for};
use kbind_tests::testenv::ClusterPair;
use konnector::api::ConflictPolicy;
use konnector::api::names::SYNCER_FINALIZER;
use kube::ResourceExt;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_restart_resumes_sync_without_deleting() -> anyhow::Result<()> {
    let pair = ClusterPair::start_private()?;
    let ns = "restart";
    let stack = Stack::start(&pair, ns).await?;
    let api = TestApi::namespaced("restart.e2e.kbind.io");
    let result = pair
        .diagnose(stack.diagnose(&[&api], async {
            api.export(&stack).await?;
            let first = stack.engage(&[&api]);
            stack
                .create_ready_binding(&stack.binding(ns, "widgets", &[&api], ConflictPolicy::Fail))
                .await?;
            for name in ["changed", "kept", "deleted"] {
                api.create(&stack.consumer, Some(ns), name, json!({ "v": 1 }))
                    .await?;
            }
            let provider = api.api(&stack.provider, Some(ns));
            let mut uids = BTreeMap::new();
            for name in ["changed", "kept", "deleted"] {
                let copy = wait_for(&format!("{name} on the provider"), WAIT, || async {
                    Ok(provider.get_opt(name).await?)
                })
                .await?;
                uids.insert(name, copy.uid().context("uid")?);
            }

            // The provider goes away; the Connection leaves Ready and is disengaged.
            tokio::task::block_in_place(|| pair.provider.stop());
            stack.disengage();

            // Meanwhile, on the consumer.
            let consumer = api.api(&stack.consumer, Some(ns));
            merge(&consumer, "changed", json!({ "spec": { "v": 2 } })).await?;
            api.create(&stack.consumer, Some(ns), "created", json!({ "v": 1 }))
                .await?;
            delete(&consumer, "deleted").await?;
            // Nothing is deleted on the consumer side because the provider is gone: the deletion
            // is held open by the syncer finalizer, every other instance stays.
            stays(
                "consumer instances kept while the provider is away",
                Duration::from_secs(4),
                || async {
                    let deleting = consumer.get_opt("deleted").await?;
                    let held = deleting
                        .is_some_and(|o| o.finalizers().iter().any(|f| f == SYNCER_FINALIZER));
                    Ok(held
                        && consumer.get_opt("kept").await?.is_some()
                        && consumer.get_opt("changed").await?.is_some())
                },
            )
            .await?;
            // The syncer is stopped, not merely failing: the new instance was never picked up.
            let created = consumer.get("created").await?;
            assert!(
                !created.finalizers().iter().any(|f| f == SYNCER_FINALIZER),
                "no syncer while disengaged"
            );

            // The provider comes back; the Connection is Ready again with a new client.
            tokio::task::block_in_place(|| pair.provider.start())?;
            let client = pair.provider.client().await?;
            let second = stack.engage_with(client.clone(), &[&api], "after-restart");
            assert!(second.epoch > first.epoch, "re-engaged with a new epoch");
            let provider = api.api(&client, Some(ns));

            wait_for("the change made meanwhile", WAIT, || async {
                Ok(provider
                    .get_opt("changed")
                    .await?
                    .filter(|o| o.data["spec"] == json!({ "v": 2 })))
            })
            .await?;
            wait_for("the instance created meanwhile", WAIT, || async {
                Ok(provider.get_opt("created").await?)
            })
            .await?;
            wait_for("the deletion made meanwhile", WAIT, || async {
                Ok(provider.get_opt("deleted").await?.is_none().then_some(()))
            })
            .await?;
            wait_for("the deleted consumer instance released", WAIT, || async {
                Ok(consumer.get_opt("deleted").await?.is_none().then_some(()))
            })
            .await?;
            // The copies that were there survived the outage as the same objects.
            for name in ["changed", "kept"] {
                let copy = provider.get(name).await?;
                assert_eq!(
                    copy.uid().as_ref(),
                    uids.get(name),
                    "{name} was not deleted and recreated"
                );
            }
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}
