//! The binding index: which binding covers which (Connection, API, namespace), and with which
//! conflict policy. A pure in-memory structure (linkerd's "index, separate writers" habit):
//! the binding controllers write it after each reconcile, the syncer supervisor reads it to
//! decide which syncers run, and each instance reconcile reads it to decide whether its object
//! is selected.
//!
//! ```text
//! Binding / ClusterBinding reconcile ──apply/delete──▶ BindingIndex ──▶ supervisor: which syncers
//!                                                           └────────▶ syncer: is this object selected,
//!                                                                       under which conflictPolicy
//! ```
//!
//! Rules encoded here, and nowhere else:
//! - a Binding selects instances in its own namespace, a ClusterBinding in every namespace and
//!   cluster-scoped instances (spec, "Selection");
//! - where a ClusterBinding and a Binding cover the same API on the same Connection, the
//!   ClusterBinding wins (the design);
//! - one API is served by one Connection: the first binding by rank (ClusterBindings first,
//!   then the oldest, then by name) pins it, and a binding listing it for another Connection is
//!   `APIBoundElsewhere`;
//! - a binding selects instances of each API that syncs, judged API by API: a failing API
//!   (not listed, or listed without a target) selects nothing while the others go on.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use tokio::sync::watch;

use crate::api::ConflictPolicy;
use crate::schema::ApiTarget;

/// Identifies one binding object.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BindingKey {
    /// A ClusterBinding, by name. Sorts before every Binding.
    Cluster {
        /// Name of the ClusterBinding.
        name: String,
    },
    /// A namespaced Binding.
    Namespaced {
        /// Namespace of the Binding, which is also the only namespace it selects.
        namespace: String,
        /// Name of the Binding.
        name: String,
    },
}

impl std::fmt::Display for BindingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Cluster { name } => write!(f, "ClusterBinding/{name}"),
            Self::Namespaced { namespace, name } => write!(f, "Binding/{namespace}/{name}"),
        }
    }
}

/// What the index knows about one binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The Connection it references.
    pub connection: String,
    /// Listed APIs, each with the resolved target once its consumer CRD is Established.
    pub apis: BTreeMap<String, Option<ApiTarget>>,
    /// The binding's `conflictPolicy`.
    pub conflict_policy: ConflictPolicy,
    /// Whether the binding selects instances: at least one of its APIs syncs (only those with
    /// a resolved target are selected).
    pub ready: bool,
    /// Creation time, for the "oldest binding pins the API" rule.
    pub created: Option<Timestamp>,
}

impl Entry {
    /// Whether this binding's `api` syncs: listed, with its consumer CRD resolved. A binding
    /// with another API failing still selects this one's instances.
    pub fn selects(&self, api: &str) -> bool {
        self.apis.get(api).is_some_and(Option::is_some)
    }
}

/// The binding that selects an instance, and the policy it brings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    /// The selecting binding.
    pub binding: BindingKey,
    /// Its conflict policy.
    pub conflict_policy: ConflictPolicy,
}

/// Who selects instances of one (Connection, API), per scope: `None` is the ClusterBinding
/// that selects in every namespace and cluster-scoped instances, `Some(ns)` the Binding of a
/// namespace (each the first by rank).
pub type Scopes = BTreeMap<Option<String>, Selection>;

/// Which instances of an API a change of its [`Scopes`] concerns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// None: the selection is the same.
    Nothing,
    /// All of them: the cluster-wide selection changed.
    Everything,
    /// Those in these namespaces.
    Namespaces(BTreeSet<String>),
}

/// What changed between two selections of one API: a binding change re-reconciles only
/// the instances whose selection it may have changed.
pub fn reach(old: &Scopes, new: &Scopes) -> Reach {
    if old.get(&None) != new.get(&None) {
        return Reach::Everything;
    }
    let namespaces: BTreeSet<String> = old
        .keys()
        .chain(new.keys())
        .flatten()
        .filter(|ns| {
            let scope = Some((*ns).clone());
            old.get(&scope) != new.get(&scope)
        })
        .cloned()
        .collect();
    if namespaces.is_empty() {
        Reach::Nothing
    } else {
        Reach::Namespaces(namespaces)
    }
}

/// All known bindings. Cheap queries, no I/O.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BindingIndex {
    entries: BTreeMap<BindingKey, Entry>,
}

/// Ordering of bindings for every tie: ClusterBindings first, then older, then by key.
fn rank<'a>(key: &'a BindingKey, entry: &Entry) -> (bool, bool, Option<Timestamp>, &'a BindingKey) {
    (
        matches!(key, BindingKey::Namespaced { .. }),
        entry.created.is_none(),
        entry.created,
        key,
    )
}

impl BindingIndex {
    /// Records (or replaces) a binding. Returns whether anything changed.
    pub fn apply(&mut self, key: BindingKey, entry: Entry) -> bool {
        match self.entries.get(&key) {
            Some(old) if *old == entry => false,
            _ => {
                self.entries.insert(key, entry);
                true
            }
        }
    }

    /// Forgets a binding. Returns whether it was known.
    pub fn delete(&mut self, key: &BindingKey) -> bool {
        self.entries.remove(key).is_some()
    }

    /// Replaces everything, e.g. after a full relist. Returns whether anything changed.
    pub fn reset(&mut self, entries: impl IntoIterator<Item = (BindingKey, Entry)>) -> bool {
        let new: BTreeMap<_, _> = entries.into_iter().collect();
        let changed = new != self.entries;
        self.entries = new;
        changed
    }

    /// The entry of one binding.
    pub fn get(&self, key: &BindingKey) -> Option<&Entry> {
        self.entries.get(key)
    }

    /// The Connection that serves `api`: the one of the first binding by rank listing it,
    /// with `candidate` counted as if it were already recorded (so a binding can ask before
    /// its own entry is written).
    pub fn pinned_connection<'a>(
        &'a self,
        api: &str,
        candidate: Option<(&'a BindingKey, &'a Entry)>,
    ) -> Option<&'a str> {
        let recorded = self
            .entries
            .iter()
            .filter(|(key, _)| candidate.is_none_or(|(c, _)| c != *key));
        recorded
            .chain(candidate)
            .filter(|(_, e)| e.apis.contains_key(api))
            .min_by(|(ka, ea), (kb, eb)| rank(ka, ea).cmp(&rank(kb, eb)))
            .map(|(_, e)| e.connection.as_str())
    }

    /// The Ready binding that selects an instance of `api` through `connection` in
    /// `namespace` (`None` for a cluster-scoped instance, which only a ClusterBinding selects).
    pub fn selecting(
        &self,
        connection: &str,
        api: &str,
        namespace: Option<&str>,
    ) -> Option<Selection> {
        self.entries
            .iter()
            .filter(|(_, e)| e.ready && e.connection == connection && e.selects(api))
            .filter(|(key, _)| match key {
                BindingKey::Cluster { .. } => true,
                BindingKey::Namespaced { namespace: ns, .. } => Some(ns.as_str()) == namespace,
            })
            .min_by(|(ka, ea), (kb, eb)| rank(ka, ea).cmp(&rank(kb, eb)))
            .map(|(key, e)| Selection {
                binding: key.clone(),
                conflict_policy: e.conflict_policy,
            })
    }

    /// Who selects instances of `api` through `connection`, per scope.
    pub fn scopes(&self, connection: &str, api: &str) -> Scopes {
        let mut ranked: Vec<_> = self
            .entries
            .iter()
            .filter(|(_, e)| e.ready && e.connection == connection && e.selects(api))
            .collect();
        ranked.sort_by(|(ka, ea), (kb, eb)| rank(ka, ea).cmp(&rank(kb, eb)));
        let mut scopes = Scopes::new();
        for (key, entry) in ranked {
            let scope = match key {
                BindingKey::Cluster { .. } => None,
                BindingKey::Namespaced { namespace, .. } => Some(namespace.clone()),
            };
            scopes.entry(scope).or_insert_with(|| Selection {
                binding: key.clone(),
                conflict_policy: entry.conflict_policy,
            });
        }
        scopes
    }

    /// Every (Connection, API) that at least one Ready binding selects and whose consumer CRD
    /// is resolved, with its target: the syncers that should run (if the Connection is engaged).
    pub fn active(&self) -> BTreeMap<(String, String), ApiTarget> {
        let mut ranked: Vec<_> = self.entries.iter().filter(|(_, e)| e.ready).collect();
        ranked.sort_by(|(ka, ea), (kb, eb)| rank(ka, ea).cmp(&rank(kb, eb)));
        let mut out = BTreeMap::new();
        for (_, entry) in ranked {
            for (api, target) in &entry.apis {
                if let Some(target) = target {
                    out.entry((entry.connection.clone(), api.clone()))
                        .or_insert_with(|| target.clone());
                }
            }
        }
        out
    }

    /// The Connection pinned for every API some binding lists ([`Self::pinned_connection`]
    /// for each): all a binding's readiness reads of other bindings' entries.
    pub fn pins(&self) -> BTreeMap<&str, &str> {
        let mut ranked: Vec<_> = self.entries.iter().collect();
        ranked.sort_by(|(ka, ea), (kb, eb)| rank(ka, ea).cmp(&rank(kb, eb)));
        let mut pins = BTreeMap::new();
        for (_, entry) in ranked {
            for api in entry.apis.keys() {
                pins.entry(api.as_str())
                    .or_insert(entry.connection.as_str());
            }
        }
        pins
    }

    /// Every binding that lists `api`, Ready or not.
    pub fn listing(&self, api: &str) -> BTreeSet<&BindingKey> {
        self.entries
            .iter()
            .filter(|(_, e)| e.apis.contains_key(api))
            .map(|(k, _)| k)
            .collect()
    }
}

/// The index shared between controllers, supervisor and syncers: a watch value, so a reader
/// sees the latest index and a subscriber wakes when its content changed.
#[derive(Clone, Default)]
pub struct SharedIndex(Arc<watch::Sender<BindingIndex>>);

impl std::fmt::Debug for SharedIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedIndex").finish_non_exhaustive()
    }
}

impl SharedIndex {
    /// Records a binding and signals subscribers when that changed anything.
    pub fn apply(&self, key: BindingKey, entry: Entry) -> bool {
        self.0.send_if_modified(|index| index.apply(key, entry))
    }

    /// Forgets a binding and signals subscribers when it was known.
    pub fn delete(&self, key: &BindingKey) -> bool {
        self.0.send_if_modified(|index| index.delete(key))
    }

    /// Runs a query against the current index.
    pub fn read<T>(&self, f: impl FnOnce(&BindingIndex) -> T) -> T {
        f(&self.0.borrow())
    }

    /// A receiver of the index, marked changed whenever its content changes.
    pub fn subscribe(&self) -> watch::Receiver<BindingIndex> {
        self.0.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(group: &str) -> ApiTarget {
        ApiTarget {
            group: group.into(),
            version: "v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
            namespaced: true,
            status_subresource: true,
        }
    }

    fn cluster(name: &str) -> BindingKey {
        BindingKey::Cluster { name: name.into() }
    }

    fn ns(namespace: &str, name: &str) -> BindingKey {
        BindingKey::Namespaced {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    fn entry(connection: &str, apis: &[&str], policy: ConflictPolicy, created: i64) -> Entry {
        Entry {
            connection: connection.into(),
            apis: apis
                .iter()
                .map(|a| ((*a).to_string(), Some(target("example.org"))))
                .collect(),
            conflict_policy: policy,
            ready: true,
            created: Timestamp::from_second(created).ok(),
        }
    }

    const W: &str = "widgets.example.org";

    use ConflictPolicy::{Adopt, Fail};

    /// An index holding `bindings`.
    fn index_of(bindings: impl IntoIterator<Item = (BindingKey, Entry)>) -> BindingIndex {
        let mut index = BindingIndex::default();
        index.reset(bindings);
        index
    }

    #[test]
    fn namespaced_binding_selects_only_its_namespace() {
        let mut index = BindingIndex::default();
        index.apply(ns("team-a", "b"), entry("p", &[W], Fail, 1));
        assert!(index.selecting("p", W, Some("team-a")).is_some());
        assert!(index.selecting("p", W, Some("team-b")).is_none());
        assert!(
            index.selecting("p", W, None).is_none(),
            "cluster-scoped needs a ClusterBinding"
        );
        assert!(
            index.selecting("q", W, Some("team-a")).is_none(),
            "other Connection"
        );
        assert!(
            index
                .selecting("p", "gadgets.example.org", Some("team-a"))
                .is_none()
        );
    }

    #[test]
    fn cluster_binding_selects_every_namespace_and_cluster_scope() {
        let mut index = BindingIndex::default();
        index.apply(cluster("all"), entry("p", &[W], Fail, 1));
        assert!(index.selecting("p", W, Some("anything")).is_some());
        assert!(index.selecting("p", W, None).is_some());
    }

    #[test]
    fn cluster_binding_wins_over_binding_for_the_same_api_and_connection() {
        // The Binding is older and says Adopt; the ClusterBinding still wins.
        let index = index_of([
            (ns("team-a", "b"), entry("p", &[W], Adopt, 1)),
            (cluster("c"), entry("p", &[W], Fail, 9)),
        ]);
        let cov = index.selecting("p", W, Some("team-a")).expect("covered");
        assert_eq!(cov.binding, cluster("c"));
        assert_eq!(cov.conflict_policy, Fail);
    }

    #[test]
    fn binding_policy_applies_when_no_cluster_binding_covers() {
        let index = index_of([(ns("team-a", "b"), entry("p", &[W], Adopt, 1))]);
        let cov = index.selecting("p", W, Some("team-a")).expect("covered");
        assert_eq!(cov.conflict_policy, Adopt);
    }

    #[test]
    fn unready_binding_selects_nothing() {
        let mut index = BindingIndex::default();
        let mut e = entry("p", &[W], Fail, 1);
        e.ready = false;
        index.apply(cluster("c"), e);
        assert!(index.selecting("p", W, Some("x")).is_none());
        assert!(index.active().is_empty());
    }

    #[test]
    fn oldest_binding_pins_the_api_and_cluster_bindings_rank_first() {
        let mut index = BindingIndex::default();
        index.apply(ns("a", "old"), entry("p", &[W], Fail, 1));
        index.apply(ns("b", "new"), entry("q", &[W], Fail, 5));
        assert_eq!(index.pinned_connection(W, None), Some("p"));
        let late_cluster = entry("q", &[W], Fail, 9);
        let key = cluster("late");
        assert_eq!(
            index.pinned_connection(W, Some((&key, &late_cluster))),
            Some("q"),
            "a ClusterBinding outranks older Bindings"
        );
        assert_eq!(index.pinned_connection("other.example.org", None), None);
    }

    #[test]
    fn candidate_replaces_its_own_recorded_entry_when_pinning() {
        let mut index = BindingIndex::default();
        let key = ns("a", "b");
        index.apply(key.clone(), entry("p", &[W], Fail, 1));
        let moved = entry("q", &[W], Fail, 1);
        assert_eq!(index.pinned_connection(W, Some((&key, &moved))), Some("q"));
    }

    #[test]
    fn active_lists_each_connection_api_pair_once_with_resolved_targets() {
        let mut index = BindingIndex::default();
        index.apply(ns("a", "b"), entry("p", &[W], Fail, 1));
        index.apply(
            cluster("c"),
            entry("p", &[W, "gadgets.example.org"], Fail, 2),
        );
        let mut unresolved = entry("p", &["pending.example.org"], Fail, 3);
        unresolved.apis.insert("pending.example.org".into(), None);
        index.apply(cluster("d"), unresolved);
        let active = index.active();
        assert_eq!(
            active.keys().cloned().collect::<Vec<_>>(),
            vec![
                ("p".to_string(), "gadgets.example.org".to_string()),
                ("p".to_string(), W.to_string()),
            ]
        );
    }

    #[test]
    fn apply_reports_changes_only() {
        let mut index = BindingIndex::default();
        let e = entry("p", &[W], Fail, 1);
        assert!(index.apply(cluster("c"), e.clone()));
        assert!(!index.apply(cluster("c"), e.clone()));
        assert!(index.delete(&cluster("c")));
        assert!(!index.delete(&cluster("c")));
        assert!(index.reset([(cluster("c"), e.clone())]));
        assert!(!index.reset([(cluster("c"), e)]));
    }

    #[test]
    fn shared_index_signals_only_real_changes() {
        let shared = SharedIndex::default();
        let mut rx = shared.subscribe();
        let e = entry("p", &[W], Fail, 1);
        assert!(shared.apply(cluster("c"), e.clone()));
        assert!(rx.has_changed().unwrap_or(false));
        rx.mark_unchanged();
        assert!(!shared.apply(cluster("c"), e));
        assert!(
            !rx.has_changed().unwrap_or(true),
            "an unchanged apply is quiet"
        );
        assert_eq!(rx.borrow().listing(W).len(), 1);
    }

    /// What `change`, made to an index holding Binding `a/b` of `W` through `p` (conflictPolicy
    /// Fail), reaches of the scopes of `p`'s `W` syncer.
    fn reach_of(change: impl FnOnce(&mut BindingIndex)) -> Reach {
        let mut index = BindingIndex::default();
        index.apply(ns("a", "b"), entry("p", &[W], Fail, 1));
        let before = index.scopes("p", W);
        change(&mut index);
        reach(&before, &index.scopes("p", W))
    }

    fn only(namespace: &str) -> Reach {
        Reach::Namespaces([namespace.to_string()].into())
    }

    #[test]
    fn namespaced_binding_change_reaches_only_its_namespace() {
        let reached = reach_of(|index| {
            index.apply(ns("b", "b"), entry("p", &[W], Fail, 2));
        });
        assert_eq!(reached, only("b"));
    }

    #[test]
    fn cluster_binding_change_reaches_everything() {
        let reached = reach_of(|index| {
            index.apply(cluster("all"), entry("p", &[W], Adopt, 2));
        });
        assert_eq!(reached, Reach::Everything);
    }

    #[test]
    fn change_to_another_api_or_connection_reaches_nothing() {
        let reached = reach_of(|index| {
            let gadgets = entry("p", &["gadgets.example.org"], Fail, 2);
            index.apply(ns("a", "g"), gadgets);
            index.apply(ns("c", "b"), entry("q", &[W], Fail, 3));
        });
        assert_eq!(reached, Reach::Nothing);
    }

    #[test]
    fn conflict_policy_change_reaches_its_namespace() {
        let reached = reach_of(|index| {
            index.apply(ns("a", "b"), entry("p", &[W], Adopt, 1));
        });
        assert_eq!(reached, only("a"));
    }
}
