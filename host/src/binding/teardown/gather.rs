//! Reading what the teardown rule ([`super::coverage`]) decides on, from the consumer: every
//! binding with its per-API state (`status.boundAPIs[].state`), whether a Binding's namespace
//! may use its Connection, the Connections that exist and the `core.kbind.io/connection` pin
//! of the consumer CRDs asked about. The binding controllers and `kubectl kbind` both read
//! through here, so they decide on the same facts.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use crate::api::{ApiState, Binding, ClusterBinding, Connection};
use crate::binding::object::BindingObject;
use crate::binding::{Error, Result, namespaces};
use crate::schema::managed::pinned_connection;

use super::coverage::{Consumer, Holder};

/// A binding as the teardown rule sees it; `allowed`: whether its namespace may use its
/// Connection (always for a ClusterBinding). `None` for an object without a name.
pub fn holder<K: BindingObject>(binding: &K, allowed: bool) -> Option<Holder> {
    let stored = binding.binding_status().map(|s| &s.bound_apis);
    let failed = |api: &str| {
        stored
            .into_iter()
            .flatten()
            .any(|b| b.name == api && b.state == Some(ApiState::Failed))
    };
    Some(Holder {
        key: binding.index_key()?,
        connection: binding.binding_spec().connection_ref.name.clone(),
        apis: binding
            .binding_spec()
            .apis
            .iter()
            .map(|a| (a.name.clone(), allowed && !failed(&a.name)))
            .collect(),
        deleting: binding.meta().deletion_timestamp.is_some(),
    })
}

/// Reads the consumer for the teardown rule, with the pins of the consumer CRDs of `apis`.
pub async fn consumer(client: &Client, apis: &BTreeSet<String>) -> Result<Consumer> {
    let lp = ListParams::default();
    let connections: BTreeMap<String, Connection> = Api::<Connection>::all(client.clone())
        .list(&lp)
        .await
        .map_err(Error::ReadConnection)?
        .items
        .into_iter()
        .map(|c| (c.name_any(), c))
        .collect();
    let mut bindings = Vec::new();
    let cluster_bindings = Api::<ClusterBinding>::all(client.clone())
        .list(&lp)
        .await
        .map_err(Error::ListBindings)?;
    bindings.extend(
        cluster_bindings
            .items
            .iter()
            .filter_map(|b| holder(b, true)),
    );
    let namespaced = Api::<Binding>::all(client.clone())
        .list(&lp)
        .await
        .map_err(Error::ListBindings)?;
    let mut allowed: BTreeMap<(String, String), bool> = BTreeMap::new();
    for b in &namespaced.items {
        let (Some(ns), Some(connection)) =
            (b.namespace(), connections.get(&b.spec.connection_ref.name))
        else {
            // No Connection: it counts for nothing whatever its namespace.
            bindings.extend(holder(b, false));
            continue;
        };
        let key = (connection.name_any(), ns.clone());
        let may = match allowed.get(&key) {
            Some(may) => *may,
            None => {
                let may = namespace_allowed(client, connection, &ns).await?;
                allowed.insert(key, may);
                may
            }
        };
        bindings.extend(holder(b, may));
    }
    let crds_api = Api::<CustomResourceDefinition>::all(client.clone());
    let mut crds = BTreeMap::new();
    for api in apis {
        let crd = crds_api
            .get_opt(api)
            .await
            .map_err(|source| Error::ReadCrd {
                name: api.clone(),
                source,
            })?;
        if let Some(crd) = crd {
            crds.insert(api.clone(), pinned_connection(&crd).map(str::to_string));
        }
    }
    Ok(Consumer {
        bindings,
        crds,
        connections: connections.into_keys().collect(),
    })
}

/// Whether Bindings in `namespace` may use `connection` (its `bindingNamespaceSelector`).
async fn namespace_allowed(
    client: &Client,
    connection: &Connection,
    namespace: &str,
) -> Result<bool> {
    let Some(selector) = connection.spec.binding_namespace_selector.as_ref() else {
        return Ok(true);
    };
    let labels = namespaces::labels_of(client, namespace).await?;
    Ok(namespaces::allowed(&connection.name_any(), Some(selector), namespace, &labels).is_ok())
}
