//! The ownership check and its conflict table: every row observed as the conflict annotation,
//! `Synced=False` and a Warning Event on the instance; `Adopt` taking an unmarked target;
//! deleting a conflicting instance leaving the foreign object; a recreated instance not owning
//! the copy its predecessor left; the binding's conflict count and its `Synced` count per
//! reason; and each conflict (`ForeignObjectExists`, `OwnedByAnother`) clearing when the other
//! object goes.

use std::time::Duration;

use kbind_tests::syncenv::{
    Scenario, ScenarioBuilder, WAIT, delete, ensure_namespace, event_note, gone, has, markers,
    message, stays, synced_condition, unwritten, wait_for,
};
use konnector::api::ConflictPolicy;
use konnector::api::names::{
    CONFLICT_ANNOTATION, CONSUMER_CLUSTER_UID_ANNOTATION, CONSUMER_OBJECT_UID_ANNOTATION,
    MANAGED_LABEL,
};
use kube::ResourceExt;
use kube::api::{DynamicObject, ObjectMeta, PostParams};
use serde_json::{Value, json};

/// How long a "nothing happens" check watches.
const QUIET: Duration = Duration::from_secs(3);

/// Creates provider object `name` directly (spec `owner: someone else`), with `metadata`
/// (ownership annotations, labels).
async fn foreign(s: &Scenario, name: &str, metadata: Value) -> anyhow::Result<DynamicObject> {
    let metadata: ObjectMeta = serde_json::from_value(metadata)?;
    let spec = json!({ "owner": "someone else" });
    let mut obj = s.api.object(Some(s.ns()), name, spec);
    obj.metadata.annotations = metadata.annotations;
    obj.metadata.labels = metadata.labels;
    ensure_namespace(&s.provider, s.ns()).await?;
    Ok(s.copies().create(&PostParams::default(), &obj).await?)
}

/// Creates instance `name` over a `foreign` object with `metadata` and waits until the
/// conflict `reason` is [`reported`]; the foreign object is left unwritten.
async fn conflict(s: &Scenario, name: &str, metadata: Value, reason: &str) -> anyhow::Result<()> {
    let before = foreign(s, name, metadata).await?;
    s.create(name, json!({ "mine": true })).await?;
    reported(s, name, reason).await?;
    let now = s.copies().get(name).await?;
    assert_eq!(now.resource_version(), before.resource_version());
    Ok(())
}

/// Waits until instance `name` carries conflict `reason`: the annotation, `Synced=False` and a
/// Warning Event.
async fn reported(s: &Scenario, name: &str, reason: &str) -> anyhow::Result<()> {
    wait_for(&format!("conflict {reason} on {name}"), WAIT, || async {
        let obj = s.instances().get(name).await?;
        let annotation = obj.annotations().get(CONFLICT_ANNOTATION);
        let annotated = annotation.is_some_and(|a| a.starts_with(reason));
        let synced = synced_condition(&obj).unwrap_or_default();
        Ok((annotated && synced["status"] == "False" && synced["reason"] == reason).then_some(()))
    })
    .await?;
    event_note(&s.consumer, (s.ns(), name), reason, Some("Warning"), WAIT).await?;
    Ok(())
}

/// Waits until instance `name` has lost its conflict annotation and is `Synced=True` at its
/// current generation.
async fn conflict_cleared(s: &Scenario, name: &str) -> anyhow::Result<()> {
    wait_for("the conflict cleared and Synced=True", WAIT, || async {
        let obj = s.in_sync(name).await?;
        Ok((!obj.annotations().contains_key(CONFLICT_ANNOTATION)).then_some(()))
    })
    .await
}

/// A bound scenario whose binding's `conflictPolicy` is `Adopt`.
fn adopting(name: &str) -> ScenarioBuilder {
    Scenario::bound(name).conflict_policy(ConflictPolicy::Adopt)
}

#[test]
fn unmarked_or_only_labelled_target_under_fail_is_foreign_object_exists() -> anyhow::Result<()> {
    Scenario::bound("conflict-foreign").run(async |s| {
        // The managed label alone is not ownership.
        let labelled = json!({ "labels": { MANAGED_LABEL: "true" } });
        for (name, metadata) in [("taken", json!({})), ("labelled", labelled)] {
            conflict(s, name, metadata, "ForeignObjectExists").await?;
        }
        // Unrelated objects keep syncing.
        s.create("free", json!({ "mine": true })).await?;
        s.copy("free").await?;
        // The binding counts them, and stays Ready.
        let status = s
            .binding_until("conflictCount 2", |s| s.conflict_count == 2)
            .await?;
        assert!(has(&status, "Conflicts", "True", "ConflictsFound"));
        assert!(has(&status, "Ready", "True", "AsExpected"));
        Ok(())
    })
}

#[test]
fn target_owned_by_another_cluster_is_owned_by_another_until_it_goes() -> anyhow::Result<()> {
    adopting("conflict-cluster").run(async |s| {
        let theirs = json!({ "annotations": {
            CONSUMER_CLUSTER_UID_ANNOTATION: "another-cluster",
            CONSUMER_OBJECT_UID_ANNOTATION: "another-object",
        }});
        conflict(s, "taken", theirs, "OwnedByAnother").await?;
        let status = s.binding_has("Synced", "False", "OwnedByAnother").await?;
        let synced = message(&status, "Synced");
        let counted = "1 of 1 instance(s) not in sync: conflict: 1 (OwnedByAnother: 1 e.g. conflict-cluster/taken)";
        assert!(synced.starts_with(counted), "{synced}");

        // The other owner's copy goes: the instance takes the name and its conflict clears.
        delete(&s.copies(), "taken").await?;
        conflict_cleared(s, "taken").await?;
        let (copy, instance) = (s.copy("taken").await?, s.instances().get("taken").await?);
        assert_eq!(markers(&copy), s.markers_of(&instance));
        Ok(())
    })
}

#[test]
fn markers_not_all_ours_are_owned_by_another_even_under_adopt() -> anyhow::Result<()> {
    adopting("conflict-partial").run(async |s| {
        let c = CONSUMER_CLUSTER_UID_ANNOTATION;
        let o = CONSUMER_OBJECT_UID_ANNOTATION;
        let rows = [
            ("another-object", json!({ c: s.consumer_uid, o: "x" })),
            ("cluster-only", json!({ c: s.consumer_uid })),
            ("object-only", json!({ o: "x" })),
        ];
        for (name, markers) in rows {
            conflict(s, name, json!({ "annotations": markers }), "OwnedByAnother").await?;
        }
        Ok(())
    })
}

#[test]
fn adopt_overwrites_an_unmarked_target() -> anyhow::Result<()> {
    adopting("conflict-adopt").run(async |s| {
        let before = foreign(s, "adoptee", json!({})).await?;
        let created = s.create("adoptee", json!({ "mine": true })).await?;
        let adopted = s.copy_with_spec("adoptee", json!({ "mine": true })).await?;
        assert_eq!(adopted.uid(), before.uid(), "adopted, not recreated");
        assert_eq!(markers(&adopted), s.markers_of(&created));
        let obj = s.instances().get("adoptee").await?;
        assert!(!obj.annotations().contains_key(CONFLICT_ANNOTATION));
        // Adopted once, then left alone: no write loop between our apply and the fields the
        // previous owner had.
        unwritten(&s.copies(), &adopted, Duration::from_secs(6)).await
    })
}

#[test]
fn conflict_clears_when_the_foreign_object_goes_away() -> anyhow::Result<()> {
    Scenario::bound("conflict-clears").run(async |s| {
        conflict(s, "taken", json!({}), "ForeignObjectExists").await?;
        delete(&s.copies(), "taken").await?;
        s.copy_with_spec("taken", json!({ "mine": true })).await?;
        conflict_cleared(s, "taken").await?;
        s.binding_until("conflictCount back to 0", |s| {
            s.conflict_count == 0 && !s.bound_apis.is_empty()
        })
        .await?;
        Ok(())
    })
}

#[test]
fn deleting_a_conflicting_instance_leaves_the_foreign_object() -> anyhow::Result<()> {
    Scenario::bound("conflict-delete").run(async |s| {
        conflict(s, "taken", json!({}), "ForeignObjectExists").await?;
        let before = s.copies().get("taken").await?;
        delete(&s.instances(), "taken").await?;
        gone(&s.instances(), "taken").await?;
        unwritten(&s.copies(), &before, QUIET).await
    })
}

#[test]
fn recreated_instance_does_not_own_the_retained_copy() -> anyhow::Result<()> {
    adopting("conflict-recreate").run(async |s| {
        let first = s.create("w", json!({ "generation": 1 })).await?;
        s.copy("w").await?;
        s.orphan("w").await?;

        let second = s.create("w", json!({ "generation": 2 })).await?;
        assert_ne!(second.uid(), first.uid());
        reported(s, "w", "OwnedByAnother").await?;
        let is_first = |copy: &DynamicObject| {
            copy.data["spec"] == json!({ "generation": 1 })
                && copy.annotations().get(CONSUMER_OBJECT_UID_ANNOTATION) == first.uid().as_ref()
        };
        let retained = || async { Ok(is_first(&s.copies().get("w").await?)) };
        stays("the retained copy the first's, unchanged", QUIET, retained).await
    })
}
