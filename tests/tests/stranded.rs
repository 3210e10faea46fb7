//! Nothing stranded: instances of an API a binding stops listing are drained like a binding
//! teardown drains them, and a binding's drain reaches the provider even when its Connection
//! is not engaged (a deleting Connection after a konnector restart), or says it could not.
//!
//! Stack tests share the pair; the restart test runs the whole manager on a pair of its own.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kbind_tests::fixtures::{
    SECRET_NAMESPACE, connect, has_condition, put_kubeconfig_secret, start_konnector,
    wait_connection,
};
use kbind_tests::syncenv::{
    Stack, TestApi, delete, ensure_namespace, events_for, merge, stays, wait_for,
};
use kbind_tests::testenv::{ClusterPair, shared_pair};
use konnector::api::names::{DELETION_POLICY_ANNOTATION, DELETION_POLICY_ORPHAN, SYNCER_FINALIZER};
use konnector::api::{
    ApiReference, Binding, BindingSpec, ConflictPolicy, Connection, ConnectionReference,
    SchemaPolicy, SchemaSource,
};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);
/// How long a "nothing happens" check watches.
const QUIET: Duration = Duration::from_secs(5);

fn holds_finalizer(obj: &DynamicObject) -> bool {
    obj.finalizers().iter().any(|f| f == SYNCER_FINALIZER)
}

async fn gone(api: &Api<DynamicObject>, name: &str, what: &str) -> anyhow::Result<()> {
    wait_for(what, WAIT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
}

async fn released(api: &Api<DynamicObject>, name: &str) -> anyhow::Result<()> {
    wait_for(
        &format!("{name}'s syncer finalizer released"),
        WAIT,
        || async { Ok((!holds_finalizer(&api.get(name).await?)).then_some(())) },
    )
    .await
}

/// A Ready Binding `b` in `ns` for `apis`, and one synced instance `w` of `apis[1]`.
async fn bound_with_instance(
    stack: &Stack,
    ns: &str,
    apis: &[&TestApi],
) -> anyhow::Result<Api<DynamicObject>> {
    for api in apis {
        api.export(stack).await?;
    }
    stack.engage(apis);
    stack
        .create_ready_binding(&stack.binding(ns, "b", apis, ConflictPolicy::Fail))
        .await?;
    let dropped = apis[apis.len() - 1];
    dropped
        .create(&stack.consumer, Some(ns), "w", json!({}))
        .await?;
    let provider = dropped.api(&stack.provider, Some(ns));
    wait_for("the provider copy", WAIT, || async {
        Ok(provider.get_opt("w").await?)
    })
    .await?;
    Ok(provider)
}

/// Lists only `api` in Binding `ns/b`.
async fn list_only(stack: &Stack, ns: &str, api: &TestApi) -> anyhow::Result<()> {
    Api::<Binding>::namespaced(stack.consumer.clone(), ns)
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "apis": [{ "name": api.name() }] } })),
        )
        .await?;
    Ok(())
}

/// The binding's condition `type_` as (status, reason), once it exists.
async fn binding_condition(
    stack: &Stack,
    ns: &str,
    type_: &str,
    status: &str,
) -> anyhow::Result<String> {
    let bindings = Api::<Binding>::namespaced(stack.consumer.clone(), ns);
    wait_for(
        &format!("{type_}={status} on Binding {ns}/b"),
        WAIT,
        || async {
            let b = bindings.get("b").await?;
            Ok(b.status
                .iter()
                .flat_map(|s| s.conditions.iter())
                .find(|c| c.type_ == type_ && c.status == status)
                .map(|c| c.reason.clone()))
        },
    )
    .await
}

/// Pins the stack's Connection to the test pair's identities, as a Connection that once
/// connected has them.
async fn pin_connection(stack: &Stack) -> anyhow::Result<()> {
    Api::<Connection>::all(stack.consumer.clone())
        .patch_status(
            &stack.name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": {
                "remoteClusterUID": stack.provider_uid,
                "localClusterUID": stack.consumer_uid,
            }})),
        )
        .await?;
    Ok(())
}

async fn warning_reasons(consumer: &Client, ns: &str, name: &str) -> anyhow::Result<Vec<String>> {
    Ok(events_for(consumer, Some(ns), name)
        .await?
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter_map(|e| e.reason)
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_dropped_from_a_binding_is_drained_like_a_teardown() -> anyhow::Result<()> {
    let ns = "strand-drop";
    let stack = Stack::start(shared_pair()?, ns).await?;
    let kept_api = TestApi::namespaced("strand-drop-a.e2e.kbind.io");
    let dropped_api = TestApi::namespaced("strand-drop-b.e2e.kbind.io");
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&kept_api, &dropped_api], async {
            let provider = bound_with_instance(&stack, ns, &[&kept_api, &dropped_api]).await?;
            let consumer = dropped_api.api(&stack.consumer, Some(ns));
            dropped_api
                .create(&stack.consumer, Some(ns), "orphan", json!({}))
                .await?;
            kept_api
                .create(&stack.consumer, Some(ns), "a", json!({}))
                .await?;
            let kept_provider = kept_api.api(&stack.provider, Some(ns));
            for (api, name) in [(&provider, "orphan"), (&kept_provider, "a")] {
                wait_for("the provider copy", WAIT, || async {
                    Ok(api.get_opt(name).await?)
                })
                .await?;
            }
            merge(
                &consumer,
                "orphan",
                json!({"metadata": {"annotations": {
                    DELETION_POLICY_ANNOTATION: DELETION_POLICY_ORPHAN
                }}}),
            )
            .await?;

            list_only(&stack, ns, &kept_api).await?;

            gone(&provider, "w", "the dropped API's owned copy deleted").await?;
            released(&consumer, "w").await?;
            released(&consumer, "orphan").await?;
            anyhow::ensure!(
                provider.get_opt("orphan").await?.is_some(),
                "the Orphan instance's copy was deleted"
            );
            assert_eq!(
                binding_condition(&stack, ns, "Drained", "True").await?,
                "AsExpected"
            );
            // Deleting the released instance completes: nothing holds it any more.
            delete(&consumer, "w").await?;
            gone(&consumer, "w", "the dropped API's instance deleted").await?;
            // The API still listed keeps syncing.
            anyhow::ensure!(
                kept_provider.get_opt("a").await?.is_some(),
                "copy of the listed API deleted"
            );
            let kept = kept_api.api(&stack.consumer, Some(ns)).get("a").await?;
            anyhow::ensure!(holds_finalizer(&kept), "listed API's instance released");
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_api_without_a_provider_client_is_released_and_reported() -> anyhow::Result<()> {
    let ns = "strand-noclient";
    let stack = Stack::start(shared_pair()?, ns).await?;
    let kept_api = TestApi::namespaced("strand-noclient-a.e2e.kbind.io");
    let dropped_api = TestApi::namespaced("strand-noclient-b.e2e.kbind.io");
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&kept_api, &dropped_api], async {
            let provider = bound_with_instance(&stack, ns, &[&kept_api, &dropped_api]).await?;
            let consumer = dropped_api.api(&stack.consumer, Some(ns));
            // The Connection goes not Ready: nothing is drained for that alone.
            stack.disengage();
            binding_condition(&stack, ns, "Ready", "False").await?;
            stays("the instance and its copy kept", QUIET, || async {
                Ok(holds_finalizer(&consumer.get("w").await?)
                    && provider.get_opt("w").await?.is_some())
            })
            .await?;

            // The stack's Connection never connected: no client can be built for the drain.
            list_only(&stack, ns, &kept_api).await?;
            released(&consumer, "w").await?;
            assert_eq!(
                binding_condition(&stack, ns, "Drained", "False").await?,
                "NoProviderClient"
            );
            let reasons = wait_for("a NoProviderClient Warning Event", WAIT, || async {
                let reasons = warning_reasons(&stack.consumer, ns, "b").await?;
                Ok(reasons
                    .iter()
                    .any(|r| r == "NoProviderClient")
                    .then_some(reasons))
            })
            .await?;
            assert!(reasons.iter().any(|r| r == "NoProviderClient"));
            // Best-effort, as documented: the provider copy remains.
            anyhow::ensure!(provider.get_opt("w").await?.is_some());
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teardown_without_engagement_drains_through_the_connection_credentials()
-> anyhow::Result<()> {
    let ns = "strand-creds";
    let stack = Stack::start(shared_pair()?, ns).await?;
    let api = TestApi::namespaced("strand-creds.e2e.kbind.io");
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            ensure_namespace(&stack.consumer, SECRET_NAMESPACE).await?;
            let kubeconfig = shared_pair()?.provider.admin().kubeconfig_yaml()?;
            put_kubeconfig_secret(&stack.consumer, &stack.name, &kubeconfig).await?;
            pin_connection(&stack).await?;
            let provider = bound_with_instance(&stack, ns, &[&api]).await?;
            // Not engaged any more, as after a restart while the Connection is deleting.
            stack.disengage();
            binding_condition(&stack, ns, "Ready", "False").await?;
            let bindings = Api::<Binding>::namespaced(stack.consumer.clone(), ns);
            bindings.delete("b", &DeleteParams::default()).await?;
            wait_for("the Binding gone", WAIT, || async {
                Ok(bindings.get_opt("b").await?.is_none().then_some(()))
            })
            .await?;
            gone(&provider, "w", "the owned provider copy deleted").await?;
            released(&api.api(&stack.consumer, Some(ns)), "w").await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teardown_with_unusable_credentials_reports_it() -> anyhow::Result<()> {
    let ns = "strand-badcreds";
    let stack = Stack::start(shared_pair()?, ns).await?;
    let api = TestApi::namespaced("strand-badcreds.e2e.kbind.io");
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            ensure_namespace(&stack.consumer, SECRET_NAMESPACE).await?;
            put_kubeconfig_secret(&stack.consumer, &stack.name, "not: [a kubeconfig").await?;
            pin_connection(&stack).await?;
            let provider = bound_with_instance(&stack, ns, &[&api]).await?;
            stack.disengage();
            binding_condition(&stack, ns, "Ready", "False").await?;
            let bindings = Api::<Binding>::namespaced(stack.consumer.clone(), ns);
            bindings.delete("b", &DeleteParams::default()).await?;
            wait_for("the Binding gone", WAIT, || async {
                Ok(bindings.get_opt("b").await?.is_none().then_some(()))
            })
            .await?;
            released(&api.api(&stack.consumer, Some(ns)), "w").await?;
            let reasons = warning_reasons(&stack.consumer, ns, "b").await?;
            anyhow::ensure!(
                reasons.iter().any(|r| r == "NoProviderClient"),
                "no NoProviderClient Warning Event; saw {reasons:?}"
            );
            // Best-effort, as documented: the copy remains for the operator to remove.
            anyhow::ensure!(provider.get_opt("w").await?.is_some());
            anyhow::Ok(())
        }))
        .await;
    let _ = Api::<Secret>::namespaced(stack.consumer.clone(), SECRET_NAMESPACE)
        .delete(&stack.name, &DeleteParams::default())
        .await;
    stack.finish(result).await
}

/// A konnector restarted while a Connection is being deleted still deletes the provider
/// copies of the bindings it then tears down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_mid_teardown_still_deletes_provider_copies() -> anyhow::Result<()> {
    let pair = tokio::task::spawn_blocking(ClusterPair::start_private).await??;
    let konnector = start_konnector(&pair.consumer)?;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let provider = pair.provider.client().await?;
        let api = TestApi::namespaced("restart.strand.kbind.io");
        api.install_on_provider(&provider).await?;
        let schema = SchemaPolicy {
            source: SchemaSource::Crd,
            ..SchemaPolicy::default()
        };
        let name = "provider";
        let ns = "restarted";
        connect(&consumer, &pair.provider, name, schema, false).await?;
        wait_connection(&consumer, name, "Ready", |c| {
            has_condition(c, "Ready", "True", "AsExpected")
        })
        .await?;
        ensure_namespace(&consumer, ns).await?;
        let binding = Binding::new(
            "b",
            BindingSpec {
                connection_ref: ConnectionReference { name: name.into() },
                apis: vec![ApiReference { name: api.name() }],
                conflict_policy: ConflictPolicy::Fail,
                related_resources: vec![],
            },
        );
        let bindings = Api::<Binding>::namespaced(consumer.clone(), ns);
        bindings.create(&PostParams::default(), &binding).await?;
        let instances = api.api(&consumer, Some(ns));
        wait_for("the instance created", WAIT, || async {
            Ok(instances
                .create(
                    &PostParams::default(),
                    &api.object(Some(ns), "w", json!({})),
                )
                .await
                .ok())
        })
        .await?;
        let copies = api.api(&provider, Some(ns));
        wait_for("the provider copy", WAIT, || async {
            Ok(copies.get_opt("w").await?)
        })
        .await?;

        // The Connection is deleted and waits for its Binding ...
        let connections = Api::<Connection>::all(consumer.clone());
        connections.delete(name, &DeleteParams::default()).await?;
        wait_connection(&consumer, name, "DrainingBindings", |c| {
            has_condition(c, "Ready", "False", "DrainingBindings")
        })
        .await?;
        // ... the konnector stops, the Binding is deleted meanwhile, and a new konnector
        // starts: it never engages the deleting Connection.
        konnector.stop().await?;
        bindings.delete("b", &DeleteParams::default()).await?;
        anyhow::ensure!(
            bindings
                .get("b")
                .await?
                .metadata
                .deletion_timestamp
                .is_some(),
            "the Binding should wait for its cleanup"
        );
        let restarted = start_konnector(&pair.consumer)?;

        wait_for("the Binding gone", WAIT, || async {
            Ok(bindings.get_opt("b").await?.is_none().then_some(()))
        })
        .await?;
        gone(&copies, "w", "the provider copy deleted after the restart").await?;
        released(&instances, "w").await?;
        wait_for("the Connection gone", WAIT, || async {
            Ok(connections.get_opt(name).await?.is_none().then_some(()))
        })
        .await?;
        restarted.stop().await
    })
    .await
}
