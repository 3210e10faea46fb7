//! The one teardown rule, for the binding controllers and `kubectl kbind` alike: what the
//! bindings left after some are deleted still cover of an API, per (Connection, API,
//! namespace), and which consumer CRDs (with every instance) the deletions delete. Pure:
//! [`super::gather`] reads the consumer, this module decides.
//!
//! ```text
//! a binding left (not deleting, not deleted by the plan) counts for API A of Connection C when
//!   C exists                                   (else ConnectionNotFound: its author must fix it)
//!   it did not fail definitively on A          (boundAPIs[A].state Failed: not exported by C,
//!                                               CRD not kbind's or bound elsewhere, schema
//!                                               refused, namespace not allowed)
//!   waiting (C not Ready, A released, settling, never judged yet) still counts
//! ClusterBinding ─▶ covers every namespace and cluster-scoped instances
//! Binding in N   ─▶ covers namespace N
//!
//! a deleted ClusterBinding of C deletes the consumer CRD of A when
//!   it counts for A itself, the CRD is annotated core.kbind.io/connection: C,
//!   A is in no group kbind never touches, and no binding left of C counts for A
//! a deleted Binding never deletes a CRD
//! ```
//!
//! This replaces the spec's "skip the API if any other binding lists it", which left
//! instances outside the remaining coverage with finalizers nobody released, and which a
//! typo'd binding (another Connection, an API its Connection does not export) satisfied.

use std::collections::{BTreeMap, BTreeSet};

use crate::registry::BindingKey;
use crate::schema::managed::is_protected_api;

/// One binding as the teardown rule sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Which binding.
    pub key: BindingKey,
    /// The Connection it references.
    pub connection: String,
    /// Each listed API, and whether the binding counts for it (`false`: it failed
    /// definitively on that API, or its namespace may not use the Connection).
    pub apis: BTreeMap<String, bool>,
    /// Whether it is being deleted already.
    pub deleting: bool,
}

impl Holder {
    /// The Binding's namespace; `None` for a ClusterBinding.
    fn namespace(&self) -> Option<&str> {
        match &self.key {
            BindingKey::Cluster { .. } => None,
            BindingKey::Namespaced { namespace, .. } => Some(namespace),
        }
    }

    /// Whether this binding counts for `api` while `connections` exist.
    fn counts_for(&self, api: &str, connections: &BTreeSet<String>) -> bool {
        connections.contains(&self.connection) && self.apis.get(api).copied().unwrap_or(false)
    }
}

/// Everything the rule reads of the consumer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Consumer {
    /// Every Binding and ClusterBinding.
    pub bindings: Vec<Holder>,
    /// The consumer CRDs that exist, by API name, each with its `core.kbind.io/connection`
    /// annotation (`None`: not kbind's, never deleted).
    pub crds: BTreeMap<String, Option<String>>,
    /// The Connections that exist.
    pub connections: BTreeSet<String>,
}

/// What the counting bindings left cover of one (Connection, API).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Covered {
    /// A ClusterBinding lists it: every namespace and cluster-scoped instances.
    pub cluster: bool,
    /// Namespaces whose Binding lists it.
    pub namespaces: BTreeSet<String>,
}

impl Covered {
    /// Whether any binding left still counts for the API (then its consumer CRD stays).
    pub fn any(&self) -> bool {
        self.cluster || !self.namespaces.is_empty()
    }

    /// Whether nothing is left to drain for a binding over `namespace` (`None`: a
    /// ClusterBinding, whose drain then leaves [`Self::namespaces`] alone).
    pub fn covers_scope(&self, namespace: Option<&str>) -> bool {
        self.cluster || namespace.is_some_and(|ns| self.namespaces.contains(ns))
    }
}

/// What the counting bindings left cover, per API, of one Connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Others(BTreeMap<String, Covered>);

/// Coverage of an API nobody left lists.
const UNCOVERED: &Covered = &Covered {
    cluster: false,
    namespaces: BTreeSet::new(),
};

impl Others {
    /// What the bindings left cover of `api` (nothing when none counts for it).
    pub fn of(&self, api: &str) -> &Covered {
        self.0.get(api).unwrap_or(UNCOVERED)
    }
}

impl Consumer {
    /// The bindings left once `deleted` (and those deleting already) are gone.
    fn left<'a>(&'a self, deleted: &'a BTreeSet<BindingKey>) -> impl Iterator<Item = &'a Holder> {
        let left = |h: &&Holder| !h.deleting && !deleted.contains(&h.key);
        self.bindings.iter().filter(left)
    }

    /// What the bindings left after `deleted` cover through `connection`, per API.
    pub fn covered(&self, connection: &str, deleted: &BTreeSet<BindingKey>) -> Others {
        let mut out: BTreeMap<String, Covered> = BTreeMap::new();
        for holder in self.left(deleted).filter(|h| h.connection == connection) {
            for api in holder.apis.keys() {
                if !holder.counts_for(api, &self.connections) {
                    continue;
                }
                let entry = out.entry(api.clone()).or_default();
                match holder.namespace() {
                    None => entry.cluster = true,
                    Some(ns) => {
                        entry.namespaces.insert(ns.to_string());
                    }
                }
            }
        }
        Others(out)
    }

    /// The Connection other than `connection` that `api`'s consumer CRD is pinned to, when
    /// that Connection exists: the instances are its bindings' to sync and release, never a
    /// binding of `connection`'s (a typo'd `connectionRef`, or one bound elsewhere).
    pub fn pinned_elsewhere(&self, api: &str, connection: &str) -> Option<&str> {
        let pin = self.crds.get(api)?.as_deref()?;
        (pin != connection && self.connections.contains(pin)).then_some(pin)
    }

    /// Which consumer CRDs deleting `deleted` deletes (and with each, every instance of its
    /// API), each with the ClusterBinding whose teardown deletes it. Bindings already deleting
    /// that are not in `deleted` are followed, not counted: their CRDs are not in the answer.
    pub fn crds_deleted(&self, deleted: &BTreeSet<BindingKey>) -> BTreeMap<String, BindingKey> {
        let mut out = BTreeMap::new();
        let deleting = self.bindings.iter().filter(|h| deleted.contains(&h.key));
        for holder in deleting.filter(|h| h.namespace().is_none()) {
            let covered = self.covered(&holder.connection, deleted);
            for api in holder.apis.keys() {
                let pinned_here = self
                    .crds
                    .get(api)
                    .is_some_and(|pin| pin.as_deref() == Some(holder.connection.as_str()));
                if pinned_here
                    && !is_protected_api(api)
                    && holder.counts_for(api, &self.connections)
                    && !covered.of(api).any()
                {
                    out.entry(api.clone()).or_insert_with(|| holder.key.clone());
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: &str = "widgets.example.org";
    const G: &str = "gadgets.example.org";

    fn cluster(name: &str) -> BindingKey {
        BindingKey::Cluster { name: name.into() }
    }

    fn ns(namespace: &str, name: &str) -> BindingKey {
        BindingKey::Namespaced {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// A binding `key` of `connection` counting for every API in `apis`.
    fn holder(key: BindingKey, connection: &str, apis: &[&str]) -> Holder {
        Holder {
            key,
            connection: connection.into(),
            apis: apis.iter().map(|a| (a.to_string(), true)).collect(),
            deleting: false,
        }
    }

    /// `holder` whose `api` failed definitively.
    fn failed_on(mut h: Holder, api: &str) -> Holder {
        h.apis.insert(api.into(), false);
        h
    }

    /// A consumer with `bindings`, Connection `p`, and CRDs of `W` and `G` pinned to `p`.
    fn consumer(bindings: Vec<Holder>) -> Consumer {
        Consumer {
            bindings,
            crds: [(W.into(), Some("p".into())), (G.into(), Some("p".into()))].into(),
            connections: ["p".to_string()].into(),
        }
    }

    fn keys(keys: &[BindingKey]) -> BTreeSet<BindingKey> {
        keys.iter().cloned().collect()
    }

    /// The APIs whose CRD deleting `deleted` from `c` deletes.
    fn deletes(c: &Consumer, deleted: &[BindingKey]) -> Vec<String> {
        c.crds_deleted(&keys(deleted)).into_keys().collect()
    }

    #[test]
    fn which_crds_deleting_bindings_deletes() {
        let cb = || holder(cluster("cb"), "p", &[W]);
        let typo = || holder(cluster("typo"), "typo", &[W]);
        let rows: Vec<(&str, Consumer, Vec<BindingKey>, Vec<&str>)> = vec![
            (
                "the last ClusterBinding",
                consumer(vec![cb()]),
                vec![cluster("cb")],
                vec![W],
            ),
            (
                "a Binding left of the same Connection keeps it",
                consumer(vec![cb(), holder(ns("a", "b"), "p", &[W])]),
                vec![cluster("cb")],
                vec![],
            ),
            (
                "a Binding the same plan deletes keeps nothing",
                consumer(vec![cb(), holder(ns("a", "b"), "p", &[W])]),
                vec![ns("a", "b"), cluster("cb")],
                vec![W],
            ),
            (
                "a ClusterBinding naming a Connection that does not exist keeps nothing",
                consumer(vec![cb(), typo()]),
                vec![cluster("cb")],
                vec![W],
            ),
            (
                "a binding of another Connection keeps nothing",
                Consumer {
                    connections: ["p".to_string(), "q".to_string()].into(),
                    ..consumer(vec![cb(), holder(cluster("q"), "q", &[W])])
                },
                vec![cluster("cb")],
                vec![W],
            ),
            (
                "a binding failed definitively on the API keeps nothing",
                consumer(vec![cb(), failed_on(holder(cluster("o"), "p", &[W, G]), W)]),
                vec![cluster("cb")],
                vec![W],
            ),
            (
                "a binding failed on another API still keeps this one",
                consumer(vec![cb(), failed_on(holder(cluster("o"), "p", &[W, G]), G)]),
                vec![cluster("cb")],
                vec![],
            ),
            (
                "a binding already deleting keeps nothing",
                consumer(vec![
                    cb(),
                    Holder {
                        deleting: true,
                        ..holder(ns("a", "b"), "p", &[W])
                    },
                ]),
                vec![cluster("cb")],
                vec![W],
            ),
            (
                "a Binding never deletes a CRD",
                consumer(vec![holder(ns("a", "b"), "p", &[W])]),
                vec![ns("a", "b")],
                vec![],
            ),
            (
                "a CRD pinned to another Connection stays",
                Consumer {
                    crds: [(W.into(), Some("q".into()))].into(),
                    ..consumer(vec![cb()])
                },
                vec![cluster("cb")],
                vec![],
            ),
            (
                "a CRD without kbind's annotation stays",
                Consumer {
                    crds: [(W.into(), None)].into(),
                    ..consumer(vec![cb()])
                },
                vec![cluster("cb")],
                vec![],
            ),
            (
                "an absent CRD is not deleted",
                Consumer {
                    crds: BTreeMap::new(),
                    ..consumer(vec![cb()])
                },
                vec![cluster("cb")],
                vec![],
            ),
            (
                "a ClusterBinding failed on the API deletes nothing of it",
                consumer(vec![failed_on(cb(), W)]),
                vec![cluster("cb")],
                vec![],
            ),
            (
                "a ClusterBinding whose Connection is gone deletes nothing",
                Consumer {
                    connections: BTreeSet::new(),
                    ..consumer(vec![cb()])
                },
                vec![cluster("cb")],
                vec![],
            ),
        ];
        for (why, c, deleted, expected) in rows {
            assert_eq!(deletes(&c, &deleted), expected, "{why}");
        }
    }

    #[test]
    fn a_protected_api_is_never_deleted() {
        let api = "clusterbindings.core.kbind.io";
        let c = Consumer {
            crds: [(api.into(), Some("p".into()))].into(),
            ..consumer(vec![holder(cluster("cb"), "p", &[api])])
        };
        assert!(deletes(&c, &[cluster("cb")]).is_empty());
    }

    #[test]
    fn the_deleting_cluster_binding_is_named_for_each_crd() {
        let c = consumer(vec![holder(cluster("cb"), "p", &[W, G])]);
        let deleted = c.crds_deleted(&keys(&[cluster("cb")]));
        assert_eq!(deleted.get(W), Some(&cluster("cb")));
        assert_eq!(deleted.get(G), Some(&cluster("cb")));
    }

    #[test]
    fn another_namespace_leaves_this_namespace_to_drain() {
        let c = consumer(vec![holder(ns("b", "x"), "p", &[W])]);
        let covered = c.covered("p", &keys(&[ns("a", "x")]));
        let w = covered.of(W);
        assert!(!w.covers_scope(Some("a")));
        assert!(w.covers_scope(Some("b")));
        // A ClusterBinding's drain goes on, leaving namespace b alone, and keeps the CRD.
        assert!(!w.covers_scope(None));
        assert!(w.any());
    }

    #[test]
    fn a_cluster_binding_covers_every_scope() {
        let c = consumer(vec![holder(cluster("all"), "p", &[W])]);
        let covered = c.covered("p", &BTreeSet::new());
        assert!(covered.of(W).covers_scope(Some("a")) && covered.of(W).covers_scope(None));
    }

    #[test]
    fn a_binding_failed_definitively_covers_nothing_of_that_api_but_still_the_others() {
        let c = consumer(vec![failed_on(holder(cluster("o"), "p", &[W, G]), W)]);
        let covered = c.covered("p", &BTreeSet::new());
        assert!(!covered.of(W).any());
        assert!(covered.of(G).covers_scope(Some("a")));
    }

    #[test]
    fn a_binding_whose_connection_does_not_exist_covers_nothing() {
        let c = consumer(vec![holder(cluster("typo"), "typo", &[W])]);
        assert!(!c.covered("typo", &BTreeSet::new()).of(W).any());
    }

    #[test]
    fn a_crd_pinned_to_another_existing_connection_is_that_ones_alone() {
        let c = consumer(vec![holder(cluster("typo"), "nope", &[W])]);
        assert_eq!(c.pinned_elsewhere(W, "nope"), Some("p"));
        assert_eq!(c.pinned_elsewhere(W, "p"), None, "its own Connection's");
        let gone = Consumer {
            connections: BTreeSet::new(),
            ..c
        };
        assert_eq!(
            gone.pinned_elsewhere(W, "nope"),
            None,
            "nobody left to release them"
        );
    }

    #[test]
    fn an_api_nobody_else_lists_is_not_covered() {
        let c = consumer(vec![holder(ns("b", "x"), "p", &[G])]);
        assert!(!c.covered("p", &BTreeSet::new()).of(W).any());
    }
}
