//! Fault: the consumer kube-apiserver (and its etcd) restarted under a running konnector; its
//! watches recover without a restart of the konnector.
//!
//! Injected: `Cluster::stop` then `Cluster::start` of the consumer, on the same data, ports
//! and credentials, while the in-process konnector stack keeps running (it is never
//! restarted or re-engaged).
//!
//! Counted: instances created and changed *after* the restart reach the provider (only a
//! recovered consumer watch can deliver them), and both sides then correspond one to one
//! ([`check_converged`]: 40 instances, 40 copies, 40 distinct UID markers).

use std::time::Duration;

use kbind_tests::faults::{check_converged, create_instances, instance_name, wait_copies};
use kbind_tests::syncenv::{Scenario, merge, wait_for};
use serde_json::json;

const BEFORE: usize = 20;
const AFTER: usize = 20;
const WAIT: Duration = Duration::from_secs(120);

#[test]
fn consumer_restart_recovers_watches_without_restarting_the_konnector() -> anyhow::Result<()> {
    Scenario::bound("consumer-restart")
        .private_pair()
        .run(async |s| {
            let (api, ns) = (&s.api, s.ns());
            create_instances(api, &s.consumer, ns, "before", 0..BEFORE).await?;
            wait_copies(api, &s.provider, ns, BEFORE, WAIT).await?;

            // Fault: the consumer apiserver restarts; the konnector's watches break.
            tokio::task::block_in_place(|| s.pair().consumer.stop());
            tokio::time::sleep(Duration::from_secs(3)).await;
            tokio::task::block_in_place(|| s.pair().consumer.start())?;

            let consumer = s.pair().consumer.client().await?;
            create_instances(api, &consumer, ns, "after", 0..AFTER).await?;
            let changed = instance_name("before", 0);
            let change = json!({ "spec": { "index": "changed" } });
            merge(&api.api(&consumer, Some(ns)), &changed, change).await?;
            wait_copies(api, &s.provider, ns, BEFORE + AFTER, WAIT).await?;
            wait_for("the change made after the restart", WAIT, || async {
                let copy = s.copies().get_opt(&changed).await?;
                Ok(copy.filter(|o| o.data["spec"] == json!({ "index": "changed" })))
            })
            .await?;
            let counted = check_converged(api, &consumer, &s.provider, ns).await?;
            println!("consumer restart: {counted:?}");
            assert_eq!(counted.provider, BEFORE + AFTER);
            assert_eq!(counted.distinct_markers, BEFORE + AFTER);
            Ok(())
        })
}
