//! The two binding kinds behind one trait: Binding (namespaced) and ClusterBinding
//! (cluster-scoped) share a spec and a status, and every binding module works on either
//! through [`BindingObject`].

use std::fmt::Debug;

use kube::core::object::{HasSpec, HasStatus};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api::{Binding, BindingSpec, BindingStatus, ClusterBinding};
use crate::recent::RecentWrites;
use crate::registry::BindingKey;

/// What the binding modules need from either kind.
pub trait BindingObject:
    Resource<DynamicType = ()>
    + HasSpec<Spec: AsRef<BindingSpec>>
    + HasStatus<Status = BindingStatus>
    + Clone
    + DeserializeOwned
    + Serialize
    + Debug
    + Send
    + Sync
    + 'static
{
    /// The shared spec.
    fn binding_spec(&self) -> &BindingSpec {
        self.spec().as_ref()
    }
    /// The stored status.
    fn binding_status(&self) -> Option<&BindingStatus> {
        self.status()
    }
    /// The index key; `None` for an object without a name.
    fn index_key(&self) -> Option<BindingKey>;
    /// The API to patch this object through.
    fn api_for(&self, client: kube::Client) -> Api<Self>;
    /// Whether objects of this kind live in a namespace (and so are subject to a
    /// Connection's `bindingNamespaceSelector`).
    fn is_namespaced() -> bool;
    /// This kind's share of the statuses the binding controllers just wrote.
    fn status_writes(writes: &StatusWrites) -> &RecentWrites<Self>;
}

/// Statuses the binding controllers just wrote, one registry per kind, standing in for a
/// cache that has not seen them: a reconcile right after a write neither writes the status
/// again nor announces its change of state a second time.
#[derive(Debug, Default)]
pub struct StatusWrites {
    bindings: RecentWrites<Binding>,
    cluster_bindings: RecentWrites<ClusterBinding>,
}

impl BindingObject for Binding {
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
    fn status_writes(writes: &StatusWrites) -> &RecentWrites<Self> {
        &writes.bindings
    }
}

impl BindingObject for ClusterBinding {
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
    fn status_writes(writes: &StatusWrites) -> &RecentWrites<Self> {
        &writes.cluster_bindings
    }
}
