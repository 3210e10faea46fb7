//! The Connection controller against real kube-apiservers, one test per branch of its
//! reconciliation: credentials, identity pinning, discovery, schema installation, autoBind,
//! heartbeat, deletion and Events.
//!
//! One test binary (one shared cluster pair and konnector), five files: credentials and
//! identity, discovery and schemas, what exports cannot reach on the consumer, lifecycle
//! (autoBind, heartbeat, deletion), Events of the other failures.

mod credentials;
mod discovery;
mod events;
mod exports;
mod lifecycle;

use std::fmt::Debug;
use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use kbind_tests::access::grant;
use kbind_tests::eventually;
use kbind_tests::fixtures::*;
use kbind_tests::syncenv::{cluster_uid, events_for, holds_syncer_finalizer, wait_for};
use kbind_tests::testenv::{Cluster, ClusterPair, shared_pair};
use konnector::api::names::{
    CLEANUP_FINALIZER, CONNECTION_ANNOTATION, EXPORTED_LABEL, MANAGED_LABEL, heartbeat_lease_name,
};
use konnector::api::{
    Binding, BindingSpec, ClusterBinding, ConditionType, Connection, ExportedApi, PullPolicy,
    SchemaPolicy, SchemaSource, UpdatePolicy,
};

/// Runs `body` against the shared pair (its konnector running) with the consumer's admin
/// client; a failure carries the apiservers' log tails.
async fn on_consumer(
    body: impl AsyncFnOnce(&'static ClusterPair, &kube::Client) -> Result<()>,
) -> Result<()> {
    let pair = shared_pair()?;
    shared_konnector(pair)?;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        body(pair, &consumer).await
    })
    .await
}

/// Runs `body` against the shared pair's consumer and a provider cluster of its own named
/// `name` (started first, stopped after): the pair, the consumer's admin client, the private
/// cluster and its admin client; a failure carries the pair's apiserver log tails.
async fn with_private_provider(
    name: &'static str,
    body: impl AsyncFnOnce(&'static ClusterPair, &kube::Client, &Cluster, &kube::Client) -> Result<()>,
) -> Result<()> {
    let pair = shared_pair()?;
    shared_konnector(pair)?;
    let cluster = tokio::task::spawn_blocking(move || private_cluster(name)).await??;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let provider = cluster.client().await?;
        body(pair, &consumer, &cluster, &provider).await
    })
    .await
}

/// Creates Connection `name` reading the Secret `name`, first written with `kubeconfig`
/// (none written if `None`).
async fn connect_with(
    consumer: &kube::Client,
    name: &str,
    kubeconfig: Option<&str>,
    schema: SchemaPolicy,
) -> Result<()> {
    if let Some(kubeconfig) = kubeconfig {
        put_kubeconfig_secret(consumer, name, kubeconfig).await?;
    }
    let connection = connection(name, name, schema, false);
    Api::<Connection>::all(consumer.clone())
        .create(&PostParams::default(), &connection)
        .await?;
    Ok(())
}

/// Connects `name` as a new provider user granted exactly `rules` (a list of RBAC rules).
async fn connect_as(
    pair: &ClusterPair,
    consumer: &kube::Client,
    name: &str,
    rules: Value,
    schema: SchemaPolicy,
) -> Result<()> {
    let user = pair.provider.mint_user(name, &[])?;
    let provider = pair.provider.client().await?;
    grant(&provider, None, name, rules, ("User", name)).await?;
    connect_with(consumer, name, Some(&user.kubeconfig_yaml()?), schema).await
}

/// Connects `name` to `provider` with `pullPolicy: All` and the schema `source` and
/// `update_policy`, and waits until its schemas are in sync.
async fn pull_all(
    consumer: &kube::Client,
    provider: &Cluster,
    name: &str,
    (source, update_policy): (SchemaSource, UpdatePolicy),
) -> Result<()> {
    let pull_policy = PullPolicy::All;
    let schema = SchemaPolicy {
        source,
        pull_policy,
        update_policy,
    };
    connect(consumer, provider, name, schema, false).await?;
    wait_reason(consumer, name, "SchemaInSync=True", "AsExpected").await?;
    Ok(())
}

/// A schema policy discovering from `source`, the other settings defaulted.
fn schema(source: SchemaSource) -> SchemaPolicy {
    SchemaPolicy {
        source,
        ..SchemaPolicy::default()
    }
}

fn crd_source() -> SchemaPolicy {
    schema(SchemaSource::Crd)
}

/// Connects `name` to `provider` with its admin kubeconfig and CRD discovery, and waits until
/// it is Ready.
async fn connect_ready(
    consumer: &kube::Client,
    provider: &Cluster,
    name: &str,
) -> Result<Connection> {
    connect(consumer, provider, name, crd_source(), false).await?;
    wait_ready(consumer, name).await
}

/// Waits until the Connection's condition `type_status` (`Type=Status`) has `reason`.
async fn wait_reason(
    consumer: &kube::Client,
    name: &str,
    type_status: &str,
    reason: &str,
) -> Result<Connection> {
    let (type_, status) = type_status.split_once('=').context("Type=Status")?;
    wait_connection(consumer, name, &format!("{type_status} {reason}"), |c| {
        has_condition(c, type_, status, reason)
    })
    .await
}

/// Waits until the Connection's condition `type_status` has `reason` and the Connection is
/// not Ready for that same reason.
async fn wait_not_ready(
    consumer: &kube::Client,
    name: &str,
    type_status: &str,
    reason: &str,
) -> Result<Connection> {
    let (type_, status) = type_status.split_once('=').context("Type=Status")?;
    let what = format!("{type_status} and Ready=False {reason}");
    wait_connection(consumer, name, &what, |c| {
        has_condition(c, type_, status, reason) && has_condition(c, "Ready", "False", reason)
    })
    .await
}

/// The message of `connection`'s condition `type_`; an error if it has none.
fn message<'a>(connection: &'a Connection, type_: &str) -> Result<&'a str> {
    let condition = condition(connection, type_).context(type_.to_string())?;
    Ok(&condition.message)
}

/// The schema source the Connection reports in effect.
fn active_source(connection: &Connection) -> Option<&str> {
    connection.status.as_ref()?.active_schema_source.as_deref()
}

/// The exports the Connection reports.
fn exported(connection: &Connection) -> impl Iterator<Item = &ExportedApi> {
    connection.status.iter().flat_map(|s| &s.exported_apis)
}

fn exported_names(connection: &Connection) -> Vec<String> {
    exported(connection).map(|a| a.name.clone()).collect()
}

/// Whether the credential Secret `name` carries the Connection cleanup finalizer.
async fn secret_guarded(consumer: &kube::Client, name: &str) -> Result<bool> {
    let secrets = Api::<Secret>::namespaced(consumer.clone(), SECRET_NAMESPACE);
    let secret = secrets.get(name).await?;
    Ok(secret.finalizers().contains(&CLEANUP_FINALIZER.to_string()))
}

async fn delete_connection(consumer: &kube::Client, name: &str) -> Result<()> {
    let connections: Api<Connection> = Api::all(consumer.clone());
    connections.delete(name, &DeleteParams::default()).await?;
    Ok(())
}

/// Waits until `api` holds no object `name` (finalizers done).
async fn absent<K: Clone + Debug + DeserializeOwned>(api: &Api<K>, name: &str) -> Result<()> {
    wait_for(&format!("{name} gone"), CONVERGE, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
}

/// The spec of a Binding or ClusterBinding of `connection` listing `api`.
fn binding_spec(connection: &str, api: &str) -> Result<BindingSpec> {
    let spec = json!({"connectionRef": {"name": connection}, "apis": [{"name": api}]});
    Ok(serde_json::from_value(spec)?)
}

/// Creates a ClusterBinding `name` of the consumer's own, for the Connection
/// `<prefix>-elsewhere` and the API `things.<prefix>.example.org`: one that has nothing to do
/// with the Connection under test.
async fn elsewhere_cluster_binding(
    consumer: &kube::Client,
    name: &str,
    prefix: &str,
) -> Result<()> {
    let api = format!("things.{prefix}.example.org");
    let spec = binding_spec(&format!("{prefix}-elsewhere"), &api)?;
    let bindings: Api<ClusterBinding> = Api::all(consumer.clone());
    let binding = ClusterBinding::new(name, spec.into());
    bindings.create(&PostParams::default(), &binding).await?;
    Ok(())
}

/// The API names a ClusterBinding lists.
fn api_names(binding: &ClusterBinding) -> Vec<String> {
    binding.spec.apis.iter().map(|a| a.name.clone()).collect()
}

/// Waits until ClusterBinding `name` exists and `check` accepts it, returning it.
async fn wait_cluster_binding(
    consumer: &kube::Client,
    name: &str,
    check: impl Fn(&ClusterBinding) -> bool,
) -> Result<ClusterBinding> {
    let bindings: Api<ClusterBinding> = Api::all(consumer.clone());
    wait_for(&format!("ClusterBinding {name}"), CONVERGE, || async {
        Ok(bindings.get_opt(name).await?.filter(|b| check(b)))
    })
    .await
}

/// Where a CRD's `spec` fields are, in its JSON.
const SPEC_FIELDS: &str = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties";

/// The exported Widget CRD of `group` with one more spec field, `shape`: a provider schema
/// change.
fn reshaped_widget_crd(group: &str) -> Result<CustomResourceDefinition> {
    let mut crd = serde_json::to_value(widget_crd(group, "Widget", true)?)?;
    let fields = crd.pointer_mut(SPEC_FIELDS).context("spec fields")?;
    fields["shape"] = json!({"type": "string"});
    Ok(serde_json::from_value(crd)?)
}

/// Whether the consumer's CRD `name` has the `shape` field of [`reshaped_widget_crd`].
async fn reshaped(consumer: &kube::Client, name: &str) -> Result<bool> {
    let crds: Api<CustomResourceDefinition> = Api::all(consumer.clone());
    let crd = serde_json::to_value(crds.get(name).await?)?;
    Ok(crd.pointer(&format!("{SPEC_FIELDS}/shape")).is_some())
}

/// Waits until the consumer's CRD `name` has followed [`reshaped_widget_crd`].
async fn wait_reshaped(consumer: &kube::Client, name: &str) -> Result<()> {
    let what = format!("the consumer CRD {name} to follow the provider");
    wait_for(&what, CONVERGE, || async {
        Ok(reshaped(consumer, name).await?.then_some(()))
    })
    .await
}

/// Events on Connection `name` with `reason`.
async fn events_with(consumer: &kube::Client, name: &str, reason: &str) -> Result<Vec<Event>> {
    let mut events = events_for(consumer, None, name).await?;
    events.retain(|e| e.reason.as_deref() == Some(reason));
    Ok(events)
}

/// Waits for an Event of `type_` and `reason` on Connection `name`, then lets several
/// periodic reconciles (1 s apart in tests) pass and checks it is still the one Event with
/// that reason, published once.
async fn published_once(
    consumer: &kube::Client,
    name: &str,
    type_: &str,
    reason: &str,
) -> Result<Event> {
    let what = format!("a {type_} {reason} Event on {name}");
    let first = wait_for(&what, CONVERGE, || async {
        let events = events_with(consumer, name, reason).await?;
        Ok(events
            .into_iter()
            .find(|e| e.type_.as_deref() == Some(type_)))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let all = events_with(consumer, name, reason).await?;
    assert_eq!(all.len(), 1, "one {reason} Event: {all:?}");
    let once = all[0].series.is_none();
    assert!(once, "{reason} published once, not per reconcile: {all:?}");
    Ok(first)
}

/// Whether `provider` holds nothing of a heartbeat: no namespace `namespace`, no Lease
/// `lease` in any namespace.
async fn no_heartbeat(provider: &kube::Client, namespace: &str, lease: &str) -> Result<bool> {
    let namespaces: Api<Namespace> = Api::all(provider.clone());
    let leases: Api<Lease> = Api::all(provider.clone());
    let written = leases.list(&Default::default()).await?.items;
    let written = written.iter().any(|l| l.name_any() == lease);
    Ok(namespaces.get_opt(namespace).await?.is_none() && !written)
}

/// Whether the shared konnector holds no engagement for `connection`.
fn not_engaged(pair: &'static ClusterPair, connection: &str) -> Result<bool> {
    let engagements = &shared_konnector(pair)?.engagements;
    Ok(engagements.get(connection).is_none())
}
