//! Many instances: 1 000 instances reach the provider, and the test reports the time taken.

use std::time::{Duration, Instant};

use kbind_tests::faults::{create_instances, instance_name};
use kbind_tests::syncenv::{Scenario, wait_for};
use konnector::api::names::MANAGED_LABEL;
use kube::api::ListParams;
use serde_json::json;

const INSTANCES: usize = 1000;

#[test]
fn thousand_instances_reach_the_provider() -> anyhow::Result<()> {
    Scenario::bound("scale").run(async |s| {
        let start = Instant::now();
        create_instances(&s.api, &s.consumer, s.ns(), "w", 0..INSTANCES).await?;
        let created = start.elapsed();
        let params = ListParams::default().labels(MANAGED_LABEL);
        wait_for("1 000 copies on the provider", Duration::from_secs(300), || async {
            let n = s.copies().list_metadata(&params).await?.items.len();
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
        let last = s.copies().get(&instance_name("w", INSTANCES - 1)).await?;
        assert_eq!(last.data["spec"], json!({ "index": INSTANCES - 1 }));
        Ok(())
    })
}
