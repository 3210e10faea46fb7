//! Related Secrets and ConfigMaps (spec, the `relatedResources` block), one test per rule, on
//! the shared real cluster pair. Each test has its own stack, API group and namespaces.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kbind_tests::syncenv::related::{
    RELATED_WAIT, entry, put_configmap, put_secret, put_typed_secret, related_binding,
    related_marker, secret_exists, secret_value, wait_secret, wait_secret_gone,
};
use kbind_tests::syncenv::{Stack, TestApi, fast_settings, stays, wait_for};
use kbind_tests::testenv::shared_pair;
use konnector::api::names::{RELATED_BINDING_ANNOTATION, RELATED_FIELD_MANAGER};
use konnector::api::{
    Binding, ClusterBinding, ConditionType, ConflictPolicy, RelatedDirection::*,
    RelatedResourceKind::*,
};
use konnector::binding::Settings;
use konnector::conditions::is_true;
use konnector::telemetry::{RelatedLabels, metrics};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// How long a "not copied" check watches after a positive signal.
const QUIET: Duration = Duration::from_secs(5);

async fn stack(name: &str) -> anyhow::Result<(Stack, TestApi)> {
    let stack = Stack::start(shared_pair()?, name).await?;
    let api = TestApi::namespaced(&format!("{name}.e2e.kbind.io"));
    Ok((stack, api))
}

async fn absent_for(client: &kube::Client, ns: &str, name: &str) -> anyhow::Result<()> {
    stays(&format!("Secret {ns}/{name} not copied"), QUIET, || async {
        Ok(!secret_exists(client, ns, name).await?)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn related_copies_in_both_directions() -> anyhow::Result<()> {
    let ns = "rel-both";
    let (stack, api) = stack(ns).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            put_secret(
                &stack.provider,
                ns,
                "from-provider",
                &[],
                &[("k", "p")],
                None,
            )
            .await?;
            put_configmap(&stack.consumer, ns, "from-consumer", &[], &[("k", "c")]).await?;
            let b = related_binding(
                &stack,
                &api,
                ns,
                "b",
                ConflictPolicy::Fail,
                vec![
                    entry(Secrets, FromProvider, &["from-provider"], &[]),
                    entry(Configmaps, FromConsumer, &["from-consumer"], &[]),
                ],
            )
            .await?;
            let copy = wait_secret(&stack.consumer, ns, "from-provider").await?;
            assert_eq!(secret_value(&copy, "k").as_deref(), Some("p"));
            assert_eq!(related_marker(&copy), b.uid());
            let provider_cms = Api::<ConfigMap>::namespaced(stack.provider.clone(), ns);
            let cm = wait_for("ConfigMap copied to the provider", RELATED_WAIT, || async {
                Ok(provider_cms.get_opt("from-consumer").await?)
            })
            .await?;
            assert_eq!(
                cm.data
                    .as_ref()
                    .and_then(|d| d.get("k"))
                    .map(String::as_str),
                Some("c")
            );
            assert_eq!(related_marker(&cm), b.uid());
            // Nothing travels the other way: no provider Secret of that name, no consumer
            // ConfigMap mirror is created by the entries.
            absent_for(&stack.provider, ns, "from-consumer").await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_only_select_exact_names() -> anyhow::Result<()> {
    let ns = "rel-names";
    let (stack, api) = stack(ns).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            put_secret(&stack.provider, ns, "wanted", &[], &[("k", "v")], None).await?;
            put_secret(&stack.provider, ns, "wanted-not", &[], &[("k", "v")], None).await?;
            related_binding(
                &stack,
                &api,
                ns,
                "b",
                ConflictPolicy::Fail,
                vec![entry(Secrets, FromProvider, &["wanted"], &[])],
            )
            .await?;
            wait_secret(&stack.consumer, ns, "wanted").await?;
            absent_for(&stack.consumer, ns, "wanted-not").await
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_only_select_matching_labels() -> anyhow::Result<()> {
    let ns = "rel-labels";
    let (stack, api) = stack(ns).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            let label = ("rel-labels.test/related", "true");
            put_secret(
                &stack.provider,
                ns,
                "labelled",
                &[label],
                &[("k", "v")],
                None,
            )
            .await?;
            put_secret(&stack.provider, ns, "plain", &[], &[("k", "v")], None).await?;
            related_binding(
                &stack,
                &api,
                ns,
                "b",
                ConflictPolicy::Fail,
                vec![entry(Secrets, FromProvider, &[], &[label])],
            )
            .await?;
            wait_secret(&stack.consumer, ns, "labelled").await?;
            absent_for(&stack.consumer, ns, "plain").await
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_and_labels_must_both_match() -> anyhow::Result<()> {
    let ns = "rel-both-match";
    let (stack, api) = stack(ns).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            let label = ("rel-both-match.test/related", "true");
            put_secret(&stack.provider, ns, "a", &[label], &[("k", "v")], None).await?;
            put_secret(&stack.provider, ns, "b", &[], &[("k", "v")], None).await?;
            put_secret(&stack.provider, ns, "c", &[label], &[("k", "v")], None).await?;
            related_binding(
                &stack,
                &api,
                ns,
                "binding",
                ConflictPolicy::Fail,
                vec![entry(Secrets, FromProvider, &["a", "b"], &[label])],
            )
            .await?;
            wait_secret(&stack.consumer, ns, "a").await?;
            // "b" is named but unlabelled; "c" is labelled but not named.
            absent_for(&stack.consumer, ns, "b").await?;
            anyhow::ensure!(!secret_exists(&stack.consumer, ns, "c").await?);
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_selector_matches_everything_in_scope() -> anyhow::Result<()> {
    let ns = "rel-empty";
    let (stack, api) = stack(ns).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            put_configmap(&stack.provider, ns, "one", &[], &[("k", "1")]).await?;
            put_configmap(&stack.provider, ns, "two", &[("x", "y")], &[("k", "2")]).await?;
            put_configmap(
                &stack.provider,
                "rel-empty-other",
                "three",
                &[],
                &[("k", "3")],
            )
            .await?;
            related_binding(
                &stack,
                &api,
                ns,
                "b",
                ConflictPolicy::Fail,
                vec![entry(Configmaps, FromProvider, &[], &[])],
            )
            .await?;
            let consumer = Api::<ConfigMap>::namespaced(stack.consumer.clone(), ns);
            for name in ["one", "two"] {
                wait_for(&format!("ConfigMap {name}"), RELATED_WAIT, || async {
                    Ok(consumer.get_opt(name).await?)
                })
                .await?;
            }
            // A Binding's scope is its namespace: the other namespace is not copied.
            let other = Api::<ConfigMap>::namespaced(stack.consumer.clone(), "rel-empty-other");
            anyhow::ensure!(other.get_opt("three").await?.is_none());
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_selects_its_namespace_cluster_binding_all() -> anyhow::Result<()> {
    let name = "rel-scope";
    let (stack, api) = stack(name).await?;
    let (ns_a, ns_b) = ("rel-scope-a", "rel-scope-b");
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            let ns_label = ("rel-scope.test/ns", "true");
            let cl_label = ("rel-scope.test/cluster", "true");
            put_secret(
                &stack.provider,
                ns_a,
                "ns-a",
                &[ns_label],
                &[("k", "a")],
                None,
            )
            .await?;
            put_secret(
                &stack.provider,
                ns_b,
                "ns-b",
                &[ns_label],
                &[("k", "b")],
                None,
            )
            .await?;
            put_secret(
                &stack.provider,
                ns_a,
                "cl-a",
                &[cl_label],
                &[("k", "a")],
                None,
            )
            .await?;
            put_secret(
                &stack.provider,
                ns_b,
                "cl-b",
                &[cl_label],
                &[("k", "b")],
                None,
            )
            .await?;
            related_binding(
                &stack,
                &api,
                ns_a,
                "b",
                ConflictPolicy::Fail,
                vec![entry(Secrets, FromProvider, &[], &[ns_label])],
            )
            .await?;
            let mut cb = stack.cluster_binding(name, &[&api], ConflictPolicy::Fail);
            cb.spec.spec.related_resources = vec![entry(Secrets, FromProvider, &[], &[cl_label])];
            stack.create_ready_cluster_binding(&cb).await?;
            wait_secret(&stack.consumer, ns_a, "ns-a").await?;
            // The ClusterBinding lists across namespaces, creating the target namespace.
            wait_secret(&stack.consumer, ns_a, "cl-a").await?;
            wait_secret(&stack.consumer, ns_b, "cl-b").await?;
            absent_for(&stack.consumer, ns_b, "ns-b").await?;
            anyhow::Ok(())
        }))
        .await;
    let _ = Api::<ClusterBinding>::all(stack.consumer.clone())
        .delete(name, &DeleteParams::default())
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_carries_only_payload_and_the_marker() -> anyhow::Result<()> {
    let ns = "rel-payload";
    let (stack, api) = stack(ns).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            let label = ("rel-payload.test/related", "true");
            put_secret(&stack.provider, ns, "s", &[label], &[("k", "v")], None).await?;
            let b = related_binding(
                &stack,
                &api,
                ns,
                "b",
                ConflictPolicy::Fail,
                vec![entry(Secrets, FromProvider, &["s"], &[])],
            )
            .await?;
            let copy = wait_secret(&stack.consumer, ns, "s").await?;
            assert_eq!(secret_value(&copy, "k").as_deref(), Some("v"));
            assert_eq!(copy.type_.as_deref(), Some("Opaque"));
            // Spec: "not arbitrary source metadata": only the marker travels.
            assert!(copy.labels().is_empty(), "labels: {:?}", copy.labels());
            let annotations: Vec<_> = copy.annotations().keys().cloned().collect();
            assert_eq!(annotations, vec![RELATED_BINDING_ANNOTATION.to_string()]);
            assert_eq!(related_marker(&copy), b.uid());
            let managers: Vec<_> = copy
                .managed_fields()
                .iter()
                .filter_map(|m| m.manager.clone())
                .collect();
            assert_eq!(managers, vec![RELATED_FIELD_MANAGER.to_string()]);
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_target_is_skipped_even_under_adopt() -> anyhow::Result<()> {
    let ns = "rel-foreign";
    let (stack, api) = stack(ns).await?;
    let result =
        shared_pair()?
            .diagnose(stack.diagnose(&[&api], async {
                put_secret(
                    &stack.provider,
                    ns,
                    "taken",
                    &[],
                    &[("k", "provider")],
                    None,
                )
                .await?;
                put_secret(&stack.provider, ns, "free", &[], &[("k", "provider")], None).await?;
                // An unmarked consumer Secret already sits at the target.
                put_secret(&stack.consumer, ns, "taken", &[], &[("k", "mine")], None).await?;
                related_binding(
                    &stack,
                    &api,
                    ns,
                    "b",
                    ConflictPolicy::Adopt,
                    vec![entry(Secrets, FromProvider, &["taken", "free"], &[])],
                )
                .await?;
                wait_secret(&stack.consumer, ns, "free").await?;
                // Counted in the (process-wide) related_skipped metric.
                let skipped = metrics()
                    .related_skipped
                    .get_or_create(&RelatedLabels {
                        resource: "secrets",
                        direction: "FromProvider",
                        reason: "foreign-target",
                    })
                    .get();
                assert!(skipped > 0, "related_skipped = {skipped}");
                let secrets = Api::<Secret>::namespaced(stack.consumer.clone(), ns);
                stays("the foreign target untouched", QUIET, || async {
                    let s = secrets.get("taken").await?;
                    Ok(secret_value(&s, "k").as_deref() == Some("mine")
                        && related_marker(&s).is_none())
                })
                .await?;
                // Not an instance conflict: the binding counts none.
                let b = Api::<Binding>::namespaced(stack.consumer.clone(), ns)
                    .get("b")
                    .await?;
                let conflicts: i64 = b
                    .status
                    .iter()
                    .flat_map(|s| s.bound_apis.iter())
                    .map(|a| a.conflict_count)
                    .sum();
                assert_eq!(conflicts, 0);
                anyhow::Ok(())
            }))
            .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_label_removed_deletes_the_copy() -> anyhow::Result<()> {
    let ns = "rel-unlabel";
    let (stack, api) = stack(ns).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            let label = ("rel-unlabel.test/related", "true");
            put_secret(&stack.provider, ns, "s", &[label], &[("k", "v")], None).await?;
            related_binding(
                &stack,
                &api,
                ns,
                "b",
                ConflictPolicy::Fail,
                vec![entry(Secrets, FromProvider, &[], &[label])],
            )
            .await?;
            wait_secret(&stack.consumer, ns, "s").await?;
            put_secret(&stack.provider, ns, "s", &[], &[("k", "v")], None).await?;
            wait_secret_gone(&stack.consumer, ns, "s").await?;
            anyhow::ensure!(
                secret_exists(&stack.provider, ns, "s").await?,
                "source kept"
            );
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_deleted_deletes_copies_keeps_sources() -> anyhow::Result<()> {
    let ns = "rel-unbind";
    let (stack, api) = stack(ns).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            put_secret(&stack.provider, ns, "down", &[], &[("k", "v")], None).await?;
            put_secret(&stack.consumer, ns, "up", &[], &[("k", "v")], None).await?;
            related_binding(
                &stack,
                &api,
                ns,
                "b",
                ConflictPolicy::Fail,
                vec![
                    entry(Secrets, FromProvider, &["down"], &[]),
                    entry(Secrets, FromConsumer, &["up"], &[]),
                ],
            )
            .await?;
            wait_secret(&stack.consumer, ns, "down").await?;
            wait_secret(&stack.provider, ns, "up").await?;
            let bindings = Api::<Binding>::namespaced(stack.consumer.clone(), ns);
            bindings.delete("b", &DeleteParams::default()).await?;
            wait_for("the Binding gone", RELATED_WAIT, || async {
                Ok(bindings.get_opt("b").await?.is_none().then_some(()))
            })
            .await?;
            anyhow::ensure!(
                !secret_exists(&stack.consumer, ns, "down").await?,
                "copy left"
            );
            anyhow::ensure!(
                !secret_exists(&stack.provider, ns, "up").await?,
                "copy left"
            );
            anyhow::ensure!(
                secret_exists(&stack.provider, ns, "down").await?,
                "source gone"
            );
            anyhow::ensure!(
                secret_exists(&stack.consumer, ns, "up").await?,
                "source gone"
            );
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immutable_source_change_recreates_the_copy() -> anyhow::Result<()> {
    let ns = "rel-immutable";
    let (stack, api) = stack(ns).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            put_secret(&stack.provider, ns, "s", &[], &[("k", "v1")], Some(true)).await?;
            related_binding(
                &stack,
                &api,
                ns,
                "b",
                ConflictPolicy::Fail,
                vec![entry(Secrets, FromProvider, &["s"], &[])],
            )
            .await?;
            let first = wait_secret(&stack.consumer, ns, "s").await?;
            assert_eq!(first.immutable, Some(true));
            // An immutable source changes only by being replaced; replace it at once, well
            // inside one binding period, so the konnector sees a changed source.
            Api::<Secret>::namespaced(stack.provider.clone(), ns)
                .delete("s", &DeleteParams::default())
                .await?;
            put_secret(&stack.provider, ns, "s", &[], &[("k", "v2")], Some(true)).await?;
            let secrets = Api::<Secret>::namespaced(stack.consumer.clone(), ns);
            let second = wait_for("the copy recreated with v2", RELATED_WAIT, || async {
                Ok(secrets
                    .get_opt("s")
                    .await?
                    .filter(|s| secret_value(s, "k").as_deref() == Some("v2")))
            })
            .await?;
            assert_ne!(first.uid(), second.uid(), "recreated, not updated");
            assert_eq!(second.immutable, Some(true));
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}

/// A stack whose konnector lives in namespace `<name>-own`, as a Pod would.
async fn guarded_stack(name: &str) -> anyhow::Result<(Stack, TestApi, String)> {
    let own = format!("{name}-own");
    let settings = Settings {
        konnector_namespace: Some(own.clone()),
        ..fast_settings(name)
    };
    let stack = Stack::start_with(shared_pair()?, name, settings).await?;
    let api = TestApi::namespaced(&format!("{name}.e2e.kbind.io"));
    Ok((stack, api, own))
}

/// `(namespace, name)` pairs that must not exist on `client`, checked for [`QUIET`].
async fn none_of(client: &Client, absent: &[(&str, &str)]) -> anyhow::Result<()> {
    stays("no Secret in a refused place", QUIET, || async {
        for (ns, name) in absent {
            if secret_exists(client, ns, name).await? {
                anyhow::bail!("Secret {ns}/{name} was written");
            }
        }
        Ok(true)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_secrets_in_protected_namespaces_or_of_token_types_are_never_copied()
-> anyhow::Result<()> {
    let name = "rel-guard-p";
    let (stack, api, own) = guarded_stack(name).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            let label = ("rel-guard-p.test/related", "true");
            let p = &stack.provider;
            // Injected on the provider, every one labelled for the ClusterBinding's entry:
            put_typed_secret(
                p,
                "kube-system",
                "bootstrap-token-rgp001",
                "bootstrap.kubernetes.io/token",
                &[label],
                &[("token-id", "rgp001"), ("token-secret", "0123456789abcdef")],
                None,
            )
            .await?;
            put_secret(
                p,
                "kube-system",
                "rel-guard-p-sys",
                &[label],
                &[("k", "v")],
                None,
            )
            .await?;
            put_secret(
                p,
                "kbind",
                "rel-guard-p-creds",
                &[label],
                &[("k", "v")],
                None,
            )
            .await?;
            put_secret(p, &own, "rel-guard-p-own", &[label], &[("k", "v")], None).await?;
            put_typed_secret(
                p,
                name,
                "sh.helm.release.v1.app.v1",
                "helm.sh/release.v1",
                &[label],
                &[("release", "x")],
                None,
            )
            .await?;
            // ... and two that may be copied.
            put_secret(p, name, "plain", &[label], &[("k", "v")], None).await?;
            put_typed_secret(
                p,
                name,
                "cert",
                "kubernetes.io/tls",
                &[label],
                &[("tls.crt", "c"), ("tls.key", "k")],
                None,
            )
            .await?;
            api.export(&stack).await?;
            stack.engage(&[&api]);
            let mut cb = stack.cluster_binding(name, &[&api], ConflictPolicy::Fail);
            cb.spec.spec.related_resources = vec![entry(Secrets, FromProvider, &[], &[label])];
            stack.create_ready_cluster_binding(&cb).await?;
            wait_secret(&stack.consumer, name, "plain").await?;
            let cert = wait_secret(&stack.consumer, name, "cert").await?;
            assert_eq!(cert.type_.as_deref(), Some("kubernetes.io/tls"));
            let refused = metrics()
                .related_skipped
                .get_or_create(&RelatedLabels {
                    resource: "secrets",
                    direction: "FromProvider",
                    reason: "secret-type",
                })
                .get();
            assert!(refused > 0, "refused Secret types are counted: {refused}");
            none_of(
                &stack.consumer,
                &[
                    ("kube-system", "bootstrap-token-rgp001"),
                    ("kube-system", "rel-guard-p-sys"),
                    ("kbind", "rel-guard-p-creds"),
                    (&own, "rel-guard-p-own"),
                    (name, "sh.helm.release.v1.app.v1"),
                ],
            )
            .await?;
            let namespaces = Api::<Namespace>::all(stack.consumer.clone());
            anyhow::ensure!(
                namespaces.get_opt(&own).await?.is_none(),
                "the konnector's namespace was created for a copy"
            );
            anyhow::Ok(())
        }))
        .await;
    let _ = Api::<ClusterBinding>::all(stack.consumer.clone())
        .delete(name, &DeleteParams::default())
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_consumer_never_touches_protected_namespaces_on_the_provider() -> anyhow::Result<()> {
    let name = "rel-guard-c";
    let (stack, api, own) = guarded_stack(name).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            let label = ("rel-guard-c.test/related", "true");
            let c = &stack.consumer;
            put_secret(
                c,
                "kube-system",
                "rel-guard-c-sys",
                &[label],
                &[("k", "v")],
                None,
            )
            .await?;
            put_secret(
                c,
                "kbind",
                "rel-guard-c-creds",
                &[label],
                &[("k", "v")],
                None,
            )
            .await?;
            put_secret(c, &own, "rel-guard-c-own", &[label], &[("k", "v")], None).await?;
            put_typed_secret(
                c,
                name,
                "bootstrap-token-rgc001",
                "bootstrap.kubernetes.io/token",
                &[label],
                &[("token-id", "rgc001"), ("token-secret", "0123456789abcdef")],
                None,
            )
            .await?;
            put_secret(c, name, "plain", &[label], &[("k", "v")], None).await?;
            api.export(&stack).await?;
            stack.engage(&[&api]);
            let mut cb = stack.cluster_binding(name, &[&api], ConflictPolicy::Fail);
            cb.spec.spec.related_resources = vec![entry(Secrets, FromConsumer, &[], &[label])];
            let cb = stack.create_ready_cluster_binding(&cb).await?;
            // A copy carrying this binding's marker in the provider's kube-system, selected by
            // nothing: a plan would delete it as no longer selected; the host must not.
            let planted = put_secret(
                &stack.provider,
                "kube-system",
                "rel-guard-c-planted",
                &[],
                &[("k", "v")],
                None,
            )
            .await?;
            let marker = json!({ "metadata": { "annotations": {
                RELATED_BINDING_ANNOTATION: cb.uid().unwrap_or_default(),
            }}});
            Api::<Secret>::namespaced(stack.provider.clone(), "kube-system")
                .patch(
                    &planted.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&marker),
                )
                .await?;
            wait_secret(&stack.provider, name, "plain").await?;
            none_of(
                &stack.provider,
                &[
                    ("kube-system", "rel-guard-c-sys"),
                    ("kbind", "rel-guard-c-creds"),
                    (&own, "rel-guard-c-own"),
                    (name, "bootstrap-token-rgc001"),
                ],
            )
            .await?;
            anyhow::ensure!(
                secret_exists(&stack.provider, "kube-system", "rel-guard-c-planted").await?,
                "a Secret in the provider's kube-system was deleted"
            );
            anyhow::Ok(())
        }))
        .await;
    let _ = Api::<ClusterBinding>::all(stack.consumer.clone())
        .delete(name, &DeleteParams::default())
        .await;
    let _ = Api::<Secret>::namespaced(stack.provider.clone(), "kube-system")
        .delete("rel-guard-c-planted", &DeleteParams::default())
        .await;
    stack.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_that_is_not_ready_copies_nothing() -> anyhow::Result<()> {
    let ns = "rel-not-ready";
    let (stack, api) = stack(ns).await?;
    let result = shared_pair()?
        .diagnose(stack.diagnose(&[&api], async {
            put_secret(&stack.provider, ns, "s", &[], &[("k", "v")], None).await?;
            // Engaged, but the provider does not export the listed API: not Ready.
            api.export(&stack).await?;
            stack.engage(&[]);
            let mut binding = stack.binding(ns, "b", &[&api], ConflictPolicy::Fail);
            binding.spec.related_resources = vec![entry(Secrets, FromProvider, &["s"], &[])];
            stack.create_binding(&binding).await?;
            let bindings = Api::<Binding>::namespaced(stack.consumer.clone(), ns);
            wait_for(
                "the Binding reconciled, not Ready",
                RELATED_WAIT,
                || async {
                    let b = bindings.get("b").await?;
                    Ok(b.status
                        .filter(|s| {
                            s.conditions.iter().any(|c| c.type_ == "Ready")
                                && !is_true(&s.conditions, ConditionType::Ready)
                        })
                        .map(|_| ()))
                },
            )
            .await?;
            absent_for(&stack.consumer, ns, "s").await?;
            // Ready once the API is exported: then it copies.
            stack.engage(&[&api]);
            wait_secret(&stack.consumer, ns, "s").await?;
            anyhow::Ok(())
        }))
        .await;
    stack.finish(result).await
}
