//! Deleting a consumer instance deletes its provider copy, waits for the provider's own
//! finalizers before releasing the instance, and keeps the copy under `deletion-policy:
//! Orphan`.

use std::time::Duration;

use kbind_tests::syncenv::{
    Scenario, WAIT, delete, event_note, gone, holds_syncer_finalizer, markers, merge, stays,
    synced_condition, wait_for,
};
use serde_json::json;

#[test]
fn deleting_an_instance_deletes_its_provider_copy() -> anyhow::Result<()> {
    Scenario::bound("delete-owned").run(async |s| {
        s.create_copied("w", json!({})).await?;
        delete(&s.instances(), "w").await?;
        gone(&s.copies(), "w").await?;
        gone(&s.instances(), "w").await
    })
}

#[test]
fn instance_deletion_waits_for_provider_finalizer() -> anyhow::Result<()> {
    Scenario::bound("delete-waits").run(async |s| {
        s.create_copied("w", json!({})).await?;
        // A provider-side controller holds its own finalizer on the copy.
        let hold = json!({ "metadata": { "finalizers": ["provider.example.org/hold"] } });
        merge(&s.copies(), "w", hold).await?;
        delete(&s.instances(), "w").await?;
        wait_for("the copy terminating", WAIT, || async {
            Ok(s.copies().get("w").await?.metadata.deletion_timestamp)
        })
        .await?;
        let held = "the instance held open by its finalizer";
        stays(held, Duration::from_secs(4), || async {
            let obj = s.instances().get_opt("w").await?;
            Ok(obj.is_some_and(|o| {
                o.metadata.deletion_timestamp.is_some() && holds_syncer_finalizer(&o)
            }))
        })
        .await?;
        // It says why: an Event and its Synced condition name the copy and the finalizer.
        let note = event_note(&s.consumer, (s.ns(), "w"), "ProviderFinalizers", None, WAIT).await?;
        let waiting = s.instances().get("w").await?;
        let synced = synced_condition(&waiting).unwrap_or_default();
        assert_eq!(synced["reason"], "ProviderFinalizers");
        for said in [
            note.as_str(),
            synced["message"].as_str().unwrap_or_default(),
        ] {
            assert!(said.contains("provider.example.org/hold"), "{said}");
            assert!(said.contains(&format!("{}/w", s.ns())), "{said}");
        }
        // The provider controller finishes; only then does the consumer instance go.
        merge(
            &s.copies(),
            "w",
            json!({ "metadata": { "finalizers": null } }),
        )
        .await?;
        gone(&s.instances(), "w").await?;
        assert!(s.copies().get_opt("w").await?.is_none());
        Ok(())
    })
}

#[test]
fn orphan_keeps_provider_copy() -> anyhow::Result<()> {
    Scenario::bound("delete-orphan").run(async |s| {
        let created = s.create("w", json!({ "keep": "me" })).await?;
        s.copy("w").await?;
        s.orphan("w").await?;
        // Kept as it was: its spec and its ownership markers.
        let kept = s.copies().get("w").await?;
        assert_eq!(kept.metadata.deletion_timestamp, None);
        assert_eq!(kept.data["spec"], json!({ "keep": "me" }));
        assert_eq!(markers(&kept), s.markers_of(&created));
        Ok(())
    })
}
