//! Which instances a binding selects (a Binding its namespace, a ClusterBinding every
//! namespace, cluster-scoped instances only through a ClusterBinding, the ClusterBinding
//! winning over a Binding), and when a binding is Ready (exported API, Ready Connection, API
//! not bound through another Connection).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_tests::faults::Sides;
use kbind_tests::syncenv::{
    BINDING, Scenario, TestApi, WAIT, appears, apply_connection, has, holds_syncer_finalizer,
    message, says, wait_for,
};
use konnector::api::names::{
    CONFLICT_ANNOTATION, CONNECTION_ANNOTATION, PROVIDER_CLUSTER_UID_ANNOTATION,
};
use konnector::api::{ConflictPolicy, Connection, PullPolicy};
use konnector::registry::Engagement;
use kube::{Api, ResourceExt};
use serde_json::json;

/// Waits until Binding `name` in the scenario's namespace has `Ready` with `value` and `reason`.
async fn ready_is(s: &Scenario, name: &str, value: &str, reason: &str) -> anyhow::Result<()> {
    wait_for(&format!("{name} Ready={value} {reason}"), WAIT, || async {
        let status = s.bindings().get(name).await?.status;
        Ok(status.filter(|b| has(b, "Ready", value, reason)).map(drop))
    })
    .await
}

#[test]
fn namespaced_binding_selects_only_its_namespace() -> anyhow::Result<()> {
    let scenario = Scenario::bound("sel-ns").namespace("sel-ns-a");
    scenario.run(async |s| {
        let other = Sides::of(s).in_namespace("sel-ns-b");
        other.create("ignored", json!({ "size": 2 })).await?;
        s.create_copied("selected", json!({ "size": 1 })).await?;
        // pullPolicy Bound: the binding installed the consumer CRD, pinned to its Connection.
        let crds = Api::<CustomResourceDefinition>::all(s.consumer.clone());
        let crd = crds.get(&s.api.name()).await?;
        assert_eq!(crd.annotations().get(CONNECTION_ANNOTATION), Some(&s.name));
        ready_is(s, BINDING, "True", "AsExpected").await?;
        // The syncer has been running for the API; the other namespace stays untouched.
        other.never_copied(&["ignored"]).await?;
        let ignored = other.instances().get("ignored").await?;
        assert!(!holds_syncer_finalizer(&ignored), "held by the syncer");
        Ok(())
    })
}

#[test]
fn cluster_binding_selects_every_namespace() -> anyhow::Result<()> {
    let scenario = Scenario::bound("sel-cluster").cluster_binding();
    scenario.run(async |s| {
        for ns in ["sel-cluster-a", "sel-cluster-b"] {
            let side = Sides::of(s).in_namespace(ns);
            side.create("w", json!({ "ns": ns })).await?;
            let copy = appears(&side.copies(), "w").await?;
            assert_eq!(copy.data["spec"], json!({ "ns": ns }));
        }
        Ok(())
    })
}

#[test]
fn cluster_scoped_api_stays_cluster_scoped() -> anyhow::Result<()> {
    let scenario = Scenario::bound("sel-scope").cluster_scoped();
    scenario.cluster_binding().run(async |s| {
        let copy = s.create_copied("global", json!({ "tier": "gold" })).await?;
        assert_eq!(copy.metadata.namespace, None);
        Ok(())
    })
}

#[test]
fn cluster_scoped_instances_need_a_cluster_binding() -> anyhow::Result<()> {
    let probe = TestApi::namespaced("sel-scope-ns-probe.e2e.kbind.io");
    let scenario = Scenario::bound("sel-scope-ns").cluster_scoped();
    scenario.with_api(probe).run(async |s| {
        let probe = Sides {
            api: s.extra[0].clone(),
            ..Sides::of(s)
        };
        s.create("global", json!({})).await?;
        probe.create("probe", json!({})).await?;
        appears(&probe.copies(), "probe").await?;
        Sides::of(s).never_copied(&["global"]).await
    })
}

#[test]
fn binding_of_unexported_api_is_not_ready() -> anyhow::Result<()> {
    let unexported = TestApi::namespaced("ready-unexported-not.e2e.kbind.io");
    let scenario = Scenario::unbound("ready-unexported").with_api(unexported);
    scenario.run(async |s| {
        s.api.export(s).await?;
        s.extra[0].install_on_consumer(&s.consumer, None).await?;
        s.stack.engage(&[&s.api]);
        s.create_binding(&s.new_binding()).await?;
        ready_is(s, BINDING, "False", "APIsNotReady").await?;
        let status = s.bindings().get(BINDING).await?.status;
        let conditions = status.map(|b| b.conditions).unwrap_or_default();
        let ready = conditions.iter().find(|c| c.type_ == "Ready");
        let message = ready.map(|c| c.message.clone()).unwrap_or_default();
        anyhow::ensure!(
            message.contains("ready-unexported-not.e2e.kbind.io (APINotExported)"),
            "the condition names the unexported API and why: {message}"
        );
        // Judged API by API: the exported one still syncs.
        s.create("w", json!({})).await?;
        Sides::of(s).wait_copies(1).await
    })
}

#[test]
fn binding_of_missing_or_unready_connection_is_not_ready() -> anyhow::Result<()> {
    Scenario::unbound("ready-noconn").run(async |s| {
        let missing = "ready-noconn-later";
        s.export().await?;
        let mut binding = s.new_binding();
        binding.spec.connection_ref.name = missing.into();
        s.create_binding(&binding).await?;
        ready_is(s, BINDING, "False", "ConnectionNotFound").await?;
        // The Connection appears but is not Ready (not engaged).
        apply_connection(&s.consumer, missing, PullPolicy::Bound).await?;
        ready_is(s, BINDING, "False", "ConnectionNotReady").await?;
        // It becomes Ready: the binding follows without being touched, and its CRD is
        // installed for it (pullPolicy Bound).
        s.engagements.engage(Engagement {
            connection: missing.into(),
            ..s.engage()
        });
        ready_is(s, BINDING, "True", "AsExpected").await
    })
}

#[test]
fn api_bound_through_two_connections_is_bound_elsewhere() -> anyhow::Result<()> {
    let scenario = Scenario::unbound("ready-twice").pull_policy(PullPolicy::None);
    scenario.run(async |s| {
        s.api.install_on_provider(&s.provider).await?;
        // pullPolicy None: the operator installs the CRD and pins it to the first Connection
        // (kbind binds only CRDs annotated for the binding's Connection).
        s.api
            .install_on_consumer(&s.consumer, Some(&s.name))
            .await?;
        // A second Connection of the same stack (same provider) for the same API.
        let other = "ready-twice-other";
        s.engagements.engage(Engagement {
            connection: other.into(),
            ..s.engage()
        });
        let first = s.binding(s.ns(), "first", &[&s.api], ConflictPolicy::Fail);
        s.create_binding(&first).await?;
        ready_is(s, "first", "True", "AsExpected").await?;
        let mut second = s.binding(s.ns(), "second", &[&s.api], ConflictPolicy::Fail);
        second.spec.connection_ref.name = other.into();
        s.create_binding(&second).await?;
        ready_is(s, "second", "False", "APIBoundElsewhere").await?;
        ready_is(s, "first", "True", "AsExpected").await
    })
}

/// Deletes the scenario's Binding and then its Connection (which nothing finalizes here), as an
/// operator replacing a Connection does; the consumer CRD stays, pinned to the gone Connection.
async fn delete_binding_and_connection(s: &Scenario) -> anyhow::Result<()> {
    s.delete_binding().await?;
    s.binding_gone().await?;
    s.disengage();
    Api::<Connection>::all(s.consumer.clone())
        .delete(&s.name, &Default::default())
        .await?;
    wait_for("the Connection gone", WAIT, || async {
        let gone = Api::<Connection>::all(s.consumer.clone())
            .get_opt(&s.name)
            .await?
            .is_none();
        Ok(gone.then_some(()))
    })
    .await
}

/// Creates and engages Connection `name` reaching the scenario's provider, recorded as cluster
/// `provider_uid`, and a Binding `name` of the scenario's API through it.
async fn bind_through(s: &Scenario, name: &str, provider_uid: &str) -> anyhow::Result<()> {
    apply_connection(&s.consumer, name, PullPolicy::Bound).await?;
    s.stack.engagements.engage(Engagement {
        connection: name.into(),
        provider_uid: provider_uid.into(),
        ..s.stack.engage(&s.apis())
    });
    s.stack.disengage();
    let mut binding = s.binding(s.ns(), name, &[&s.api], ConflictPolicy::Fail);
    binding.spec.connection_ref.name = name.into();
    s.create_binding(&binding).await.map(drop)
}

#[test]
fn a_new_connection_to_the_same_provider_takes_over_a_deleted_connections_api() -> anyhow::Result<()>
{
    Scenario::bound("handover-same").run(async |s| {
        s.create_copied("w", json!({ "size": 1 })).await?;
        // The CRD records the provider cluster it was installed from.
        let crds = Api::<CustomResourceDefinition>::all(s.consumer.clone());
        let crd = crds.get(&s.api.name()).await?;
        let recorded = crd.annotations().get(PROVIDER_CLUSTER_UID_ANNOTATION);
        assert_eq!(recorded, Some(&s.provider_uid));

        delete_binding_and_connection(s).await?;
        let next = format!("{}-next", s.name);
        bind_through(s, &next, &s.provider_uid).await?;
        // No hand edit: the CRD is re-pinned, the binding Ready, and instances sync.
        ready_is(s, &next, "True", "AsExpected").await?;
        let crd = crds.get(&s.api.name()).await?;
        assert_eq!(crd.annotations().get(CONNECTION_ANNOTATION), Some(&next));
        s.create_copied("w2", json!({ "size": 2 })).await?;
        appears(&s.copies(), "w").await.map(drop)
    })
}

#[test]
fn a_connection_to_another_provider_is_told_how_to_take_over_a_deleted_connections_api()
-> anyhow::Result<()> {
    Scenario::bound("handover-other").run(async |s| {
        s.create_copied("w", json!({ "size": 1 })).await?;
        delete_binding_and_connection(s).await?;
        let other = format!("{}-other", s.name);
        bind_through(s, &other, "another-provider-cluster").await?;
        ready_is(s, &other, "False", "PinnedConnectionGone").await?;
        let status = s.bindings().get(&other).await?.status.unwrap_or_default();
        says(
            message(&status, "Ready"),
            &[
                &format!("pinned to Connection {}, which no longer exists", s.name),
                &format!("core.kbind.io/connection={other} --overwrite"),
            ],
        );
        // Nothing was re-pinned.
        let crds = Api::<CustomResourceDefinition>::all(s.consumer.clone());
        let crd = crds.get(&s.api.name()).await?;
        assert_eq!(crd.annotations().get(CONNECTION_ANNOTATION), Some(&s.name));
        Ok(())
    })
}

#[test]
fn cluster_binding_wins_over_binding_for_the_same_api() -> anyhow::Result<()> {
    let scenario = Scenario::unbound("sel-wins").cluster_binding();
    scenario.run(async |s| {
        s.export().await?;
        s.engage();
        // The Binding would adopt; the ClusterBinding says Fail and must win.
        let adopting = s.binding(s.ns(), "adopting", &[&s.api], ConflictPolicy::Adopt);
        s.create_binding(&adopting).await?;
        s.bind().await?;
        let foreign = json!({ "foreign": true });
        s.api
            .create(&s.provider, Some(s.ns()), "taken", foreign.clone())
            .await?;
        s.create("taken", json!({ "mine": true })).await?;
        let conflict = wait_for("a conflict (Fail policy)", WAIT, || async {
            let obj = s.instances().get("taken").await?;
            Ok(obj.annotations().get(CONFLICT_ANNOTATION).cloned())
        })
        .await?;
        assert!(conflict.starts_with("ForeignObjectExists"), "{conflict}");
        s.copy_with_spec("taken", foreign).await?;
        Ok(())
    })
}
