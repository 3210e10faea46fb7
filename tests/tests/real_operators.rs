//! A real operator on the provider and a GitOps tool on the consumer, one test per promise.
//!
//! trust-manager (cert-manager's trust bundle operator, built from its Go module) runs against
//! the provider apiserver and serves `bundles.trust.cert-manager.io`, bound through one
//! ClusterBinding that also copies the Secrets it mints (`trust.cert-manager.io/bundle` labelled)
//! back to the consumer. The consumer objects are written as GitOps tools write them, by the
//! real kubectl: server-side apply under Argo CD's field manager, and client-side apply.
//!
//! One konnector stack, one trust-manager and one binding serve every test of this binary (a
//! consumer CRD belongs to one Connection); each test has its own bundles and namespaces.

use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kbind_tests::gitops::{
    ARGO_MANAGER, KUBECTL_CLIENT_SIDE_MANAGER, LAST_APPLIED_ANNOTATION, apply_client_side,
    apply_server_side, fields_beyond_konnector, kubectl, managers,
};
use kbind_tests::operators::{
    BUNDLE_LABEL, BUNDLES, TrustManager, bundle_resource, bundles_export, ca_certificate, pem_body,
};
use kbind_tests::syncenv::{Stack, ensure_namespace, gone, holds_syncer_finalizer, wait_for};
use kbind_tests::testenv::{ClusterPair, shared_pair};
use konnector::api::{RelatedDirection, RelatedResource, RelatedResourceKind, RelatedSelector};
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

/// The stack's name: its Connection and ClusterBinding.
const STACK: &str = "real-operators";
/// Where trust-manager reads bundle sources from (none of these tests uses one).
const TRUST_NAMESPACE: &str = "rop-trust";
/// How long the operator and the konnector may take to answer a change.
const WAIT: Duration = Duration::from_secs(60);
/// How long a re-apply is watched for writes that follow it: more than the stack's resync
/// interval (5 s) and binding period (2 s).
const SETTLE: Duration = Duration::from_secs(7);

/// What every test shares: the konnector stack on its own runtime, trust-manager, the pair.
struct World {
    pair: &'static ClusterPair,
    trust_manager: TrustManager,
    _stack: Stack,
    _runtime: tokio::runtime::Runtime,
}

/// Starts the shared stack, trust-manager and the Ready ClusterBinding once per binary.
fn world() -> anyhow::Result<&'static World> {
    static WORLD: OnceLock<Result<World, String>> = OnceLock::new();
    WORLD
        .get_or_init(|| start_world().map_err(|e| format!("{e:?}")))
        .as_ref()
        .map_err(|e| anyhow!("starting the real-operator world: {e}"))
}

fn start_world() -> anyhow::Result<World> {
    let pair = shared_pair()?;
    let runtime = kbind_tests::runtime()?;
    let (stack, trust_manager) = runtime.block_on(async {
        let dir = pair.root().join("trust-manager");
        std::fs::create_dir_all(&dir)?;
        let trust_manager = TrustManager::start(&pair.provider, TRUST_NAMESPACE, &dir).await?;
        let stack = Stack::start(pair, STACK).await?;
        stack.engage_exports(vec![bundles_export()]);
        let mut binding = stack.cluster_binding_of(STACK, &[BUNDLES]);
        binding.spec.spec.related_resources = vec![minted_secrets()];
        stack
            .create_ready_cluster_binding(&binding)
            .await
            .with_context(|| trust_manager.log_tail())?;
        anyhow::Ok((stack, trust_manager))
    })?;
    Ok(World {
        pair,
        trust_manager,
        _stack: stack,
        _runtime: runtime,
    })
}

/// The related entry for the Secrets trust-manager mints: whatever carries its bundle label.
fn minted_secrets() -> RelatedResource {
    RelatedResource {
        group: String::new(),
        resource: RelatedResourceKind::Secrets,
        direction: RelatedDirection::FromProvider,
        selector: RelatedSelector {
            label_selector: Some(LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: BUNDLE_LABEL.into(),
                    operator: "Exists".into(),
                    values: None,
                }]),
                match_labels: None,
            }),
            names: vec![],
        },
    }
}

/// Runs a test body on a runtime of its own against the shared world; a failure carries
/// trust-manager's log tail.
fn run(body: impl AsyncFnOnce(&World, Clients) -> anyhow::Result<()>) -> anyhow::Result<()> {
    let world = world()?;
    kbind_tests::runtime()?.block_on(async {
        let clients = Clients {
            provider: world.pair.provider.client().await?,
            consumer: world.pair.consumer.client().await?,
        };
        body(world, clients)
            .await
            .map_err(|e| anyhow!("{e:?}\n\n{}", world.trust_manager.log_tail()))
    })
}

/// Admin clients of both clusters, on the test's own runtime.
struct Clients {
    provider: Client,
    consumer: Client,
}

fn bundles(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &bundle_resource())
}

/// A Bundle manifest distributing `ca` to the namespaces labelled `rop.test/bundle: <name>`,
/// as a Secret (`secret`) or a ConfigMap.
fn bundle(name: &str, ca: &str, secret: bool) -> Value {
    let target = json!({ "key": "ca.crt" });
    let kind = if secret { "secret" } else { "configMap" };
    json!({
        "apiVersion": "trust.cert-manager.io/v1alpha1",
        "kind": "Bundle",
        "metadata": { "name": name },
        "spec": {
            "sources": [{ "inLine": ca }],
            "target": {
                kind: target,
                "namespaceSelector": { "matchLabels": { "rop.test/bundle": name } },
            },
        },
    })
}

/// The condition of `type_` in `obj`'s status.
fn condition(obj: &DynamicObject, type_: &str) -> Option<Value> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

/// Waits until the consumer object `name` carries trust-manager's `Synced=True` observed at
/// its own current generation, and returns it.
async fn observed_current(consumer: &Client, name: &str) -> anyhow::Result<DynamicObject> {
    let what = format!("{name}: trust-manager's Synced observed at the consumer's generation");
    wait_for(&what, WAIT, || async {
        let obj = bundles(consumer).get(name).await?;
        let synced = condition(&obj, "Synced");
        let current = synced.is_some_and(|c| {
            c["status"] == "True"
                && c["reason"] == "Synced"
                && c["observedGeneration"].as_i64() == obj.metadata.generation
        });
        Ok(current.then_some(obj))
    })
    .await
}

/// The value of `key` in Secret `namespace/name`, once it exists.
async fn secret_key(client: &Client, namespace: &str, name: &str, key: &str) -> Option<String> {
    let secret = Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .ok()??;
    let bytes = secret.data?.get(key)?.0.clone();
    String::from_utf8(bytes).ok()
}

/// Fails unless the object `name` is still at `resource_version`: nobody wrote it since.
async fn still_at(consumer: &Client, name: &str, resource_version: &str) -> anyhow::Result<()> {
    let now = bundles(consumer).get(name).await?;
    anyhow::ensure!(
        now.metadata.resource_version.as_deref() == Some(resource_version),
        "{name} was written after a re-apply of the same manifest: managers {:?}",
        managers(&now)
    );
    Ok(())
}

#[test]
fn operator_conditions_come_back_observed_at_the_consumer_s_generation() -> anyhow::Result<()> {
    run(async |_, c| {
        let name = "rop-status";
        let manifest = bundle(name, &ca_certificate("rop-status one")?, false);
        apply_server_side(&world()?.pair.consumer, ARGO_MANAGER, &manifest).await?;
        let first = observed_current(&c.consumer, name).await?;
        assert_eq!(first.metadata.generation, Some(1));
        // Someone edits the provider copy; the konnector repairs it, so the copy has counted
        // two more generations than the consumer object.
        let drift =
            json!({ "spec": { "sources": [{ "inLine": ca_certificate("rop-status drift")? }] } });
        let params = PatchParams::default();
        bundles(&c.provider)
            .patch(name, &params, &Patch::Merge(&drift))
            .await?;
        let repaired = wait_for(
            "the copy repaired and observed by trust-manager",
            WAIT,
            || async {
                let copy = bundles(&c.provider).get(name).await?;
                let observed =
                    condition(&copy, "Synced").and_then(|c| c["observedGeneration"].as_i64());
                let repaired = copy.data["spec"] == manifest["spec"]
                    && copy.metadata.generation >= Some(3)
                    && observed == copy.metadata.generation;
                Ok(repaired.then_some(copy))
            },
        )
        .await?;
        let consumer = observed_current(&c.consumer, name).await?;
        assert_eq!(consumer.metadata.generation, Some(1));
        assert_ne!(repaired.metadata.generation, consumer.metadata.generation);
        // A new generation of the consumer object is observed as that generation.
        let changed = bundle(name, &ca_certificate("rop-status two")?, false);
        apply_server_side(&world()?.pair.consumer, ARGO_MANAGER, &changed).await?;
        let second = observed_current(&c.consumer, name).await?;
        assert_eq!(second.metadata.generation, Some(2));
        Ok(())
    })
}

#[test]
fn operator_minted_secret_reaches_the_consumer_and_follows_a_reissue() -> anyhow::Result<()> {
    run(async |w, c| {
        let (name, ns) = ("rop-secret", "rop-secret-target");
        ensure_namespace(&c.consumer, ns).await?;
        ensure_namespace(&c.provider, ns).await?;
        let label = json!({ "metadata": { "labels": { "rop.test/bundle": name } } });
        let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(c.provider.clone());
        namespaces
            .patch(ns, &PatchParams::default(), &Patch::Merge(&label))
            .await?;
        for (round, ca) in [
            ca_certificate("rop-secret one")?,
            ca_certificate("rop-secret two")?,
        ]
        .iter()
        .enumerate()
        {
            // Round 0 creates the bundle, round 1 changes its CAs: trust-manager re-issues the
            // Secret on the provider, and the consumer copy follows it.
            apply_server_side(&w.pair.consumer, ARGO_MANAGER, &bundle(name, ca, true)).await?;
            let what = format!("round {round}: the minted Secret on the consumer");
            let copied = wait_for(&what, WAIT, || async {
                let got = secret_key(&c.consumer, ns, name, "ca.crt").await;
                Ok(got.filter(|pem| pem_body(pem) == pem_body(ca)))
            })
            .await?;
            let minted = secret_key(&c.provider, ns, name, "ca.crt").await;
            assert_eq!(minted.as_deref(), Some(copied.as_str()), "round {round}");
        }
        Ok(())
    })
}

#[test]
fn gitops_server_side_applies_need_no_force_and_a_reapply_writes_nothing() -> anyhow::Result<()> {
    run(async |w, c| {
        let name = "rop-argo";
        let manifest = bundle(name, &ca_certificate("rop-argo one")?, false);
        apply_server_side(&w.pair.consumer, ARGO_MANAGER, &manifest).await?;
        let synced = observed_current(&c.consumer, name).await?;
        anyhow::ensure!(holds_syncer_finalizer(&synced), "no syncer finalizer");
        // The tool re-applies its manifest every few seconds, without --force-conflicts: no
        // conflict, and no write by anyone after it.
        for _ in 0..3 {
            apply_server_side(&w.pair.consumer, ARGO_MANAGER, &manifest).await?;
            tokio::time::sleep(SETTLE / 3).await;
        }
        let version = synced.metadata.resource_version.clone().unwrap_or_default();
        still_at(&c.consumer, name, &version).await?;
        // The konnector owns only its finalizer, its annotations and status.
        let now = bundles(&c.consumer).get(name).await?;
        assert_eq!(
            fields_beyond_konnector(&now, ARGO_MANAGER),
            Vec::<String>::new()
        );
        let owners = managers(&now);
        let expected_owners = [
            "argocd-controller Apply",
            "kbind-konnector Update",
            "kbind-konnector Apply status",
        ];
        for expected in expected_owners {
            assert!(
                owners.iter().any(|m| m == expected),
                "{expected} in {owners:?}"
            );
        }
        // A change the tool applies reaches the copy; the finalizer it never lists stays.
        let changed = bundle(name, &ca_certificate("rop-argo two")?, false);
        apply_server_side(&w.pair.consumer, ARGO_MANAGER, &changed).await?;
        wait_for("the changed spec on the provider copy", WAIT, || async {
            let copy = bundles(&c.provider).get(name).await?;
            Ok((copy.data["spec"] == changed["spec"]).then_some(()))
        })
        .await?;
        let after = observed_current(&c.consumer, name).await?;
        anyhow::ensure!(
            holds_syncer_finalizer(&after),
            "the re-apply dropped the finalizer"
        );
        Ok(())
    })
}

#[test]
fn client_side_apply_keeps_the_konnector_s_fields_and_a_reapply_writes_nothing()
-> anyhow::Result<()> {
    run(async |w, c| {
        let name = "rop-kubectl";
        let manifest = bundle(name, &ca_certificate("rop-kubectl one")?, false);
        apply_client_side(&w.pair.consumer, &manifest).await?;
        let synced = observed_current(&c.consumer, name).await?;
        let annotations = synced.metadata.annotations.clone().unwrap_or_default();
        anyhow::ensure!(
            annotations.contains_key(LAST_APPLIED_ANNOTATION),
            "no last-applied"
        );
        let out = apply_client_side(&w.pair.consumer, &manifest).await?;
        anyhow::ensure!(out.contains("unchanged"), "kubectl apply said: {out}");
        tokio::time::sleep(SETTLE).await;
        let version = synced.metadata.resource_version.clone().unwrap_or_default();
        still_at(&c.consumer, name, &version).await?;
        let now = bundles(&c.consumer).get(name).await?;
        let beyond = fields_beyond_konnector(&now, KUBECTL_CLIENT_SIDE_MANAGER);
        assert_eq!(beyond, Vec::<String>::new());
        // The three-way merge of a changed manifest keeps the konnector's finalizer.
        let changed = bundle(name, &ca_certificate("rop-kubectl two")?, false);
        apply_client_side(&w.pair.consumer, &changed).await?;
        let after = observed_current(&c.consumer, name).await?;
        assert_eq!(after.metadata.generation, Some(2));
        anyhow::ensure!(
            holds_syncer_finalizer(&after),
            "the apply dropped the finalizer"
        );
        // Pruning it (kubectl delete) deletes the provider copy, then the object.
        kubectl(
            &w.pair.consumer,
            &["delete", BUNDLES, name, "--wait=false"],
            "",
        )
        .await?;
        gone(&bundles(&c.provider), name).await?;
        gone(&bundles(&c.consumer), name).await
    })
}
