//! Bindings tell the story of their instances, in `kubectl get -o yaml` and `kubectl describe`:
//! `Synced` counts the failing instances per reason and says what to do, `status.conflictCount`
//! totals conflicts, `PermissionDenied` shows what the provider refuses the engine,
//! `RelatedResourcesSynced` and `TeardownFailed` report related-copy and teardown failures,
//! and every change of state is one Event on the binding. Each clears when its cause is gone.

use std::collections::BTreeMap;

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_tests::access::grant;
use kbind_tests::fixtures::install_crd;
use kbind_tests::syncenv::related::{entry, put_secret, wait_secret};
use kbind_tests::syncenv::{
    Scenario, WAIT, condition, delete, ensure_namespace, gone, has, merge, message, says,
    synced_condition, wait_for,
};
use konnector::api::RelatedDirection::FromProvider;
use konnector::api::RelatedResourceKind::Secrets;
use konnector::api::names::EXPORTED_LABEL;
use konnector::api::{InstanceCounts, PullPolicy};
use serde_json::json;

/// An instance `taken` in `ns` whose provider target already exists without markers: a
/// conflict under `Fail`.
async fn taken_by_another(s: &Scenario, ns: &str) -> anyhow::Result<()> {
    let spec = json!({ "owner": "else" });
    s.api.create(&s.provider, Some(ns), "taken", spec).await?;
    let spec = json!({ "mine": true });
    s.api.create(&s.consumer, Some(ns), "taken", spec).await?;
    Ok(())
}

/// Warning Events of `reason` on the scenario's binding.
async fn warnings(s: &Scenario, reason: &str) -> anyhow::Result<Vec<Event>> {
    let mut events = s.binding_events().await?;
    events.retain(|e| e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some(reason));
    Ok(events)
}

/// Panics unless `text` begins with `count` (a `Synced` message's count of failing instances
/// and their reasons) and says `hint` (what to do; empty for none).
fn counts(text: &str, count: &str, hint: &str) {
    assert!(text.starts_with(count), "{text:?} does not count {count:?}");
    says(text, &[hint]);
}

/// Grants provider user `user` `verbs` on the main API's `widgets`, cluster-wide (ClusterRole
/// `name`).
async fn allow(s: &Scenario, user: &str, name: &str, verbs: &[&str]) -> anyhow::Result<()> {
    let rules = json!([{ "apiGroups": [s.api.group], "resources": ["widgets"], "verbs": verbs }]);
    grant(&s.provider, None, name, rules, ("User", user)).await
}

/// The provider's CRD for the main API with a strict spec (`size` an integer ≤ 100), exported.
fn strict_provider_crd(s: &Scenario) -> anyhow::Result<CustomResourceDefinition> {
    let mut crd = serde_json::to_value(s.api.crd()?)?;
    crd["metadata"]["labels"] = json!({ EXPORTED_LABEL: "true" });
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = json!({
        "type": "object",
        "properties": { "size": { "type": "integer", "maximum": 100 } },
    });
    Ok(serde_json::from_value(crd)?)
}

/// Exports the API, installs its consumer CRD (the restricted user need not read CRDs) and the
/// provider namespace (nor create one), and engages the Connection with restricted provider
/// user `<ns>-user`, granted `verbs` on the API (ClusterRole `<ns>-initial`); then binds.
/// Returns the user.
async fn bind_restricted(s: &Scenario, verbs: &[&str]) -> anyhow::Result<String> {
    let user = format!("{}-user", s.ns());
    s.api.export(s).await?;
    s.api
        .install_on_consumer(&s.consumer, Some(&s.name))
        .await?;
    ensure_namespace(&s.provider, s.ns()).await?;
    let client = s.pair().provider.mint_user(&user, &[])?.client().await?;
    s.engage_with(client, &[&s.api], &user);
    let initial = format!("{}-initial", s.ns());
    allow(s, &user, &initial, verbs).await?;
    s.bind().await?;
    Ok(user)
}

#[test]
fn a_provider_rejection_is_counted_on_the_binding_and_clears_when_fixed() -> anyhow::Result<()> {
    let scenario = Scenario::unbound("opsc-rejected").pull_policy(PullPolicy::None);
    scenario.run(async |s| {
        install_crd(&s.provider, &strict_provider_crd(s)?).await?;
        s.api
            .install_on_consumer(&s.consumer, Some(&s.name))
            .await?;
        s.engage();
        s.bind().await?;
        s.create("good", json!({ "size": 1 })).await?;
        s.create("bad", json!({ "size": 1000 })).await?;

        let status = s.binding_has("Synced", "False", "ProviderRejected").await?;
        let synced = message(&status, "Synced");
        let count = "1 of 2 instance(s) not in sync: ProviderRejected: 1 e.g. opsc-rejected/bad";
        counts(synced, count, "fix the instance's spec");
        assert!(has(&status, "Ready", "True", "AsExpected"));
        assert!(has(&status, "PermissionDenied", "False", "AsExpected"));
        assert_eq!(status.conflict_count, 0);
        let warning = s.binding_event("Warning", "ProviderRejected").await?;
        assert!(warning.note.is_some_and(|n| n.contains("bad")));

        // The cause goes away: the instance and then the binding say Synced=True.
        merge(&s.instances(), "bad", json!({ "spec": { "size": 5 } })).await?;
        s.in_sync("bad").await?;
        let status = s.binding_has("Synced", "True", "AsExpected").await?;
        assert_eq!(message(&status, "Synced"), "2 instance(s) in sync");
        s.binding_event("Normal", "Synced").await?;
        // One Warning for the change of state, not one per retry or requeue.
        let warnings = warnings(s, "ProviderRejected").await?;
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].series.is_none(), "published once: {warnings:?}");
        Ok(())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_binding_counts_conflicts_in_every_namespace_and_clears_them()
-> anyhow::Result<()> {
    let namespaces = ["opsc-conflicts-a", "opsc-conflicts-b"];
    let scenario = Scenario::bound("opsc-conflicts").cluster_binding();
    let body = async |s: &Scenario| {
        for ns in namespaces {
            taken_by_another(s, ns).await?;
        }
        let (free, ns) = (json!({ "mine": true }), Some(namespaces[0]));
        s.api.create(&s.consumer, ns, "free", free).await?;

        let conflicted = s
            .binding_until("conflictCount 2", |s| {
                s.conflict_count == 2 && has(s, "Synced", "False", "ForeignObjectExists")
            })
            .await?;
        assert_eq!(conflicted.bound_apis[0].conflict_count, 2);
        assert!(has(&conflicted, "Conflicts", "True", "ConflictsFound"));
        assert!(has(&conflicted, "Ready", "True", "AsExpected"));
        let synced = message(&conflicted, "Synced");
        let count = "2 of 3 instance(s) not in sync: conflict: 2 (ForeignObjectExists: 2";
        counts(synced, count, "conflictPolicy: Adopt");
        s.binding_event("Warning", "ForeignObjectExists").await?;
        s.binding_event("Warning", "ConflictsFound").await?;

        for ns in namespaces {
            delete(&s.api.api(&s.provider, Some(ns)), "taken").await?;
        }
        let cleared = s
            .binding_until("conflictCount back to 0 and Synced=True", |s| {
                s.conflict_count == 0 && has(s, "Synced", "True", "AsExpected")
            })
            .await?;
        assert!(has(&cleared, "Conflicts", "False", "AsExpected"));
        assert_eq!(cleared.bound_apis[0].conflict_count, 0);
        Ok(())
    };
    let s = scenario.start().await?;
    s.run_then(body, Scenario::forget_cluster_binding).await
}

#[test]
fn provider_refusals_are_permission_denied_until_granted() -> anyhow::Result<()> {
    let shared = vec![entry(Secrets, FromProvider, &["shared"], &[])];
    let scenario = Scenario::unbound("opsc-denied").pull_policy(PullPolicy::None);
    scenario.related(shared).run(async |s| {
        let ns = s.ns();
        put_secret(&s.provider, ns, "shared", &[], &[("k", "v")], None).await?;
        // The user may watch the API, nothing more: copies cannot be written and related
        // Secrets cannot be listed.
        let read = ["get", "list", "watch"];
        let user = bind_restricted(s, &read).await?;
        s.create("w", json!({ "a": 1 })).await?;

        let what = "PermissionDenied=True for writes and related";
        let denied = s
            .binding_until(what, |s| {
                has(s, "RelatedResourcesSynced", "False", "Forbidden")
                    && has(s, "PermissionDenied", "True", "Forbidden")
                    && message(s, "PermissionDenied").contains("instance copy write(s) refused")
            })
            .await?;
        assert!(has(&denied, "Synced", "False", "Forbidden"));
        assert!(has(&denied, "Ready", "True", "AsExpected"));
        let synced = message(&denied, "Synced");
        let count = "1 of 1 instance(s) not in sync: Forbidden: 1 e.g. opsc-denied/w";
        counts(synced, count, "kubectl kbind provider-rbac");
        let refused = [
            "1 instance copy write(s) refused",
            "related secrets",
            "kubectl kbind provider-rbac",
        ];
        says(message(&denied, "PermissionDenied"), &refused);
        let warning = s.binding_event("Warning", "Forbidden").await?;
        assert!(warning.note.is_some_and(|n| n.contains("grant")));
        // Three conditions went Forbidden, each with its own story: each is its own Event (its
        // own action), not one series keeping the first note.
        let stories = wait_for("a Forbidden Warning per condition", WAIT, || async {
            let notes = warnings(s, "Forbidden").await?.into_iter();
            let notes: BTreeMap<_, _> = notes.filter_map(|e| Some((e.action?, e.note?))).collect();
            Ok((notes.len() >= 3).then_some(notes))
        })
        .await?;
        let note = |action: &str| stories.get(action).map_or("", String::as_str);
        counts(note("Sync"), "1 of 1 instance(s) not in sync", "");
        says(note("CopyRelated"), &["related secrets"]);
        says(note("CheckPermissions"), &["kubectl kbind provider-rbac"]);
        let instance = synced_condition(&s.instances().get("w").await?);
        assert_eq!(instance.unwrap_or_default()["reason"], "Forbidden");

        let write = ["create", "patch", "update"];
        allow(s, &user, "opsc-denied-write", &write).await?;
        let secrets = json!([{ "apiGroups": [""], "resources": ["secrets"], "verbs": read }]);
        let who = ("User", user.as_str());
        grant(&s.provider, None, "opsc-denied-secrets", secrets, who).await?;
        let granted = s
            .binding_until("everything granted and in sync", |s| {
                has(s, "PermissionDenied", "False", "AsExpected")
                    && has(s, "Synced", "True", "AsExpected")
                    && has(s, "RelatedResourcesSynced", "True", "AsExpected")
            })
            .await?;
        assert_eq!(granted.conflict_count, 0);
        // The instance's Forbidden cleared too.
        s.in_sync("w").await?;
        wait_secret(&s.consumer, ns, "shared").await?;
        s.copy("w").await?;
        Ok(())
    })
}

#[test]
fn a_blocked_teardown_says_why_until_it_can_finish() -> anyhow::Result<()> {
    let scenario = Scenario::unbound("opsc-teardown").pull_policy(PullPolicy::None);
    scenario.run(async |s| {
        let everything_but_delete = ["get", "list", "watch", "create", "patch", "update"];
        let user = bind_restricted(s, &everything_but_delete).await?;
        s.create("w", json!({ "a": 1 })).await?;
        s.binding_until("Synced=True with the copy", |s| {
            message(s, "Synced") == "1 instance(s) in sync"
        })
        .await?;

        s.delete_binding().await?;
        let blocked = s.binding_has("TeardownFailed", "True", "Forbidden").await?;
        let steps = ["deleting provider copy w", "deletion-policy=Orphan"];
        says(message(&blocked, "TeardownFailed"), &steps);
        let warning = s.binding_event("Warning", "Forbidden").await?;
        assert_eq!(warning.action.as_deref(), Some("Teardown"));
        counts(&warning.note.unwrap_or_default(), "teardown blocked", "");

        allow(s, &user, "opsc-teardown-delete", &["delete"]).await?;
        s.binding_gone().await?;
        gone(&s.copies(), "w").await
    })
}

#[test]
fn a_restarted_konnector_keeps_the_binding_story_without_repeating_it() -> anyhow::Result<()> {
    let name = "opsc-restart";
    let mut before = None;
    Scenario::bound(name).run(async |s| {
        taken_by_another(s, s.ns()).await?;
        let status = s
            .binding_has("Synced", "False", "ForeignObjectExists")
            .await?;
        s.binding_event("Warning", "ForeignObjectExists").await?;
        before = condition(&status, "Synced").map(|c| c.last_transition_time.clone());
        Ok(())
    })?;

    // A new konnector process: nothing in memory, a new Event recorder.
    Scenario::unbound(name).run(async |s| {
        s.engage();
        s.create("after", json!({ "mine": true })).await?;
        let status = s
            .binding_until("the new konnector's summary", |s| {
                message(s, "Synced").starts_with("1 of 2 instance(s) not in sync")
            })
            .await?;
        assert!(has(&status, "Synced", "False", "ForeignObjectExists"));
        let since = condition(&status, "Synced").map(|c| c.last_transition_time.clone());
        assert_eq!(
            since, before,
            "Synced never flipped while the new konnector caught up"
        );
        assert_eq!(status.conflict_count, 1);
        let warnings = warnings(s, "ForeignObjectExists").await?;
        assert_eq!(warnings.len(), 1, "not announced again: {warnings:?}");
        Ok(())
    })
}

#[test]
fn binding_status_counts_each_apis_instances_as_the_konnector_knows_them() -> anyhow::Result<()> {
    Scenario::bound("cond-counts").run(async |s| {
        s.create("a", json!({"size": 1})).await?;
        s.create("b", json!({"size": 2})).await?;
        taken_by_another(s, s.ns()).await?;
        let expected = InstanceCounts {
            synced: 2,
            conflicting: 1,
            failing: 0,
            pending: 0,
        };
        let api = s.api.name();
        s.binding_until(
            "boundAPIs[].instances to count 2 synced, 1 conflicting",
            |status| {
                let ours = status.bound_apis.iter().find(|b| b.name == api);
                ours.and_then(|b| b.instances) == Some(expected)
            },
        )
        .await?;
        Ok(())
    })
}
