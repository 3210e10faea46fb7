//! The ownership check and its conflict table (required: "every row of the conflict table
//! observed as annotation + Event; Adopt overwriting an unmarked target; conflicting delete
//! leaving the foreign object; recreated instance not owning the retained copy"), and the
//! binding's conflict count.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use kbind_tests::syncenv::{
    Stack, TestApi, delete, ensure_namespace, events_for, merge, stays, wait_for,
};
use kbind_tests::testenv::shared_pair;
use konnector::api::names::{
    CONFLICT_ANNOTATION, CONSUMER_CLUSTER_UID_ANNOTATION, CONSUMER_OBJECT_UID_ANNOTATION,
    DELETION_POLICY_ANNOTATION, DELETION_POLICY_ORPHAN, MANAGED_LABEL,
};
use konnector::api::{Binding, ConditionType, ConflictPolicy};
use kube::api::{DynamicObject, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

async fn bound(name: &str, policy: ConflictPolicy) -> anyhow::Result<(Stack, TestApi)> {
    let pair = shared_pair()?;
    let stack = Stack::start(pair, name).await?;
    let api = TestApi::namespaced(&format!("{name}.e2e.kbind.io"));
    api.export(&stack).await?;
    stack.engage(&[&api]);
    stack
        .create_ready_binding(&stack.binding(name, "widgets", &[&api], policy))
        .await?;
    ensure_namespace(&stack.provider, name).await?;
    Ok((stack, api))
}

/// Creates a provider object directly, with the given ownership annotations.
async fn foreign(
    stack: &Stack,
    api: &TestApi,
    ns: &str,
    name: &str,
    markers: &[(&str, &str)],
) -> anyhow::Result<DynamicObject> {
    let mut obj = api.object(Some(ns), name, json!({ "owner": "someone else" }));
    if !markers.is_empty() {
        obj.metadata.annotations = Some(
            markers
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
        );
    }
    Ok(api
        .api(&stack.provider, Some(ns))
        .create(&PostParams::default(), &obj)
        .await?)
}

/// Waits for the conflict annotation and a Warning Event with `reason` on a consumer instance.
async fn conflict_reported(
    stack: &Stack,
    api: &TestApi,
    ns: &str,
    name: &str,
    reason: &str,
) -> anyhow::Result<String> {
    let annotation = wait_for(&format!("conflict annotation {reason}"), WAIT, || async {
        let obj = api.api(&stack.consumer, Some(ns)).get(name).await?;
        Ok(obj
            .annotations()
            .get(CONFLICT_ANNOTATION)
            .filter(|a| a.starts_with(reason))
            .cloned())
    })
    .await?;
    wait_for(&format!("Warning Event {reason}"), WAIT, || async {
        let events = events_for(&stack.consumer, Some(ns), name).await?;
        Ok(events
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason) && e.type_.as_deref() == Some("Warning")))
    })
    .await?;
    Ok(annotation)
}

async fn provider_untouched(
    stack: &Stack,
    api: &TestApi,
    ns: &str,
    name: &str,
    before: &DynamicObject,
) -> anyhow::Result<()> {
    let now = api.api(&stack.provider, Some(ns)).get(name).await?;
    anyhow::ensure!(
        now.resource_version() == before.resource_version(),
        "the foreign object was written"
    );
    anyhow::ensure!(now.data["spec"] == json!({ "owner": "someone else" }));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmarked_target_under_fail_is_foreign_object_exists() -> anyhow::Result<()> {
    let ns = "conflict-foreign";
    let (stack, api) = bound(ns, ConflictPolicy::Fail).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            let before = foreign(&stack, &api, ns, "taken", &[]).await?;
            api.create(&stack.consumer, Some(ns), "taken", json!({ "mine": true }))
                .await?;
            api.create(&stack.consumer, Some(ns), "free", json!({ "mine": true }))
                .await?;
            conflict_reported(&stack, &api, ns, "taken", "ForeignObjectExists").await?;
            // Unrelated objects keep syncing.
            wait_for("the unrelated instance on the provider", WAIT, || async {
                Ok(api.api(&stack.provider, Some(ns)).get_opt("free").await?)
            })
            .await?;
            provider_untouched(&stack, &api, ns, "taken", &before).await?;
            // The best-effort instance condition survives this schema (free-form status).
            let obj = api.api(&stack.consumer, Some(ns)).get("taken").await?;
            let synced = obj.data["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Synced").cloned())
                .context("Synced condition")?;
            assert_eq!(synced["status"], "False");
            assert_eq!(synced["reason"], "ForeignObjectExists");
            // The binding counts it, and stays Ready.
            let binding = wait_for("conflictCount 1", WAIT, || async {
                let b = Api::<Binding>::namespaced(stack.consumer.clone(), ns)
                    .get("widgets")
                    .await?;
                Ok(b.status
                    .filter(|s| s.bound_apis.iter().any(|a| a.conflict_count == 1)))
            })
            .await?;
            let is = |t: ConditionType| {
                binding
                    .conditions
                    .iter()
                    .any(|c| c.type_ == t.as_str() && c.status == "True")
            };
            assert!(is(ConditionType::Conflicts), "Conflicts=True");
            assert!(
                is(ConditionType::Ready),
                "Conflicts does not make the binding unready"
            );
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_owned_by_another_cluster_is_owned_by_another() -> anyhow::Result<()> {
    let ns = "conflict-cluster";
    let (stack, api) = bound(ns, ConflictPolicy::Adopt).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            let markers = [
                (CONSUMER_CLUSTER_UID_ANNOTATION, "another-cluster"),
                (CONSUMER_OBJECT_UID_ANNOTATION, "another-object"),
            ];
            let before = foreign(&stack, &api, ns, "taken", &markers).await?;
            api.create(&stack.consumer, Some(ns), "taken", json!({ "mine": true }))
                .await?;
            conflict_reported(&stack, &api, ns, "taken", "OwnedByAnother").await?;
            provider_untouched(&stack, &api, ns, "taken", &before).await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_owned_by_another_object_of_this_cluster_is_owned_by_another() -> anyhow::Result<()>
{
    let ns = "conflict-object";
    let (stack, api) = bound(ns, ConflictPolicy::Adopt).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            let markers = [
                (CONSUMER_CLUSTER_UID_ANNOTATION, stack.consumer_uid.as_str()),
                (CONSUMER_OBJECT_UID_ANNOTATION, "another-object"),
            ];
            let before = foreign(&stack, &api, ns, "taken", &markers).await?;
            api.create(&stack.consumer, Some(ns), "taken", json!({ "mine": true }))
                .await?;
            conflict_reported(&stack, &api, ns, "taken", "OwnedByAnother").await?;
            provider_untouched(&stack, &api, ns, "taken", &before).await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_markers_count_as_owned_by_another_even_under_adopt() -> anyhow::Result<()> {
    let ns = "conflict-partial";
    let (stack, api) = bound(ns, ConflictPolicy::Adopt).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            let cluster_only = foreign(
                &stack,
                &api,
                ns,
                "cluster-only",
                &[(CONSUMER_CLUSTER_UID_ANNOTATION, stack.consumer_uid.as_str())],
            )
            .await?;
            let object_only = foreign(
                &stack,
                &api,
                ns,
                "object-only",
                &[(CONSUMER_OBJECT_UID_ANNOTATION, "x")],
            )
            .await?;
            api.create(&stack.consumer, Some(ns), "cluster-only", json!({}))
                .await?;
            api.create(&stack.consumer, Some(ns), "object-only", json!({}))
                .await?;
            conflict_reported(&stack, &api, ns, "cluster-only", "OwnedByAnother").await?;
            conflict_reported(&stack, &api, ns, "object-only", "OwnedByAnother").await?;
            provider_untouched(&stack, &api, ns, "cluster-only", &cluster_only).await?;
            provider_untouched(&stack, &api, ns, "object-only", &object_only).await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_label_alone_is_not_ownership() -> anyhow::Result<()> {
    let ns = "conflict-label";
    let (stack, api) = bound(ns, ConflictPolicy::Fail).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            let mut obj = api.object(Some(ns), "taken", json!({ "owner": "someone else" }));
            obj.metadata.labels = Some(BTreeMap::from([(
                MANAGED_LABEL.to_string(),
                "true".to_string(),
            )]));
            let before = api
                .api(&stack.provider, Some(ns))
                .create(&PostParams::default(), &obj)
                .await?;
            api.create(&stack.consumer, Some(ns), "taken", json!({}))
                .await?;
            conflict_reported(&stack, &api, ns, "taken", "ForeignObjectExists").await?;
            provider_untouched(&stack, &api, ns, "taken", &before).await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adopt_overwrites_an_unmarked_target() -> anyhow::Result<()> {
    let ns = "conflict-adopt";
    let (stack, api) = bound(ns, ConflictPolicy::Adopt).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            let before = foreign(&stack, &api, ns, "adoptee", &[]).await?;
            let created = api
                .create(
                    &stack.consumer,
                    Some(ns),
                    "adoptee",
                    json!({ "mine": true }),
                )
                .await?;
            let adopted = wait_for("the adopted target carrying our spec", WAIT, || async {
                let target = api.api(&stack.provider, Some(ns)).get("adoptee").await?;
                Ok((target.data["spec"] == json!({ "mine": true })).then_some(target))
            })
            .await?;
            assert_eq!(
                adopted.uid(),
                before.uid(),
                "the same object, adopted, not recreated"
            );
            assert_eq!(
                adopted.annotations().get(CONSUMER_OBJECT_UID_ANNOTATION),
                created.uid().as_ref()
            );
            assert_eq!(
                adopted.annotations().get(CONSUMER_CLUSTER_UID_ANNOTATION),
                Some(&stack.consumer_uid)
            );
            assert_eq!(
                adopted.labels().get(MANAGED_LABEL).map(String::as_str),
                Some("true")
            );
            let obj = api.api(&stack.consumer, Some(ns)).get("adoptee").await?;
            assert!(!obj.annotations().contains_key(CONFLICT_ANNOTATION));
            // Adopted once, then left alone: no write loop between our apply and the fields the
            // previous owner had.
            let settled = api
                .api(&stack.provider, Some(ns))
                .get("adoptee")
                .await?
                .resource_version();
            stays(
                "the adopted copy settled",
                Duration::from_secs(6),
                || async {
                    Ok(api
                        .api(&stack.provider, Some(ns))
                        .get("adoptee")
                        .await?
                        .resource_version()
                        == settled)
                },
            )
            .await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflict_clears_when_the_foreign_object_goes_away() -> anyhow::Result<()> {
    let ns = "conflict-clears";
    let (stack, api) = bound(ns, ConflictPolicy::Fail).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            foreign(&stack, &api, ns, "taken", &[]).await?;
            api.create(&stack.consumer, Some(ns), "taken", json!({ "mine": true }))
                .await?;
            conflict_reported(&stack, &api, ns, "taken", "ForeignObjectExists").await?;
            delete(&api.api(&stack.provider, Some(ns)), "taken").await?;
            wait_for("our copy replacing the foreign object", WAIT, || async {
                Ok(api
                    .api(&stack.provider, Some(ns))
                    .get_opt("taken")
                    .await?
                    .filter(|o| o.data["spec"] == json!({ "mine": true })))
            })
            .await?;
            wait_for(
                "the conflict annotation cleared and Synced=True",
                WAIT,
                || async {
                    let obj = api.api(&stack.consumer, Some(ns)).get("taken").await?;
                    let synced = obj.data["status"]["conditions"]
                        .as_array()
                        .is_some_and(|cs| {
                            cs.iter().any(|c| {
                                c["type"] == "Synced"
                                    && c["status"] == "True"
                                    && c["observedGeneration"] == json!(obj.metadata.generation)
                            })
                        });
                    Ok(
                        (!obj.annotations().contains_key(CONFLICT_ANNOTATION) && synced)
                            .then_some(()),
                    )
                },
            )
            .await?;
            wait_for("conflictCount back to 0", WAIT, || async {
                let b = Api::<Binding>::namespaced(stack.consumer.clone(), ns)
                    .get("widgets")
                    .await?;
                Ok(b.status.filter(|s| {
                    s.bound_apis.iter().all(|a| a.conflict_count == 0) && !s.bound_apis.is_empty()
                }))
            })
            .await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_conflicting_instance_leaves_the_foreign_object() -> anyhow::Result<()> {
    let ns = "conflict-delete";
    let (stack, api) = bound(ns, ConflictPolicy::Fail).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            let before = foreign(&stack, &api, ns, "taken", &[]).await?;
            api.create(&stack.consumer, Some(ns), "taken", json!({}))
                .await?;
            conflict_reported(&stack, &api, ns, "taken", "ForeignObjectExists").await?;
            delete(&api.api(&stack.consumer, Some(ns)), "taken").await?;
            wait_for("the consumer instance gone", WAIT, || async {
                Ok(api
                    .api(&stack.consumer, Some(ns))
                    .get_opt("taken")
                    .await?
                    .is_none()
                    .then_some(()))
            })
            .await?;
            provider_untouched(&stack, &api, ns, "taken", &before).await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreated_instance_does_not_own_the_retained_copy() -> anyhow::Result<()> {
    let ns = "conflict-recreate";
    let (stack, api) = bound(ns, ConflictPolicy::Adopt).await?;
    let result = shared_pair()?.diagnose(stack.diagnose(&[&api], async {
        let consumer = api.api(&stack.consumer, Some(ns));
        let first = api.create(&stack.consumer, Some(ns), "w", json!({ "generation": 1 })).await?;
        wait_for("the first copy", WAIT, || async { Ok(api.api(&stack.provider, Some(ns)).get_opt("w").await?) }).await?;
        merge(&consumer, "w", json!({ "metadata": { "annotations": { DELETION_POLICY_ANNOTATION: DELETION_POLICY_ORPHAN } } })).await?;
        delete(&consumer, "w").await?;
        wait_for("the orphaning delete done", WAIT, || async { Ok(consumer.get_opt("w").await?.is_none().then_some(())) }).await?;

        let second = api.create(&stack.consumer, Some(ns), "w", json!({ "generation": 2 })).await?;
        assert_ne!(second.uid(), first.uid());
        conflict_reported(&stack, &api, ns, "w", "OwnedByAnother").await?;
        let retained = api.api(&stack.provider, Some(ns)).get("w").await?;
        assert_eq!(retained.data["spec"], json!({ "generation": 1 }));
        assert_eq!(retained.annotations().get(CONSUMER_OBJECT_UID_ANNOTATION), first.uid().as_ref());
        stays("the retained copy unchanged", Duration::from_secs(3), || async {
            let now = api.api(&stack.provider, Some(ns)).get("w").await?;
            Ok(now.data["spec"] == json!({ "generation": 1 }) && now.annotations().get(CONSUMER_OBJECT_UID_ANNOTATION) == first.uid().as_ref())
        })
        .await?;
        anyhow::Ok(())
    }))
    .await;
    stack.finish(result).await
}
