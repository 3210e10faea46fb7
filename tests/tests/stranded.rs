//! Nothing stranded: instances of an API a binding stops listing are drained like a binding
//! teardown drains them, and a binding's drain reaches the provider even when its Connection
//! is not engaged (a deleting Connection after a konnector restart), or says it could not. A
//! drain whose provider identity may not read a copy keeps the finalizer until it may.
//!
//! Scenario tests share the pair; the restart test runs the whole manager on a pair of its own.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kbind_tests::access::grant;
use kbind_tests::faults::Sides;
use kbind_tests::fixtures::{
    SECRET_NAMESPACE, has_condition, put_kubeconfig_secret, start_konnector, wait_connection,
};
use kbind_tests::syncenv::remains::Left::{Gone, Kept, Released};
use kbind_tests::syncenv::remains::{delete_gone, kind, wait_left};
use kbind_tests::syncenv::{
    BINDING, Scenario, ScenarioBuilder, TestApi, appears, ensure_namespace, holds_syncer_finalizer,
    merge, message, says, stays,
};
use kbind_tests::testenv::ClusterPair;
use konnector::api::names::{DELETION_POLICY_ANNOTATION, DELETION_POLICY_ORPHAN};
use konnector::api::{Binding, Connection};
use konnector::registry::Engagement;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

/// How long a "nothing happens" check watches.
const QUIET: Duration = Duration::from_secs(5);

/// Creates instances `names` of `api` and waits for their provider copies.
async fn with_instances(s: &Scenario, api: &TestApi, names: &[&str]) -> anyhow::Result<()> {
    for name in names {
        api.create(&s.consumer, Some(s.ns()), name, json!({}))
            .await?;
        appears(&api.api(&s.provider, Some(s.ns())), name).await?;
    }
    Ok(())
}

/// Lists only the scenario's main API in its Binding.
async fn list_only_main_api(s: &Scenario) -> anyhow::Result<()> {
    let bindings = Api::namespaced_with(s.consumer.clone(), s.ns(), &kind::<Binding>());
    let apis = json!({ "spec": { "apis": [{ "name": s.api.name() }] } });
    merge(&bindings, BINDING, apis).await.map(drop)
}

/// Disengages the Connection and waits until the binding says so.
async fn disengage(s: &Scenario) -> anyhow::Result<()> {
    s.disengage();
    s.binding_has("Ready", "False", "ConnectionNotReady")
        .await?;
    Ok(())
}

/// A bound scenario with a second API (`<name>-b`), for the test to drop from the Binding.
fn dropping(name: &str) -> ScenarioBuilder {
    Scenario::bound(name).with_api(TestApi::namespaced(&format!("{name}-b.e2e.kbind.io")))
}

/// Binds with `kubeconfig` in the Connection's Secret and the Connection pinned to the test
/// pair's identities (as a Connection that once connected has them), copies an instance `w`,
/// then disengages the Connection, as after a restart while it is deleting, and unbinds.
async fn unbind_disengaged(s: &Scenario, kubeconfig: &str) -> anyhow::Result<()> {
    ensure_namespace(&s.consumer, SECRET_NAMESPACE).await?;
    put_kubeconfig_secret(&s.consumer, &s.name, kubeconfig).await?;
    let uids = json!({ "status": {
        "remoteClusterUID": s.provider_uid,
        "localClusterUID": s.consumer_uid,
    }});
    Api::<Connection>::all(s.consumer.clone())
        .patch_status(&s.name, &PatchParams::default(), &Patch::Merge(uids))
        .await?;
    s.export_and_bind().await?;
    with_instances(s, &s.api, &["w"]).await?;
    disengage(s).await?;
    s.unbind().await
}

#[test]
fn api_dropped_from_a_binding_is_drained_like_a_teardown() -> anyhow::Result<()> {
    dropping("strand-drop").run(async |s| {
        let dropped = &s.extra[0];
        with_instances(s, dropped, &["w", "orphan"]).await?;
        with_instances(s, &s.api, &["a"]).await?;
        let orphan = json!({ "metadata": { "annotations": {
            DELETION_POLICY_ANNOTATION: DELETION_POLICY_ORPHAN } } });
        merge(&dropped.api(&s.consumer, Some(s.ns())), "orphan", orphan).await?;

        list_only_main_api(s).await?;

        let (c, p, kind) = (&s.consumer, &s.provider, dropped.resource());
        wait_left(&[
            (p, kind.clone(), "strand-drop/w", Gone),
            (c, kind.clone(), "strand-drop/w", Released),
            (c, kind.clone(), "strand-drop/orphan", Released),
            (p, kind.clone(), "strand-drop/orphan", Kept),
            // The API still listed keeps syncing.
            (p, s.api.resource(), "strand-drop/a", Kept),
        ])
        .await?;
        s.binding_has("Drained", "True", "AsExpected").await?;
        // Deleting the released instance completes: nothing holds it any more.
        delete_gone(c, kind, "strand-drop/w").await?;
        assert!(holds_syncer_finalizer(&s.instances().get("a").await?));
        Ok(())
    })
}

#[test]
fn drained_reports_a_copy_whose_deletion_a_provider_finalizer_holds() -> anyhow::Result<()> {
    dropping("strand-held").run(async |s| {
        let dropped = &s.extra[0];
        with_instances(s, dropped, &["held", "w"]).await?;
        // A provider-side controller holds its own finalizer on one copy.
        let copies = dropped.api(&s.provider, Some(s.ns()));
        let hold = json!({ "metadata": { "finalizers": ["provider.example.org/hold"] } });
        merge(&copies, "held", hold).await?;

        list_only_main_api(s).await?;
        // Binding cleanup does not wait for provider finalizers, and says what it left.
        let status = s
            .binding_has("Drained", "True", "DeletionRequested")
            .await?;
        says(
            message(&status, "Drained"),
            &[
                "1 owned copies deleted",
                "1 whose deletion was requested still on the provider",
                "first: strand-held/held",
            ],
        );
        let held = copies.get("held").await?;
        assert!(
            held.metadata.deletion_timestamp.is_some(),
            "the held copy is terminating"
        );
        let (c, kind) = (&s.consumer, dropped.resource());
        wait_left(&[(c, kind, "strand-held/held", Released)]).await?;
        // The provider's controller finishes; the copy goes.
        merge(
            &copies,
            "held",
            json!({ "metadata": { "finalizers": null } }),
        )
        .await?;
        kbind_tests::syncenv::gone(&copies, "held").await
    })
}

#[test]
fn dropped_api_without_a_provider_client_is_released_and_reported() -> anyhow::Result<()> {
    dropping("strand-noclient").run(async |s| {
        let dropped = &s.extra[0];
        with_instances(s, dropped, &["w"]).await?;
        let consumer = dropped.api(&s.consumer, Some(s.ns()));
        let provider = dropped.api(&s.provider, Some(s.ns()));
        // The Connection goes not Ready: nothing is drained for that alone.
        disengage(s).await?;
        stays("the instance and its copy kept", QUIET, || async {
            Ok(holds_syncer_finalizer(&consumer.get("w").await?)
                && provider.get_opt("w").await?.is_some())
        })
        .await?;

        // The stack's Connection never connected: no client can be built for the drain.
        list_only_main_api(s).await?;
        let (c, p, kind) = (&s.consumer, &s.provider, dropped.resource());
        // Best-effort: the provider copy remains.
        let rows = [
            (c, kind.clone(), "strand-noclient/w", Released),
            (p, kind, "strand-noclient/w", Kept),
        ];
        wait_left(&rows).await?;
        s.binding_has("Drained", "False", "NoProviderClient")
            .await?;
        s.binding_event("Warning", "NoProviderClient").await?;
        Ok(())
    })
}

#[test]
fn teardown_without_engagement_drains_through_the_connection_credentials() -> anyhow::Result<()> {
    Scenario::unbound("strand-creds").run(async |s| {
        unbind_disengaged(s, &s.pair().provider.admin().kubeconfig_yaml()?).await?;
        let (c, p, kind) = (&s.consumer, &s.provider, s.api.resource());
        wait_left(&[
            (p, kind.clone(), "strand-creds/w", Gone),
            (c, kind, "strand-creds/w", Released),
        ])
        .await
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teardown_with_unusable_credentials_reports_it() -> anyhow::Result<()> {
    let s = Scenario::unbound("strand-badcreds").start().await?;
    let body = async |s: &Scenario| {
        unbind_disengaged(s, "not: [a kubeconfig").await?;
        let (c, p, kind) = (&s.consumer, &s.provider, s.api.resource());
        // Best-effort: the copy remains for the operator to remove.
        wait_left(&[
            (c, kind.clone(), "strand-badcreds/w", Released),
            (p, kind, "strand-badcreds/w", Kept),
        ])
        .await?;
        s.binding_event("Warning", "NoProviderClient").await?;
        Ok(())
    };
    let secret = format!("{SECRET_NAMESPACE}/strand-badcreds");
    let forget_secret = async |s: &Scenario| {
        let _ = delete_gone(&s.consumer, kind::<Secret>(), &secret).await;
    };
    s.run_then(body, forget_secret).await
}

/// A konnector restarted while a Connection is being deleted still deletes the provider
/// copies of the bindings it then tears down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_mid_teardown_still_deletes_provider_copies() -> anyhow::Result<()> {
    let pair = tokio::task::spawn_blocking(ClusterPair::start_private).await??;
    let konnector = start_konnector(&pair.consumer)?;
    pair.diagnose(async {
        let api = TestApi::namespaced("restart.strand.kbind.io");
        let (name, ns) = ("provider", "restarted");
        let sides = Sides::on(&pair, api, ns).await?;
        sides.connect(&pair.provider, name).await?;
        sides.create("w", json!({})).await?;
        appears(&sides.copies(), "w").await?;
        let (c, p) = (&sides.consumer, &sides.provider);

        // The Connection is deleted and waits for its Binding ...
        let dp = DeleteParams::default();
        Api::<Connection>::all(c.clone()).delete(name, &dp).await?;
        wait_connection(c, name, "DrainingBindings", |c| {
            has_condition(c, "Ready", "False", "DrainingBindings")
        })
        .await?;
        // ... the konnector stops, the Binding is deleted meanwhile, and a new konnector
        // starts: it never engages the deleting Connection.
        konnector.stop().await?;
        let bindings = Api::<Binding>::namespaced(c.clone(), ns);
        bindings.delete("widgets", &dp).await?;
        let waiting = bindings.get("widgets").await?.metadata.deletion_timestamp;
        anyhow::ensure!(waiting.is_some(), "the Binding should wait for its cleanup");
        let restarted = start_konnector(&pair.consumer)?;

        wait_left(&[
            (c, kind::<Binding>(), "restarted/widgets", Gone),
            (p, sides.api.resource(), "restarted/w", Gone),
            (c, sides.api.resource(), "restarted/w", Released),
            (c, kind::<Connection>(), name, Gone),
        ])
        .await?;
        restarted.stop().await
    })
    .await
}

#[test]
fn drain_refused_a_read_keeps_finalizers_until_granted() -> anyhow::Result<()> {
    dropping("strand-noget").run(async |s| {
        let dropped = &s.extra[0];
        // The provider identity may do everything the sync needs on the dropped API but read
        // one object: a drain cannot check whose a copy is.
        let user = s.pair().provider.mint_user("strand-noget", &[])?;
        let no_get = json!([
            {"apiGroups": [s.api.group.clone()], "resources": ["*"], "verbs": ["*"]},
            {"apiGroups": [dropped.group.clone()], "resources": ["widgets", "widgets/status"],
             "verbs": ["list", "watch", "create", "update", "patch", "delete"]},
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch", "create"]}
        ]);
        grant(&s.provider, None, "strand-noget", no_get, ("User", "strand-noget")).await?;
        // A new credentials digest: the registry keeps the engaged client for the same one.
        s.engagements.engage(Engagement {
            provider: user.client().await?,
            credentials_digest: "strand-noget".into(),
            ..s.engage()
        });
        with_instances(s, dropped, &["w"]).await?;

        list_only_main_api(s).await?;
        s.binding_has("Drained", "False", "Forbidden").await?;
        let (consumer, provider) = (dropped.api(&s.consumer, Some(s.ns())), dropped.api(&s.provider, Some(s.ns())));
        stays("the instance keeps its finalizer and its copy", QUIET, || async {
            Ok(holds_syncer_finalizer(&consumer.get("w").await?)
                && provider.get_opt("w").await?.is_some())
        })
        .await?;

        let get = json!([{"apiGroups": [dropped.group.clone()], "resources": ["widgets"], "verbs": ["get"]}]);
        grant(&s.provider, None, "strand-noget-get", get, ("User", "strand-noget")).await?;
        // Any change to the binding retries at once, as the README tells operators.
        let bindings = Api::namespaced_with(s.consumer.clone(), s.ns(), &kind::<Binding>());
        let nudge = json!({"metadata": {"annotations": {"example.org/retry": "1"}}});
        merge(&bindings, BINDING, nudge).await?;
        let (c, p, kind) = (&s.consumer, &s.provider, dropped.resource());
        wait_left(&[
            (p, kind.clone(), "strand-noget/w", Gone),
            (c, kind, "strand-noget/w", Released),
        ])
        .await?;
        s.binding_has("Drained", "True", "AsExpected").await?;
        Ok(())
    })
}
