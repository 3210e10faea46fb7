//! Many instances (required: "1 000 instances reaching the provider in a test that reports the
//! time taken").

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kbind_tests::syncenv::{Stack, TestApi, wait_for};
use kbind_tests::testenv::shared_pair;
use konnector::api::ConflictPolicy;
use kube::api::ListParams;
use serde_json::json;

const INSTANCES: usize = 1000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_instances_reach_the_provider() -> anyhow::Result<()> {
    let pair = shared_pair()?;
    let ns = "scale";
    let stack = Stack::start(pair, ns).await?;
    let api = TestApi::namespaced("scale.e2e.kbind.io");
    let result = pair.diagnose(async {
        api.export(&stack).await?;
        stack.engage(&[&api]);
        stack.create_ready_binding(&stack.binding(ns, "widgets", &[&api], ConflictPolicy::Fail)).await?;
        kbind_tests::syncenv::ensure_namespace(&stack.consumer, ns).await?;

        let start = Instant::now();
        futures::stream::iter(0..INSTANCES)
            .map(|i| {
                let api = &api;
                let consumer = &stack.consumer;
                async move { api.create(consumer, Some(ns), &format!("w-{i:04}"), json!({ "index": i })).await }
            })
            .buffer_unordered(16)
            .try_collect::<Vec<_>>()
            .await?;
        let created = start.elapsed();
        let provider = api.api(&stack.provider, Some(ns));
        let params = ListParams::default().labels(konnector::api::names::MANAGED_LABEL);
        wait_for("1 000 copies on the provider", Duration::from_secs(300), || async {
            let n = provider.list_metadata(&params).await?.items.len();
            Ok((n == INSTANCES).then_some(()))
        })
        .await?;
        let synced = start.elapsed();
        println!(
            "{INSTANCES} instances: created on the consumer in {:.1}s, all on the provider after {:.1}s ({:.0} instances/s)",
            created.as_secs_f64(),
            synced.as_secs_f64(),
            INSTANCES as f64 / synced.as_secs_f64()
        );
        // Spot-check content.
        let last = provider.get(&format!("w-{:04}", INSTANCES - 1)).await?;
        assert_eq!(last.data["spec"], json!({ "index": INSTANCES - 1 }));
        anyhow::Ok(())
    })
    .await;
    stack.finish(result).await
}
