//! What the last reconcile of each bound instance came to, in memory: written by the syncers
//! wherever they set an instance's `Synced` condition or conflict annotation, read by the
//! binding controllers to summarise their scope without listing instances.
//!
//! ```text
//! syncer (Connection, API) ── record / forget ──▶ Outcomes ── summarise(scope) ──▶ Binding status
//!   either watch refused ──── deny / allow ──────▶   │                              (Synced, Conflicts,
//! supervisor: syncer stopped ── forget_api ──────▶   └── changes (watch) ──▶         PermissionDenied)
//!                                                         binding controller re-reconciles
//! ```
//!
//! Keyed by (Connection, API), then namespace, then name, so that a Binding reads its own
//! namespace only and a ClusterBinding everything. An entry leaves when its object is deleted
//! or no longer selected, and every entry of an API leaves when its syncer stops: the registry
//! describes what running syncers currently know, never history. Subscribers wake only when
//! something a summary shows changed (a resync that finds an instance still in sync
//! writes nothing).
//!
//! A syncer that just started (a konnector restart, a re-engaged Connection) knows nothing
//! yet: until every object of its consumer listing has been reconciled once, its API is
//! *settling*, and a summary says so, so that bindings keep their last known conditions
//! instead of flapping to "all in sync" and back.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio::sync::watch;

use crate::api::{InstanceCounts, Reason};

/// How many instance names a summary keeps per failing reason, as examples for the operator.
pub(crate) const EXAMPLES: usize = 3;

/// What the last reconcile of one instance came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The provider copy matches the instance's spec.
    InSync,
    /// The provider target belongs to someone else: ForeignObjectExists or OwnedByAnother.
    Conflict(Reason),
    /// The copy could not be written: ProviderRejected, PolicyFailed, Forbidden.
    Failed(Reason),
}

impl Outcome {
    /// The outcome an instance `Synced=False` reason stands for: a conflict for the two
    /// ownership reasons, a failure for the rest.
    pub fn failure(reason: Reason) -> Self {
        match reason {
            Reason::ForeignObjectExists | Reason::OwnedByAnother => Self::Conflict(reason),
            other => Self::Failed(other),
        }
    }

    /// The failing reason; `None` when in sync.
    pub fn reason(self) -> Option<Reason> {
        match self {
            Self::InSync => None,
            Self::Conflict(reason) | Self::Failed(reason) => Some(reason),
        }
    }
}

/// The instances of one reason in a summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Failing {
    /// How many instances fail for this reason.
    pub count: u64,
    /// A few of them as `namespace/name` (or `name`), for the operator to look at.
    pub examples: Vec<String>,
}

/// What a binding's scope looks like right now, as far as running syncers know.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Some API of the scope has no syncer yet, or one whose listed objects have not all been
    /// reconciled once: the counts are incomplete.
    pub settling: bool,
    /// Failing instances per reason (conflicts included).
    pub failing: BTreeMap<Reason, Failing>,
    /// APIs whose provider watch the provider refuses, with what it said.
    pub denied_apis: BTreeMap<String, String>,
    /// APIs whose consumer watch the konnector's own consumer RBAC refuses, with what the
    /// consumer said: the chart's RBAC (`rbac.boundResourceGroups`) does not cover them.
    pub consumer_denied_apis: BTreeMap<String, String>,
    /// Per API of the scope (every one has an entry): how its instances stand.
    pub per_api: BTreeMap<String, InstanceCounts>,
}

impl Summary {
    /// Instances whose provider copy matches their spec.
    pub fn in_sync(&self) -> u64 {
        self.per_api.values().map(|c| c.synced).sum()
    }

    /// Conflicting instances per API (every API of the scope has an entry).
    pub fn conflicts_per_api(&self) -> BTreeMap<String, i64> {
        let count = |c: &InstanceCounts| i64::try_from(c.conflicting).unwrap_or(i64::MAX);
        self.per_api
            .iter()
            .map(|(api, counts)| (api.clone(), count(counts)))
            .collect()
    }

    /// Conflicting instances over every API.
    pub fn conflicts(&self) -> i64 {
        self.conflicts_per_api().values().sum()
    }

    /// Instances not in sync, whatever the reason.
    pub fn failing_total(&self) -> u64 {
        self.failing.values().map(|f| f.count).sum()
    }

    /// Instances the provider refused to take (403).
    pub fn forbidden(&self) -> Option<&Failing> {
        self.failing.get(&Reason::Forbidden)
    }
}

/// Where the registry keeps one syncer's instances: (Connection, API).
pub type ApiKey = (String, String);

/// The cluster whose watch of a bound API refused the konnector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeniedBy {
    /// The provider refused the Connection's identity (provider RBAC).
    Provider,
    /// The consumer refused the konnector itself (the chart's consumer RBAC).
    Consumer,
}

/// What each cluster said when it refused a syncer's watch of one API; an API neither
/// refuses has no entry.
#[derive(Debug, Default)]
struct Denials {
    provider: Option<String>,
    consumer: Option<String>,
}

impl Denials {
    fn of(&mut self, side: DeniedBy) -> &mut Option<String> {
        match side {
            DeniedBy::Provider => &mut self.provider,
            DeniedBy::Consumer => &mut self.consumer,
        }
    }

    fn said(&self, side: DeniedBy) -> Option<&String> {
        match side {
            DeniedBy::Provider => self.provider.as_ref(),
            DeniedBy::Consumer => self.consumer.as_ref(),
        }
    }
}
type ObjectKey = (Option<String>, String);
type Namespaces = BTreeMap<Option<String>, BTreeMap<String, Outcome>>;

/// A syncer's consumer listing: which listed objects still wait for their first reconcile.
#[derive(Debug, Default)]
struct Listing {
    /// The list (or re-list) is complete.
    done: bool,
    /// Listed objects no reconcile has left an outcome for yet, by namespace (so an object is
    /// looked up without building its key).
    pending: BTreeMap<Option<String>, BTreeSet<String>>,
    /// Every object of the current list, to prune what disappeared unseen when it completes.
    listed: BTreeSet<ObjectKey>,
}

impl Listing {
    fn settled(&self) -> bool {
        self.done && self.pending.is_empty()
    }
}

/// Every outcome the running syncers recorded; read through [`Outcomes::summarise`].
#[derive(Debug, Default)]
pub struct Recorded {
    instances: BTreeMap<ApiKey, Namespaces>,
    denied: BTreeMap<ApiKey, Denials>,
    listings: BTreeMap<ApiKey, Listing>,
}

impl Recorded {
    /// Removes `namespace/name` from its listing's pending set; true when that settled the API.
    fn reconciled(&mut self, key: &ApiKey, namespace: &Option<String>, name: &str) -> bool {
        let Some(listing) = self.listings.get_mut(key) else {
            return false;
        };
        let Some(names) = listing.pending.get_mut(namespace) else {
            return false;
        };
        let removed = names.remove(name);
        if names.is_empty() {
            listing.pending.remove(namespace);
        }
        removed && listing.settled()
    }

    fn is_pending(&self, key: &ApiKey, namespace: &Option<String>, name: &str) -> bool {
        self.listings
            .get(key)
            .and_then(|l| l.pending.get(namespace))
            .is_some_and(|names| names.contains(name))
    }

    fn outcome_of(&self, key: &ApiKey, namespace: &Option<String>, name: &str) -> Option<&Outcome> {
        self.instances.get(key)?.get(namespace)?.get(name)
    }
}

/// The shared registry of instance outcomes. Cheap to clone; every clone is the same registry:
/// a watch value whose subscribers wake when a summary may have changed.
#[derive(Clone, Debug, Default)]
pub struct Outcomes(Arc<watch::Sender<Recorded>>);

impl Outcomes {
    /// Records what reconciling `namespace/name` of `api` through `connection` came to.
    pub fn record(
        &self,
        connection: &str,
        api: &str,
        namespace: Option<&str>,
        name: &str,
        outcome: Outcome,
    ) {
        let key = (connection.to_string(), api.to_string());
        self.record_at(&key, &namespace.map(str::to_string), name, outcome);
    }

    /// [`Self::record`] for a syncer that keeps its (Connection, API) key: an outcome that did
    /// not change (every periodic resync of an instance in sync) costs a lookup and no copy.
    pub fn record_at(
        &self,
        key: &ApiKey,
        namespace: &Option<String>,
        name: &str,
        outcome: Outcome,
    ) {
        let unchanged = self.read(|s| {
            !s.is_pending(key, namespace, name)
                && s.outcome_of(key, namespace, name) == Some(&outcome)
        });
        if unchanged {
            return;
        }
        self.write(|s| {
            let settled = s.reconciled(key, namespace, name);
            let previous = s
                .instances
                .entry(key.clone())
                .or_default()
                .entry(namespace.clone())
                .or_default()
                .insert(name.to_string(), outcome);
            settled || previous != Some(outcome)
        });
    }

    /// Forgets one instance: it was deleted, or no Ready binding selects it any more.
    pub fn forget(&self, connection: &str, api: &str, namespace: Option<&str>, name: &str) {
        let key = (connection.to_string(), api.to_string());
        let namespace = namespace.map(str::to_string);
        let present = self.read(|s| {
            s.is_pending(&key, &namespace, name) || s.outcome_of(&key, &namespace, name).is_some()
        });
        if !present {
            return;
        }
        self.write(|s| {
            let settled = s.reconciled(&key, &namespace, name);
            let Some(namespaces) = s.instances.get_mut(&key) else {
                return settled;
            };
            let removed = namespaces
                .get_mut(&namespace)
                .is_some_and(|names| names.remove(name).is_some());
            namespaces.retain(|_, names| !names.is_empty());
            if namespaces.is_empty() {
                s.instances.remove(&key);
            }
            settled || removed
        });
    }

    /// A reconcile of the object ended without an outcome to record (it failed for another
    /// reason): the object no longer holds its API's first pass back.
    pub fn attempted(&self, connection: &str, api: &str, namespace: Option<&str>, name: &str) {
        let key = (connection.to_string(), api.to_string());
        let namespace = namespace.map(str::to_string);
        if self.read(|s| s.is_pending(&key, &namespace, name)) {
            self.write(|s| s.reconciled(&key, &namespace, name));
        }
    }

    /// The syncer's consumer watch (re)starts listing `api`: the API settles again once every
    /// listed object has been reconciled.
    pub fn listing_started(&self, connection: &str, api: &str) {
        let key = (connection.to_string(), api.to_string());
        self.write(|s| {
            let was_settled = s.listings.get(&key).is_some_and(Listing::settled);
            s.listings.insert(key, Listing::default());
            was_settled
        });
    }

    /// One object of the listing; it holds the API back until its first reconcile.
    pub fn listed(&self, connection: &str, api: &str, namespace: Option<&str>, name: &str) {
        let key = (connection.to_string(), api.to_string());
        let object = (namespace.map(str::to_string), name.to_string());
        self.write(|s| {
            if let Some(listing) = s.listings.get_mut(&key) {
                let names = listing.pending.entry(object.0.clone()).or_default();
                names.insert(object.1.clone());
                listing.listed.insert(object);
            }
            false
        });
    }

    /// The listing is complete: objects known before but not listed again are gone.
    pub fn listing_done(&self, connection: &str, api: &str) {
        let key = (connection.to_string(), api.to_string());
        self.write(|s| {
            let Some(listing) = s.listings.get_mut(&key) else {
                return false;
            };
            listing.done = true;
            let listed = std::mem::take(&mut listing.listed);
            if let Some(namespaces) = s.instances.get_mut(&key) {
                for (ns, names) in namespaces.iter_mut() {
                    names.retain(|name, _| listed.contains(&(ns.clone(), name.clone())));
                }
                namespaces.retain(|_, names| !names.is_empty());
            }
            true
        });
    }

    /// Forgets everything about `api` through `connection`: its syncer stopped.
    pub fn forget_api(&self, connection: &str, api: &str) {
        let key = (connection.to_string(), api.to_string());
        self.write(|s| {
            let had_instances = s.instances.remove(&key).is_some();
            let was_denied = s.denied.remove(&key).is_some();
            let was_listing = s.listings.remove(&key).is_some();
            had_instances || was_denied || was_listing
        });
    }

    /// Records whether `side` refuses to list/watch `api` for `connection` (`Some`: what it
    /// said), as the syncer's watch of that side finds out.
    pub fn set_denied(&self, connection: &str, api: &str, side: DeniedBy, denied: Option<String>) {
        let key = (connection.to_string(), api.to_string());
        let said = |s: &Recorded| s.denied.get(&key).and_then(|d| d.said(side)).cloned();
        if self.read(|s| said(s) == denied) {
            return;
        }
        self.write(|s| {
            let denials = s.denied.entry(key.clone()).or_default();
            let changed = *denials.of(side) != denied;
            *denials.of(side) = denied;
            if denials.provider.is_none() && denials.consumer.is_none() {
                s.denied.remove(&key);
            }
            changed
        });
    }

    /// Summarises the instances of `apis` through `connection` in `namespace` (a Binding) or in
    /// every namespace and cluster-wide (`None`, a ClusterBinding).
    pub fn summarise<'a>(
        &self,
        connection: &str,
        apis: impl IntoIterator<Item = &'a str>,
        namespace: Option<&str>,
    ) -> Summary {
        let apis: Vec<ApiKey> = apis
            .into_iter()
            .map(|api| (connection.to_string(), api.to_string()))
            .collect();
        self.read(|s| {
            let mut summary = Summary::default();
            for key in &apis {
                let denied = s.denied.get(key);
                if let Some(message) = denied.and_then(|d| d.said(DeniedBy::Provider)) {
                    summary.denied_apis.insert(key.1.clone(), message.clone());
                }
                if let Some(message) = denied.and_then(|d| d.said(DeniedBy::Consumer)) {
                    summary
                        .consumer_denied_apis
                        .insert(key.1.clone(), message.clone());
                }
                // A refused watch never settles, and is the story itself.
                let settled = s.listings.get(key).is_some_and(Listing::settled);
                summary.settling |= !settled && denied.is_none();
                let counts = summary.per_api.entry(key.1.clone()).or_default();
                let known = s.instances.get(key);
                if let Some(listing) = s.listings.get(key) {
                    let pending = listing
                        .pending
                        .iter()
                        .filter(|(ns, _)| namespace.is_none() || ns.as_deref() == namespace)
                        .flat_map(|(ns, names)| {
                            let outcomes = known.and_then(|namespaces| namespaces.get(ns));
                            names
                                .iter()
                                .filter(move |name| outcomes.is_none_or(|o| !o.contains_key(*name)))
                        })
                        .count();
                    counts.pending = u64::try_from(pending).unwrap_or(u64::MAX);
                }
                let Some(namespaces) = known else {
                    continue;
                };
                let in_scope = namespaces
                    .iter()
                    .filter(|(ns, _)| namespace.is_none() || ns.as_deref() == namespace);
                for (ns, names) in in_scope {
                    for (name, outcome) in names {
                        let Some(reason) = outcome.reason() else {
                            counts.synced += 1;
                            continue;
                        };
                        if matches!(outcome, Outcome::Conflict(_)) {
                            counts.conflicting += 1;
                        } else {
                            counts.failing += 1;
                        }
                        let failing = summary.failing.entry(reason).or_default();
                        failing.count += 1;
                        if failing.examples.len() < EXAMPLES {
                            failing.examples.push(match ns {
                                Some(ns) => format!("{ns}/{name}"),
                                None => name.clone(),
                            });
                        }
                    }
                }
            }
            summary
        })
    }

    /// A receiver marked changed whenever a summary may have changed.
    pub fn subscribe(&self) -> watch::Receiver<Recorded> {
        self.0.subscribe()
    }

    fn read<T>(&self, f: impl FnOnce(&Recorded) -> T) -> T {
        f(&self.0.borrow())
    }

    /// Applies `f`; subscribers wake when it says something a summary shows changed.
    fn write(&self, f: impl FnOnce(&mut Recorded) -> bool) {
        self.0.send_if_modified(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: &str = "provider";
    const API: &str = "widgets.example.org";

    fn registry() -> Outcomes {
        let outcomes = Outcomes::default();
        outcomes.listing_started(C, API);
        outcomes.listing_done(C, API);
        outcomes.record(C, API, Some("a"), "ok", Outcome::InSync);
        outcomes.record(
            C,
            API,
            Some("a"),
            "taken",
            Outcome::failure(Reason::ForeignObjectExists),
        );
        outcomes.record(
            C,
            API,
            Some("b"),
            "bad",
            Outcome::failure(Reason::ProviderRejected),
        );
        outcomes.record(C, API, None, "cluster-wide", Outcome::InSync);
        outcomes
    }

    #[test]
    fn a_binding_summarises_its_namespace_and_a_cluster_binding_everything() {
        let outcomes = registry();
        let a = outcomes.summarise(C, [API], Some("a"));
        assert_eq!(a.in_sync(), 1);
        assert_eq!(a.conflicts(), 1);
        assert_eq!(a.failing_total(), 1);
        assert_eq!(
            a.failing[&Reason::ForeignObjectExists].examples,
            vec!["a/taken"]
        );
        let all = outcomes.summarise(C, [API], None);
        assert_eq!(all.in_sync(), 2);
        assert_eq!(all.failing_total(), 2);
        assert_eq!(all.conflicts_per_api()[API], 1);
        assert_eq!(all.failing[&Reason::ProviderRejected].count, 1);
    }

    #[test]
    fn instances_are_counted_per_api_pending_included() {
        let outcomes = registry();
        // A re-list: "ok" keeps its outcome while it waits, "new" has none yet.
        outcomes.listing_started(C, API);
        outcomes.listed(C, API, Some("a"), "ok");
        outcomes.listed(C, API, Some("a"), "new");
        let a = outcomes.summarise(C, [API], Some("a"));
        let expected = InstanceCounts {
            synced: 1,
            conflicting: 1,
            failing: 0,
            pending: 1,
        };
        assert_eq!(a.per_api.get(API), Some(&expected));
        let all = outcomes.summarise(C, [API], None);
        assert_eq!(
            all.per_api.get(API).map(|c| (c.synced, c.failing)),
            Some((2, 1))
        );
    }

    #[test]
    fn only_the_binding_s_connection_and_apis_count() {
        let outcomes = registry();
        let other = outcomes.summarise("other", [API], None);
        assert_eq!(other.in_sync() + other.failing_total(), 0);
        assert_eq!(
            other.conflicts_per_api(),
            BTreeMap::from([(API.to_string(), 0)])
        );
        let gadgets = outcomes.summarise(C, ["gadgets.example.org"], None);
        assert_eq!(gadgets.in_sync() + gadgets.failing_total(), 0);
        assert!(gadgets.settling, "no syncer for it");
    }

    #[test]
    fn a_cleared_cause_and_a_deleted_instance_leave_the_summary() {
        let outcomes = registry();
        outcomes.record(C, API, Some("a"), "taken", Outcome::InSync);
        outcomes.forget(C, API, Some("b"), "bad");
        let all = outcomes.summarise(C, [API], None);
        assert_eq!(all.failing_total(), 0);
        assert_eq!(all.in_sync(), 3);
        assert_eq!(all.conflicts_per_api()[API], 0, "still listed, with zero");
    }

    #[test]
    fn a_stopped_syncer_leaves_nothing_behind() {
        let outcomes = registry();
        outcomes.set_denied(C, API, DeniedBy::Provider, Some("forbidden".into()));
        outcomes.forget_api(C, API);
        let s = outcomes.summarise(C, [API], None);
        assert!(s.settling, "a restarted syncer starts over");
        assert_eq!(s.in_sync() + s.failing_total(), 0);
        assert!(s.denied_apis.is_empty());
    }

    #[test]
    fn the_change_counter_moves_only_when_a_summary_can_change() {
        let outcomes = registry();
        let mut rx = outcomes.subscribe();
        rx.mark_unchanged();
        outcomes.record(C, API, Some("a"), "ok", Outcome::InSync);
        outcomes.forget(C, API, Some("a"), "never-seen");
        outcomes.set_denied(C, API, DeniedBy::Provider, None);
        assert!(!rx.has_changed().unwrap_or(true), "nothing changed");
        outcomes.record(C, API, Some("a"), "ok", Outcome::failure(Reason::Forbidden));
        assert!(rx.has_changed().unwrap_or(false));
        rx.mark_unchanged();
        outcomes.set_denied(C, API, DeniedBy::Provider, Some("no list".into()));
        assert!(rx.has_changed().unwrap_or(false));
    }

    #[test]
    fn denials_are_reported_per_api_and_cleared() {
        let outcomes = registry();
        outcomes.set_denied(
            C,
            API,
            DeniedBy::Provider,
            Some("widgets is forbidden".into()),
        );
        let s = outcomes.summarise(C, [API], Some("a"));
        assert_eq!(s.denied_apis[API], "widgets is forbidden");
        outcomes.set_denied(C, API, DeniedBy::Provider, None);
        assert!(
            outcomes
                .summarise(C, [API], Some("a"))
                .denied_apis
                .is_empty()
        );
    }

    #[test]
    fn an_api_settles_once_every_listed_object_was_reconciled() {
        let outcomes = Outcomes::default();
        assert!(outcomes.summarise(C, [API], None).settling, "no syncer yet");
        outcomes.listing_started(C, API);
        outcomes.listed(C, API, Some("a"), "one");
        outcomes.listed(C, API, Some("b"), "two");
        outcomes.listed(C, API, Some("c"), "failing");
        outcomes.listing_done(C, API);
        outcomes.record(C, API, Some("a"), "one", Outcome::InSync);
        outcomes.forget(C, API, Some("b"), "two");
        assert!(outcomes.summarise(C, [API], None).settling, "one left");
        let mut rx = outcomes.subscribe();
        rx.mark_unchanged();
        outcomes.attempted(C, API, Some("c"), "failing");
        assert!(!outcomes.summarise(C, [API], None).settling);
        assert!(rx.has_changed().unwrap_or(false), "settling is a change");
    }

    #[test]
    fn a_relist_prunes_objects_that_disappeared_unseen() {
        let outcomes = registry();
        outcomes.listing_started(C, API);
        outcomes.listed(C, API, Some("a"), "ok");
        outcomes.listing_done(C, API);
        let s = outcomes.summarise(C, [API], None);
        assert!(s.settling, "ok is listed again and not yet reconciled");
        assert_eq!(s.failing_total(), 0, "taken and bad disappeared");
        outcomes.record(C, API, Some("a"), "ok", Outcome::InSync);
        let s = outcomes.summarise(C, [API], None);
        assert!(!s.settling);
        assert_eq!(s.in_sync(), 1);
    }

    #[test]
    fn a_refused_watch_is_not_settling() {
        let outcomes = Outcomes::default();
        outcomes.set_denied(C, API, DeniedBy::Provider, Some("forbidden".into()));
        assert!(!outcomes.summarise(C, [API], None).settling);
    }

    #[test]
    fn ownership_reasons_are_conflicts_and_the_rest_failures() {
        assert_eq!(
            Outcome::failure(Reason::OwnedByAnother),
            Outcome::Conflict(Reason::OwnedByAnother)
        );
        assert_eq!(
            Outcome::failure(Reason::PolicyFailed),
            Outcome::Failed(Reason::PolicyFailed)
        );
        assert_eq!(Outcome::InSync.reason(), None);
    }
}
