//! Fault: the consumer kube-apiserver (and its etcd) restarted under a running konnector
//! stack, which is never restarted or re-engaged: instances created and changed after the
//! restart reach the provider (only a recovered consumer watch can deliver them), and both
//! sides converge one to one.

use std::time::Duration;

use kbind_tests::faults::{FAULT_WAIT, Sides, instance_name, restart};
use kbind_tests::syncenv::{Scenario, merge, wait_for};
use serde_json::json;

const BEFORE: usize = 20;
const AFTER: usize = 20;

#[test]
fn consumer_restart_recovers_watches_without_restarting_the_konnector() -> anyhow::Result<()> {
    Scenario::bound("consumer-restart")
        .private_pair()
        .run(async |s| {
            let sides = Sides::of(s);
            sides.create_many("before", 0..BEFORE).await?;
            sides.wait_copies(BEFORE).await?;
            restart(&s.pair().consumer, Duration::from_secs(3)).await?;

            let consumer = s.pair().consumer.client().await?;
            let sides = Sides { consumer, ..sides };
            sides.create_many("after", 0..AFTER).await?;
            let (changed, spec) = (instance_name("before", 0), json!({ "index": "changed" }));
            merge(&sides.instances(), &changed, json!({ "spec": spec })).await?;
            wait_for("the change made after the restart", FAULT_WAIT, || async {
                let copy = s.copies().get_opt(&changed).await?;
                Ok(copy.filter(|o| o.data["spec"] == spec))
            })
            .await?;
            sides.converged(BEFORE + AFTER).await
        })
}
