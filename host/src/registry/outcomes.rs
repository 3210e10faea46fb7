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

pub use super::summary::Outcome;
use super::summary::Summary;
use super::tally::Tally;
use crate::api::InstanceCounts;

/// How many instance names a summary keeps per failing reason, as examples for the operator.
pub(crate) const EXAMPLES: usize = 3;

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
type Namespaces = BTreeMap<Option<String>, Tally>;

/// A syncer's consumer listing: which listed objects still wait for their first reconcile.
#[derive(Debug, Default)]
struct Listing {
    /// The list (or re-list) is complete.
    done: bool,
    /// Listed objects no reconcile has left an outcome for yet, by namespace (so an object is
    /// looked up without building its key).
    pending: BTreeMap<Option<String>, BTreeSet<String>>,
    /// Per namespace, how many of `pending` have no outcome recorded at all (a summary's
    /// `pending` count, kept as it changes rather than counted per summary).
    unknown: BTreeMap<Option<String>, u64>,
    /// Every object of the current list, to prune what disappeared unseen when it completes.
    listed: BTreeSet<ObjectKey>,
}

impl Listing {
    fn settled(&self) -> bool {
        self.done && self.pending.is_empty()
    }

    /// A pending object without an outcome is no longer pending.
    fn unknown_left(&mut self, namespace: &Option<String>) {
        if let Some(n) = self.unknown.get_mut(namespace) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.unknown.remove(namespace);
            }
        }
    }

    /// Pending objects without an outcome in the namespaces `in_scope` accepts.
    fn unknown_in(&self, in_scope: impl Fn(&Option<String>) -> bool) -> u64 {
        self.unknown
            .iter()
            .filter(|(ns, _)| in_scope(ns))
            .map(|(_, n)| *n)
            .sum()
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
    /// Called before the object's outcome is recorded or forgotten.
    fn reconciled(&mut self, key: &ApiKey, namespace: &Option<String>, name: &str) -> bool {
        let known = self.outcome_of(key, namespace, name).is_some();
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
        if removed && !known {
            listing.unknown_left(namespace);
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
                .set(name, outcome);
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
            let known = s.outcome_of(&key, &object.0, &object.1).is_some();
            if let Some(listing) = s.listings.get_mut(&key) {
                let names = listing.pending.entry(object.0.clone()).or_default();
                if names.insert(object.1.clone()) && !known {
                    *listing.unknown.entry(object.0.clone()).or_default() += 1;
                }
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
                    names.retain(|name| listed.contains(&(ns.clone(), name.to_string())));
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
                let in_scope =
                    |ns: &Option<String>| namespace.is_none() || ns.as_deref() == namespace;
                if let Some(listing) = s.listings.get(key) {
                    counts.pending = listing.unknown_in(in_scope);
                }
                let Some(namespaces) = s.instances.get(key) else {
                    continue;
                };
                for (ns, tally) in namespaces.iter().filter(|(ns, _)| in_scope(ns)) {
                    counts.synced += tally.synced();
                    counts.conflicting += tally.conflicting();
                    counts.failing += tally.failing();
                    for (reason, names) in tally.not_in_sync() {
                        let failing = summary.failing.entry(reason).or_default();
                        failing.count += u64::try_from(names.len()).unwrap_or(u64::MAX);
                        let room = EXAMPLES.saturating_sub(failing.examples.len());
                        failing
                            .examples
                            .extend(names.iter().take(room).map(|name| match ns {
                                Some(ns) => format!("{ns}/{name}"),
                                None => name.clone(),
                            }));
                    }
                }
            }
            summary
        })
    }

    /// A receiver marked changed whenever a summary may have changed.
    /// Instance counts per API over every Connection and namespace (for the gauges).
    pub fn counts_per_api(&self) -> BTreeMap<String, InstanceCounts> {
        let mut apis: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        self.read(|s| {
            for (connection, api) in s.listings.keys().chain(s.instances.keys()) {
                apis.entry(connection.clone())
                    .or_default()
                    .insert(api.clone());
            }
        });
        let mut out: BTreeMap<String, InstanceCounts> = BTreeMap::new();
        for (connection, names) in &apis {
            let summary = self.summarise(connection, names.iter().map(String::as_str), None);
            for (api, counts) in summary.per_api {
                let sum = out.entry(api).or_default();
                sum.synced += counts.synced;
                sum.conflicting += counts.conflicting;
                sum.failing += counts.failing;
                sum.pending += counts.pending;
            }
        }
        out
    }

    /// Wakes on every change a summary shows.
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
mod tests;
