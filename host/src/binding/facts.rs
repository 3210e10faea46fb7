//! Gathering what a binding's readiness is judged on: the referenced Connection and its
//! engagement, whether the binding's namespace may use it, which Connection the index pins
//! each API to, and each listed API's consumer CRD (installed first under `pullPolicy:
//! Bound`).
//!
//! ```text
//! Connection (consumer) ─┐   engagement ─┐
//! Namespace labels ──────┴▶ ConnectionState   index pins ─┐
//!                                          ▼              ▼
//!                          [Engaged: install this Connection's CRDs (pullPolicy Bound)]
//!                                          ▼
//!                          consumer CRDs ─▶ ApiFacts per listed API, CRD hashes
//! ```
//!
//! Reads only (the install, and taking over a CRD whose Connection is gone, aside);
//! [`super::readiness`] judges what is gathered here.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, ResourceExt};

use crate::api::names::CONNECTION_ANNOTATION;
use crate::api::{Connection, Reason};
use crate::registry::Engagement;
use crate::schema::handover::{self, Handover};
use crate::schema::schema_hash;
use crate::schema::versions::left_out_note;
use crate::schema::{ApiTarget, is_established};

use super::object::BindingObject;
use super::readiness::{ApiFacts, ConnectionState, CrdFacts};
use super::{Context, Error, Result};
use super::{namespaces, schema};
use crate::registry::{BindingKey, Entry};

/// What one reconcile knows about a binding's surroundings.
#[derive(Clone, Debug)]
pub(super) struct Facts {
    /// The referenced Connection's name.
    pub connection: String,
    /// Its engagement, when it is Ready.
    pub engagement: Option<Engagement>,
    /// What the consumer and the engagement registry say about it.
    pub state: ConnectionState,
    /// The binding's index entry before readiness is judged (not Ready, APIs unresolved).
    pub candidate: Entry,
    /// Per listed API: its consumer CRD, the index's pin, an install problem.
    pub apis: Vec<ApiFacts>,
    /// Consumer CRD hashes of the listed APIs that exist.
    pub hashes: BTreeMap<String, String>,
}

/// Gathers the facts for `obj`, whose index key is `key`.
pub(super) async fn gather<K: BindingObject>(
    obj: &K,
    key: &BindingKey,
    ctx: &Context,
) -> Result<Facts> {
    let spec = obj.binding_spec();
    let connection = spec.connection_ref.name.clone();
    let engagement = ctx.shared.engagements.get(&connection);
    let connection_obj = Api::<Connection>::all(ctx.shared.consumer.clone())
        .get_opt(&connection)
        .await
        .map_err(Error::ReadConnection)?;
    let state = connection_state(obj, ctx, connection_obj.as_ref(), engagement.as_ref()).await?;
    // The candidate entry, so this binding takes part in "who serves this API" before its
    // own entry is written.
    let candidate = Entry {
        connection: connection.clone(),
        apis: spec.apis.iter().map(|a| (a.name.clone(), None)).collect(),
        conflict_policy: spec.conflict_policy,
        ready: false,
        created: obj.meta().creation_timestamp.as_ref().map(|t| t.0),
    };
    let pins: BTreeMap<String, Option<String>> = spec
        .apis
        .iter()
        .map(|a| {
            let pin = ctx.shared.index.read(|i| {
                i.pinned_connection(&a.name, Some((key, &candidate)))
                    .map(str::to_string)
            });
            (a.name.clone(), pin)
        })
        .collect();
    // Installs are the Connection shard's work: a replica that does not hold it only reads.
    let installs = ctx.shared.shards.owns_connection(&connection);
    // A consumer CRD pinned to a Connection that is gone is taken over first when this
    // Connection reaches the same provider cluster (else the handover's refusal is reported).
    let mut handovers = match &engagement {
        Some(engagement) if installs => {
            let ours = pins
                .iter()
                .filter(|(_, pin)| pin.as_deref() == Some(connection.as_str()))
                .map(|(api, _)| api.as_str());
            take_over_gone(ctx, engagement, ours).await?
        }
        _ => BTreeMap::new(),
    };
    // pullPolicy Bound: install the CRDs of the APIs this Connection serves, before reading
    // them. An API pinned to another Connection is never installed from here.
    let mut installs = match (&engagement, &state) {
        (Some(engagement), ConnectionState::Engaged { .. }) if installs => {
            let ours: Vec<&str> = pins
                .iter()
                .filter(|(_, pin)| pin.as_deref() == Some(connection.as_str()))
                .map(|(api, _)| api.as_str())
                .collect();
            schema::install_bound(ctx, connection_obj.as_ref(), engagement, &ours).await
        }
        _ => schema::Installs::default(),
    };
    let crds = Api::<CustomResourceDefinition>::all(ctx.shared.consumer.clone());
    let mut apis = Vec::with_capacity(spec.apis.len());
    let mut hashes = BTreeMap::new();
    for listed in &spec.apis {
        let name = &listed.name;
        // Just installed: as written. Established and kbind's, as last watched: nothing to
        // ask. Else the cluster says.
        let crd = match installs
            .crds
            .remove(name)
            .or_else(|| ctx.crds.established(name))
        {
            Some(crd) => Some(crd),
            None => crds
                .get_opt(name)
                .await
                .map_err(|source| Error::ReadCrd {
                    name: name.clone(),
                    source,
                })?
                .map(Arc::new),
        };
        let exported_versions = engagement
            .as_ref()
            .and_then(|e| e.exported.iter().find(|x| x.name == *name))
            .map(|x| x.versions.clone())
            .unwrap_or_default();
        if let Some(crd) = &crd {
            hashes.insert(name.clone(), schema_hash(crd));
        }
        apis.push(ApiFacts {
            name: name.clone(),
            crd: crd.map(|crd| CrdFacts {
                established: is_established(&crd),
                pinned_to: crd.annotations().get(CONNECTION_ANNOTATION).cloned(),
                target: ApiTarget::from_crd(&crd, &exported_versions),
                versions_note: left_out_note(&crd).map(str::to_string),
            }),
            index_pin: pins.get(name).cloned().flatten(),
            install_problem: handovers
                .remove(name)
                .or_else(|| installs.problems.remove(name)),
        });
    }
    Ok(Facts {
        connection,
        engagement,
        state,
        candidate,
        apis,
        hashes,
    })
}

/// Takes over, for `engagement`'s Connection, the consumer CRDs of `apis` pinned to a Connection
/// that no longer exists when they were installed from the same provider cluster
/// ([`handover`]); returns, per API, why one was not taken over (`PinnedConnectionGone`).
async fn take_over_gone<'a>(
    ctx: &Context,
    engagement: &Engagement,
    apis: impl Iterator<Item = &'a str>,
) -> Result<BTreeMap<String, (Reason, String)>> {
    let crds = Api::<CustomResourceDefinition>::all(ctx.shared.consumer.clone());
    let mut refused = BTreeMap::new();
    for name in apis {
        // Established and ours as last watched: nothing to take over, nothing to read.
        let ours = |crd: &CustomResourceDefinition| {
            crd.annotations().get(CONNECTION_ANNOTATION) == Some(&engagement.connection)
        };
        if ctx.crds.established(name).is_some_and(|crd| ours(&crd)) {
            continue;
        }
        let Some(crd) = crds.get_opt(name).await.map_err(|source| Error::ReadCrd {
            name: name.to_string(),
            source,
        })?
        else {
            continue;
        };
        let pinned = crd.annotations().get(CONNECTION_ANNOTATION);
        if pinned.is_none_or(|p| *p == engagement.connection) {
            continue;
        }
        let consumer = &ctx.shared.consumer;
        match handover::take_over(
            consumer,
            &crd,
            &engagement.connection,
            &engagement.provider_uid,
        )
        .await
        .map_err(Error::Handover)?
        {
            Handover::Refused(message) => {
                refused.insert(name.to_string(), (Reason::PinnedConnectionGone, message));
            }
            Handover::Keep | Handover::TakeOver => {}
        }
    }
    Ok(refused)
}

/// What the binding can expect of its Connection. The engagement registry is the truth about
/// readiness: the Connection controller engages exactly the Ready Connections. A Binding
/// outside the Connection's `bindingNamespaceSelector` syncs nothing: no CRD install, no index
/// selection, no related copies.
async fn connection_state<K: BindingObject>(
    obj: &K,
    ctx: &Context,
    connection: Option<&Connection>,
    engagement: Option<&Engagement>,
) -> Result<ConnectionState> {
    let refused_namespace = match (connection, obj.namespace()) {
        (Some(c), Some(ns)) => namespace_refusal(ctx, c, &ns).await?,
        _ => None,
    };
    Ok(match (engagement, connection, refused_namespace) {
        (_, _, Some(message)) => ConnectionState::NamespaceNotAllowed { message },
        (Some(e), _, None) => ConnectionState::Engaged {
            exported: e.exported.clone(),
        },
        (None, Some(_), None) => ConnectionState::NotReady,
        (None, None, None) => ConnectionState::NotFound,
    })
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
    let labels = namespaces::labels_of(&ctx.shared.consumer, namespace).await?;
    Ok(namespaces::allowed(&connection.name_any(), Some(selector), namespace, &labels).err())
}
