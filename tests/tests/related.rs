//! Related Secrets and ConfigMaps (a binding's `relatedResources`), one test per rule: what a
//! selector selects in which scope, what a copy carries, which targets are never written, and
//! when copies are deleted. Each test has its own stack, API group and namespaces.

use anyhow::Context as _;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kbind_tests::syncenv::related::{
    QUIET, RELATED_WAIT, copied_only, entry, none_of, put_configmap, put_plain_secret, put_secret,
    put_typed_secret, related_marker, secret_exists, secret_value, skipped_from_provider,
    wait_secret, wait_secret_gone,
};
use kbind_tests::syncenv::{BINDING, Scenario, appears, condition, stays, wait_for};
use konnector::api::names::{
    RELATED_BINDING_ANNOTATION, RELATED_DIGEST_ANNOTATION, RELATED_FIELD_MANAGER,
    RELATED_SOURCE_VERSION_ANNOTATION,
};
use konnector::api::{
    ConflictPolicy::Adopt, RelatedDirection, RelatedDirection::*, RelatedResource,
    RelatedResourceKind::*,
};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

/// Puts plain provider Secrets `(name, label)` in scenario `name`'s namespace once it is bound
/// with `selector` alone: the `copied` ones reach the consumer, the `absent` ones do not.
fn selects(
    name: &str,
    selector: RelatedResource,
    copied: &[(&str, Option<(&str, &str)>)],
    absent: &[(&str, Option<(&str, &str)>)],
) -> anyhow::Result<()> {
    let scenario = Scenario::bound(name).related(vec![selector]);
    scenario.run(async |s| {
        for (name, label) in copied.iter().chain(absent) {
            put_plain_secret(&s.provider, s.ns(), name, label.as_slice()).await?;
        }
        let copied: Vec<_> = copied.iter().map(|(n, _)| (s.ns(), *n)).collect();
        let absent: Vec<_> = absent.iter().map(|(n, _)| (s.ns(), *n)).collect();
        copied_only(&s.consumer, &copied, &absent).await?;
        Ok(())
    })
}

#[test]
fn related_copies_in_both_directions() -> anyhow::Result<()> {
    let entries = vec![
        entry(Secrets, FromProvider, &["from-provider"], &[]),
        entry(Configmaps, FromConsumer, &["from-consumer"], &[]),
    ];
    Scenario::bound("rel-both").related(entries).run(async |s| {
        let ns = s.ns();
        put_secret(&s.provider, ns, "from-provider", &[], &[("k", "p")], None).await?;
        put_configmap(&s.consumer, ns, "from-consumer", &[], &[("k", "c")]).await?;
        let secret = wait_secret(&s.consumer, ns, "from-provider").await?;
        let provider_cms = Api::<ConfigMap>::namespaced(s.provider.clone(), ns);
        let cm = appears(&provider_cms, "from-consumer").await?;
        let uid = s.bindings().get(BINDING).await?.uid();
        let copies = json!({ "secret": [secret_value(&secret, "k"), related_marker(&secret)],
            "configmap": [cm.data, related_marker(&cm)] });
        let expected = json!({ "secret": ["p", uid], "configmap": [{ "k": "c" }, uid] });
        assert_eq!(copies, expected);
        // Nothing travels the other way: the entries create no provider Secret of that name.
        none_of(&s.provider, &[(ns, "from-consumer")]).await
    })
}

#[test]
fn names_only_select_exact_names() -> anyhow::Result<()> {
    let selector = entry(Secrets, FromProvider, &["wanted"], &[]);
    let (copied, absent) = ([("wanted", None)], [("wanted-not", None)]);
    selects("rel-names", selector, &copied, &absent)
}

#[test]
fn labels_only_select_matching_labels() -> anyhow::Result<()> {
    let label = ("rel-labels.test/related", "true");
    let selector = entry(Secrets, FromProvider, &[], &[label]);
    let (copied, absent) = ([("labelled", Some(label))], [("plain", None)]);
    selects("rel-labels", selector, &copied, &absent)
}

#[test]
fn names_and_labels_must_both_match() -> anyhow::Result<()> {
    let label = ("rel-both-match.test/related", "true");
    let selector = entry(Secrets, FromProvider, &["a", "b"], &[label]);
    // "b" is named but unlabelled; "c" is labelled but not named.
    let absent = [("b", None), ("c", Some(label))];
    selects("rel-both-match", selector, &[("a", Some(label))], &absent)
}

#[test]
fn empty_selector_matches_everything_in_scope() -> anyhow::Result<()> {
    let entries = vec![entry(Configmaps, FromProvider, &[], &[])];
    let scenario = Scenario::bound("rel-empty").related(entries);
    scenario.run(async |s| {
        put_configmap(&s.provider, s.ns(), "one", &[], &[("k", "1")]).await?;
        put_configmap(&s.provider, s.ns(), "two", &[("x", "y")], &[("k", "2")]).await?;
        put_configmap(&s.provider, "rel-empty-other", "three", &[], &[("k", "3")]).await?;
        let consumer = |ns| Api::<ConfigMap>::namespaced(s.consumer.clone(), ns);
        for name in ["one", "two"] {
            appears(&consumer(s.ns()), name).await?;
        }
        // A Binding's scope is its namespace: the other namespace is not copied.
        let three = consumer("rel-empty-other").get_opt("three").await?;
        anyhow::ensure!(three.is_none(), "copied from another namespace");
        Ok(())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_selects_its_namespace_cluster_binding_all() -> anyhow::Result<()> {
    let (ns_a, ns_b) = ("rel-scope-a", "rel-scope-b");
    let ns_label = ("rel-scope.test/ns", "true");
    let cl_label = ("rel-scope.test/cluster", "true");
    let entries = vec![entry(Secrets, FromProvider, &[], &[ns_label])];
    let scenario = Scenario::bound("rel-scope").namespace(ns_a);
    let s = scenario.related(entries).start().await?;
    s.run_then(
        async |s| {
            put_plain_secret(&s.provider, ns_a, "ns-a", &[ns_label]).await?;
            put_plain_secret(&s.provider, ns_b, "ns-b", &[ns_label]).await?;
            put_plain_secret(&s.provider, ns_a, "cl-a", &[cl_label]).await?;
            put_plain_secret(&s.provider, ns_b, "cl-b", &[cl_label]).await?;
            let mut cb = s.new_cluster_binding();
            cb.spec.spec.related_resources = vec![entry(Secrets, FromProvider, &[], &[cl_label])];
            s.create_ready_cluster_binding(&cb).await?;
            // The ClusterBinding lists across namespaces, creating the target namespace.
            let copied = [(ns_a, "ns-a"), (ns_a, "cl-a"), (ns_b, "cl-b")];
            copied_only(&s.consumer, &copied, &[(ns_b, "ns-b")]).await?;
            Ok(())
        },
        Scenario::forget_cluster_binding,
    )
    .await
}

#[test]
fn copy_carries_only_payload_and_the_marker() -> anyhow::Result<()> {
    let label = ("rel-payload.test/related", "true");
    let entries = vec![entry(Secrets, FromProvider, &["s"], &[])];
    Scenario::bound("rel-payload")
        .related(entries)
        .run(async |s| {
            let source = put_plain_secret(&s.provider, s.ns(), "s", &[label]).await?;
            let copy = wait_secret(&s.consumer, s.ns(), "s").await?;
            let managers: Vec<_> = copy.managed_fields().iter().map(|m| &m.manager).collect();
            let carried = json!({ "k": secret_value(&copy, "k"), "type": copy.type_,
            "labels": copy.labels(), "annotations": copy.annotations(), "managers": managers });
            // No source metadata travels: only the marker, the payload's digest and the
            // source version it was copied from.
            let uid = s.bindings().get(BINDING).await?.uid();
            let expected = json!({ "k": "v", "type": "Opaque", "labels": {},
            "annotations": { RELATED_BINDING_ANNOTATION: uid,
                RELATED_DIGEST_ANNOTATION: copy.annotations().get(RELATED_DIGEST_ANNOTATION),
                RELATED_SOURCE_VERSION_ANNOTATION: source.resource_version() },
            "managers": [RELATED_FIELD_MANAGER] });
            assert_eq!(carried, expected);
            Ok(())
        })
}

#[test]
fn foreign_target_is_skipped_even_under_adopt() -> anyhow::Result<()> {
    let entries = vec![entry(Secrets, FromProvider, &["taken", "free"], &[])];
    let adopting = Scenario::bound("rel-foreign").conflict_policy(Adopt);
    adopting.related(entries).run(async |s| {
        // An unmarked consumer Secret already sits at the target.
        put_secret(&s.consumer, s.ns(), "taken", &[], &[("k", "mine")], None).await?;
        put_plain_secret(&s.provider, s.ns(), "taken", &[]).await?;
        put_plain_secret(&s.provider, s.ns(), "free", &[]).await?;
        wait_secret(&s.consumer, s.ns(), "free").await?;
        let skipped = skipped_from_provider("foreign-target");
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
    let scenario = Scenario::bound("rel-unlabel").related(entries);
    scenario.run(async |s| {
        put_plain_secret(&s.provider, s.ns(), "s", &[label]).await?;
        wait_secret(&s.consumer, s.ns(), "s").await?;
        put_plain_secret(&s.provider, s.ns(), "s", &[]).await?;
        wait_secret_gone(&s.consumer, s.ns(), "s").await?;
        let kept = secret_exists(&s.provider, s.ns(), "s").await?;
        anyhow::ensure!(kept, "source kept");
        Ok(())
    })
}

#[test]
fn binding_deleted_deletes_copies_keeps_sources() -> anyhow::Result<()> {
    let entries = vec![
        entry(Secrets, FromProvider, &["down"], &[]),
        entry(Secrets, FromConsumer, &["up"], &[]),
    ];
    let scenario = Scenario::bound("rel-unbind").related(entries);
    scenario.run(async |s| {
        let (consumer, provider, ns) = (&s.consumer, &s.provider, s.ns());
        put_plain_secret(provider, ns, "down", &[]).await?;
        put_plain_secret(consumer, ns, "up", &[]).await?;
        wait_secret(consumer, ns, "down").await?;
        wait_secret(provider, ns, "up").await?;
        s.unbind().await?;
        let has = async |client, name| secret_exists(client, ns, name).await;
        let left = json!({
            "copies": [has(consumer, "down").await?, has(provider, "up").await?],
            "sources": [has(provider, "down").await?, has(consumer, "up").await?],
        });
        let expected = json!({ "copies": [false, false], "sources": [true, true] });
        assert_eq!(left, expected);
        Ok(())
    })
}

#[test]
fn immutable_source_change_recreates_the_copy() -> anyhow::Result<()> {
    let entries = vec![entry(Secrets, FromProvider, &["s"], &[])];
    let scenario = Scenario::bound("rel-immutable").related(entries);
    scenario.run(async |s| {
        put_secret(&s.provider, s.ns(), "s", &[], &[("k", "v1")], Some(true)).await?;
        let first = wait_secret(&s.consumer, s.ns(), "s").await?;
        assert_eq!(first.immutable, Some(true));
        // An immutable source changes only by being replaced; replace it at once, well inside
        // one binding period, so the konnector sees a changed source.
        let sources = Api::<Secret>::namespaced(s.provider.clone(), s.ns());
        sources.delete("s", &DeleteParams::default()).await?;
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

/// A Secret's type and payload, for the guard tests' sources.
type Payload = (&'static str, &'static [(&'static str, &'static str)]);
const PLAIN: Payload = ("Opaque", &[("k", "v")]);
const TLS: Payload = ("kubernetes.io/tls", &[("tls.crt", "c"), ("tls.key", "k")]);
const HELM: Payload = ("helm.sh/release.v1", &[("release", "x")]);
const TOKEN: Payload = (
    "bootstrap.kubernetes.io/token",
    &[("token-id", "abcdef"), ("token-secret", "0123456789abcdef")],
);

/// Runs a ClusterBinding scenario whose konnector runs in namespace `{name}-own` and which
/// copies every Secret labelled for it in `direction`: puts the `refused` and `allowed` Secrets
/// `(namespace, name, payload)` on the source side once it is bound; the allowed ones are
/// copied, no refused one is; then `then` runs with the allowed ones' copies.
async fn guarded(
    name: &str,
    direction: RelatedDirection,
    refused: &[(&str, &str, Payload)],
    allowed: &[(&str, &str, Payload)],
    then: impl AsyncFnOnce(&Scenario, Vec<Secret>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let key = format!("{name}.test/related");
    let label = (key.as_str(), "true");
    let s = Scenario::bound(name)
        .settings(|settings| settings.konnector_namespace = Some(format!("{name}-own")))
        .cluster_binding()
        .related(vec![entry(Secrets, direction, &[], &[label])])
        .start()
        .await?;
    let (from, to) = match direction {
        FromProvider => (&s.provider, &s.consumer),
        FromConsumer => (&s.consumer, &s.provider),
    };
    let places = |secrets: &[(_, _, _)]| secrets.iter().map(|(ns, n, _)| (*ns, *n)).collect();
    let (refused_at, allowed_at): (Vec<_>, Vec<_>) = (places(refused), places(allowed));
    let result = s
        .check(async |s| {
            for (ns, name, (type_, data)) in refused.iter().chain(allowed) {
                put_typed_secret(from, ns, name, type_, &[label], data, None).await?;
            }
            let copies = copied_only(to, &allowed_at, &refused_at).await?;
            then(s, copies).await
        })
        .await;
    s.forget_cluster_binding().await;
    s.finish(result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_secrets_in_protected_namespaces_or_of_token_types_are_never_copied()
-> anyhow::Result<()> {
    let (name, own) = ("rel-guard-p", "rel-guard-p-own");
    let refused = [
        ("kube-system", "bootstrap-token-abcdef", TOKEN),
        ("kube-system", "rel-guard-p-sys", PLAIN),
        ("kbind", "rel-guard-p-creds", PLAIN),
        (own, "rel-guard-p-own", PLAIN),
        (name, "sh.helm.release.v1.app.v1", HELM),
    ];
    let allowed = [(name, "plain", PLAIN), (name, "cert", TLS)];
    guarded(name, FromProvider, &refused, &allowed, async |s, copies| {
        assert_eq!(copies[1].type_.as_deref(), Some(TLS.0));
        let refused = skipped_from_provider("secret-type");
        assert!(refused > 0, "refused Secret types are counted: {refused}");
        let namespaces = Api::<Namespace>::all(s.consumer.clone());
        let own_ns = namespaces.get_opt(own).await?;
        anyhow::ensure!(own_ns.is_none(), "{own} created for a copy");
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_consumer_never_touches_protected_namespaces_on_the_provider() -> anyhow::Result<()> {
    let (name, planted) = ("rel-guard-c", "rel-guard-c-planted");
    let refused = [
        ("kube-system", "rel-guard-c-sys", PLAIN),
        ("kbind", "rel-guard-c-creds", PLAIN),
        ("rel-guard-c-own", "rel-guard-c-own", PLAIN),
        (name, "bootstrap-token-abcdef", TOKEN),
    ];
    guarded(
        name,
        FromConsumer,
        &refused,
        &[(name, "plain", PLAIN)],
        async |s, _| {
            // A copy carrying this binding's marker in the provider's kube-system, selected by
            // nothing: a plan would delete it as no longer selected; the host must not.
            let uid = s.cluster_bindings().get(name).await?.uid();
            let marker =
                json!({ "metadata": { "annotations": { RELATED_BINDING_ANNOTATION: uid } } });
            put_plain_secret(&s.provider, "kube-system", planted, &[]).await?;
            let provider_system = Api::<Secret>::namespaced(s.provider.clone(), "kube-system");
            let (params, patch) = (PatchParams::default(), Patch::Merge(&marker));
            provider_system.patch(planted, &params, &patch).await?;
            stays("the provider's kube-system Secret kept", QUIET, || async {
                Ok(provider_system.get_opt(planted).await?.is_some())
            })
            .await?;
            provider_system
                .delete(planted, &DeleteParams::default())
                .await?;
            Ok(())
        },
    )
    .await
}

#[test]
fn a_binding_that_is_not_ready_copies_nothing() -> anyhow::Result<()> {
    let entries = vec![entry(Secrets, FromProvider, &["s"], &[])];
    let scenario = Scenario::unbound("rel-not-ready").related(entries);
    scenario.run(async |s| {
        put_plain_secret(&s.provider, s.ns(), "s", &[]).await?;
        // Engaged, but the provider does not export the listed API: not Ready.
        s.export().await?;
        s.stack.engage(&[]);
        s.create_binding(&s.new_binding()).await?;
        s.binding_until("the Binding reconciled, not Ready", |b| {
            condition(b, "Ready").is_some_and(|c| c.status != "True")
        })
        .await?;
        none_of(&s.consumer, &[(s.ns(), "s")]).await?;
        // Ready once the API is exported: then it copies.
        s.engage();
        wait_secret(&s.consumer, s.ns(), "s").await?;
        Ok(())
    })
}
