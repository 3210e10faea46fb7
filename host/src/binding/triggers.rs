//! Reconciling a binding when the sync engine's outcomes for its scope change, rather than
//! only on its periodic requeue.
//!
//! ```text
//! Outcomes (changes tick) ─▶ settle briefly ─▶ summarise each binding's scope
//!                                              ─▶ differs from the last summary seen? ─▶ reconcile it
//! ```
//!
//! The registry's change counter ticks on any instance outcome anywhere; comparing each
//! binding's own summary with the one last seen keeps unrelated bindings quiet, and the short
//! settling delay turns a burst (an initial sync of thousands of instances) into a few
//! reconciles.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use futures::Stream;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::sync::{Outcomes, Summary};

use super::controller::BindingObject;
use super::summary;

/// How long a burst of outcome changes may settle before summaries are compared.
const SETTLE: Duration = Duration::from_millis(250);

struct State<K: BindingObject> {
    changes: tokio::sync::watch::Receiver<u64>,
    outcomes: Outcomes,
    bindings: Store<K>,
    seen: HashMap<ObjectRef<K>, Summary>,
    due: VecDeque<ObjectRef<K>>,
}

/// The bindings (of the controller's `bindings` store) whose scope's summary changed.
pub fn summary_changes<K: BindingObject>(
    outcomes: Outcomes,
    bindings: Store<K>,
) -> impl Stream<Item = ObjectRef<K>> + Send + 'static {
    let state = State {
        changes: outcomes.subscribe(),
        outcomes,
        bindings,
        seen: HashMap::new(),
        due: VecDeque::new(),
    };
    futures::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(next) = state.due.pop_front() {
                return Some((next, state));
            }
            state.changes.changed().await.ok()?;
            tokio::time::sleep(SETTLE).await;
            state.changes.mark_unchanged();
            let mut seen = HashMap::new();
            for binding in state.bindings.state() {
                let reference = ObjectRef::from_obj(&*binding);
                let summary = summary::of(&*binding, &state.outcomes);
                if state.seen.get(&reference) != Some(&summary) {
                    state.due.push_back(reference.clone());
                }
                seen.insert(reference, summary);
            }
            state.seen = seen;
        }
    })
}
