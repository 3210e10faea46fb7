//! Which instances a binding selects, and when a binding is Ready (required: "namespaced vs
//! cluster binding selection; cluster-scoped API"; readiness reasons).

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_tests::syncenv::{Stack, TestApi, apply_connection, stays, wait_for};
use kbind_tests::testenv::shared_pair;
use konnector::api::PullPolicy;
use konnector::api::names::{CONNECTION_ANNOTATION, SYNCER_FINALIZER};
use konnector::api::{Binding, ClusterBinding, ConditionType, ConflictPolicy, Reason};
use konnector::registry::Engagement;
use kube::api::DynamicObject;
use kube::{Api, ResourceExt};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

fn ready_reason(
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
) -> Option<(String, String)> {
    conditions
        .iter()
        .find(|c| c.type_ == ConditionType::Ready.as_str())
        .map(|c| (c.status.clone(), c.reason.clone()))
}

async fn binding_ready(
    stack: &Stack,
    ns: &str,
    name: &str,
) -> anyhow::Result<Option<(String, String)>> {
    let b = Api::<Binding>::namespaced(stack.consumer.clone(), ns)
        .get(name)
        .await?;
    Ok(b.status.and_then(|s| ready_reason(&s.conditions)))
}

async fn on_provider(
    stack: &Stack,
    api: &TestApi,
    ns: Option<&str>,
    name: &str,
) -> anyhow::Result<Option<DynamicObject>> {
    Ok(api.api(&stack.provider, ns).get_opt(name).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaced_binding_selects_only_its_namespace() -> anyhow::Result<()> {
    let pair = shared_pair()?;
    let stack = Stack::start(pair, "sel-ns").await?;
    let api = TestApi::namespaced("sel-ns.e2e.kbind.io");
    let result = pair
        .diagnose(stack.diagnose(&[&api], async {
            api.export(&stack).await?;
            stack.engage(&[&api]);
            stack
                .create_ready_binding(&stack.binding(
                    "sel-ns-a",
                    "widgets",
                    &[&api],
                    ConflictPolicy::Fail,
                ))
                .await?;
            api.create(
                &stack.consumer,
                Some("sel-ns-a"),
                "selected",
                json!({ "size": 1 }),
            )
            .await?;
            api.create(
                &stack.consumer,
                Some("sel-ns-b"),
                "ignored",
                json!({ "size": 2 }),
            )
            .await?;

            let copy = wait_for("the selected instance on the provider", WAIT, || async {
                on_provider(&stack, &api, Some("sel-ns-a"), "selected").await
            })
            .await?;
            assert_eq!(copy.data["spec"], json!({ "size": 1 }));
            // pullPolicy Bound: the binding installed the consumer CRD, pinned to its Connection.
            let crd = Api::<CustomResourceDefinition>::all(stack.consumer.clone())
                .get(&api.name())
                .await?;
            assert_eq!(
                crd.annotations().get(CONNECTION_ANNOTATION),
                Some(&stack.name),
                "consumer CRD pinned to the Connection"
            );
            assert_eq!(
                binding_ready(&stack, "sel-ns-a", "widgets").await?,
                Some(("True".into(), "AsExpected".into()))
            );
            // The syncer has been running for the API; the other namespace stays untouched.
            stays(
                "the unselected instance to stay consumer-only",
                Duration::from_secs(3),
                || async {
                    let absent = on_provider(&stack, &api, Some("sel-ns-b"), "ignored")
                        .await?
                        .is_none();
                    let ignored = api
                        .api(&stack.consumer, Some("sel-ns-b"))
                        .get("ignored")
                        .await?;
                    Ok(absent && !ignored.finalizers().iter().any(|f| f == SYNCER_FINALIZER))
                },
            )
            .await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_binding_selects_every_namespace() -> anyhow::Result<()> {
    let pair = shared_pair()?;
    let stack = Stack::start(pair, "sel-cluster").await?;
    let api = TestApi::namespaced("sel-cluster.e2e.kbind.io");
    let result = pair
        .diagnose(stack.diagnose(&[&api], async {
            api.export(&stack).await?;
            stack.engage(&[&api]);
            stack
                .create_ready_cluster_binding(&stack.cluster_binding(
                    "sel-cluster",
                    &[&api],
                    ConflictPolicy::Fail,
                ))
                .await?;
            for ns in ["sel-cluster-a", "sel-cluster-b"] {
                api.create(&stack.consumer, Some(ns), "w", json!({ "ns": ns }))
                    .await?;
            }
            for ns in ["sel-cluster-a", "sel-cluster-b"] {
                let copy = wait_for(
                    &format!("the instance in {ns} on the provider"),
                    WAIT,
                    || async { on_provider(&stack, &api, Some(ns), "w").await },
                )
                .await?;
                assert_eq!(copy.data["spec"], json!({ "ns": ns }));
            }
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_scoped_api_stays_cluster_scoped() -> anyhow::Result<()> {
    let pair = shared_pair()?;
    let stack = Stack::start(pair, "sel-scope").await?;
    let api = TestApi::cluster_scoped("sel-scope.e2e.kbind.io");
    let result = pair
        .diagnose(stack.diagnose(&[&api], async {
            api.export(&stack).await?;
            stack.engage(&[&api]);
            stack
                .create_ready_cluster_binding(&stack.cluster_binding(
                    "sel-scope",
                    &[&api],
                    ConflictPolicy::Fail,
                ))
                .await?;
            api.create(&stack.consumer, None, "global", json!({ "tier": "gold" }))
                .await?;
            let copy = wait_for(
                "the cluster-scoped instance on the provider",
                WAIT,
                || async { on_provider(&stack, &api, None, "global").await },
            )
            .await?;
            assert_eq!(copy.metadata.namespace, None);
            assert_eq!(copy.data["spec"], json!({ "tier": "gold" }));
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_scoped_instances_need_a_cluster_binding() -> anyhow::Result<()> {
    let pair = shared_pair()?;
    let stack = Stack::start(pair, "sel-scope-ns").await?;
    let api = TestApi::cluster_scoped("sel-scope-ns.e2e.kbind.io");
    let probe = TestApi::namespaced("sel-scope-ns-probe.e2e.kbind.io");
    let result = pair
        .diagnose(stack.diagnose(&[&api, &probe], async {
            api.export(&stack).await?;
            probe.export(&stack).await?;
            stack.engage(&[&api, &probe]);
            stack
                .create_ready_binding(&stack.binding(
                    "sel-scope-ns",
                    "widgets",
                    &[&api, &probe],
                    ConflictPolicy::Fail,
                ))
                .await?;
            api.create(&stack.consumer, None, "global", json!({}))
                .await?;
            probe
                .create(&stack.consumer, Some("sel-scope-ns"), "probe", json!({}))
                .await?;
            wait_for("the namespaced probe on the provider", WAIT, || async {
                on_provider(&stack, &probe, Some("sel-scope-ns"), "probe").await
            })
            .await?;
            stays(
                "the cluster-scoped instance to stay consumer-only",
                Duration::from_secs(3),
                || async { Ok(on_provider(&stack, &api, None, "global").await?.is_none()) },
            )
            .await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_of_unexported_api_is_not_ready() -> anyhow::Result<()> {
    let pair = shared_pair()?;
    let stack = Stack::start(pair, "ready-unexported").await?;
    let api = TestApi::namespaced("ready-unexported.e2e.kbind.io");
    let unexported = TestApi::namespaced("ready-unexported-not.e2e.kbind.io");
    let result = pair
        .diagnose(stack.diagnose(&[&api], async {
            api.export(&stack).await?;
            unexported
                .install_on_consumer(&stack.consumer, None)
                .await?;
            stack.engage(&[&api]);
            stack
                .create_binding(&stack.binding(
                    "ready-unexported",
                    "widgets",
                    &[&api, &unexported],
                    ConflictPolicy::Fail,
                ))
                .await?;
            let reason = wait_for("Ready=False APINotExported", WAIT, || async {
                Ok(binding_ready(&stack, "ready-unexported", "widgets")
                    .await?
                    .filter(|(_, r)| r == Reason::APINotExported.as_str()))
            })
            .await?;
            assert_eq!(reason.0, "False");
            // A not-Ready binding selects nothing, not even its exported API.
            api.create(&stack.consumer, Some("ready-unexported"), "w", json!({}))
                .await?;
            stays(
                "nothing to reach the provider",
                Duration::from_secs(3),
                || async {
                    Ok(on_provider(&stack, &api, Some("ready-unexported"), "w")
                        .await?
                        .is_none())
                },
            )
            .await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_of_missing_or_unready_connection_is_not_ready() -> anyhow::Result<()> {
    let pair = shared_pair()?;
    let stack = Stack::start(pair, "ready-noconn").await?;
    let api = TestApi::namespaced("ready-noconn.e2e.kbind.io");
    let missing = "ready-noconn-later";
    let is = |status: &str, reason: Reason| (status.to_string(), reason.as_str().to_string());
    let result = pair
        .diagnose(stack.diagnose(&[&api], async {
            api.export(&stack).await?;
            let mut binding =
                stack.binding("ready-noconn", "widgets", &[&api], ConflictPolicy::Fail);
            binding.spec.connection_ref.name = missing.into();
            stack.create_binding(&binding).await?;
            wait_for("Ready=False ConnectionNotFound", WAIT, || async {
                Ok(binding_ready(&stack, "ready-noconn", "widgets")
                    .await?
                    .filter(|r| *r == is("False", Reason::ConnectionNotFound)))
            })
            .await?;
            // The Connection appears but is not Ready (not engaged).
            apply_connection(&stack.consumer, missing, PullPolicy::Bound).await?;
            wait_for("Ready=False ConnectionNotReady", WAIT, || async {
                Ok(binding_ready(&stack, "ready-noconn", "widgets")
                    .await?
                    .filter(|r| *r == is("False", Reason::ConnectionNotReady)))
            })
            .await?;
            // It becomes Ready: the binding follows without being touched, and its CRD is
            // installed for it (pullPolicy Bound).
            stack.engagements.engage(Engagement {
                connection: missing.into(),
                ..stack.engage(&[&api])
            });
            wait_for("Ready=True once engaged", WAIT, || async {
                Ok(binding_ready(&stack, "ready-noconn", "widgets")
                    .await?
                    .filter(|r| *r == is("True", Reason::AsExpected)))
            })
            .await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_bound_through_two_connections_is_bound_elsewhere() -> anyhow::Result<()> {
    let pair = shared_pair()?;
    let first = Stack::start(pair, "ready-twice").await?;
    let api = TestApi::namespaced("ready-twice.e2e.kbind.io");
    let result = pair
        .diagnose(first.diagnose(&[&api], async {
            api.install_on_provider(&first.provider).await?;
            // pullPolicy None: the operator installs the CRD and pins it to the first
            // Connection (kbind binds only CRDs annotated for the binding's Connection).
            first.set_pull_policy(PullPolicy::None).await?;
            api.install_on_consumer(&first.consumer, Some("ready-twice"))
                .await?;
            first.engage(&[&api]);
            // A second Connection of the same stack (same provider) for the same API.
            let second = Engagement {
                connection: "ready-twice-other".into(),
                ..first.engage(&[&api])
            };
            first.engagements.engage(second);
            first
                .create_binding(&first.binding(
                    "ready-twice",
                    "first",
                    &[&api],
                    ConflictPolicy::Fail,
                ))
                .await?;
            wait_for("the first binding Ready", WAIT, || async {
                Ok(binding_ready(&first, "ready-twice", "first")
                    .await?
                    .filter(|(s, _)| s == "True"))
            })
            .await?;
            let mut other = first.binding("ready-twice", "second", &[&api], ConflictPolicy::Fail);
            other.spec.connection_ref.name = "ready-twice-other".into();
            first.create_binding(&other).await?;
            wait_for("the second binding APIBoundElsewhere", WAIT, || async {
                Ok(binding_ready(&first, "ready-twice", "second")
                    .await?
                    .filter(|r| {
                        *r == (
                            "False".to_string(),
                            Reason::APIBoundElsewhere.as_str().to_string(),
                        )
                    }))
            })
            .await?;
            assert_eq!(
                binding_ready(&first, "ready-twice", "first")
                    .await?
                    .map(|r| r.0),
                Some("True".into())
            );
            anyhow::Ok(())
        }))
        .await;
    first.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_binding_wins_over_binding_for_the_same_api() -> anyhow::Result<()> {
    let pair = shared_pair()?;
    let stack = Stack::start(pair, "sel-wins").await?;
    let api = TestApi::namespaced("sel-wins.e2e.kbind.io");
    let result = pair
        .diagnose(stack.diagnose(&[&api], async {
            api.export(&stack).await?;
            stack.engage(&[&api]);
            // The Binding would adopt; the ClusterBinding says Fail and must win.
            stack
                .create_binding(&stack.binding(
                    "sel-wins",
                    "adopting",
                    &[&api],
                    ConflictPolicy::Adopt,
                ))
                .await?;
            stack
                .create_ready_cluster_binding(&stack.cluster_binding(
                    "sel-wins",
                    &[&api],
                    ConflictPolicy::Fail,
                ))
                .await?;
            wait_for("the ClusterBinding Ready", WAIT, || async {
                let b = Api::<ClusterBinding>::all(stack.consumer.clone())
                    .get("sel-wins")
                    .await?;
                Ok(b.status
                    .and_then(|s| ready_reason(&s.conditions))
                    .filter(|(s, _)| s == "True"))
            })
            .await?;
            kbind_tests::syncenv::ensure_namespace(&stack.provider, "sel-wins").await?;
            api.api(&stack.provider, Some("sel-wins"))
                .create(
                    &Default::default(),
                    &api.object(Some("sel-wins"), "taken", json!({ "foreign": true })),
                )
                .await?;
            api.create(
                &stack.consumer,
                Some("sel-wins"),
                "taken",
                json!({ "mine": true }),
            )
            .await?;
            let conflict = wait_for(
                "a ForeignObjectExists conflict (Fail policy)",
                WAIT,
                || async {
                    let obj = api
                        .api(&stack.consumer, Some("sel-wins"))
                        .get("taken")
                        .await?;
                    Ok(obj
                        .annotations()
                        .get(konnector::api::names::CONFLICT_ANNOTATION)
                        .cloned())
                },
            )
            .await?;
            assert!(conflict.starts_with("ForeignObjectExists"), "{conflict}");
            let foreign = on_provider(&stack, &api, Some("sel-wins"), "taken")
                .await?
                .context("foreign object")?;
            assert_eq!(foreign.data["spec"], json!({ "foreign": true }));
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}
