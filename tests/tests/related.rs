//! Related Secrets and ConfigMaps (a binding's `relatedResources`), one test per rule: what a
//! selector selects in which scope, what a copy carries, which targets are never written, and
//! when copies are deleted. Each test has its own stack, API group and namespaces.

use std::time::Duration;

use anyhow::Context as _;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kbind_tests::syncenv::related::{
    RELATED_WAIT, entry, put_configmap, put_plain_secret, put_secret, put_typed_secret,
    related_marker, secret_exists, secret_value, wait_secret, wait_secret_gone,
};
use kbind_tests::syncenv::{
    BINDING, Scenario, ScenarioBuilder, appears, condition, stays, wait_for,
};
use konnector::api::names::{RELATED_BINDING_ANNOTATION, RELATED_FIELD_MANAGER};
use konnector::api::{
    ConflictPolicy, RelatedDirection, RelatedDirection::*, RelatedResourceKind::*,
};
use konnector::telemetry::{RelatedLabels, metrics};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// How long a "not copied" check watches after a positive signal.
const QUIET: Duration = Duration::from_secs(5);

async fn absent_for(client: &Client, ns: &str, name: &str) -> anyhow::Result<()> {
    stays(&format!("Secret {ns}/{name} not copied"), QUIET, || async {
        Ok(!secret_exists(client, ns, name).await?)
    })
    .await
}

/// The UID of the scenario's Binding: the marker its copies carry.
async fn binding_uid(s: &Scenario) -> anyhow::Result<Option<String>> {
    Ok(s.bindings().get(BINDING).await?.uid())
}

/// How often related copies were skipped for `reason` (the metric is process-wide).
fn skipped(reason: &'static str) -> u64 {
    let labels = RelatedLabels {
        resource: "secrets",
        direction: "FromProvider",
        reason,
    };
    metrics().related_skipped.get_or_create(&labels).get()
}

#[test]
fn related_copies_in_both_directions() -> anyhow::Result<()> {
    let entries = vec![
        entry(Secrets, FromProvider, &["from-provider"], &[]),
        entry(Configmaps, FromConsumer, &["from-consumer"], &[]),
    ];
    Scenario::unbound("rel-both")
        .related(entries)
        .run(async |s| {
            let ns = s.ns();
            put_secret(&s.provider, ns, "from-provider", &[], &[("k", "p")], None).await?;
            put_configmap(&s.consumer, ns, "from-consumer", &[], &[("k", "c")]).await?;
            s.export_and_bind().await?;
            let uid = binding_uid(s).await?;
            let copy = wait_secret(&s.consumer, ns, "from-provider").await?;
            assert_eq!(secret_value(&copy, "k").as_deref(), Some("p"));
            assert_eq!(related_marker(&copy), uid);
            let provider_cms = Api::<ConfigMap>::namespaced(s.provider.clone(), ns);
            let cm = appears(&provider_cms, "from-consumer").await?;
            assert_eq!(
                cm.data
                    .as_ref()
                    .and_then(|d| d.get("k"))
                    .map(String::as_str),
                Some("c")
            );
            assert_eq!(related_marker(&cm), uid);
            // Nothing travels the other way: the entries create no provider Secret of that name.
            absent_for(&s.provider, ns, "from-consumer").await
        })
}

#[test]
fn names_only_select_exact_names() -> anyhow::Result<()> {
    let entries = vec![entry(Secrets, FromProvider, &["wanted"], &[])];
    Scenario::unbound("rel-names")
        .related(entries)
        .run(async |s| {
            put_plain_secret(&s.provider, s.ns(), "wanted", &[]).await?;
            put_plain_secret(&s.provider, s.ns(), "wanted-not", &[]).await?;
            s.export_and_bind().await?;
            wait_secret(&s.consumer, s.ns(), "wanted").await?;
            absent_for(&s.consumer, s.ns(), "wanted-not").await
        })
}

#[test]
fn labels_only_select_matching_labels() -> anyhow::Result<()> {
    let label = ("rel-labels.test/related", "true");
    let entries = vec![entry(Secrets, FromProvider, &[], &[label])];
    Scenario::unbound("rel-labels")
        .related(entries)
        .run(async |s| {
            put_plain_secret(&s.provider, s.ns(), "labelled", &[label]).await?;
            put_plain_secret(&s.provider, s.ns(), "plain", &[]).await?;
            s.export_and_bind().await?;
            wait_secret(&s.consumer, s.ns(), "labelled").await?;
            absent_for(&s.consumer, s.ns(), "plain").await
        })
}

#[test]
fn names_and_labels_must_both_match() -> anyhow::Result<()> {
    let label = ("rel-both-match.test/related", "true");
    let entries = vec![entry(Secrets, FromProvider, &["a", "b"], &[label])];
    Scenario::unbound("rel-both-match")
        .related(entries)
        .run(async |s| {
            put_plain_secret(&s.provider, s.ns(), "a", &[label]).await?;
            put_plain_secret(&s.provider, s.ns(), "b", &[]).await?;
            put_plain_secret(&s.provider, s.ns(), "c", &[label]).await?;
            s.export_and_bind().await?;
            wait_secret(&s.consumer, s.ns(), "a").await?;
            // "b" is named but unlabelled; "c" is labelled but not named.
            absent_for(&s.consumer, s.ns(), "b").await?;
            anyhow::ensure!(!secret_exists(&s.consumer, s.ns(), "c").await?);
            Ok(())
        })
}

#[test]
fn empty_selector_matches_everything_in_scope() -> anyhow::Result<()> {
    let entries = vec![entry(Configmaps, FromProvider, &[], &[])];
    Scenario::unbound("rel-empty")
        .related(entries)
        .run(async |s| {
            put_configmap(&s.provider, s.ns(), "one", &[], &[("k", "1")]).await?;
            put_configmap(&s.provider, s.ns(), "two", &[("x", "y")], &[("k", "2")]).await?;
            put_configmap(&s.provider, "rel-empty-other", "three", &[], &[("k", "3")]).await?;
            s.export_and_bind().await?;
            let consumer = Api::<ConfigMap>::namespaced(s.consumer.clone(), s.ns());
            for name in ["one", "two"] {
                appears(&consumer, name).await?;
            }
            // A Binding's scope is its namespace: the other namespace is not copied.
            let other = Api::<ConfigMap>::namespaced(s.consumer.clone(), "rel-empty-other");
            anyhow::ensure!(other.get_opt("three").await?.is_none());
            Ok(())
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_selects_its_namespace_cluster_binding_all() -> anyhow::Result<()> {
    let (ns_a, ns_b) = ("rel-scope-a", "rel-scope-b");
    let ns_label = ("rel-scope.test/ns", "true");
    let cl_label = ("rel-scope.test/cluster", "true");
    let entries = vec![entry(Secrets, FromProvider, &[], &[ns_label])];
    let s = Scenario::unbound("rel-scope")
        .namespace(ns_a)
        .related(entries)
        .start()
        .await?;
    s.run_then(
        async |s| {
            let p = &s.provider;
            put_secret(p, ns_a, "ns-a", &[ns_label], &[("k", "a")], None).await?;
            put_secret(p, ns_b, "ns-b", &[ns_label], &[("k", "b")], None).await?;
            put_secret(p, ns_a, "cl-a", &[cl_label], &[("k", "a")], None).await?;
            put_secret(p, ns_b, "cl-b", &[cl_label], &[("k", "b")], None).await?;
            s.export_and_bind().await?;
            let mut cb = s.new_cluster_binding();
            cb.spec.spec.related_resources = vec![entry(Secrets, FromProvider, &[], &[cl_label])];
            s.create_ready_cluster_binding(&cb).await?;
            wait_secret(&s.consumer, ns_a, "ns-a").await?;
            // The ClusterBinding lists across namespaces, creating the target namespace.
            wait_secret(&s.consumer, ns_a, "cl-a").await?;
            wait_secret(&s.consumer, ns_b, "cl-b").await?;
            absent_for(&s.consumer, ns_b, "ns-b").await
        },
        Scenario::forget_cluster_binding,
    )
    .await
}

#[test]
fn copy_carries_only_payload_and_the_marker() -> anyhow::Result<()> {
    let label = ("rel-payload.test/related", "true");
    let entries = vec![entry(Secrets, FromProvider, &["s"], &[])];
    Scenario::unbound("rel-payload")
        .related(entries)
        .run(async |s| {
            put_plain_secret(&s.provider, s.ns(), "s", &[label]).await?;
            s.export_and_bind().await?;
            let copy = wait_secret(&s.consumer, s.ns(), "s").await?;
            assert_eq!(secret_value(&copy, "k").as_deref(), Some("v"));
            assert_eq!(copy.type_.as_deref(), Some("Opaque"));
            // No source metadata travels: only the marker.
            assert!(copy.labels().is_empty(), "labels: {:?}", copy.labels());
            let annotations: Vec<_> = copy.annotations().keys().cloned().collect();
            assert_eq!(annotations, vec![RELATED_BINDING_ANNOTATION.to_string()]);
            assert_eq!(related_marker(&copy), binding_uid(s).await?);
            let managers: Vec<_> = copy
                .managed_fields()
                .iter()
                .map(|m| m.manager.clone())
                .collect();
            assert_eq!(managers, [Some(RELATED_FIELD_MANAGER.to_string())]);
            Ok(())
        })
}

#[test]
fn foreign_target_is_skipped_even_under_adopt() -> anyhow::Result<()> {
    let entries = vec![entry(Secrets, FromProvider, &["taken", "free"], &[])];
    let scenario = Scenario::unbound("rel-foreign")
        .conflict_policy(ConflictPolicy::Adopt)
        .related(entries);
    scenario.run(async |s| {
        for name in ["taken", "free"] {
            put_secret(&s.provider, s.ns(), name, &[], &[("k", "provider")], None).await?;
        }
        // An unmarked consumer Secret already sits at the target.
        put_secret(&s.consumer, s.ns(), "taken", &[], &[("k", "mine")], None).await?;
        s.export_and_bind().await?;
        wait_secret(&s.consumer, s.ns(), "free").await?;
        let skipped = skipped("foreign-target");
        assert!(skipped > 0, "related_skipped = {skipped}");
        let secrets = Api::<Secret>::namespaced(s.consumer.clone(), s.ns());
        stays("the foreign target untouched", QUIET, || async {
            let taken = secrets.get("taken").await?;
            Ok(secret_value(&taken, "k").as_deref() == Some("mine")
                && related_marker(&taken).is_none())
        })
        .await?;
        // Not an instance conflict: the binding counts none.
        let status = s.binding_status().await?.context("binding status")?;
        assert_eq!(status.conflict_count, 0);
        Ok(())
    })
}

#[test]
fn source_label_removed_deletes_the_copy() -> anyhow::Result<()> {
    let label = ("rel-unlabel.test/related", "true");
    let entries = vec![entry(Secrets, FromProvider, &[], &[label])];
    Scenario::unbound("rel-unlabel")
        .related(entries)
        .run(async |s| {
            put_plain_secret(&s.provider, s.ns(), "s", &[label]).await?;
            s.export_and_bind().await?;
            wait_secret(&s.consumer, s.ns(), "s").await?;
            put_plain_secret(&s.provider, s.ns(), "s", &[]).await?;
            wait_secret_gone(&s.consumer, s.ns(), "s").await?;
            anyhow::ensure!(
                secret_exists(&s.provider, s.ns(), "s").await?,
                "source kept"
            );
            Ok(())
        })
}

#[test]
fn binding_deleted_deletes_copies_keeps_sources() -> anyhow::Result<()> {
    let entries = vec![
        entry(Secrets, FromProvider, &["down"], &[]),
        entry(Secrets, FromConsumer, &["up"], &[]),
    ];
    Scenario::unbound("rel-unbind")
        .related(entries)
        .run(async |s| {
            let (consumer, provider, ns) = (&s.consumer, &s.provider, s.ns());
            put_plain_secret(provider, ns, "down", &[]).await?;
            put_plain_secret(consumer, ns, "up", &[]).await?;
            s.export_and_bind().await?;
            wait_secret(consumer, ns, "down").await?;
            wait_secret(provider, ns, "up").await?;
            s.unbind().await?;
            anyhow::ensure!(!secret_exists(consumer, ns, "down").await?, "copy left");
            anyhow::ensure!(!secret_exists(provider, ns, "up").await?, "copy left");
            anyhow::ensure!(secret_exists(provider, ns, "down").await?, "source gone");
            anyhow::ensure!(secret_exists(consumer, ns, "up").await?, "source gone");
            Ok(())
        })
}

#[test]
fn immutable_source_change_recreates_the_copy() -> anyhow::Result<()> {
    let entries = vec![entry(Secrets, FromProvider, &["s"], &[])];
    Scenario::unbound("rel-immutable")
        .related(entries)
        .run(async |s| {
            put_secret(&s.provider, s.ns(), "s", &[], &[("k", "v1")], Some(true)).await?;
            s.export_and_bind().await?;
            let first = wait_secret(&s.consumer, s.ns(), "s").await?;
            assert_eq!(first.immutable, Some(true));
            // An immutable source changes only by being replaced; replace it at once, well inside
            // one binding period, so the konnector sees a changed source.
            Api::<Secret>::namespaced(s.provider.clone(), s.ns())
                .delete("s", &DeleteParams::default())
                .await?;
            put_secret(&s.provider, s.ns(), "s", &[], &[("k", "v2")], Some(true)).await?;
            let secrets = Api::<Secret>::namespaced(s.consumer.clone(), s.ns());
            let second = wait_for("the copy recreated with v2", RELATED_WAIT, || async {
                let copy = secrets.get_opt("s").await?;
                Ok(copy.filter(|c| secret_value(c, "k").as_deref() == Some("v2")))
            })
            .await?;
            assert_ne!(first.uid(), second.uid(), "recreated, not updated");
            assert_eq!(second.immutable, Some(true));
            Ok(())
        })
}

/// `(namespace, name)` pairs that must not exist on `client`, checked for [`QUIET`].
async fn none_of(client: &Client, absent: &[(&str, &str)]) -> anyhow::Result<()> {
    stays("no Secret in a refused place", QUIET, || async {
        for (ns, name) in absent {
            anyhow::ensure!(
                !secret_exists(client, ns, name).await?,
                "Secret {ns}/{name} was written"
            );
        }
        Ok(true)
    })
    .await
}

/// An unbound scenario whose konnector runs in namespace `own` and whose ClusterBinding copies
/// every Secret labelled `label` in `direction`.
fn guarded(
    name: &str,
    own: &str,
    direction: RelatedDirection,
    label: (&str, &str),
) -> ScenarioBuilder {
    Scenario::unbound(name)
        .settings(|settings| settings.konnector_namespace = Some(own.into()))
        .cluster_binding()
        .related(vec![entry(Secrets, direction, &[], &[label])])
}

/// Applies a bootstrap token Secret `bootstrap-token-<id>` labelled `label`.
async fn put_bootstrap_token(
    client: &Client,
    ns: &str,
    id: &str,
    label: (&str, &str),
) -> anyhow::Result<()> {
    let token = [("token-id", id), ("token-secret", "0123456789abcdef")];
    let token_type = "bootstrap.kubernetes.io/token";
    let secret_name = format!("bootstrap-token-{id}");
    put_typed_secret(client, ns, &secret_name, token_type, &[label], &token, None).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_secrets_in_protected_namespaces_or_of_token_types_are_never_copied()
-> anyhow::Result<()> {
    let (name, own) = ("rel-guard-p", "rel-guard-p-own");
    let label = ("rel-guard-p.test/related", "true");
    let s = guarded(name, own, FromProvider, label).start().await?;
    s.run_then(
        async |s| {
            let p = &s.provider;
            // Injected on the provider, every one labelled for the ClusterBinding's entry:
            put_bootstrap_token(p, "kube-system", "rgp001", label).await?;
            put_plain_secret(p, "kube-system", "rel-guard-p-sys", &[label]).await?;
            put_plain_secret(p, "kbind", "rel-guard-p-creds", &[label]).await?;
            put_plain_secret(p, own, "rel-guard-p-own", &[label]).await?;
            let (helm, release) = ("helm.sh/release.v1", [("release", "x")]);
            let helm_name = "sh.helm.release.v1.app.v1";
            put_typed_secret(p, name, helm_name, helm, &[label], &release, None).await?;
            // ... and two that may be copied.
            put_plain_secret(p, name, "plain", &[label]).await?;
            let tls = [("tls.crt", "c"), ("tls.key", "k")];
            put_typed_secret(p, name, "cert", "kubernetes.io/tls", &[label], &tls, None).await?;
            s.export_and_bind().await?;
            wait_secret(&s.consumer, name, "plain").await?;
            let cert = wait_secret(&s.consumer, name, "cert").await?;
            assert_eq!(cert.type_.as_deref(), Some("kubernetes.io/tls"));
            let refused = skipped("secret-type");
            assert!(refused > 0, "refused Secret types are counted: {refused}");
            let refused_places = [
                ("kube-system", "bootstrap-token-rgp001"),
                ("kube-system", "rel-guard-p-sys"),
                ("kbind", "rel-guard-p-creds"),
                (own, "rel-guard-p-own"),
                (name, "sh.helm.release.v1.app.v1"),
            ];
            none_of(&s.consumer, &refused_places).await?;
            let own_ns = Api::<Namespace>::all(s.consumer.clone())
                .get_opt(own)
                .await?;
            anyhow::ensure!(
                own_ns.is_none(),
                "the konnector's namespace was created for a copy"
            );
            Ok(())
        },
        Scenario::forget_cluster_binding,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_consumer_never_touches_protected_namespaces_on_the_provider() -> anyhow::Result<()> {
    let (name, own) = ("rel-guard-c", "rel-guard-c-own");
    let label = ("rel-guard-c.test/related", "true");
    let s = guarded(name, own, FromConsumer, label).start().await?;
    s.run_then(
        async |s| {
            let c = &s.consumer;
            put_plain_secret(c, "kube-system", "rel-guard-c-sys", &[label]).await?;
            put_plain_secret(c, "kbind", "rel-guard-c-creds", &[label]).await?;
            put_plain_secret(c, own, "rel-guard-c-own", &[label]).await?;
            put_bootstrap_token(c, name, "rgc001", label).await?;
            put_plain_secret(c, name, "plain", &[label]).await?;
            s.export_and_bind().await?;
            let cb = s.cluster_bindings().get(name).await?;
            // A copy carrying this binding's marker in the provider's kube-system, selected by
            // nothing: a plan would delete it as no longer selected; the host must not.
            put_plain_secret(&s.provider, "kube-system", "rel-guard-c-planted", &[]).await?;
            let marker = json!({ "metadata": { "annotations": {
                RELATED_BINDING_ANNOTATION: cb.uid().unwrap_or_default(),
            }}});
            let provider_system = Api::<Secret>::namespaced(s.provider.clone(), "kube-system");
            let pp = PatchParams::default();
            provider_system
                .patch("rel-guard-c-planted", &pp, &Patch::Merge(&marker))
                .await?;
            wait_secret(&s.provider, name, "plain").await?;
            let refused_places = [
                ("kube-system", "rel-guard-c-sys"),
                ("kbind", "rel-guard-c-creds"),
                (own, "rel-guard-c-own"),
                (name, "bootstrap-token-rgc001"),
            ];
            none_of(&s.provider, &refused_places).await?;
            anyhow::ensure!(
                secret_exists(&s.provider, "kube-system", "rel-guard-c-planted").await?,
                "a Secret in the provider's kube-system was deleted"
            );
            Ok(())
        },
        async |s| {
            s.forget_cluster_binding().await;
            let _ = Api::<Secret>::namespaced(s.provider.clone(), "kube-system")
                .delete("rel-guard-c-planted", &DeleteParams::default())
                .await;
        },
    )
    .await
}

#[test]
fn a_binding_that_is_not_ready_copies_nothing() -> anyhow::Result<()> {
    let entries = vec![entry(Secrets, FromProvider, &["s"], &[])];
    Scenario::unbound("rel-not-ready")
        .related(entries)
        .run(async |s| {
            put_plain_secret(&s.provider, s.ns(), "s", &[]).await?;
            // Engaged, but the provider does not export the listed API: not Ready.
            s.export().await?;
            s.stack.engage(&[]);
            s.create_binding(&s.new_binding()).await?;
            s.binding_until("the Binding reconciled, not Ready", |b| {
                condition(b, "Ready").is_some_and(|c| c.status != "True")
            })
            .await?;
            absent_for(&s.consumer, s.ns(), "s").await?;
            // Ready once the API is exported: then it copies.
            s.engage();
            wait_secret(&s.consumer, s.ns(), "s").await?;
            Ok(())
        })
}
