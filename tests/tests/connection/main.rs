//! The Connection controller against real kube-apiservers (one shared cluster pair and
//! konnector), one test per branch of its reconciliation: credentials and identity, discovery
//! and schemas, lifecycle (autoBind, heartbeat, deletion, what exports cannot reach), and a
//! binding's API whose schema synthesis refuses. Each
//! failure's Warning Event is checked with its condition: one when the Connection enters it,
//! not one per periodic reconcile.

mod credentials;
mod discovery;
mod lifecycle;
mod synthesis;

use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use kbind_tests::access::{expect_refused, grant};
use kbind_tests::eventually;
use kbind_tests::fixtures::*;
use kbind_tests::syncenv::{TestApi, cluster_uid, event_note, events_for, says, stays, wait_for};
use kbind_tests::testenv::{Cluster, ClusterPair, shared_pair};
use konnector::api::names::{
    CLEANUP_FINALIZER, CONNECTION_ANNOTATION, EXPORTED_LABEL, MANAGED_LABEL,
    PROVIDER_CLUSTER_UID_ANNOTATION, heartbeat_lease_name,
};
use konnector::api::{Binding, BindingSpec, ClusterBinding, Connection, SchemaPolicy};

/// Runs `body` against the shared pair (its konnector running) with the consumer's admin client
/// and a Connection name of its own from `prefix`; a failure carries the apiservers' log tails.
async fn on_consumer(
    prefix: &str,
    body: impl AsyncFnOnce(&'static ClusterPair, &Client, String) -> Result<()>,
) -> Result<()> {
    let pair = shared_pair()?;
    shared_konnector(pair)?;
    pair.diagnose(async { body(pair, &pair.consumer.client().await?, unique(prefix)).await })
        .await
}

/// [`on_consumer`] with a provider cluster of its own named `name` and its admin client too.
async fn with_private_provider(
    name: &'static str,
    body: impl AsyncFnOnce(&'static ClusterPair, &Client, &Cluster, &Client, String) -> Result<()>,
) -> Result<()> {
    let cluster = tokio::task::spawn_blocking(move || private_cluster(name)).await??;
    let provider = cluster.client().await?;
    on_consumer(name, async |pair, consumer, connection| {
        body(pair, consumer, &cluster, &provider, connection).await
    })
    .await
}

/// Creates Connection `name` reading the Secret `name`, written with `kubeconfig` if given.
async fn connect_with(
    consumer: &Client,
    name: &str,
    kubeconfig: Option<&str>,
    schema: SchemaPolicy,
) -> Result<()> {
    if let Some(kubeconfig) = kubeconfig {
        put_kubeconfig_secret(consumer, name, kubeconfig).await?;
    }
    let connection = connection(name, name, schema, false);
    let connections: Api<Connection> = Api::all(consumer.clone());
    connections.create(&Default::default(), &connection).await?;
    Ok(())
}

/// Connects `name` as a new provider user granted exactly `rules` (a list of RBAC rules).
async fn connect_as(
    pair: &ClusterPair,
    consumer: &Client,
    name: &str,
    rules: Value,
    schema: SchemaPolicy,
) -> Result<()> {
    let user = pair.provider.mint_user(name, &[])?;
    let provider = pair.provider.client().await?;
    grant(&provider, None, name, rules, ("User", name)).await?;
    connect_with(consumer, name, Some(&user.kubeconfig_yaml()?), schema).await
}

/// Connects `name` to `provider` with `pullPolicy: All`, the schema `source` and `update`
/// policy (as a Connection spells them), and waits until its schemas are in sync.
async fn pull_all(
    consumer: &Client,
    provider: &Cluster,
    name: &str,
    source: &str,
    update: &str,
) -> Result<Connection> {
    let schema = json!({"source": source, "pullPolicy": "All", "updatePolicy": update});
    let schema: SchemaPolicy = serde_json::from_value(schema)?;
    connect(consumer, provider, name, schema, false).await?;
    wait_reason(consumer, name, "SchemaInSync=True", "AsExpected").await
}

/// Whether each of the Connection's conditions `states` (`Type=Status`, space-separated) has
/// `reason`: `"SecretValid=False Ready=False"` for a failure that makes it unready.
fn holds(connection: &Connection, states: &str, reason: &str) -> bool {
    let mut states = states.split(' ').map(|state| state.split_once('='));
    states.all(|state| state.is_some_and(|(t, s)| has_condition(connection, t, s, reason)))
}

/// Waits until the Connection [`holds`] `state` (one or more `Type=Status`) with `reason`.
async fn wait_reason(client: &Client, name: &str, state: &str, reason: &str) -> Result<Connection> {
    let what = format!("{state} {reason}");
    wait_connection(client, name, &what, |c| holds(c, state, reason)).await
}

/// The message of `connection`'s condition `type_`, empty (failing any check) if it has none.
fn message<'a>(connection: &'a Connection, type_: &str) -> &'a str {
    condition(connection, type_).map_or("", |c| c.message.as_str())
}

/// The schema source the Connection reports in effect.
fn active_source(connection: &Connection) -> Option<&str> {
    connection.status.as_ref()?.active_schema_source.as_deref()
}

/// The names of the exports the Connection reports.
fn exported_names(connection: &Connection) -> Vec<String> {
    let exported = connection.status.iter().flat_map(|s| &s.exported_apis);
    exported.map(|a| a.name.clone()).collect()
}

/// Merge-patches the spec of Connection `name` with `spec`: a user changing a policy.
async fn patch_spec(consumer: &Client, name: &str, spec: Value) -> Result<()> {
    let patch = Patch::Merge(json!({ "spec": spec }));
    let connections: Api<Connection> = Api::all(consumer.clone());
    connections.patch(name, &Default::default(), &patch).await?;
    Ok(())
}

/// Labels the provider CRD `name` exported or removes the label: a provider changing exports.
async fn set_exported(provider: &Client, name: &str, exported: bool) -> Result<()> {
    let label = exported.then_some("true");
    let patch = Patch::Merge(json!({"metadata": {"labels": {EXPORTED_LABEL: label}}}));
    let crds: Api<CustomResourceDefinition> = Api::all(provider.clone());
    crds.patch(name, &PatchParams::default(), &patch).await?;
    Ok(())
}

/// Whether the credential Secret `name` carries the Connection cleanup finalizer.
async fn secret_guarded(consumer: &Client, name: &str) -> Result<bool> {
    let secrets = Api::<Secret>::namespaced(consumer.clone(), SECRET_NAMESPACE);
    let secret = secrets.get(name).await?;
    Ok(secret.finalizers().contains(&CLEANUP_FINALIZER.to_string()))
}

async fn delete_connection(consumer: &Client, name: &str) -> Result<()> {
    let connections: Api<Connection> = Api::all(consumer.clone());
    connections.delete(name, &DeleteParams::default()).await?;
    Ok(())
}

/// The spec of a Binding or ClusterBinding of `connection` listing `api`.
fn binding_spec(connection: &str, api: &str) -> Result<BindingSpec> {
    let spec = json!({"connectionRef": {"name": connection}, "apis": [{"name": api}]});
    Ok(serde_json::from_value(spec)?)
}

/// Creates a ClusterBinding `name` of the consumer's own, for the Connection `<prefix>-elsewhere`
/// and API `things.<prefix>.example.org`: one unrelated to the Connection under test.
async fn elsewhere_cluster_binding(consumer: &Client, name: &str, prefix: &str) -> Result<()> {
    let api = format!("things.{prefix}.example.org");
    let spec = binding_spec(&format!("{prefix}-elsewhere"), &api)?;
    let bindings: Api<ClusterBinding> = Api::all(consumer.clone());
    let binding = ClusterBinding::new(name, spec.into());
    bindings.create(&PostParams::default(), &binding).await?;
    Ok(())
}

/// The API names a ClusterBinding lists.
fn api_names(binding: &ClusterBinding) -> Vec<&str> {
    binding.spec.apis.iter().map(|a| a.name.as_str()).collect()
}

/// Waits until ClusterBinding `name` exists and `check` accepts it, returning it.
async fn wait_cluster_binding(
    consumer: &Client,
    name: &str,
    check: impl Fn(&ClusterBinding) -> bool,
) -> Result<ClusterBinding> {
    let bindings: Api<ClusterBinding> = Api::all(consumer.clone());
    let accepted = || async { Ok(bindings.get_opt(name).await?.filter(|b| check(b))) };
    wait_for(&format!("ClusterBinding {name}"), CONVERGE, accepted).await
}

/// Where a CRD's `spec` schema is, in its JSON.
const SPEC_SCHEMA: &str = "/spec/versions/0/schema/openAPIV3Schema/properties/spec";

/// The exported Widget CRD of `group` with one more spec field, `shape`: a schema change.
fn reshaped_widget_crd(group: &str) -> Result<CustomResourceDefinition> {
    let mut crd = serde_json::to_value(widget_crd(group, "Widget", true)?)?;
    let spec = crd.pointer_mut(SPEC_SCHEMA).context("spec schema")?;
    spec["properties"]["shape"] = json!({"type": "string"});
    Ok(serde_json::from_value(crd)?)
}

/// Whether the consumer's CRD `name` has the `shape` field of [`reshaped_widget_crd`].
async fn reshaped(consumer: &Client, name: &str) -> Result<bool> {
    let crds: Api<CustomResourceDefinition> = Api::all(consumer.clone());
    let crd = serde_json::to_value(crds.get(name).await?)?;
    Ok(crd
        .pointer(&format!("{SPEC_SCHEMA}/properties/shape"))
        .is_some())
}

/// Waits until the consumer's CRD `name` has followed [`reshaped_widget_crd`].
async fn wait_reshaped(consumer: &Client, name: &str) -> Result<()> {
    let what = format!("the consumer CRD {name} to follow the provider");
    let followed = || async { Ok(reshaped(consumer, name).await?.then_some(())) };
    wait_for(&what, CONVERGE, followed).await
}

/// Waits for a `type_` Event with `reason` on Connection `name`, its note saying each of `note`;
/// several periodic reconciles (1 s apart in tests) later it must still be the one, not a series.
async fn published_once(
    consumer: &Client,
    name: &str,
    type_: &str,
    reason: &str,
    note: &[&str],
) -> Result<Event> {
    let first = event_note(consumer, ("default", name), reason, Some(type_), CONVERGE).await?;
    says(&first, note);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut all = events_for(consumer, None, name).await?;
    all.retain(|e| e.reason.as_deref() == Some(reason));
    let once = all.len() == 1 && all[0].series.is_none();
    assert!(once, "one {reason} Event, published once: {all:?}");
    let regarding = all[0].regarding.as_ref().and_then(|r| r.kind.as_deref());
    assert_eq!(regarding, Some("Connection"), "about the Connection");
    Ok(all.remove(0))
}

/// Whether `provider` holds no heartbeat: no namespace `namespace`, no Lease `lease` anywhere.
async fn no_heartbeat(provider: &Client, namespace: &str, lease: &str) -> Result<bool> {
    let namespaces: Api<Namespace> = Api::all(provider.clone());
    let leases: Api<Lease> = Api::all(provider.clone());
    let written = leases.list(&Default::default()).await?.items;
    let written = written.iter().any(|l| l.name_any() == lease);
    Ok(namespaces.get_opt(namespace).await?.is_none() && !written)
}
