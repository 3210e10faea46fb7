//! The ownership check and its conflict table: every row observed as the conflict annotation
//! and a Warning Event on the instance; `Adopt` taking an unmarked target; deleting a
//! conflicting instance leaving the foreign object; a recreated instance not owning the copy
//! its predecessor left; the binding's conflict count and its `Synced` count per reason; and
//! each conflict (`ForeignObjectExists`, `OwnedByAnother`) clearing when the other object goes.

use std::time::Duration;

use anyhow::Context as _;
use kbind_tests::syncenv::{
    Scenario, ScenarioBuilder, WAIT, delete, ensure_namespace, events_for, gone, has, markers,
    message, stays, synced_condition, unwritten, wait_for,
};
use konnector::api::ConflictPolicy;
use konnector::api::names::{
    CONFLICT_ANNOTATION, CONSUMER_CLUSTER_UID_ANNOTATION, CONSUMER_OBJECT_UID_ANNOTATION,
    MANAGED_LABEL,
};
use kube::ResourceExt;
use kube::api::{DynamicObject, PostParams};
use serde_json::json;

/// Creates a provider object directly, with the given ownership annotations and labels.
async fn foreign(
    s: &Scenario,
    name: &str,
    markers: &[(&str, &str)],
    labels: &[(&str, &str)],
) -> anyhow::Result<DynamicObject> {
    let spec = json!({ "owner": "someone else" });
    let mut obj = s.api.object(Some(s.ns()), name, spec);
    let to_map = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    obj.metadata.annotations = Some(to_map(markers));
    obj.metadata.labels = Some(to_map(labels));
    ensure_namespace(&s.provider, s.ns()).await?;
    Ok(s.copies().create(&PostParams::default(), &obj).await?)
}

/// Waits for the conflict annotation and a Warning Event with `reason` on instance `name`.
async fn conflict_reported(s: &Scenario, name: &str, reason: &str) -> anyhow::Result<()> {
    wait_for(&format!("conflict annotation {reason}"), WAIT, || async {
        let obj = s.instances().get(name).await?;
        let annotation = obj.annotations().get(CONFLICT_ANNOTATION);
        Ok(annotation.filter(|a| a.starts_with(reason)).map(|_| ()))
    })
    .await?;
    wait_for(&format!("Warning Event {reason}"), WAIT, || async {
        let events = events_for(&s.consumer, Some(s.ns()), name).await?;
        Ok(events
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason) && e.type_.as_deref() == Some("Warning")))
    })
    .await?;
    Ok(())
}

/// Fails if the foreign object was written since `before`.
async fn untouched(s: &Scenario, before: &DynamicObject) -> anyhow::Result<()> {
    let now = s.copies().get(&before.name_any()).await?;
    anyhow::ensure!(
        now.resource_version() == before.resource_version(),
        "foreign object written"
    );
    Ok(())
}

/// A bound scenario whose binding's `conflictPolicy` is `Adopt`.
fn adopting(name: &str) -> ScenarioBuilder {
    Scenario::bound(name).conflict_policy(ConflictPolicy::Adopt)
}

/// Fails unless instance `name` carries `Synced=False` with `reason`.
async fn synced_false(s: &Scenario, name: &str, reason: &str) -> anyhow::Result<()> {
    let synced = synced_condition(&s.instances().get(name).await?).context("Synced")?;
    assert_eq!(
        (&synced["status"], &synced["reason"]),
        (&json!("False"), &json!(reason))
    );
    Ok(())
}

/// Waits until instance `name` has lost its conflict annotation and is `Synced=True` at its
/// current generation.
async fn conflict_cleared(s: &Scenario, name: &str) -> anyhow::Result<()> {
    wait_for("the conflict cleared and Synced=True", WAIT, || async {
        let obj = s.instances().get(name).await?;
        let synced = synced_condition(&obj).is_some_and(|c| {
            c["status"] == "True" && c["observedGeneration"] == json!(obj.metadata.generation)
        });
        Ok((!obj.annotations().contains_key(CONFLICT_ANNOTATION) && synced).then_some(()))
    })
    .await
}

#[test]
fn unmarked_target_under_fail_is_foreign_object_exists() -> anyhow::Result<()> {
    Scenario::bound("conflict-foreign").run(async |s| {
        let before = foreign(s, "taken", &[], &[]).await?;
        s.create("taken", json!({ "mine": true })).await?;
        s.create("free", json!({ "mine": true })).await?;
        conflict_reported(s, "taken", "ForeignObjectExists").await?;
        // Unrelated objects keep syncing.
        s.copy("free").await?;
        untouched(s, &before).await?;
        // The best-effort instance condition survives this schema (free-form status).
        synced_false(s, "taken", "ForeignObjectExists").await?;
        // The binding counts it, and stays Ready.
        let status = s
            .binding_until("conflictCount 1", |s| s.conflict_count == 1)
            .await?;
        assert!(has(&status, "Conflicts", "True", "ConflictsFound"));
        assert!(
            has(&status, "Ready", "True", "AsExpected"),
            "Conflicts leaves it Ready"
        );
        Ok(())
    })
}

#[test]
fn target_owned_by_another_cluster_is_owned_by_another_until_it_goes() -> anyhow::Result<()> {
    adopting("conflict-cluster").run(async |s| {
        let markers = [
            (CONSUMER_CLUSTER_UID_ANNOTATION, "another-cluster"),
            (CONSUMER_OBJECT_UID_ANNOTATION, "another-object"),
        ];
        let before = foreign(s, "taken", &markers, &[]).await?;
        s.create("taken", json!({ "mine": true })).await?;
        conflict_reported(s, "taken", "OwnedByAnother").await?;
        untouched(s, &before).await?;
        synced_false(s, "taken", "OwnedByAnother").await?;
        let status = s.binding_has("Synced", "False", "OwnedByAnother").await?;
        let counted = format!(
            "1 of 1 instance(s) not in sync: conflict: 1 (OwnedByAnother: 1 e.g. {}/taken)",
            s.ns()
        );
        let synced = message(&status, "Synced");
        assert!(synced.starts_with(&counted), "{synced}");

        // The other owner's copy goes: the instance takes the name and its conflict clears.
        delete(&s.copies(), "taken").await?;
        conflict_cleared(s, "taken").await?;
        let copy = s.copy("taken").await?;
        assert_eq!(
            copy.annotations().get(CONSUMER_CLUSTER_UID_ANNOTATION),
            Some(&s.consumer_uid)
        );
        Ok(())
    })
}

#[test]
fn target_owned_by_another_object_of_this_cluster_is_owned_by_another() -> anyhow::Result<()> {
    adopting("conflict-object").run(async |s| {
        let markers = [
            (CONSUMER_CLUSTER_UID_ANNOTATION, s.consumer_uid.as_str()),
            (CONSUMER_OBJECT_UID_ANNOTATION, "another-object"),
        ];
        let before = foreign(s, "taken", &markers, &[]).await?;
        s.create("taken", json!({ "mine": true })).await?;
        conflict_reported(s, "taken", "OwnedByAnother").await?;
        untouched(s, &before).await
    })
}

#[test]
fn partial_markers_count_as_owned_by_another_even_under_adopt() -> anyhow::Result<()> {
    adopting("conflict-partial").run(async |s| {
        let cluster_marker = [(CONSUMER_CLUSTER_UID_ANNOTATION, s.consumer_uid.as_str())];
        let cluster_only = foreign(s, "cluster-only", &cluster_marker, &[]).await?;
        let object_only = foreign(
            s,
            "object-only",
            &[(CONSUMER_OBJECT_UID_ANNOTATION, "x")],
            &[],
        )
        .await?;
        s.create("cluster-only", json!({})).await?;
        s.create("object-only", json!({})).await?;
        conflict_reported(s, "cluster-only", "OwnedByAnother").await?;
        conflict_reported(s, "object-only", "OwnedByAnother").await?;
        untouched(s, &cluster_only).await?;
        untouched(s, &object_only).await
    })
}

#[test]
fn managed_label_alone_is_not_ownership() -> anyhow::Result<()> {
    Scenario::bound("conflict-label").run(async |s| {
        let before = foreign(s, "taken", &[], &[(MANAGED_LABEL, "true")]).await?;
        s.create("taken", json!({})).await?;
        conflict_reported(s, "taken", "ForeignObjectExists").await?;
        untouched(s, &before).await
    })
}

#[test]
fn adopt_overwrites_an_unmarked_target() -> anyhow::Result<()> {
    adopting("conflict-adopt").run(async |s| {
        let before = foreign(s, "adoptee", &[], &[]).await?;
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
        foreign(s, "taken", &[], &[]).await?;
        s.create("taken", json!({ "mine": true })).await?;
        conflict_reported(s, "taken", "ForeignObjectExists").await?;
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
        let before = foreign(s, "taken", &[], &[]).await?;
        s.create("taken", json!({})).await?;
        conflict_reported(s, "taken", "ForeignObjectExists").await?;
        delete(&s.instances(), "taken").await?;
        gone(&s.instances(), "taken").await?;
        untouched(s, &before).await
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
        conflict_reported(s, "w", "OwnedByAnother").await?;
        let is_first = |copy: &DynamicObject| {
            copy.data["spec"] == json!({ "generation": 1 })
                && copy.annotations().get(CONSUMER_OBJECT_UID_ANNOTATION) == first.uid().as_ref()
        };
        assert!(
            is_first(&s.copies().get("w").await?),
            "the retained copy is the first's"
        );
        stays(
            "the retained copy unchanged",
            Duration::from_secs(3),
            || async { Ok(is_first(&s.copies().get("w").await?)) },
        )
        .await
    })
}
