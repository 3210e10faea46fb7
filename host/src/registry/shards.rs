//! Which work this replica may do: written by the shard coordinator (`crate::sharding`), read by
//! the Connection controller, the binding controllers and the syncer supervisor before they
//! write anything.
//!
//! Without sharding one replica does everything (`Held::everything`). With it, a replica
//! owns a Connection shard (the Connection's status, discovery, heartbeat, autoBind, schema
//! installs, related resources, bindings' overall status and finalizers) or an API shard (the
//! syncer of one (Connection, API)) only while it holds that shard's Lease.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

/// The shards this replica holds at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// Whether work is sharded at all; `false` means this replica owns everything.
    pub sharded: bool,
    /// Connections whose shard this replica holds.
    pub connections: BTreeSet<String>,
    /// (Connection, API) pairs whose syncer this replica may run.
    pub apis: BTreeSet<(String, String)>,
}

impl Held {
    /// One replica, every shard (no `--sharding`).
    pub fn everything() -> Self {
        Self::default()
    }

    /// Whether this replica does the Connection's own work.
    pub fn connection(&self, connection: &str) -> bool {
        !self.sharded || self.connections.contains(connection)
    }

    /// Whether this replica runs the syncer of `api` through `connection`.
    pub fn api(&self, connection: &str, api: &str) -> bool {
        !self.sharded || self.apis.iter().any(|(c, a)| c == connection && a == api)
    }
}

/// Shared shards registry, cheap to clone; subscribers wake when a shard is acquired or
/// given up.
#[derive(Clone, Debug)]
pub struct Shards {
    owned: Arc<watch::Sender<Held>>,
    identity: Arc<str>,
    lease_namespace: Arc<str>,
    /// Reconciles doing a Connection shard's work right now, per Connection: its Lease is
    /// released only once none is left.
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
}

/// A reconcile doing a Connection shard's work; the shard cannot be handed over while it lives.
#[derive(Debug)]
pub struct ConnectionWork {
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
    connection: String,
}

impl Drop for ConnectionWork {
    fn drop(&mut self) {
        let mut in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = in_flight.get_mut(&self.connection) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                in_flight.remove(&self.connection);
            }
        }
    }
}

impl Default for Shards {
    fn default() -> Self {
        Self::new(false, "konnector", "")
    }
}

impl Shards {
    /// A registry for replica `identity` whose shard Leases live in `lease_namespace`; a
    /// sharded one starts owning nothing.
    pub fn new(sharded: bool, identity: &str, lease_namespace: &str) -> Self {
        let owned = Held {
            sharded,
            ..Held::default()
        };
        Self {
            owned: Arc::new(watch::Sender::new(owned)),
            identity: identity.into(),
            lease_namespace: lease_namespace.into(),
            in_flight: Arc::default(),
        }
    }

    /// Starts a piece of the Connection's own work when this replica holds its shard; the
    /// shard is not released until the returned guard is dropped. `None`: another replica's.
    pub fn claim_connection(&self, connection: &str) -> Option<ConnectionWork> {
        let mut in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Checked under the lock, so the coordinator never sees "given up, nothing running"
        // while a claim is being made.
        if !self.owns_connection(connection) {
            return None;
        }
        *in_flight.entry(connection.to_string()).or_default() += 1;
        Some(ConnectionWork {
            in_flight: self.in_flight.clone(),
            connection: connection.to_string(),
        })
    }

    /// Resolves once this replica no longer holds the Connection's shard (at once when it
    /// does not): work racing it is dropped, so no write starts after the renew deadline.
    pub async fn connection_lost(&self, connection: &str) {
        let mut owned = self.owned.subscribe();
        let _ = owned.wait_for(|o| !o.connection(connection)).await;
    }

    /// Whether some reconcile still does the Connection's own work here.
    pub fn connection_busy(&self, connection: &str) -> bool {
        let in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        in_flight.contains_key(connection)
    }

    /// The namespace of the shard Leases.
    pub fn lease_namespace(&self) -> &str {
        &self.lease_namespace
    }

    /// Whether work is sharded over replicas.
    pub fn sharded(&self) -> bool {
        self.owned.borrow().sharded
    }

    /// This replica's identity (its Pod name): shard Lease holder and status field manager.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether this replica does the Connection's own work now.
    pub fn owns_connection(&self, connection: &str) -> bool {
        self.owned.borrow().connection(connection)
    }

    /// Whether this replica may run the syncer of `api` through `connection` now.
    pub fn owns_api(&self, connection: &str, api: &str) -> bool {
        self.owned.borrow().api(connection, api)
    }

    /// The shards held now.
    pub fn current(&self) -> Held {
        self.owned.borrow().clone()
    }

    /// Wakes on every change of the shards held.
    pub fn subscribe(&self) -> watch::Receiver<Held> {
        self.owned.subscribe()
    }

    /// One item per change of the Connection shards held: the controllers whose objects follow
    /// a Connection reconcile them all again, as owner or as follower.
    pub fn connection_changes(&self) -> impl futures::Stream<Item = ()> + Send + use<> {
        let mut owned = self.owned.subscribe();
        let last = owned.borrow_and_update().connections.clone();
        futures::stream::unfold((owned, last), |(mut owned, mut last)| async move {
            loop {
                owned.changed().await.ok()?;
                let now = owned.borrow_and_update().connections.clone();
                if now != last {
                    last = now;
                    return Some(((), (owned, last)));
                }
            }
        })
    }

    /// Publishes the shards held now (the coordinator's, after each change).
    pub fn publish(&self, connections: BTreeSet<String>, apis: BTreeSet<(String, String)>) {
        self.owned.send_if_modified(|owned| {
            let changed = owned.connections != connections || owned.apis != apis;
            owned.connections = connections;
            owned.apis = apis;
            changed
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unsharded_replica_owns_everything() {
        let shards = Shards::default();
        assert!(shards.owns_connection("any"));
        assert!(shards.owns_api("any", "widgets.example.org"));
    }

    #[test]
    fn a_sharded_replica_owns_only_what_it_published() {
        let shards = Shards::new(true, "r1", "kbind");
        assert!(!shards.owns_connection("c"));
        shards.publish(
            BTreeSet::from(["c".to_string()]),
            BTreeSet::from([("d".to_string(), "widgets.example.org".to_string())]),
        );
        assert!(shards.owns_connection("c"));
        assert!(!shards.owns_connection("d"));
        assert!(shards.owns_api("d", "widgets.example.org"));
        assert!(!shards.owns_api("c", "widgets.example.org"));
    }

    #[test]
    fn a_connection_shard_is_busy_while_its_work_runs() {
        let shards = Shards::new(true, "r1", "kbind");
        assert!(shards.claim_connection("c").is_none());
        shards.publish(BTreeSet::from(["c".to_string()]), BTreeSet::new());
        let first = shards.claim_connection("c");
        let second = shards.claim_connection("c");
        assert!(first.is_some() && second.is_some());
        drop(first);
        assert!(shards.connection_busy("c"));
        drop(second);
        assert!(!shards.connection_busy("c"));
    }
}
