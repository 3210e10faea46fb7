//! Bindings tell the story of their instances, in `kubectl get -o yaml` and `kubectl describe`:
//! `Synced` counts the failing instances per reason and says what to do, `status.conflictCount`
//! totals conflicts, `PermissionDenied` shows what the provider refuses the engine,
//! `RelatedResourcesSynced` and `TeardownFailed` report related-copy and teardown failures,
//! and every change of state is one Event on the binding. Each clears when its cause is gone.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kbind_tests::fixtures::install_crd;
use kbind_tests::syncenv::related::{entry, put_secret, wait_secret};
use kbind_tests::syncenv::{
    Stack, TestApi, delete, ensure_namespace, events_for, merge, synced_condition, wait_for,
};
use kbind_tests::testenv::shared_pair;
use konnector::api::names::EXPORTED_LABEL;
use konnector::api::{
    Binding, BindingStatus, ClusterBinding, ConflictPolicy, PullPolicy, RelatedDirection,
    RelatedResourceKind,
};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

fn condition<'a>(status: &'a BindingStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

fn is(status: &BindingStatus, type_: &str, value: &str, reason: &str) -> bool {
    condition(status, type_).is_some_and(|c| c.status == value && c.reason == reason)
}

/// Starts a stack named `name` on the shared pair, runs `body` with it and stops it; a failure
/// carries both clusters' objects of `api` and the stack's bindings, and the apiservers' log
/// tails.
async fn on_stack<T>(
    name: &str,
    api: &TestApi,
    body: impl AsyncFnOnce(&Stack) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let pair = shared_pair()?;
    let stack = Stack::start(pair, name).await?;
    let result = pair.diagnose(stack.diagnose(&[api], body(&stack))).await;
    stack.finish(result).await
}

/// An instance `taken` in `ns` whose provider target already exists without markers: a
/// conflict under `Fail`.
async fn taken_by_another(stack: &Stack, api: &TestApi, ns: &str) -> anyhow::Result<()> {
    api.create(
        &stack.provider,
        Some(ns),
        "taken",
        json!({ "owner": "else" }),
    )
    .await?;
    api.create(&stack.consumer, Some(ns), "taken", json!({ "mine": true }))
        .await?;
    Ok(())
}

/// Waits until the Binding `ns/name`'s status passes `check`.
async fn wait_binding(
    stack: &Stack,
    ns: &str,
    name: &str,
    what: &str,
    check: impl Fn(&BindingStatus) -> bool,
) -> anyhow::Result<BindingStatus> {
    let api = Api::<Binding>::namespaced(stack.consumer.clone(), ns);
    wait_for(what, WAIT, || async {
        Ok(api.get(name).await?.status.filter(|s| check(s)))
    })
    .await
}

/// Waits for an Event of `type_` and `reason` on the object `name` (Events of cluster-scoped
/// objects land in `default`).
async fn event(
    stack: &Stack,
    ns: Option<&str>,
    name: &str,
    type_: &str,
    reason: &str,
) -> anyhow::Result<Event> {
    wait_for(
        &format!("a {type_} {reason} Event on {name}"),
        WAIT,
        || async {
            Ok(events_for(&stack.consumer, ns, name)
                .await?
                .into_iter()
                .find(|e| e.type_.as_deref() == Some(type_) && e.reason.as_deref() == Some(reason)))
        },
    )
    .await
}

/// The provider's CRD for `api` with a strict spec (`size` an integer ≤ 100), exported.
fn strict_provider_crd(api: &TestApi) -> anyhow::Result<CustomResourceDefinition> {
    let mut crd = serde_json::to_value(api.crd()?)?;
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = json!({
        "type": "object",
        "properties": { "size": { "type": "integer", "maximum": 100 } },
    });
    let mut crd: CustomResourceDefinition = serde_json::from_value(crd)?;
    crd.metadata.labels = Some(BTreeMap::from([(
        EXPORTED_LABEL.to_string(),
        "true".to_string(),
    )]));
    Ok(crd)
}

/// Grants provider user `user` the `rules` cluster-wide (one ClusterRole per call, `name`).
async fn grant(
    provider: &Client,
    name: &str,
    user: &str,
    rules: serde_json::Value,
) -> anyhow::Result<()> {
    let role: ClusterRole =
        serde_json::from_value(json!({ "metadata": { "name": name }, "rules": rules }))?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": { "name": name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name },
        "subjects": [{ "kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io" }],
    }))?;
    Api::<ClusterRole>::all(provider.clone())
        .create(&PostParams::default(), &role)
        .await?;
    Api::<ClusterRoleBinding>::all(provider.clone())
        .create(&PostParams::default(), &binding)
        .await?;
    Ok(())
}

/// A stack whose Connection is engaged with a restricted provider user, `api` exported and its
/// consumer CRD installed by the test (the user need not read CRDs), and the namespace on both
/// sides; once engaged, the user is granted `rules` (ClusterRole `role`).
async fn restricted(
    stack: &Stack,
    api: &TestApi,
    (user, ns): (&str, &str),
    role: &str,
    rules: serde_json::Value,
) -> anyhow::Result<Client> {
    stack.set_pull_policy(PullPolicy::None).await?;
    api.export(stack).await?;
    api.install_on_consumer(&stack.consumer, Some(&stack.name))
        .await?;
    ensure_namespace(&stack.provider, ns).await?;
    ensure_namespace(&stack.consumer, ns).await?;
    let identity = shared_pair()?.provider.mint_user(user, &[])?;
    let client = identity.client().await?;
    stack.engage_with(client.clone(), &[api], user);
    grant(&stack.provider, role, user, rules).await?;
    Ok(client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_rejection_is_counted_on_the_binding_and_clears_when_fixed() -> anyhow::Result<()>
{
    let ns = "opsc-rejected";
    let api = TestApi::namespaced("rejected.opsc.kbind.io");
    on_stack(ns, &api, async |stack| {
        stack.set_pull_policy(PullPolicy::None).await?;
        install_crd(&stack.provider, &strict_provider_crd(&api)?).await?;
        api.install_on_consumer(&stack.consumer, Some(ns)).await?;
        stack.engage(&[&api]);
        stack
            .create_ready_binding(&stack.binding(ns, "widgets", &[&api], ConflictPolicy::Fail))
            .await?;
        api.create(&stack.consumer, Some(ns), "good", json!({ "size": 1 }))
            .await?;
        api.create(&stack.consumer, Some(ns), "bad", json!({ "size": 1000 }))
            .await?;

        let status = wait_binding(stack, ns, "widgets", "Synced=False ProviderRejected", |s| {
            condition(s, "Synced").is_some_and(|c| {
                c.status == "False"
                    && c.reason == "ProviderRejected"
                    && c.message.starts_with("1 of 2 instance(s) not in sync")
            })
        })
        .await?;
        let synced = condition(&status, "Synced").context("Synced")?;
        assert!(
            synced
                .message
                .contains(&format!("ProviderRejected: 1 e.g. {ns}/bad")),
            "names the instance: {}",
            synced.message
        );
        assert!(
            synced.message.contains("fix the instance's spec"),
            "says what to do: {}",
            synced.message
        );
        assert!(is(&status, "Ready", "True", "AsExpected"));
        assert!(is(&status, "PermissionDenied", "False", "AsExpected"));
        assert_eq!(status.conflict_count, 0);
        let warning = event(stack, Some(ns), "widgets", "Warning", "ProviderRejected").await?;
        assert!(warning.note.as_deref().is_some_and(|n| n.contains("bad")));

        // The cause goes away: the instance and then the binding say Synced=True.
        merge(
            &api.api(&stack.consumer, Some(ns)),
            "bad",
            json!({ "spec": { "size": 5 } }),
        )
        .await?;
        wait_for("bad Synced=True for its generation", WAIT, || async {
            let obj = api.api(&stack.consumer, Some(ns)).get("bad").await?;
            Ok(synced_condition(&obj)
                .filter(|c| {
                    c["status"] == "True"
                        && c["observedGeneration"] == json!(obj.metadata.generation)
                })
                .map(|_| ()))
        })
        .await?;
        let status = wait_binding(stack, ns, "widgets", "Synced=True", |s| {
            is(s, "Synced", "True", "AsExpected")
        })
        .await?;
        assert_eq!(
            condition(&status, "Synced").map(|c| c.message.as_str()),
            Some("2 instance(s) in sync")
        );
        event(stack, Some(ns), "widgets", "Normal", "Synced").await?;
        // One Warning for the change of state, not one per retry or requeue.
        let warnings: Vec<Event> = events_for(&stack.consumer, Some(ns), "widgets")
            .await?
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("ProviderRejected"))
            .collect();
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].series.is_none(), "published once: {warnings:?}");
        anyhow::Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_binding_counts_conflicts_in_every_namespace_and_clears_them()
-> anyhow::Result<()> {
    let name = "opsc-conflicts";
    let (ns_a, ns_b) = ("opsc-conflicts-a", "opsc-conflicts-b");
    let api = TestApi::namespaced("conflicts.opsc.kbind.io");
    on_stack(name, &api, async |stack| {
        api.export(stack).await?;
        stack.engage(&[&api]);
        stack
            .create_ready_cluster_binding(&stack.cluster_binding(
                name,
                &[&api],
                ConflictPolicy::Fail,
            ))
            .await?;
        for ns in [ns_a, ns_b] {
            taken_by_another(stack, &api, ns).await?;
        }
        api.create(&stack.consumer, Some(ns_a), "free", json!({ "mine": true }))
            .await?;

        let bindings = Api::<ClusterBinding>::all(stack.consumer.clone());
        let conflicted = wait_for("conflictCount 2", WAIT, || async {
            Ok(bindings.get(name).await?.status.filter(|s| {
                s.conflict_count == 2 && is(s, "Synced", "False", "ForeignObjectExists")
            }))
        })
        .await?;
        assert_eq!(conflicted.bound_apis[0].conflict_count, 2);
        assert!(is(&conflicted, "Conflicts", "True", "ConflictsFound"));
        assert!(is(&conflicted, "Ready", "True", "AsExpected"));
        let synced = condition(&conflicted, "Synced").context("Synced")?;
        assert!(
            synced.message.starts_with("2 of 3 instance(s) not in sync")
                && synced
                    .message
                    .contains("conflict: 2 (ForeignObjectExists: 2")
                && synced.message.contains("conflictPolicy: Adopt"),
            "{}",
            synced.message
        );
        event(stack, None, name, "Warning", "ForeignObjectExists").await?;
        event(stack, None, name, "Warning", "ConflictsFound").await?;

        for ns in [ns_a, ns_b] {
            delete(&api.api(&stack.provider, Some(ns)), "taken").await?;
        }
        let cleared = wait_for("conflictCount back to 0 and Synced=True", WAIT, || async {
            Ok(bindings
                .get(name)
                .await?
                .status
                .filter(|s| s.conflict_count == 0 && is(s, "Synced", "True", "AsExpected")))
        })
        .await?;
        assert!(is(&cleared, "Conflicts", "False", "AsExpected"));
        assert_eq!(cleared.bound_apis[0].conflict_count, 0);
        anyhow::Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_refusals_are_permission_denied_until_granted() -> anyhow::Result<()> {
    let ns = "opsc-denied";
    let user = "opsc-denied-user";
    let api = TestApi::namespaced("denied.opsc.kbind.io");
    on_stack(ns, &api, async |stack| {
        // The user may watch the API, nothing more: copies cannot be written and related
        // Secrets cannot be listed.
        let watch = json!([{ "apiGroups": [api.group], "resources": ["widgets"], "verbs": ["get", "list", "watch"] }]);
        restricted(stack, &api, (user, ns), "opsc-denied-watch", watch).await?;
        put_secret(&stack.provider, ns, "shared", &[], &[("k", "v")], None).await?;
        let mut binding = stack.binding(ns, "widgets", &[&api], ConflictPolicy::Fail);
        binding.spec.related_resources = vec![entry(
            RelatedResourceKind::Secrets,
            RelatedDirection::FromProvider,
            &["shared"],
            &[],
        )];
        stack.create_ready_binding(&binding).await?;
        api.create(&stack.consumer, Some(ns), "w", json!({ "a": 1 }))
            .await?;

        let denied = wait_binding(stack, ns, "widgets", "PermissionDenied=True for writes and related", |s| {
            condition(s, "PermissionDenied").is_some_and(|c| {
                c.status == "True"
                    && c.message.contains("1 instance copy write(s) refused")
                    && c.message.contains("related secrets")
            }) && is(s, "RelatedResourcesSynced", "False", "Forbidden")
        })
        .await?;
        assert!(is(&denied, "Synced", "False", "Forbidden"));
        assert!(is(&denied, "Ready", "True", "AsExpected"));
        let synced = &condition(&denied, "Synced").context("Synced")?.message;
        assert!(
            synced.starts_with(&format!("1 of 1 instance(s) not in sync: Forbidden: 1 e.g. {ns}/w")),
            "counts the refused instance: {synced}"
        );
        assert!(synced.contains("kubectl kbind provider-rbac"), "says what to do: {synced}");
        let message = &condition(&denied, "PermissionDenied").context("PermissionDenied")?.message;
        assert!(message.contains("kubectl kbind provider-rbac"), "{message}");
        let warning = event(stack, Some(ns), "widgets", "Warning", "Forbidden").await?;
        assert!(warning.note.is_some_and(|n| n.contains("grant")));
        // Three conditions went Forbidden, each with its own story: each is its own Event
        // (its own action), not one series keeping the first note.
        let stories = wait_for("a Forbidden Warning per condition", WAIT, || async {
            let notes: BTreeMap<String, String> = events_for(&stack.consumer, Some(ns), "widgets")
                .await?
                .into_iter()
                .filter(|e| e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some("Forbidden"))
                .filter_map(|e| Some((e.action?, e.note?)))
                .collect();
            Ok((notes.len() >= 3).then_some(notes))
        })
        .await?;
        let note = |action: &str| stories.get(action).map(String::as_str).unwrap_or_default();
        assert!(note("Sync").starts_with("1 of 1 instance(s) not in sync"), "{stories:?}");
        assert!(note("CopyRelated").contains("related secrets"), "{stories:?}");
        assert!(note("CheckPermissions").contains("kubectl kbind provider-rbac"), "{stories:?}");
        let instance = api.api(&stack.consumer, Some(ns)).get("w").await?;
        assert_eq!(
            synced_condition(&instance).map(|c| c["reason"].clone()),
            Some(json!("Forbidden"))
        );

        grant(
            &stack.provider,
            "opsc-denied-write",
            user,
            json!([
                { "apiGroups": [api.group], "resources": ["widgets"], "verbs": ["create", "patch", "update"] },
                { "apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"] },
            ]),
        )
        .await?;
        let granted = wait_binding(stack, ns, "widgets", "everything granted and in sync", |s| {
            is(s, "PermissionDenied", "False", "AsExpected")
                && is(s, "Synced", "True", "AsExpected")
                && is(s, "RelatedResourcesSynced", "True", "AsExpected")
        })
        .await?;
        assert_eq!(granted.conflict_count, 0);
        let instance = api.api(&stack.consumer, Some(ns)).get("w").await?;
        assert_eq!(
            synced_condition(&instance).map(|c| c["status"].clone()),
            Some(json!("True")),
            "the instance's Forbidden cleared too"
        );
        wait_secret(&stack.consumer, ns, "shared").await?;
        assert!(api.api(&stack.provider, Some(ns)).get_opt("w").await?.is_some());
        anyhow::Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_teardown_says_why_until_it_can_finish() -> anyhow::Result<()> {
    let ns = "opsc-teardown";
    let user = "opsc-teardown-user";
    let api = TestApi::namespaced("teardown.opsc.kbind.io");
    on_stack(ns, &api, async |stack| {
        // Everything but delete.
        let sync = json!([{ "apiGroups": [api.group], "resources": ["widgets"], "verbs": ["get", "list", "watch", "create", "patch", "update"] }]);
        restricted(stack, &api, (user, ns), "opsc-teardown-sync", sync).await?;
        stack
            .create_ready_binding(&stack.binding(ns, "widgets", &[&api], ConflictPolicy::Fail))
            .await?;
        api.create(&stack.consumer, Some(ns), "w", json!({ "a": 1 }))
            .await?;
        wait_binding(stack, ns, "widgets", "Synced=True with the copy", |s| {
            condition(s, "Synced").is_some_and(|c| c.message == "1 instance(s) in sync")
        })
        .await?;

        let bindings = Api::<Binding>::namespaced(stack.consumer.clone(), ns);
        bindings.delete("widgets", &DeleteParams::default()).await?;
        let blocked = wait_binding(stack, ns, "widgets", "TeardownFailed=True Forbidden", |s| {
            is(s, "TeardownFailed", "True", "Forbidden")
        })
        .await?;
        let message = &condition(&blocked, "TeardownFailed").context("TeardownFailed")?.message;
        assert!(
            message.contains("deleting provider copy w") && message.contains("deletion-policy=Orphan"),
            "names the step and what to do: {message}"
        );
        let warning = event(stack, Some(ns), "widgets", "Warning", "Forbidden").await?;
        assert_eq!(warning.action.as_deref(), Some("Teardown"));
        assert!(warning.note.is_some_and(|n| n.starts_with("teardown blocked")));

        grant(
            &stack.provider,
            "opsc-teardown-delete",
            user,
            json!([{ "apiGroups": [api.group], "resources": ["widgets"], "verbs": ["delete"] }]),
        )
        .await?;
        wait_for("the binding gone", WAIT, || async {
            Ok(bindings.get_opt("widgets").await?.is_none().then_some(()))
        })
        .await?;
        wait_for("the provider copy gone", WAIT, || async {
            Ok(api.api(&stack.provider, Some(ns)).get_opt("w").await?.is_none().then_some(()))
        })
        .await?;
        anyhow::Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_konnector_keeps_the_binding_story_without_repeating_it() -> anyhow::Result<()>
{
    let ns = "opsc-restart";
    let api = TestApi::namespaced("restart.opsc.kbind.io");
    let before = on_stack(ns, &api, async |stack| {
        api.export(stack).await?;
        stack.engage(&[&api]);
        stack
            .create_ready_binding(&stack.binding(ns, "widgets", &[&api], ConflictPolicy::Fail))
            .await?;
        taken_by_another(stack, &api, ns).await?;
        let status = wait_binding(
            stack,
            ns,
            "widgets",
            "Synced=False ForeignObjectExists",
            |s| is(s, "Synced", "False", "ForeignObjectExists"),
        )
        .await?;
        event(stack, Some(ns), "widgets", "Warning", "ForeignObjectExists").await?;
        condition(&status, "Synced").cloned().context("Synced")
    })
    .await?;

    // A new konnector process: nothing in memory, a new Event recorder.
    on_stack(ns, &api, async |stack| {
        stack.engage(&[&api]);
        api.create(&stack.consumer, Some(ns), "after", json!({ "mine": true }))
            .await?;
        let status = wait_binding(stack, ns, "widgets", "the new konnector's summary", |s| {
            condition(s, "Synced")
                .is_some_and(|c| c.message.starts_with("1 of 2 instance(s) not in sync"))
        })
        .await?;
        let synced = condition(&status, "Synced").context("Synced")?;
        assert_eq!(synced.reason, "ForeignObjectExists");
        assert_eq!(
            synced.last_transition_time, before.last_transition_time,
            "Synced never flipped while the new konnector caught up"
        );
        assert_eq!(status.conflict_count, 1);
        let warnings: Vec<Event> = events_for(&stack.consumer, Some(ns), "widgets")
            .await?
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("ForeignObjectExists"))
            .collect();
        assert_eq!(warnings.len(), 1, "not announced again: {warnings:?}");
        anyhow::Ok(())
    })
    .await
}
