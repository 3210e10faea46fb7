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

use kbind_tests::faults::{check_converged, count_copies, create_instances, wait_copies};
use kbind_tests::syncenv::{Scenario, wait_for};

const INSTANCES: usize = 1000;
const STOP_AFTER: usize = 200;
const CONVERGE: Duration = Duration::from_secs(300);

#[test]
fn provider_outage_mid_sync_loses_and_duplicates_nothing() -> anyhow::Result<()> {
    Scenario::bound("outage").private_pair().run(async |s| {
        let (api, ns) = (&s.api, s.ns());
        let creating = {
            let (api, consumer, ns) = (api.clone(), s.consumer.clone(), ns.to_string());
            tokio::spawn(
                async move { create_instances(&api, &consumer, &ns, "w", 0..INSTANCES).await },
            )
        };
        wait_for(
            &format!("{STOP_AFTER} copies before the outage"),
            CONVERGE,
            || async {
                let n = count_copies(api, &s.provider, ns).await?;
                Ok((n >= STOP_AFTER).then_some(n))
            },
        )
        .await?;
        // Fault: the provider goes away mid-sync.
        tokio::task::block_in_place(|| s.pair().provider.stop());
        tokio::time::sleep(Duration::from_secs(5)).await;
        tokio::task::block_in_place(|| s.pair().provider.start())?;
        creating.await??;

        let provider = s.pair().provider.client().await?;
        wait_copies(api, &provider, ns, INSTANCES, CONVERGE).await?;
        let counted = check_converged(api, &s.consumer, &provider, ns).await?;
        println!("provider outage: {counted:?}");
        assert_eq!(counted.consumer, INSTANCES, "every instance is still there");
        assert_eq!(counted.provider, INSTANCES, "one copy per instance");
        assert_eq!(counted.distinct_markers, INSTANCES, "no marker twice");
        Ok(())
    })
}
