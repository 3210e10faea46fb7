//! Losing the provider and getting it back: the Connection is disengaged, nothing is deleted,
//! and once re-engaged the sync resumes and catches up on the changes made meanwhile. The
//! only sync test with a cluster pair of its own: it stops a cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use kbind_tests::faults::Sides;
use kbind_tests::syncenv::{Scenario, delete, holds_syncer_finalizer, merge, stays};
use kube::ResourceExt;
use serde_json::json;

#[test]
fn provider_restart_resumes_sync_without_deleting() -> anyhow::Result<()> {
    Scenario::unbound("restart").private_pair().run(async |s| {
        s.export().await?;
        let first = s.engage();
        s.bind().await?;
        let mut uids = BTreeMap::new();
        for name in ["changed", "kept", "deleted"] {
            uids.insert(name, s.create_copied(name, json!({ "v": 1 })).await?.uid());
        }

        // The provider goes away; the Connection leaves Ready and is disengaged.
        tokio::task::block_in_place(|| s.pair().provider.stop());
        s.disengage();
        let consumer = s.instances();
        merge(&consumer, "changed", json!({ "spec": { "v": 2 } })).await?;
        s.create("created", json!({ "v": 1 })).await?;
        delete(&consumer, "deleted").await?;
        // Nothing is deleted on the consumer side because the provider is gone: the deletion
        // is held open by the syncer finalizer, every other instance stays.
        let kept = "consumer instances kept while the provider is away";
        stays(kept, Duration::from_secs(4), || async {
            let held = consumer.get_opt("deleted").await?;
            Ok(held.is_some_and(|o| holds_syncer_finalizer(&o))
                && consumer.get_opt("kept").await?.is_some()
                && consumer.get_opt("changed").await?.is_some())
        })
        .await?;
        // The syncer is stopped, not merely failing: the new instance was never picked up.
        let created = consumer.get("created").await?;
        assert!(
            !holds_syncer_finalizer(&created),
            "no syncer while disengaged"
        );

        // The provider comes back; the Connection is Ready again with a new client.
        tokio::task::block_in_place(|| s.pair().provider.start())?;
        let client = s.pair().provider.client().await?;
        let second = s.engage_with(client, &[&s.api], "after-restart");
        assert!(second.epoch > first.epoch, "re-engaged with a new epoch");
        s.copy_with_spec("changed", json!({ "v": 2 })).await?;
        // "deleted" gone from both sides, "created" copied, nothing left held.
        Sides::of(s).converged(3).await?;
        // The copies that were there survived the outage as the same objects.
        for name in ["changed", "kept"] {
            let uid = s.copies().get(name).await?.uid();
            assert_eq!(uid, uids[name], "{name} deleted and recreated");
        }
        Ok(())
    })
}
