//! Many instances: 1 000 instances reach the provider, and the test reports the time taken.

use std::time::Instant;

use kbind_tests::faults::{Sides, instance_name};
use kbind_tests::syncenv::Scenario;
use serde_json::json;

const INSTANCES: usize = 1000;

#[test]
fn thousand_instances_reach_the_provider() -> anyhow::Result<()> {
    Scenario::bound("scale").run(async |s| {
        let sides = Sides::of(s);
        let start = Instant::now();
        sides.create_many("w", 0..INSTANCES).await?;
        let created = start.elapsed().as_secs_f64();
        sides.wait_copies(INSTANCES).await?;
        let synced = start.elapsed().as_secs_f64();
        let rate = INSTANCES as f64 / synced;
        println!(
            "{INSTANCES} instances: created on the consumer in {created:.1}s, all on the \
             provider after {synced:.1}s ({rate:.0} instances/s)"
        );
        let last = INSTANCES - 1;
        let spec = json!({ "index": last });
        s.copy_with_spec(&instance_name("w", last), spec).await?;
        Ok(())
    })
}
