//! Nothing stranded: instances of an API a binding stops listing are drained like a binding
//! teardown drains them, and a binding's drain reaches the provider even when its Connection
//! is not engaged (a deleting Connection after a konnector restart), or says it could not.
//!
//! Scenario tests share the pair; the restart test runs the whole manager on a pair of its own.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kbind_tests::fixtures::{
    SECRET_NAMESPACE, connect, has_condition, put_kubeconfig_secret, start_konnector,
    wait_connection,
};
use kbind_tests::syncenv::{
    BINDING, Scenario, TestApi, WAIT, delete, ensure_namespace, events_for, gone,
    holds_syncer_finalizer, merge, stays, wait_for,
};
use kbind_tests::testenv::ClusterPair;
use konnector::api::names::{DELETION_POLICY_ANNOTATION, DELETION_POLICY_ORPHAN};
use konnector::api::{
    ApiReference, Binding, BindingSpec, ConflictPolicy, Connection, ConnectionReference,
    SchemaPolicy, SchemaSource,
};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

/// How long a "nothing happens" check watches.
const QUIET: Duration = Duration::from_secs(5);

async fn released(api: &Api<DynamicObject>, name: &str) -> anyhow::Result<()> {
    wait_for(
        &format!("{name}'s syncer finalizer released"),
        WAIT,
        || async { Ok((!holds_syncer_finalizer(&api.get(name).await?)).then_some(())) },
    )
    .await
}

/// Creates instance `w` of `api` and waits for its provider copy; returns the copies' API.
async fn with_instance(s: &Scenario, api: &TestApi) -> anyhow::Result<Api<DynamicObject>> {
    api.create(&s.consumer, Some(s.ns()), "w", json!({}))
        .await?;
    let copies = api.api(&s.provider, Some(s.ns()));
    wait_for("the provider copy", WAIT, || async {
        Ok(copies.get_opt("w").await?)
    })
    .await?;
    Ok(copies)
}

/// Lists only the scenario's main API in its Binding.
async fn list_only_main_api(s: &Scenario) -> anyhow::Result<()> {
    let apis = json!({ "spec": { "apis": [{ "name": s.api.name() }] } });
    s.bindings()
        .patch(BINDING, &PatchParams::default(), &Patch::Merge(apis))
        .await?;
    Ok(())
}

/// Waits until the Binding has condition `type_` with `status`; returns its reason.
async fn binding_condition(s: &Scenario, type_: &str, status: &str) -> anyhow::Result<String> {
    wait_for(
        &format!("{type_}={status} on the Binding"),
        WAIT,
        || async {
            let b = s.bindings().get(BINDING).await?;
            Ok(b.status
                .iter()
                .flat_map(|st| st.conditions.iter())
                .find(|c| c.type_ == type_ && c.status == status)
                .map(|c| c.reason.clone()))
        },
    )
    .await
}

/// Pins the stack's Connection to the test pair's identities, as a Connection that once
/// connected has them.
async fn pin_connection(s: &Scenario) -> anyhow::Result<()> {
    let uids = json!({ "status": {
        "remoteClusterUID": s.provider_uid,
        "localClusterUID": s.consumer_uid,
    }});
    Api::<Connection>::all(s.consumer.clone())
        .patch_status(&s.name, &PatchParams::default(), &Patch::Merge(uids))
        .await?;
    Ok(())
}

/// Puts `kubeconfig` in the Connection's Secret and pins the Connection, then binds.
async fn bind_with_credentials(s: &Scenario, kubeconfig: &str) -> anyhow::Result<()> {
    ensure_namespace(&s.consumer, SECRET_NAMESPACE).await?;
    put_kubeconfig_secret(&s.consumer, &s.name, kubeconfig).await?;
    pin_connection(s).await?;
    s.export_and_bind().await
}

async fn warning_reasons(consumer: &Client, ns: &str, name: &str) -> anyhow::Result<Vec<String>> {
    Ok(events_for(consumer, Some(ns), name)
        .await?
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter_map(|e| e.reason)
        .collect())
}

#[test]
fn api_dropped_from_a_binding_is_drained_like_a_teardown() -> anyhow::Result<()> {
    let dropped = TestApi::namespaced("strand-drop-b.e2e.kbind.io");
    Scenario::bound("strand-drop")
        .with_api(dropped)
        .run(async |s| {
            let dropped = &s.extra[0];
            let provider = with_instance(s, dropped).await?;
            let consumer = dropped.api(&s.consumer, Some(s.ns()));
            dropped
                .create(&s.consumer, Some(s.ns()), "orphan", json!({}))
                .await?;
            s.create("a", json!({})).await?;
            wait_for("the provider copy", WAIT, || async {
                Ok(provider.get_opt("orphan").await?)
            })
            .await?;
            s.copy("a").await?;
            let orphan = json!({"metadata": {"annotations": {
            DELETION_POLICY_ANNOTATION: DELETION_POLICY_ORPHAN }}});
            merge(&consumer, "orphan", orphan).await?;

            list_only_main_api(s).await?;

            gone(&provider, "w").await?;
            released(&consumer, "w").await?;
            released(&consumer, "orphan").await?;
            anyhow::ensure!(
                provider.get_opt("orphan").await?.is_some(),
                "the Orphan instance's copy was deleted"
            );
            assert_eq!(binding_condition(s, "Drained", "True").await?, "AsExpected");
            // Deleting the released instance completes: nothing holds it any more.
            delete(&consumer, "w").await?;
            gone(&consumer, "w").await?;
            // The API still listed keeps syncing.
            anyhow::ensure!(
                s.copies().get_opt("a").await?.is_some(),
                "copy of the listed API deleted"
            );
            let kept = s.instances().get("a").await?;
            anyhow::ensure!(
                holds_syncer_finalizer(&kept),
                "listed API's instance released"
            );
            Ok(())
        })
}

#[test]
fn dropped_api_without_a_provider_client_is_released_and_reported() -> anyhow::Result<()> {
    let dropped = TestApi::namespaced("strand-noclient-b.e2e.kbind.io");
    Scenario::bound("strand-noclient")
        .with_api(dropped)
        .run(async |s| {
            let dropped = &s.extra[0];
            let provider = with_instance(s, dropped).await?;
            let consumer = dropped.api(&s.consumer, Some(s.ns()));
            // The Connection goes not Ready: nothing is drained for that alone.
            s.disengage();
            binding_condition(s, "Ready", "False").await?;
            stays("the instance and its copy kept", QUIET, || async {
                Ok(holds_syncer_finalizer(&consumer.get("w").await?)
                    && provider.get_opt("w").await?.is_some())
            })
            .await?;

            // The stack's Connection never connected: no client can be built for the drain.
            list_only_main_api(s).await?;
            released(&consumer, "w").await?;
            assert_eq!(
                binding_condition(s, "Drained", "False").await?,
                "NoProviderClient"
            );
            wait_for("a NoProviderClient Warning Event", WAIT, || async {
                let reasons = warning_reasons(&s.consumer, s.ns(), BINDING).await?;
                Ok(reasons
                    .iter()
                    .any(|r| r == "NoProviderClient")
                    .then_some(()))
            })
            .await?;
            // Best-effort: the provider copy remains.
            anyhow::ensure!(provider.get_opt("w").await?.is_some());
            Ok(())
        })
}

#[test]
fn teardown_without_engagement_drains_through_the_connection_credentials() -> anyhow::Result<()> {
    Scenario::unbound("strand-creds").run(async |s| {
        bind_with_credentials(s, &s.pair().provider.admin().kubeconfig_yaml()?).await?;
        let provider = with_instance(s, &s.api).await?;
        // Not engaged any more, as after a restart while the Connection is deleting.
        s.disengage();
        binding_condition(s, "Ready", "False").await?;
        s.unbind().await?;
        gone(&provider, "w").await?;
        released(&s.instances(), "w").await
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teardown_with_unusable_credentials_reports_it() -> anyhow::Result<()> {
    let s = Scenario::unbound("strand-badcreds").start().await?;
    let result = s
        .check(async |s| {
            bind_with_credentials(s, "not: [a kubeconfig").await?;
            let provider = with_instance(s, &s.api).await?;
            s.disengage();
            binding_condition(s, "Ready", "False").await?;
            s.unbind().await?;
            released(&s.instances(), "w").await?;
            let reasons = warning_reasons(&s.consumer, s.ns(), BINDING).await?;
            anyhow::ensure!(
                reasons.iter().any(|r| r == "NoProviderClient"),
                "no NoProviderClient Warning Event; saw {reasons:?}"
            );
            // Best-effort: the copy remains for the operator to remove.
            anyhow::ensure!(provider.get_opt("w").await?.is_some());
            Ok(())
        })
        .await;
    let _ = Api::<Secret>::namespaced(s.consumer.clone(), SECRET_NAMESPACE)
        .delete(&s.name, &DeleteParams::default())
        .await;
    s.finish(result).await
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
        gone(&copies, "w").await?;
        released(&instances, "w").await?;
        wait_for("the Connection gone", WAIT, || async {
            Ok(connections.get_opt(name).await?.is_none().then_some(()))
        })
        .await?;
        restarted.stop().await
    })
    .await
}
