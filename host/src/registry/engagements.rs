//! The engagement registry: the one place where a Ready Connection's provider client lives.
//!
//! The Connection controller engages a Connection when it becomes Ready and disengages it when
//! it stops being Ready; bindings and syncers only ever read from here. Losing an engagement
//! stops syncers, it never deletes anything (spec: "Objects and CRDs are not deleted merely
//! because connectivity is lost").

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tokio::sync::watch;

use crate::api::{ExportedApi, IsolationInForce};
use crate::telemetry::metrics;

/// A registry size as a gauge value.
fn gauge(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// A Ready Connection: its provider client and the identities pinned for it.
#[derive(Clone)]
pub struct Engagement {
    /// Name of the Connection.
    pub connection: String,
    /// Client for the provider cluster, built from the Connection's kubeconfig.
    pub provider: kube::Client,
    /// Pinned provider cluster UID.
    pub provider_uid: String,
    /// Pinned consumer cluster UID, written into ownership markers.
    pub consumer_uid: String,
    /// APIs the provider exports, as last discovered.
    pub exported: Vec<ExportedApi>,
    /// Per exported API (by name), a revision of its provider schema as discovery saw it; an
    /// unchanged revision means the schema need not be fetched again. Missing: unknown.
    pub schema_revisions: BTreeMap<String, String>,
    /// Where this consumer's copies go on the provider (`status.isolation` of the Connection).
    pub isolation: IsolationInForce,
    /// The provider namespace of the heartbeat Lease: never a place for copies.
    pub heartbeat_namespace: String,
    /// Digest of the kubeconfig the client was built from; a change means a new client.
    pub credentials_digest: String,
    /// Bumped each time this Connection is (re)engaged with a new client, so that syncers
    /// built for an older client know to rebuild.
    pub epoch: u64,
}

impl std::fmt::Debug for Engagement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engagement")
            .field("connection", &self.connection)
            .field("provider_uid", &self.provider_uid)
            .field("consumer_uid", &self.consumer_uid)
            .field("exported", &self.exported.len())
            .field("epoch", &self.epoch)
            .finish()
    }
}

/// Shared registry of engaged Connections, cheap to clone: a watch value, so subscribers
/// wake when a Connection is engaged with a new client or exports, or disengaged.
#[derive(Clone, Default)]
pub struct Engagements(Arc<watch::Sender<Engaged>>);

/// The engaged Connections at one moment.
#[derive(Clone, Default)]
pub struct Engaged {
    by_connection: HashMap<String, Engagement>,
    next_epoch: u64,
}

impl Engaged {
    /// The engagement of a Connection, if it is Ready.
    pub fn get(&self, connection: &str) -> Option<&Engagement> {
        self.by_connection.get(connection)
    }

    /// Every engaged Connection's engagement.
    pub fn all(&self) -> impl Iterator<Item = &Engagement> {
        self.by_connection.values()
    }
}

impl std::fmt::Debug for Engagements {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engagements").finish_non_exhaustive()
    }
}

impl Engagements {
    /// Records a Ready Connection. The epoch is kept when the same credentials and identities
    /// are engaged again (a periodic reconcile), and bumped when anything a syncer was built
    /// for changed. Returns the engagement as stored.
    pub fn engage(&self, mut engagement: Engagement) -> Engagement {
        self.0.send_if_modified(|registry| {
            let old = registry
                .by_connection
                .get(&engagement.connection)
                .filter(|old| {
                    old.credentials_digest == engagement.credentials_digest
                        && old.provider_uid == engagement.provider_uid
                        && old.consumer_uid == engagement.consumer_uid
                        && old.isolation == engagement.isolation
                        && old.heartbeat_namespace == engagement.heartbeat_namespace
                });
            let changed = match old {
                Some(old) => {
                    engagement.epoch = old.epoch;
                    engagement.provider = old.provider.clone();
                    old.exported != engagement.exported
                        || old.schema_revisions != engagement.schema_revisions
                }
                None => {
                    registry.next_epoch += 1;
                    engagement.epoch = registry.next_epoch;
                    true
                }
            };
            registry
                .by_connection
                .insert(engagement.connection.clone(), engagement.clone());
            metrics()
                .engaged_connections
                .set(gauge(registry.by_connection.len()));
            changed
        });
        engagement
    }

    /// Forgets a Connection that is no longer Ready; its syncers stop on the next change.
    pub fn disengage(&self, connection: &str) {
        self.0.send_if_modified(|registry| {
            let removed = registry.by_connection.remove(connection).is_some();
            metrics()
                .engaged_connections
                .set(gauge(registry.by_connection.len()));
            removed
        });
    }

    /// The current engagement of a Connection, if it is Ready.
    pub fn get(&self, connection: &str) -> Option<Engagement> {
        self.0.borrow().get(connection).cloned()
    }

    /// Names of every engaged Connection.
    pub fn connections(&self) -> Vec<String> {
        self.0.borrow().by_connection.keys().cloned().collect()
    }

    /// A receiver of the engaged Connections, marked changed whenever a Connection is
    /// engaged, re-engaged with a different client or exports, or disengaged.
    pub fn subscribe(&self) -> watch::Receiver<Engaged> {
        self.0.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engagement(digest: &str, exported: &[&str]) -> Engagement {
        let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        Engagement {
            connection: "provider".into(),
            provider: kube::Client::try_from(config).unwrap(),
            provider_uid: "p".into(),
            consumer_uid: "c".into(),
            exported: exported
                .iter()
                .map(|name| ExportedApi {
                    name: name.to_string(),
                    group: "example.org".into(),
                    resource: "widgets".into(),
                    scope: crate::api::ResourceScope::Namespaced,
                    versions: vec!["v1".into()],
                })
                .collect(),
            schema_revisions: BTreeMap::new(),
            isolation: Default::default(),
            heartbeat_namespace: "kbind".into(),
            credentials_digest: digest.into(),
            epoch: 0,
        }
    }

    #[tokio::test]
    async fn reengaging_the_same_credentials_keeps_the_epoch_and_stays_quiet() {
        let registry = Engagements::default();
        let mut changes = registry.subscribe();
        let first = registry.engage(engagement("d1", &["widgets.example.org"]));
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        let again = registry.engage(engagement("d1", &["widgets.example.org"]));
        assert_eq!(again.epoch, first.epoch);
        assert!(
            !changes.has_changed().unwrap(),
            "a periodic reconcile does not wake syncers"
        );
    }

    #[tokio::test]
    async fn new_credentials_bump_the_epoch() {
        let registry = Engagements::default();
        let first = registry.engage(engagement("d1", &[]));
        let rotated = registry.engage(engagement("d2", &[]));
        assert!(rotated.epoch > first.epoch);
    }

    #[tokio::test]
    async fn changed_exports_notify_without_a_new_epoch() {
        let registry = Engagements::default();
        let mut changes = registry.subscribe();
        let first = registry.engage(engagement("d1", &[]));
        changes.mark_unchanged();
        let more = registry.engage(engagement("d1", &["widgets.example.org"]));
        assert_eq!(more.epoch, first.epoch);
        assert!(changes.has_changed().unwrap());
    }

    #[tokio::test]
    async fn disengaging_forgets_and_notifies_once() {
        let registry = Engagements::default();
        let mut changes = registry.subscribe();
        registry.engage(engagement("d1", &[]));
        changes.mark_unchanged();
        registry.disengage("provider");
        assert!(registry.get("provider").is_none());
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        registry.disengage("provider");
        assert!(
            !changes.has_changed().unwrap(),
            "disengaging twice is quiet"
        );
    }
}
