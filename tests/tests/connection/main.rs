//! The Connection controller against real kube-apiservers, one test per branch of its
//! reconciliation: credentials, identity pinning, discovery, schema installation, autoBind,
//! heartbeat and deletion.
//!
//! One test binary (one shared cluster pair and konnector), four files: credentials and
//! identity, discovery and schemas, what exports cannot reach on the consumer, lifecycle
//! (autoBind, heartbeat, deletion).

mod credentials;
mod discovery;
mod events;
mod exports;
mod lifecycle;
mod schema_refresh;

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use kbind_tests::eventually;
use kbind_tests::fixtures::*;
use kbind_tests::testenv::{Cluster, ClusterPair, shared_pair};
use konnector::api::names::{
    CLEANUP_FINALIZER, CONNECTION_ANNOTATION, EXPORTED_LABEL, MANAGED_LABEL, SYNCER_FINALIZER,
};
use konnector::api::{
    ApiReference, Binding, BindingSpec, ClusterBinding, Connection, ConnectionReference,
    PullPolicy, SchemaPolicy, SchemaSource, UpdatePolicy,
};

fn setup() -> anyhow::Result<&'static ClusterPair> {
    let pair = shared_pair()?;
    shared_konnector(pair)?;
    Ok(pair)
}

/// Runs `body` against the shared pair (its konnector running) with the consumer's admin
/// client; a failure carries the apiservers' log tails.
async fn on_consumer(
    body: impl AsyncFnOnce(&'static ClusterPair, &kube::Client) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let pair = setup()?;
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
    body: impl AsyncFnOnce(
        &'static ClusterPair,
        &kube::Client,
        &Cluster,
        &kube::Client,
    ) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let pair = setup()?;
    let cluster = tokio::task::spawn_blocking(move || private_cluster(name)).await??;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let provider = cluster.client().await?;
        body(pair, &consumer, &cluster, &provider).await
    })
    .await
}

/// A ClusterBinding `name` of the consumer's own, for the Connection `<prefix>-elsewhere` and the
/// API `things.<prefix>.example.org`: one that has nothing to do with the Connection under test.
fn elsewhere_cluster_binding(name: &str, prefix: &str) -> ClusterBinding {
    ClusterBinding::new(
        name,
        BindingSpec {
            connection_ref: ConnectionReference {
                name: format!("{prefix}-elsewhere"),
            },
            apis: vec![ApiReference {
                name: format!("things.{prefix}.example.org"),
            }],
            conflict_policy: Default::default(),
            related_resources: Vec::new(),
        }
        .into(),
    )
}

/// Creates `connection` on the consumer.
async fn create_connection(
    consumer: &kube::Client,
    connection: &Connection,
) -> anyhow::Result<Connection> {
    Ok(Api::<Connection>::all(consumer.clone())
        .create(&PostParams::default(), connection)
        .await?)
}

/// Connects `name` to `provider` with `pullPolicy: All`, schemas from `source` updated under
/// `update`, and waits until its schemas are in sync.
async fn pull_all(
    consumer: &kube::Client,
    provider: &Cluster,
    name: &str,
    source: SchemaSource,
    update: UpdatePolicy,
) -> anyhow::Result<()> {
    let schema = SchemaPolicy {
        source,
        pull_policy: PullPolicy::All,
        update_policy: update,
    };
    connect(consumer, provider, name, schema, false).await?;
    wait_connection(consumer, name, "SchemaInSync", |c| {
        has_condition(c, "SchemaInSync", "True", "AsExpected")
    })
    .await?;
    Ok(())
}

/// The message of `connection`'s condition `type_`; an error if it has none.
fn message<'a>(connection: &'a Connection, type_: &str) -> anyhow::Result<&'a String> {
    Ok(&condition(connection, type_)
        .with_context(|| type_.to_string())?
        .message)
}

fn crd_source() -> SchemaPolicy {
    SchemaPolicy {
        source: SchemaSource::Crd,
        ..SchemaPolicy::default()
    }
}

async fn kube_system_uid(client: &kube::Client) -> anyhow::Result<String> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    Ok(namespaces
        .get("kube-system")
        .await?
        .uid()
        .unwrap_or_default())
}

/// Grants `user` on the provider exactly `rules`, cluster-wide.
async fn grant(provider: &kube::Client, user: &str, rules: Vec<PolicyRule>) -> anyhow::Result<()> {
    let roles: Api<ClusterRole> = Api::all(provider.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(provider.clone());
    let meta = ObjectMeta {
        name: Some(user.to_string()),
        ..ObjectMeta::default()
    };
    roles
        .create(
            &PostParams::default(),
            &ClusterRole {
                metadata: meta.clone(),
                rules: Some(rules),
                ..ClusterRole::default()
            },
        )
        .await?;
    bindings
        .create(
            &PostParams::default(),
            &ClusterRoleBinding {
                metadata: meta,
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "ClusterRole".into(),
                    name: user.into(),
                },
                subjects: Some(vec![Subject {
                    kind: "User".into(),
                    name: user.into(),
                    ..Subject::default()
                }]),
            },
        )
        .await?;
    Ok(())
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    let strings = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect());
    PolicyRule {
        api_groups: strings(groups),
        resources: strings(resources),
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        ..PolicyRule::default()
    }
}

/// A restricted provider user with a kubeconfig Secret on the consumer and a Connection.
async fn connect_as(
    pair: &ClusterPair,
    consumer: &kube::Client,
    name: &str,
    rules: Vec<PolicyRule>,
    schema: SchemaPolicy,
) -> anyhow::Result<()> {
    let provider = pair.provider.client().await?;
    let user = pair.provider.mint_user(name, &[])?;
    if !rules.is_empty() {
        grant(&provider, name, rules).await?;
    }
    put_kubeconfig_secret(consumer, name, &user.kubeconfig_yaml()?).await?;
    create_connection(consumer, &connection(name, name, schema, false)).await?;
    Ok(())
}

fn exported_names(connection: &Connection) -> Vec<String> {
    connection
        .status
        .as_ref()
        .map(|s| s.exported_apis.iter().map(|a| a.name.clone()).collect())
        .unwrap_or_default()
}
