//! What the *other* bindings still cover of an API when one binding lets it go (deleted, the
//! API removed from `apis`, or `connectionRef` moved): computed per (Connection, API,
//! namespace), so a drain leaves exactly what another binding still syncs and strands nothing.
//!
//! ```text
//! other binding, not deleting, same Connection ──▶ counts when it can ever sync:
//!   the Connection exists                        (else ConnectionNotFound: its author must fix it)
//!   a Binding's namespace is allowed by the
//!   Connection's bindingNamespaceSelector        (else NamespaceNotAllowed)
//!   (its consumer CRD kbind's for the Connection: checked by the drain itself; any other CRD
//!    is only ever released, never drained)
//! ClusterBinding ─▶ covers every namespace and cluster-scoped instances
//! Binding in N   ─▶ covers namespace N
//! ```
//!
//! A binding that is not Ready for a passing reason (its Connection not Ready, Pending, an
//! API the provider released) still counts: readiness changes nothing here, only the facts
//! its author controls. This replaces the spec's "skip the API if any other binding lists it",
//! which left instances outside the remaining coverage with finalizers nobody released.

use std::collections::{BTreeMap, BTreeSet};

use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use crate::api::{Binding, ClusterBinding, Connection};

use crate::binding::namespaces;
use crate::binding::{Error, Result};

/// What the other counting bindings of one (Connection, API) cover.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Covered {
    /// A ClusterBinding lists it: every namespace and cluster-scoped instances.
    pub cluster: bool,
    /// Namespaces whose Binding lists it.
    pub namespaces: BTreeSet<String>,
}

impl Covered {
    /// Whether any other binding still lists the API (then its consumer CRD stays).
    pub(crate) fn any(&self) -> bool {
        self.cluster || !self.namespaces.is_empty()
    }

    /// Whether nothing is left to drain for a binding over `namespace` (`None`: a
    /// ClusterBinding, whose drain then leaves [`Self::namespaces`] alone).
    pub(crate) fn covers_scope(&self, namespace: Option<&str>) -> bool {
        self.cluster || namespace.is_some_and(|ns| self.namespaces.contains(ns))
    }
}

/// What the other counting bindings cover, per API.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Others(BTreeMap<String, Covered>);

/// Coverage of an API nobody else lists.
const UNCOVERED: &Covered = &Covered {
    cluster: false,
    namespaces: BTreeSet::new(),
};

impl Others {
    /// What the others cover of `api` (nothing when none lists it).
    pub(crate) fn of(&self, api: &str) -> &Covered {
        self.0.get(api).unwrap_or(UNCOVERED)
    }
}

/// One other binding as coverage sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Other {
    /// The Binding's namespace; `None` for a ClusterBinding.
    pub namespace: Option<String>,
    /// The APIs it lists.
    pub apis: Vec<String>,
    /// Whether it can ever sync through the Connection (exists, namespace allowed).
    pub counts: bool,
}

/// Per API, what the counting bindings among `others` cover. Pure.
pub(crate) fn covered(others: &[Other]) -> Others {
    let mut out: BTreeMap<String, Covered> = BTreeMap::new();
    for other in others.iter().filter(|o| o.counts) {
        for api in &other.apis {
            let entry = out.entry(api.clone()).or_default();
            match &other.namespace {
                None => entry.cluster = true,
                Some(ns) => {
                    entry.namespaces.insert(ns.clone());
                }
            }
        }
    }
    Others(out)
}

/// What the bindings other than `uid` that reference `connection` cover, per API.
pub(crate) async fn of_others(consumer: &Client, uid: &str, connection: &str) -> Result<Others> {
    let Some(conn) = Api::<Connection>::all(consumer.clone())
        .get_opt(connection)
        .await
        .map_err(Error::ReadConnection)?
    else {
        // Bindings naming a Connection that does not exist can never sync: none counts.
        return Ok(Others::default());
    };
    let lp = ListParams::default();
    let live =
        |m: &kube::api::ObjectMeta| m.uid.as_deref() != Some(uid) && m.deletion_timestamp.is_none();
    let names = |apis: &[crate::api::ApiReference]| apis.iter().map(|a| a.name.clone()).collect();
    let mut others = Vec::new();
    let cluster_bindings = Api::<ClusterBinding>::all(consumer.clone())
        .list(&lp)
        .await
        .map_err(Error::ListBindings)?;
    for b in cluster_bindings.items.iter().filter(|b| live(&b.metadata)) {
        if b.spec.connection_ref.name == connection {
            others.push(Other {
                namespace: None,
                apis: names(&b.spec.apis),
                counts: true,
            });
        }
    }
    let bindings = Api::<Binding>::all(consumer.clone())
        .list(&lp)
        .await
        .map_err(Error::ListBindings)?;
    let mut allowed: BTreeMap<String, bool> = BTreeMap::new();
    for b in bindings.items.iter().filter(|b| live(&b.metadata)) {
        if b.spec.connection_ref.name != connection {
            continue;
        }
        let Some(ns) = b.namespace() else { continue };
        let counts = match allowed.get(&ns) {
            Some(counts) => *counts,
            None => {
                let counts = namespace_allowed(consumer, &conn, &ns).await?;
                allowed.insert(ns.clone(), counts);
                counts
            }
        };
        others.push(Other {
            namespace: Some(ns),
            apis: names(&b.spec.apis),
            counts,
        });
    }
    Ok(covered(&others))
}

/// Whether Bindings in `namespace` may use `connection` (its `bindingNamespaceSelector`).
async fn namespace_allowed(
    consumer: &Client,
    connection: &Connection,
    namespace: &str,
) -> Result<bool> {
    let Some(selector) = connection.spec.binding_namespace_selector.as_ref() else {
        return Ok(true);
    };
    let labels = namespaces::labels_of(consumer, namespace).await?;
    Ok(namespaces::allowed(&connection.name_any(), Some(selector), namespace, &labels).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn other(namespace: Option<&str>, apis: &[&str], counts: bool) -> Other {
        Other {
            namespace: namespace.map(str::to_string),
            apis: apis.iter().map(|a| a.to_string()).collect(),
            counts,
        }
    }

    #[test]
    fn a_binding_that_cannot_sync_covers_nothing() {
        let map = covered(&[other(Some("t"), &["x"], false), other(None, &["y"], false)]);
        assert_eq!(map, Others::default());
    }

    #[test]
    fn another_namespace_leaves_this_namespace_to_drain() {
        let map = covered(&[other(Some("b"), &["x"], true)]);
        let x = map.of("x");
        assert!(!x.covers_scope(Some("a")));
        assert!(x.covers_scope(Some("b")));
        // A ClusterBinding's drain goes on, leaving namespace b alone, and keeps the CRD.
        assert!(!x.covers_scope(None));
        assert!(x.any());
    }

    #[test]
    fn a_cluster_binding_covers_every_scope() {
        let map = covered(&[other(None, &["x"], true)]);
        assert!(map.of("x").covers_scope(Some("a")) && map.of("x").covers_scope(None));
    }

    #[test]
    fn an_api_nobody_else_lists_is_not_covered() {
        let map = covered(&[other(Some("b"), &["y"], true)]);
        assert!(!map.of("x").any());
    }
}
