//! Which instances a binding selects (a Binding its namespace, a ClusterBinding every
//! namespace, cluster-scoped instances only through a ClusterBinding, the ClusterBinding
//! winning over a Binding), and when a binding is Ready (exported API, Ready Connection, API
//! not bound through another Connection).

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_tests::syncenv::{
    BINDING, Scenario, TestApi, WAIT, appears, apply_connection, ensure_namespace, has,
    holds_syncer_finalizer, stays, wait_for,
};
use konnector::api::names::{CONFLICT_ANNOTATION, CONNECTION_ANNOTATION};
use konnector::api::{ConflictPolicy, PullPolicy, Reason};
use konnector::registry::Engagement;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::json;

/// Waits until Binding `name` in the scenario's namespace is Ready with `status` and `reason`.
async fn ready_is(s: &Scenario, name: &str, status: &str, reason: Reason) -> anyhow::Result<()> {
    let what = format!("{name} Ready={status} {}", reason.as_str());
    wait_for(&what, WAIT, || async {
        let b = s.bindings().get(name).await?.status;
        Ok(b.filter(|b| has(b, "Ready", status, reason.as_str()))
            .map(|_| ()))
    })
    .await
}

/// Fails if `name` reaches the provider (in `ns`) within a few seconds.
async fn stays_consumer_only(s: &Scenario, ns: &str, name: &str) -> anyhow::Result<()> {
    let copies = s.api.api(&s.provider, Some(ns));
    stays(
        &format!("{name} consumer-only"),
        Duration::from_secs(3),
        || async { Ok(copies.get_opt(name).await?.is_none()) },
    )
    .await
}

#[test]
fn namespaced_binding_selects_only_its_namespace() -> anyhow::Result<()> {
    Scenario::bound("sel-ns")
        .namespace("sel-ns-a")
        .run(async |s| {
            s.create("selected", json!({ "size": 1 })).await?;
            let other = Some("sel-ns-b");
            s.api
                .create(&s.consumer, other, "ignored", json!({ "size": 2 }))
                .await?;
            let copy = s.copy("selected").await?;
            assert_eq!(copy.data["spec"], json!({ "size": 1 }));
            // pullPolicy Bound: the binding installed the consumer CRD, pinned to its Connection.
            let crds = Api::<CustomResourceDefinition>::all(s.consumer.clone());
            let crd = crds.get(&s.api.name()).await?;
            assert_eq!(
                crd.annotations().get(CONNECTION_ANNOTATION),
                Some(&s.name),
                "pinned"
            );
            ready_is(s, BINDING, "True", Reason::AsExpected).await?;
            // The syncer has been running for the API; the other namespace stays untouched.
            stays_consumer_only(s, "sel-ns-b", "ignored").await?;
            let ignored = s
                .api
                .api(&s.consumer, Some("sel-ns-b"))
                .get("ignored")
                .await?;
            anyhow::ensure!(
                !holds_syncer_finalizer(&ignored),
                "the other namespace's instance held"
            );
            Ok(())
        })
}

#[test]
fn cluster_binding_selects_every_namespace() -> anyhow::Result<()> {
    Scenario::bound("sel-cluster")
        .cluster_binding()
        .run(async |s| {
            let namespaces = ["sel-cluster-a", "sel-cluster-b"];
            for ns in namespaces {
                s.api
                    .create(&s.consumer, Some(ns), "w", json!({ "ns": ns }))
                    .await?;
            }
            for ns in namespaces {
                let copy = appears(&s.api.api(&s.provider, Some(ns)), "w").await?;
                assert_eq!(copy.data["spec"], json!({ "ns": ns }));
            }
            Ok(())
        })
}

#[test]
fn cluster_scoped_api_stays_cluster_scoped() -> anyhow::Result<()> {
    let scenario = Scenario::bound("sel-scope")
        .cluster_scoped()
        .cluster_binding();
    scenario.run(async |s| {
        s.create("global", json!({ "tier": "gold" })).await?;
        let copy = s.copy("global").await?;
        assert_eq!(copy.metadata.namespace, None);
        assert_eq!(copy.data["spec"], json!({ "tier": "gold" }));
        Ok(())
    })
}

#[test]
fn cluster_scoped_instances_need_a_cluster_binding() -> anyhow::Result<()> {
    let probe = TestApi::namespaced("sel-scope-ns-probe.e2e.kbind.io");
    let scenario = Scenario::bound("sel-scope-ns")
        .cluster_scoped()
        .with_api(probe);
    scenario.run(async |s| {
        let probe = &s.extra[0];
        s.create("global", json!({})).await?;
        probe
            .create(&s.consumer, Some(s.ns()), "probe", json!({}))
            .await?;
        appears(&probe.api(&s.provider, Some(s.ns())), "probe").await?;
        stays_consumer_only(s, s.ns(), "global").await
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
        ready_is(s, BINDING, "False", Reason::APINotExported).await?;
        // A not-Ready binding selects nothing, not even its exported API.
        s.create("w", json!({})).await?;
        stays_consumer_only(s, s.ns(), "w").await
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
        ready_is(s, BINDING, "False", Reason::ConnectionNotFound).await?;
        // The Connection appears but is not Ready (not engaged).
        apply_connection(&s.consumer, missing, PullPolicy::Bound).await?;
        ready_is(s, BINDING, "False", Reason::ConnectionNotReady).await?;
        // It becomes Ready: the binding follows without being touched, and its CRD is
        // installed for it (pullPolicy Bound).
        s.engagements.engage(Engagement {
            connection: missing.into(),
            ..s.engage()
        });
        ready_is(s, BINDING, "True", Reason::AsExpected).await
    })
}

#[test]
fn api_bound_through_two_connections_is_bound_elsewhere() -> anyhow::Result<()> {
    let scenario = Scenario::unbound("ready-twice").pull_policy(PullPolicy::None);
    scenario.run(async |s| {
        let other = "ready-twice-other";
        s.api.install_on_provider(&s.provider).await?;
        // pullPolicy None: the operator installs the CRD and pins it to the first Connection
        // (kbind binds only CRDs annotated for the binding's Connection).
        s.api
            .install_on_consumer(&s.consumer, Some(&s.name))
            .await?;
        // A second Connection of the same stack (same provider) for the same API.
        s.engagements.engage(Engagement {
            connection: other.into(),
            ..s.engage()
        });
        s.create_binding(&s.binding(s.ns(), "first", &[&s.api], ConflictPolicy::Fail))
            .await?;
        ready_is(s, "first", "True", Reason::AsExpected).await?;
        let mut second = s.binding(s.ns(), "second", &[&s.api], ConflictPolicy::Fail);
        second.spec.connection_ref.name = other.into();
        s.create_binding(&second).await?;
        ready_is(s, "second", "False", Reason::APIBoundElsewhere).await?;
        ready_is(s, "first", "True", Reason::AsExpected).await
    })
}

#[test]
fn cluster_binding_wins_over_binding_for_the_same_api() -> anyhow::Result<()> {
    Scenario::unbound("sel-wins")
        .cluster_binding()
        .run(async |s| {
            s.export().await?;
            s.engage();
            // The Binding would adopt; the ClusterBinding says Fail and must win.
            s.create_binding(&s.binding(s.ns(), "adopting", &[&s.api], ConflictPolicy::Adopt))
                .await?;
            s.bind().await?;
            ensure_namespace(&s.provider, s.ns()).await?;
            let foreign = s
                .api
                .object(Some(s.ns()), "taken", json!({ "foreign": true }));
            s.copies().create(&PostParams::default(), &foreign).await?;
            s.create("taken", json!({ "mine": true })).await?;
            let conflict = wait_for("a conflict (Fail policy)", WAIT, || async {
                let obj = s.instances().get("taken").await?;
                Ok(obj.annotations().get(CONFLICT_ANNOTATION).cloned())
            })
            .await?;
            assert!(conflict.starts_with("ForeignObjectExists"), "{conflict}");
            let foreign = s.copies().get("taken").await?;
            assert_eq!(foreign.data["spec"], json!({ "foreign": true }));
            Ok(())
        })
}
