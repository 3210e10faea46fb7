//! Which syncers run: written by the syncer supervisor, read by drains that must not race a
//! syncer still writing.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::sync::watch;

/// The (Connection, API) pairs that have a syncer, as the supervisor last published them:
/// a pair is listed from its syncer's start until the syncer has finished.
#[derive(Clone, Debug, Default)]
pub struct RunningSyncers(Arc<watch::Sender<BTreeSet<(String, String)>>>);

impl RunningSyncers {
    /// Whether a syncer for `api` through `connection` runs (or is still stopping).
    pub fn contains(&self, connection: &str, api: &str) -> bool {
        self.0
            .borrow()
            .iter()
            .any(|(c, a)| c == connection && a == api)
    }

    /// Publishes the pairs that have a syncer now (the supervisor's, after each change).
    pub fn publish(&self, running: BTreeSet<(String, String)>) {
        self.0.send_if_modified(|current| {
            let changed = *current != running;
            *current = running;
            changed
        });
    }
}
