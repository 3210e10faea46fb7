//! The Binding and ClusterBinding controllers: one generic reconcile for both kinds, wrapped
//! in kube-runtime's `finalizer()` with `core.kbind.io/cleanup`.
//!
//! ```text
//! Binding / ClusterBinding ─▶ gather facts (Connection, engagement, consumer CRDs, index pin)
//!        │                     ─▶ readiness verdict ─▶ binding index (selection for syncers)
//!        │                     ─▶ drain APIs dropped from `apis` (teardown::drain_dropped)
//!        │                     ─▶ count conflict annotations ─▶ status (written when changed)
//!        │                     ─▶ related Secrets/ConfigMaps (when Ready)
//!        └─ deleted ─▶ leave the index (stops selection) ─▶ teardown ─▶ release the finalizer
//! ```
//!
//! Requeue policy, written down once: Ready → the periodic status interval (30 s by default,
//! which is also when conflicts are counted); not Ready → soon (level-triggered, not an
//! error); failures → `error_policy`, backing off per binding.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, instrument, warn};

use crate::api::names::{
    CLEANUP_FINALIZER, CONFLICT_ANNOTATION, CONNECTION_ANNOTATION, FIELD_MANAGER,
};
use crate::api::{Binding, BindingSpec, BindingStatus, ClusterBinding, Connection, Reason};
use crate::conditions::{self, Desired};
use crate::schema::schema_hash;
use crate::schema::{ApiTarget, is_established};
use crate::sync::changes;

use super::readiness::{self, ApiFacts, ConnectionState, CrdFacts, Verdict};
use super::related::{self, RelatedScope};
use super::{Context, Error, Result};
use super::{namespaces, schema, status, teardown};
use crate::registry::{BindingKey, Entry};

/// What the controller needs from either binding kind.
pub trait BindingObject:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug + Send + Sync + 'static
{
    /// The shared spec.
    fn binding_spec(&self) -> &BindingSpec;
    /// The stored status.
    fn binding_status(&self) -> Option<&BindingStatus>;
    /// The index key; `None` for an object without a name.
    fn index_key(&self) -> Option<BindingKey>;
    /// The API to patch this object through.
    fn api_for(&self, client: kube::Client) -> Api<Self>;
    /// Whether objects of this kind live in a namespace (and so are subject to a
    /// Connection's `bindingNamespaceSelector`).
    fn is_namespaced() -> bool;
}

impl BindingObject for Binding {
    fn binding_spec(&self) -> &BindingSpec {
        &self.spec
    }
    fn binding_status(&self) -> Option<&BindingStatus> {
        self.status.as_ref()
    }
    fn index_key(&self) -> Option<BindingKey> {
        Some(BindingKey::Namespaced {
            namespace: self.metadata.namespace.clone()?,
            name: self.metadata.name.clone()?,
        })
    }
    fn api_for(&self, client: kube::Client) -> Api<Self> {
        match &self.metadata.namespace {
            Some(ns) => Api::namespaced(client, ns),
            None => Api::all(client),
        }
    }
    fn is_namespaced() -> bool {
        true
    }
}

impl BindingObject for ClusterBinding {
    fn binding_spec(&self) -> &BindingSpec {
        &self.spec
    }
    fn binding_status(&self) -> Option<&BindingStatus> {
        self.status.as_ref()
    }
    fn index_key(&self) -> Option<BindingKey> {
        Some(BindingKey::Cluster {
            name: self.metadata.name.clone()?,
        })
    }
    fn api_for(&self, client: kube::Client) -> Api<Self> {
        Api::all(client)
    }
    fn is_namespaced() -> bool {
        false
    }
}

/// Runs the controller for one binding kind until `shutdown`.
pub async fn run<K: BindingObject>(ctx: Arc<Context>, shutdown: CancellationToken) {
    let client = ctx.consumer.clone();
    let mut config = watcher::Config::default();
    if let Some(selector) = &ctx.settings.binding_selector {
        config = config.labels(selector);
    }
    let controller = Controller::new(Api::<K>::all(client.clone()), config);
    let by_connection = controller.store();
    let by_api = controller.store();
    let by_namespace = controller.store();
    // A namespace's labels decide whether its Bindings may use a Connection with a
    // bindingNamespaceSelector: watching Namespaces makes a relabel take effect at once, both
    // ways (a revoked namespace stops syncing without waiting for a periodic requeue).
    // Namespaces are few and rarely change; ClusterBindings do not depend on them.
    let controller = if K::is_namespaced() {
        controller.watches(
            Api::<Namespace>::all(client.clone()),
            watcher::Config::default(),
            move |namespace| {
                let name = namespace.name_any();
                by_namespace
                    .state()
                    .iter()
                    .filter(|b| b.namespace().as_deref() == Some(name.as_str()))
                    .map(|b| ObjectRef::from_obj(&**b))
                    .collect::<Vec<_>>()
            },
        )
    } else {
        controller
    };
    controller
        // A Connection changing (appearing, Ready flipping) concerns the bindings naming it.
        .watches(
            Api::<Connection>::all(client.clone()),
            watcher::Config::default(),
            move |connection| {
                let name = connection.name_any();
                by_connection
                    .state()
                    .iter()
                    .filter(|b| b.binding_spec().connection_ref.name == name)
                    .map(|b| ObjectRef::from_obj(&**b))
                    .collect::<Vec<_>>()
            },
        )
        // A consumer CRD appearing or becoming Established concerns the bindings listing it.
        .watches(
            Api::<CustomResourceDefinition>::all(client),
            watcher::Config::default(),
            move |crd| {
                let name = crd.name_any();
                by_api
                    .state()
                    .iter()
                    .filter(|b| b.binding_spec().apis.iter().any(|a| a.name == name))
                    .map(|b| ObjectRef::from_obj(&**b))
                    .collect::<Vec<_>>()
            },
        )
        .reconcile_all_on(changes(ctx.engagements.subscribe()))
        .reconcile_all_on(changes(ctx.index.subscribe()))
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile::<K>, error_policy::<K>, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                debug!(error = %e, "binding controller event");
            }
        })
        .await;
}

#[instrument(skip(obj, ctx), fields(kind = %K::kind(&()), namespace = obj.namespace().unwrap_or_default(), name = %obj.name_any()))]
async fn reconcile<K: BindingObject>(obj: Arc<K>, ctx: Arc<Context>) -> Result<Action> {
    let failure_key = failure_key(&*obj);
    let api = obj.api_for(ctx.consumer.clone());
    let action = finalizer(&api, CLEANUP_FINALIZER, obj, |event| async {
        match event {
            Finalizer::Apply(obj) => apply(&*obj, &api, &ctx).await,
            Finalizer::Cleanup(obj) => cleanup(&*obj, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)));
    if action.is_ok() {
        ctx.failures.succeeded(&failure_key);
    }
    action
}

async fn apply<K: BindingObject>(obj: &K, api: &Api<K>, ctx: &Context) -> Result<Action> {
    let key = obj.index_key().ok_or(Error::MissingName)?;
    let spec = obj.binding_spec();
    let connection = spec.connection_ref.name.as_str();
    let engagement = ctx.engagements.get(connection);
    let connection_obj = Api::<Connection>::all(ctx.consumer.clone())
        .get_opt(connection)
        .await
        .map_err(Error::ReadConnection)?;
    // A Binding outside the Connection's bindingNamespaceSelector syncs nothing: no CRD
    // install, no index selection, no related copies.
    let refused_namespace = match (&connection_obj, obj.namespace()) {
        (Some(c), Some(ns)) => namespace_refusal(ctx, c, &ns).await?,
        _ => None,
    };
    // The engagement registry is the truth about readiness: the Connection controller
    // engages exactly the Ready Connections.
    let state = match (&engagement, &connection_obj, refused_namespace) {
        (_, _, Some(message)) => ConnectionState::NamespaceNotAllowed { message },
        (Some(e), _, None) => ConnectionState::Engaged {
            exported: e.exported.clone(),
        },
        (None, Some(_), None) => ConnectionState::NotReady,
        (None, None, None) => ConnectionState::NotFound,
    };
    // The candidate entry, so this binding takes part in "who serves this API" before its
    // own entry is written.
    let candidate = Entry {
        connection: connection.to_string(),
        apis: spec.apis.iter().map(|a| (a.name.clone(), None)).collect(),
        conflict_policy: spec.conflict_policy,
        ready: false,
        created: obj.meta().creation_timestamp.as_ref().map(|t| t.0),
    };
    let index_pins: BTreeMap<&str, Option<String>> = spec
        .apis
        .iter()
        .map(|a| {
            let pin = ctx.index.read(|i| {
                i.pinned_connection(&a.name, Some((&key, &candidate)))
                    .map(str::to_string)
            });
            (a.name.as_str(), pin)
        })
        .collect();
    // pullPolicy Bound: install the CRDs of the APIs this Connection serves, before reading
    // them. An API pinned to another Connection is never installed from here.
    let mut install_problems = match (&engagement, &state) {
        (Some(engagement), ConnectionState::Engaged { .. }) => {
            let ours: Vec<&str> = index_pins
                .iter()
                .filter(|(_, pin)| pin.as_deref() == Some(connection))
                .map(|(api, _)| *api)
                .collect();
            schema::install_bound(ctx, connection_obj.as_ref(), engagement, &ours).await
        }
        _ => BTreeMap::new(),
    };
    let crds = Api::<CustomResourceDefinition>::all(ctx.consumer.clone());
    let mut facts = Vec::with_capacity(spec.apis.len());
    let mut hashes = BTreeMap::new();
    for listed in &spec.apis {
        let name = &listed.name;
        let crd = crds.get_opt(name).await.map_err(|source| Error::ReadCrd {
            name: name.clone(),
            source,
        })?;
        let exported_versions = engagement
            .as_ref()
            .and_then(|e| e.exported.iter().find(|x| x.name == *name))
            .map(|x| x.versions.clone())
            .unwrap_or_default();
        if let Some(crd) = &crd {
            hashes.insert(name.clone(), schema_hash(crd));
        }
        facts.push(ApiFacts {
            name: name.clone(),
            crd: crd.map(|crd| CrdFacts {
                established: is_established(&crd),
                pinned_to: crd.annotations().get(CONNECTION_ANNOTATION).cloned(),
                target: ApiTarget::from_crd(&crd, &exported_versions),
            }),
            index_pin: index_pins.get(name.as_str()).cloned().flatten(),
            install_problem: install_problems.remove(name),
        });
    }
    let verdict = readiness::evaluate(connection, &state, &facts);
    let ready = verdict.is_ready();
    // A Binding its Connection does not allow lists nothing in the index either, so it cannot
    // pin an API to its Connection ahead of the bindings that may use it.
    let apis = match state {
        ConnectionState::NamespaceNotAllowed { .. } => BTreeMap::new(),
        _ => verdict.targets.clone(),
    };
    ctx.index.apply(
        key.clone(),
        Entry {
            apis,
            ready,
            ..candidate
        },
    );
    // After the index stopped listing them: drain the APIs this binding no longer lists.
    let dropped = teardown::drain_dropped(obj, ctx).await?;

    // Count conflicts among the instances in this binding's scope (spec: "Bindings count
    // conflict annotations on a periodic reconciliation").
    let mut counts = BTreeMap::new();
    for fact in &facts {
        let Some(target) = fact.crd.as_ref().and_then(|c| c.target.as_ref()) else {
            continue;
        };
        let count = count_conflicts(ctx, target, obj.namespace().as_deref())
            .await
            .map_err(|source| Error::CountConflicts {
                api: fact.name.clone(),
                source,
            })?;
        counts.insert(fact.name.clone(), count);
    }
    let listed: Vec<String> = spec.apis.iter().map(|a| a.name.clone()).collect();
    let mut new_status = status::build(
        obj.binding_status(),
        &verdict,
        &listed,
        &hashes,
        &counts,
        obj.meta().generation,
    );
    status::keep_pending_drains(&mut new_status, obj.binding_status(), &dropped.pending);
    if let Some(condition) = dropped.condition {
        conditions::set(&mut new_status.conditions, condition, obj.meta().generation);
    }
    if obj.binding_status() != Some(&new_status) {
        warn_on_refusal(ctx, obj, &verdict).await;
        write_status(obj, api, &new_status).await?;
        info!(
            ready,
            reason = verdict.ready.reason.as_str(),
            "binding status updated"
        );
    }
    // Related resources run in binding reconciliation (spec: "normally every 30 seconds,
    // rather than using the instance watch path"), only for a Ready binding.
    if let (Some(engagement), true, false) = (&engagement, ready, spec.related_resources.is_empty())
    {
        let uid = obj.meta().uid.clone().unwrap_or_default();
        let namespace = obj.namespace();
        let scope = RelatedScope {
            binding_uid: &uid,
            namespace: namespace.as_deref(),
            entries: &spec.related_resources,
            guard: &ctx.related_guard,
        };
        related::sync(&scope, &ctx.consumer, engagement, &ctx.policies).await?;
    }
    Ok(Action::requeue(if ready && dropped.pending.is_empty() {
        ctx.settings.status_interval
    } else {
        ctx.settings.pending_requeue
    }))
}

/// The condition message when the Connection's `bindingNamespaceSelector` leaves
/// `namespace` out; `None` when the namespace may bind.
async fn namespace_refusal(
    ctx: &Context,
    connection: &Connection,
    namespace: &str,
) -> Result<Option<String>> {
    let Some(selector) = connection.spec.binding_namespace_selector.as_ref() else {
        return Ok(None);
    };
    let labels = Api::<Namespace>::all(ctx.consumer.clone())
        .get_opt(namespace)
        .await
        .map_err(|source| Error::ReadNamespace {
            namespace: namespace.to_string(),
            source,
        })?
        .and_then(|ns| ns.metadata.labels)
        .unwrap_or_default();
    Ok(namespaces::allowed(&connection.name_any(), Some(selector), namespace, &labels).err())
}

/// A Warning Event when a binding turns not Ready for a reason only an operator can fix: a
/// consumer CRD kbind does not manage, or a namespace the Connection does not allow. Sent when
/// the status changes, not on every requeue.
async fn warn_on_refusal<K: BindingObject>(ctx: &Context, obj: &K, verdict: &Verdict) {
    let reason = verdict.ready.reason;
    let previous = obj
        .binding_status()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| (c.reason.as_str(), c.message.as_str()));
    let refusal = matches!(reason, Reason::CRDNotManaged | Reason::NamespaceNotAllowed);
    if refusal && previous != Some((reason.as_str(), verdict.ready.message.as_str())) {
        ctx.warn(
            &obj.object_ref(&()),
            reason.as_str(),
            verdict.ready.message.clone(),
        )
        .await;
    }
}

async fn count_conflicts(
    ctx: &Context,
    target: &ApiTarget,
    namespace: Option<&str>,
) -> Result<i64, kube::Error> {
    let ar = target.api_resource();
    let api: Api<DynamicObject> = match namespace {
        Some(ns) if target.namespaced => Api::namespaced_with(ctx.consumer.clone(), ns, &ar),
        _ => Api::all_with(ctx.consumer.clone(), &ar),
    };
    let list = api.list_metadata(&ListParams::default()).await?;
    let count = list
        .items
        .iter()
        .filter(|o| o.annotations().contains_key(CONFLICT_ANNOTATION))
        .count();
    Ok(i64::try_from(count).unwrap_or(i64::MAX))
}

async fn write_status<K: BindingObject>(
    obj: &K,
    api: &Api<K>,
    status: &BindingStatus,
) -> Result<()> {
    let mut metadata = json!({ "name": obj.name_any() });
    if let Some(ns) = obj.namespace() {
        metadata["namespace"] = json!(ns);
    }
    let body = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": metadata,
        "status": status,
    });
    api.patch_status(
        &obj.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(Error::WriteStatus)?;
    Ok(())
}

/// Sets one condition on a binding's stored status and writes it; a failure is logged (used
/// where the condition is a report, not a step to retry).
pub(super) async fn write_condition<K: BindingObject>(obj: &K, ctx: &Context, desired: Desired) {
    let mut new_status = obj.binding_status().cloned().unwrap_or_default();
    conditions::set(&mut new_status.conditions, desired, obj.meta().generation);
    let api = obj.api_for(ctx.consumer.clone());
    if let Err(error) = write_status(obj, &api, &new_status).await {
        warn!(%error, "writing a binding condition failed");
    }
}

async fn cleanup<K: BindingObject>(obj: &K, ctx: &Context) -> Result<Action> {
    // Spec: "Deleting one stops it being selected for new instance sync and runs cleanup."
    // Leaving the index stops selection at once; the supervisor stops syncers nothing else
    // needs.
    if let Some(key) = obj.index_key() {
        ctx.index.delete(&key);
    }
    teardown::run(obj, ctx).await?;
    info!("binding deleted; cleanup done");
    Ok(Action::await_change())
}

fn error_policy<K: BindingObject>(obj: Arc<K>, err: &Error, ctx: Arc<Context>) -> Action {
    let delay = ctx.failures.failed(failure_key(&*obj));
    warn!(kind = %K::kind(&()), name = %obj.name_any(), error = %err, ?delay, "binding reconcile failed");
    Action::requeue(delay)
}

fn failure_key<K: BindingObject>(obj: &K) -> String {
    format!(
        "{}/{}/{}",
        K::kind(&()),
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
}
