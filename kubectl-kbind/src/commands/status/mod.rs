//! `kubectl kbind status [NAME]`: Connections → exported APIs → bindings → instance counts
//! (synced, conflicting, failing, pending), naming the instances that are not in sync. Exit
//! code 1 when anything is not Ready or not in sync, so scripts can gate on it.
//!
//! [`collect`] reads the cluster into a [`model::Report`]; [`render::render`] draws it. When
//! the konnector shards its work over replicas, each bound API (and each Connection) also says
//! which replica runs it, from the shard Leases in the konnector's namespace ([`shards`]).

pub mod model;
pub mod render;
pub mod shards;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::{Api, Client, ResourceExt};

use konnector::api::{Binding, ClusterBinding, ConditionType, Connection, InstanceCounts};

use crate::args::OutputArgs;
use crate::binding::{BindingObject, api_names, conditions, kind};
use crate::client::ClientArgs;
use crate::exit::NotReady;
use crate::output;
use model::{ApiNode, BindingNode, ConnectionNode, Placed, Report, State, classify, placed_at};

/// Flags of `status`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Only this Connection.
    pub name: Option<String>,
    /// The konnector's namespace: where a sharded konnector's shard Leases say which replica
    /// runs which API.
    #[arg(long, default_value = konnector::api::names::DEFAULT_SECRET_NAMESPACE, value_name = "NS")]
    pub konnector_namespace: String,
    /// Output.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Runs `status`.
pub async fn run(client: &ClientArgs, args: StatusArgs) -> anyhow::Result<()> {
    let target = client.connect().await?;
    let mut report = collect(
        &target.client,
        args.name.as_deref(),
        client.namespace.as_deref(),
    )
    .await?;
    if let Some(holders) = shards::read(&target.client, &args.konnector_namespace).await {
        report.place(&holders);
    }
    match args.output.output {
        Some(format) => output::print(format, &report)?,
        None => print!("{}", render::render(&report)),
    }
    if report.healthy() {
        Ok(())
    } else {
        Err(NotReady("not everything is Ready and in sync (see above)".into()).into())
    }
}

/// One binding of either kind, reduced to what the report needs.
struct Bound {
    kind: Cow<'static, str>,
    namespace: Option<String>,
    name: String,
    connection: String,
    apis: Vec<String>,
    ready: State,
    synced: State,
    deleting: bool,
    /// The konnector's instance counts per API, where it published them.
    counts: BTreeMap<String, InstanceCounts>,
}

impl Bound {
    /// The binding's line in the report, before its instances or note are added.
    fn node(&self) -> BindingNode {
        BindingNode {
            kind: self.kind.to_string(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            ready: self.ready.clone(),
            synced: self.synced.clone(),
            deleting: self.deleting,
            ..BindingNode::default()
        }
    }
}

fn bound<B: BindingObject>(b: &B) -> Bound {
    let conds = conditions(b);
    Bound {
        kind: kind::<B>(),
        namespace: b.meta().namespace.clone(),
        name: b.meta().name.clone().unwrap_or_default(),
        connection: b.binding_spec().connection_ref.name.clone(),
        apis: api_names(b),
        ready: State::of(conds, ConditionType::Ready),
        synced: State::of(conds, ConditionType::Synced),
        deleting: b.meta().deletion_timestamp.is_some(),
        counts: b
            .binding_status()
            .iter()
            .flat_map(|s| &s.bound_apis)
            .filter_map(|api| Some((api.name.clone(), api.instances?)))
            .collect(),
    }
}

/// Reads Connections, bindings and instances into a report. `namespace` limits the Bindings
/// shown (ClusterBindings are always shown).
pub async fn collect(
    client: &Client,
    name: Option<&str>,
    namespace: Option<&str>,
) -> anyhow::Result<Report> {
    let connections = match name {
        Some(name) => vec![
            Api::<Connection>::all(client.clone())
                .get_opt(name)
                .await?
                .with_context(|| format!("Connection {name} not found"))?,
        ],
        None => {
            Api::<Connection>::all(client.clone())
                .list(&ListParams::default())
                .await?
                .items
        }
    };
    let bindings = match namespace {
        Some(ns) => Api::<Binding>::namespaced(client.clone(), ns),
        None => Api::<Binding>::all(client.clone()),
    };
    let mut all: Vec<Bound> = bindings
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(bound)
        .collect();
    all.extend(
        Api::<ClusterBinding>::all(client.clone())
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .map(bound),
    );
    let mut report = Report::default();
    let known: BTreeSet<String> = connections.iter().map(|c| c.name_any()).collect();
    let mut crds = CrdCache::new(client);
    for connection in &connections {
        report
            .connections
            .push(connection_node(connection, &all, &mut crds).await?);
    }
    if name.is_none() {
        for b in all.iter().filter(|b| !known.contains(&b.connection)) {
            report.orphans.push(BindingNode {
                note: Some(format!("Connection {} does not exist", b.connection)),
                ..b.node()
            });
        }
    }
    Ok(report)
}

async fn connection_node(
    connection: &Connection,
    all: &[Bound],
    crds: &mut CrdCache,
) -> anyhow::Result<ConnectionNode> {
    let name = connection.name_any();
    let status = connection.status.clone().unwrap_or_default();
    let exported: BTreeSet<String> = status
        .exported_apis
        .iter()
        .map(|a| a.name.clone())
        .collect();
    let mine: Vec<&Bound> = all.iter().filter(|b| b.connection == name).collect();
    let mut apis: BTreeSet<String> = exported.clone();
    apis.extend(mine.iter().flat_map(|b| b.apis.iter().cloned()));
    let mut nodes = Vec::new();
    for api in apis {
        let mut node = ApiNode {
            exported: exported.contains(&api),
            name: api.clone(),
            ..ApiNode::default()
        };
        for b in mine.iter().filter(|b| b.apis.contains(&api)) {
            node.bindings.push(binding_node(b, &api, crds).await);
        }
        nodes.push(node);
    }
    Ok(ConnectionNode {
        name,
        ready: State::of(&status.conditions, ConditionType::Ready),
        source: status.active_schema_source.clone(),
        deleting: connection.metadata.deletion_timestamp.is_some(),
        isolation: status
            .isolation
            .as_ref()
            .filter(|i| i.strategy != konnector::api::IsolationStrategy::None)
            .map(|i| format!("{} (prefix {})", i.strategy.as_str(), i.prefix)),
        policies: status.policies.iter().map(model::policy_line).collect(),
        problems: status
            .conditions
            .iter()
            .filter(|c| c.type_ != ConditionType::Ready.as_str() && crate::hints::is_problem(c))
            .map(|c| (c.type_.clone(), State::from_condition(c)))
            .collect(),
        apis: nodes,
        shard: None,
    })
}

async fn binding_node(b: &Bound, api: &str, crds: &mut CrdCache) -> BindingNode {
    let mut node = b.node();
    match crds.instances(api, b.namespace.as_deref()).await {
        Ok(Some(items)) => {
            for item in items {
                let value = serde_json::to_value(&item).unwrap_or_default();
                if let Some(at) = placed_at(&value) {
                    node.placed.push(Placed {
                        namespace: item.metadata.namespace.clone(),
                        name: item.name_any(),
                        at,
                    });
                }
                node.count(
                    item.metadata.namespace.clone(),
                    item.name_any(),
                    classify(&value),
                );
            }
        }
        Ok(None) => node.note = Some("no consumer CRD yet".into()),
        Err(e) => node.note = Some(format!("could not be listed: {e:#}")),
    }
    // Instance conditions are current where they exist; an instance without one (a status
    // schema that keeps no conditions) is known only to the konnector's published counts.
    if node.counts.pending > 0
        && let Some(published) = b.counts.get(api)
    {
        node.counted_by_konnector(*published);
    }
    node
}

/// Consumer CRDs looked up once per API.
pub(crate) struct CrdCache {
    client: Client,
    seen: BTreeMap<String, Option<(ApiResource, bool)>>,
}

impl CrdCache {
    pub(crate) fn new(client: &Client) -> Self {
        Self {
            client: client.clone(),
            seen: BTreeMap::new(),
        }
    }

    /// The instances of `api` in `namespace` (every namespace for `None`), or `None` when
    /// the consumer has no CRD for it.
    pub(crate) async fn instances(
        &mut self,
        api: &str,
        namespace: Option<&str>,
    ) -> anyhow::Result<Option<Vec<DynamicObject>>> {
        if !self.seen.contains_key(api) {
            let crd = Api::<CustomResourceDefinition>::all(self.client.clone())
                .get_opt(api)
                .await?;
            self.seen
                .insert(api.to_string(), crd.as_ref().and_then(resource_of));
        }
        let Some(Some((ar, namespaced))) = self.seen.get(api) else {
            return Ok(None);
        };
        let list = konnector::k8s::dynamic_api(&self.client, ar, *namespaced, namespace)
            .list(&ListParams::default())
            .await?;
        Ok(Some(list.items))
    }
}

/// The served storage version of a CRD as an `ApiResource`, and whether it is namespaced.
fn resource_of(crd: &CustomResourceDefinition) -> Option<(ApiResource, bool)> {
    let spec = &crd.spec;
    let version = spec
        .versions
        .iter()
        .find(|v| v.storage && v.served)
        .or_else(|| spec.versions.iter().find(|v| v.served))?;
    let ar = ApiResource {
        group: spec.group.clone(),
        version: version.name.clone(),
        api_version: format!("{}/{}", spec.group, version.name),
        kind: spec.names.kind.clone(),
        plural: spec.names.plural.clone(),
    };
    Some((ar, spec.scope == "Namespaced"))
}
