//! Fault: the provider kube-apiserver (and its etcd) stopped while 1 000 instances are being
//! synced, then restarted with its data.
//!
//! Injected: `Cluster::stop` of the provider once at least 200 copies exist, while the test is
//! still creating consumer instances; 5 s later `Cluster::start` on the same data, ports and
//! credentials. The Connection is *not* disengaged: the syncer's watches and writes must ride
//! out the outage on their own (error backoff, watch re-list).
//!
//! Counted: provider copies vs consumer instances (exactly 1 000 each), each copy's
//! consumer-object-UID marker vs its instance's UID (no copy lost, none duplicated or written
//! for the wrong object), the syncer finalizer on every instance (exactly once) and no
//! instance left with a deletionTimestamp.

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
