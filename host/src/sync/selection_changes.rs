//! Binding changes as reconcile triggers, proportional to what they change: a syncer
//! re-reconciles the instances of the namespaces whose selection changed, all of them only
//! when the cluster-wide selection did, and none when a change concerns other APIs or
//! Connections.
//!
//! ```text
//! index change ──▶ scopes(connection, api) now vs before ──▶ reach ──▶ consumer cache
//!                                                                   ──▶ keys of the objects reached
//! ```

use futures::{Stream, StreamExt, stream};
use kube::runtime::reflector::Store;
use tokio::sync::watch;

use crate::registry::{BindingIndex, Reach, Scopes, SharedIndex, reach};

use super::cache::instance::CachedInstance;
use super::recovery::Key;

/// What the trigger stream carries between index changes.
struct State {
    index: watch::Receiver<BindingIndex>,
    connection: String,
    api: String,
    last: Scopes,
    cache: Store<CachedInstance>,
}

/// A stream of the consumer objects (name and namespace only) that a binding change may
/// have selected or deselected, for the syncer's work queue.
pub(super) fn selection_changes(
    index: SharedIndex,
    connection: String,
    api: String,
    cache: Store<CachedInstance>,
) -> impl Stream<Item = Key> + Send + 'static {
    let state = State {
        last: index.read(|i| i.scopes(&connection, &api)),
        index: index.subscribe(),
        connection,
        api,
        cache,
    };
    stream::unfold(state, |mut state| async move {
        state.index.changed().await.ok()?;
        let now = state
            .index
            .borrow_and_update()
            .scopes(&state.connection, &state.api);
        let reached = reach(&state.last, &now);
        state.last = now;
        let keys = reached_keys(&reached, &state.cache);
        Some((stream::iter(keys), state))
    })
    .flatten()
}

/// The keys of the cached objects a change reaches.
fn reached_keys(reached: &Reach, cache: &Store<CachedInstance>) -> Vec<Key> {
    let selected = |obj: &CachedInstance| match reached {
        Reach::Nothing => false,
        Reach::Everything => true,
        Reach::Namespaces(namespaces) => obj
            .metadata
            .namespace
            .as_ref()
            .is_some_and(|ns| namespaces.contains(ns)),
    };
    if *reached == Reach::Nothing {
        return Vec::new();
    }
    cache
        .state()
        .iter()
        .filter(|obj| selected(obj))
        .filter_map(|obj| obj.key())
        .collect()
}
