//! Fault: the provider kube-apiserver (and its etcd) stopped for 5 s while 1 000 instances are
//! created and synced, then started on the same data, ports and credentials. The Connection
//! stays engaged: the syncer's watches and writes ride out the outage on their own (error
//! backoff, watch re-list), and both sides converge one to one.

use std::time::Duration;

use kbind_tests::faults::{Sides, restart};
use kbind_tests::syncenv::Scenario;

const INSTANCES: usize = 1000;
const STOP_AFTER: usize = 200;

#[test]
fn provider_outage_mid_sync_loses_and_duplicates_nothing() -> anyhow::Result<()> {
    Scenario::bound("outage").private_pair().run(async |s| {
        let sides = Sides::of(s);
        let outage = async || restart(&s.pair().provider, Duration::from_secs(5)).await;
        sides.fault_mid_sync(INSTANCES, STOP_AFTER, outage).await?;
        let provider = s.pair().provider.client().await?;
        Sides { provider, ..sides }.converged(INSTANCES).await
    })
}
