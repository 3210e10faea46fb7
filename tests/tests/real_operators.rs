//! Real operators on the provider and a GitOps tool on the consumer, one test per promise.
//!
//! Two operators built from their Go modules run against the provider apiserver: trust-manager
//! (cert-manager's trust bundle operator) serves `bundles.trust.cert-manager.io` and mints
//! Secrets (`trust.cert-manager.io/bundle` labelled), which the binding copies back to the
//! consumer; kro serves `credentials.kro.run`, an API it installs from a graph, and holds its
//! finalizer on each instance. The consumer objects are written as GitOps tools write them, by
//! the real kubectl: server-side apply under Argo CD's field manager, and client-side apply.
//!
//! One konnector stack, both operators and one ClusterBinding serve every test of this binary
//! (a consumer CRD belongs to one Connection); each test has its own objects and namespaces.

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
    BUNDLES, CREDENTIALS, KRO_FINALIZER, Operator, bundle_resource, bundles_export, ca_certificate,
    credential_resource, credentials_export, pem_body,
};
use kbind_tests::syncenv::{
    Stack, ensure_namespace, event_note, gone, holds_syncer_finalizer, wait_for,
};
use kbind_tests::testenv::{ClusterPair, shared_pair};
use konnector::api::{RelatedDirection, RelatedResource, RelatedResourceKind, RelatedSelector};
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
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

/// The label trust-manager puts on every Secret it writes, valued with the bundle's name.
const BUNDLE_LABEL: &str = "trust.cert-manager.io/bundle";

/// What every test shares: the konnector stack on its own runtime, the operators, the pair.
struct World {
    pair: &'static ClusterPair,
    trust_manager: Operator,
    kro: Operator,
    _stack: Stack,
    _runtime: tokio::runtime::Runtime,
}

/// Starts the shared stack, the operators and the Ready ClusterBinding once per binary.
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
    let (stack, trust_manager, kro) = runtime.block_on(async {
        let dir = pair.root().join("operators");
        std::fs::create_dir_all(&dir)?;
        let trust_manager = Operator::trust_manager(&pair.provider, TRUST_NAMESPACE, &dir).await?;
        let kro = Operator::kro(&pair.provider, &dir).await?;
        let stack = Stack::start(pair, STACK).await?;
        stack.engage_exports(vec![bundles_export(), credentials_export()]);
        let mut binding = stack.cluster_binding_of(STACK, &[BUNDLES, CREDENTIALS]);
        binding.spec.spec.related_resources = vec![minted_secrets()];
        stack
            .create_ready_cluster_binding(&binding)
            .await
            .with_context(|| format!("{}\n{}", trust_manager.log_tail(), kro.log_tail()))?;
        anyhow::Ok((stack, trust_manager, kro))
    })?;
    Ok(World {
        pair,
        trust_manager,
        kro,
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

/// Runs a test body on a runtime of its own against the shared world; a failure carries the
/// operators' log tails.
fn run(body: impl AsyncFnOnce(&World, Clients) -> anyhow::Result<()>) -> anyhow::Result<()> {
    let world = world()?;
    kbind_tests::runtime()?.block_on(async {
        let clients = Clients {
            provider: world.pair.provider.client().await?,
            consumer: world.pair.consumer.client().await?,
        };
        body(world, clients).await.map_err(|e| {
            let logs = [world.trust_manager.log_tail(), world.kro.log_tail()];
            anyhow!("{e:?}\n\n{}", logs.join("\n"))
        })
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

fn credentials(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &credential_resource())
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

#[test]
fn an_operator_s_finalizer_holds_a_consumer_deletion_until_it_releases_the_copy()
-> anyhow::Result<()> {
    run(async |w, c| {
        let (name, ns) = ("rop-final", "rop-kro");
        ensure_namespace(&c.consumer, ns).await?;
        let manifest = json!({
            "apiVersion": "kro.run/v1alpha1",
            "kind": "Credential",
            "metadata": { "name": name, "namespace": ns },
            "spec": { "password": "one" },
        });
        apply_server_side(&w.pair.consumer, ARGO_MANAGER, &manifest).await?;
        // kro serves the copy: its finalizer on it, the Secret its graph makes beside it, and
        // its Ready condition observed at the consumer object's generation.
        let copies = credentials(&c.provider, ns);
        let secret = format!("{name}-credential");
        wait_for(
            "kro's finalizer on the copy and its Secret",
            WAIT,
            || async {
                let copy = copies.get_opt(name).await?;
                let held = copy.is_some_and(|o| o.finalizers().iter().any(|f| f == KRO_FINALIZER));
                let made = secret_key(&c.provider, ns, &secret, "password").await;
                Ok((held && made.as_deref() == Some("one")).then_some(()))
            },
        )
        .await?;
        wait_for("kro's Ready on the consumer object", WAIT, || async {
            let obj = credentials(&c.consumer, ns).get(name).await?;
            let ready = condition(&obj, "Ready").is_some_and(|c| {
                c["status"] == "True" && c["observedGeneration"].as_i64() == obj.metadata.generation
            });
            Ok(ready.then_some(()))
        })
        .await?;
        // kro hangs, and the GitOps tool prunes the object.
        w.kro.pause()?;
        let waited = async {
            let args = ["delete", CREDENTIALS, name, "-n", ns, "--wait=false"];
            kubectl(&w.pair.consumer, &args, "").await?;
            let note =
                event_note(&c.consumer, (ns, name), "ProviderFinalizers", None, WAIT).await?;
            // The Event and the status are two writes; the condition may land a moment later.
            let waiting = wait_for("Synced=False ProviderFinalizers", WAIT, || async {
                let obj = credentials(&c.consumer, ns).get(name).await?;
                let synced = condition(&obj, "Synced").unwrap_or_default();
                Ok((synced["reason"] == "ProviderFinalizers").then_some(obj))
            })
            .await?;
            anyhow::ensure!(
                waiting.metadata.deletion_timestamp.is_some(),
                "not deleting"
            );
            let synced = condition(&waiting, "Synced").unwrap_or_default();
            for said in [
                note.as_str(),
                synced["message"].as_str().unwrap_or_default(),
            ] {
                anyhow::ensure!(said.contains(KRO_FINALIZER), "{said}");
            }
            anyhow::Ok(())
        }
        .await;
        w.kro.resume()?;
        waited?;
        // kro deletes what the instance made and releases the copy; then the object goes.
        gone(&copies, name).await?;
        gone(&credentials(&c.consumer, ns), name).await?;
        assert_eq!(secret_key(&c.provider, ns, &secret, "password").await, None);
        Ok(())
    })
}
