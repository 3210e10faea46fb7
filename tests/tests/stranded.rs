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
    BINDING, Scenario, TestApi, WAIT, appears, delete, ensure_namespace, gone,
    holds_syncer_finalizer, merge, stays, wait_for,
};
use kbind_tests::testenv::ClusterPair;
use konnector::api::names::{DELETION_POLICY_ANNOTATION, DELETION_POLICY_ORPHAN};
use konnector::api::{Binding, Connection, SchemaPolicy, SchemaSource};
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

/// How long a "nothing happens" check watches.
const QUIET: Duration = Duration::from_secs(5);

/// Waits until instance `name` no longer holds the syncer's finalizer.
async fn released(api: &Api<DynamicObject>, name: &str) -> anyhow::Result<()> {
    wait_for(&format!("{name} released"), WAIT, || async {
        Ok((!holds_syncer_finalizer(&api.get(name).await?)).then_some(()))
    })
    .await
}

/// Creates instance `w` of `api` and waits for its provider copy; returns the copies' API.
async fn with_instance(s: &Scenario, api: &TestApi) -> anyhow::Result<Api<DynamicObject>> {
    api.create(&s.consumer, Some(s.ns()), "w", json!({}))
        .await?;
    let copies = api.api(&s.provider, Some(s.ns()));
    appears(&copies, "w").await?;
    Ok(copies)
}

/// Lists only the scenario's main API in its Binding.
async fn list_only_main_api(s: &Scenario) -> anyhow::Result<()> {
    let apis = json!({ "spec": { "apis": [{ "name": s.api.name() }] } });
    let pp = PatchParams::default();
    s.bindings()
        .patch(BINDING, &pp, &Patch::Merge(apis))
        .await?;
    Ok(())
}

/// Whether the binding has had a Warning Event of `reason`.
async fn warned(s: &Scenario, reason: &str) -> anyhow::Result<bool> {
    let events = s.binding_events().await?;
    Ok(events
        .iter()
        .any(|e| e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some(reason)))
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
            appears(&provider, "orphan").await?;
            s.copy("a").await?;
            let orphan = json!({ "metadata": { "annotations": {
                DELETION_POLICY_ANNOTATION: DELETION_POLICY_ORPHAN } } });
            merge(&consumer, "orphan", orphan).await?;

            list_only_main_api(s).await?;

            gone(&provider, "w").await?;
            released(&consumer, "w").await?;
            released(&consumer, "orphan").await?;
            anyhow::ensure!(
                provider.get_opt("orphan").await?.is_some(),
                "the Orphan instance's copy was deleted"
            );
            s.binding_has("Drained", "True", "AsExpected").await?;
            // Deleting the released instance completes: nothing holds it any more.
            delete(&consumer, "w").await?;
            gone(&consumer, "w").await?;
            // The API still listed keeps syncing.
            anyhow::ensure!(
                s.copies().get_opt("a").await?.is_some(),
                "listed API's copy deleted"
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
            s.binding_has("Ready", "False", "ConnectionNotReady")
                .await?;
            stays("the instance and its copy kept", QUIET, || async {
                Ok(holds_syncer_finalizer(&consumer.get("w").await?)
                    && provider.get_opt("w").await?.is_some())
            })
            .await?;

            // The stack's Connection never connected: no client can be built for the drain.
            list_only_main_api(s).await?;
            released(&consumer, "w").await?;
            s.binding_has("Drained", "False", "NoProviderClient")
                .await?;
            s.binding_event("Warning", "NoProviderClient").await?;
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
        s.binding_has("Ready", "False", "ConnectionNotReady")
            .await?;
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
            s.binding_has("Ready", "False", "ConnectionNotReady")
                .await?;
            s.unbind().await?;
            released(&s.instances(), "w").await?;
            anyhow::ensure!(
                warned(s, "NoProviderClient").await?,
                "no NoProviderClient Warning"
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
        let (name, ns) = ("provider", "restarted");
        let schema = SchemaPolicy {
            source: SchemaSource::Crd,
            ..SchemaPolicy::default()
        };
        connect(&consumer, &pair.provider, name, schema, false).await?;
        wait_connection(&consumer, name, "Ready", |c| {
            has_condition(c, "Ready", "True", "AsExpected")
        })
        .await?;
        ensure_namespace(&consumer, ns).await?;
        let binding = json!({
            "metadata": { "name": "b" },
            "spec": { "connectionRef": { "name": name }, "apis": [{ "name": api.name() }] },
        });
        let bindings = Api::<Binding>::namespaced(consumer.clone(), ns);
        bindings
            .create(&PostParams::default(), &serde_json::from_value(binding)?)
            .await?;
        let instances = api.api(&consumer, Some(ns));
        let instance = api.object(Some(ns), "w", json!({}));
        wait_for("the instance created", WAIT, || async {
            Ok(instances
                .create(&PostParams::default(), &instance)
                .await
                .ok())
        })
        .await?;
        let copies = api.api(&provider, Some(ns));
        appears(&copies, "w").await?;

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
        let waiting = bindings
            .get("b")
            .await?
            .metadata
            .deletion_timestamp
            .is_some();
        anyhow::ensure!(waiting, "the Binding should wait for its cleanup");
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
