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

use crate::registry::{Outcomes, Summary};

use super::object::BindingObject;
use super::status::summary;

/// How long a burst of outcome changes may settle before summaries are compared.
const SETTLE: Duration = Duration::from_millis(250);

struct State<K: BindingObject> {
    changes: tokio::sync::watch::Receiver<crate::registry::Recorded>,
    outcomes: Outcomes,
    bindings: Store<K>,
    seen: HashMap<ObjectRef<K>, Summary>,
    due: VecDeque<ObjectRef<K>>,
}

/// The bindings (of the controller's `bindings` store) whose scope's summary changed.
pub(super) fn summary_changes<K: BindingObject>(
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::api::Reason;
    use crate::api::{ApiReference, Binding, BindingSpec, ConflictPolicy, ConnectionReference};
    use crate::registry::Outcome;
    use futures::StreamExt;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher;

    const API: &str = "widgets.example.org";

    fn binding(namespace: &str) -> Binding {
        let mut b = Binding::new(
            "widgets",
            BindingSpec {
                connection_ref: ConnectionReference { name: "p".into() },
                apis: vec![ApiReference { name: API.into() }],
                conflict_policy: ConflictPolicy::Fail,
                related_resources: vec![],
            },
        );
        b.metadata.namespace = Some(namespace.into());
        b
    }

    async fn next<S: Stream<Item = ObjectRef<Binding>> + Unpin>(stream: &mut S) -> Option<String> {
        next_namespace(stream, Duration::from_secs(2)).await
    }

    /// The namespace of the next binding `stream` yields within `wait`, if any.
    pub(crate) async fn next_namespace<S: Stream<Item = ObjectRef<Binding>> + Unpin>(
        stream: &mut S,
        wait: Duration,
    ) -> Option<String> {
        tokio::time::timeout(wait, stream.next())
            .await
            .ok()
            .flatten()
            .and_then(|r| r.namespace)
    }

    #[tokio::test]
    async fn only_bindings_whose_summary_changed_are_reconciled() {
        let outcomes = Outcomes::default();
        let mut writer = Writer::<Binding>::default();
        for ns in ["a", "b"] {
            writer.apply_watcher_event(&watcher::Event::Apply(binding(ns)));
        }
        let mut stream = Box::pin(summary_changes(outcomes.clone(), writer.as_reader()));
        // The syncer finished its first pass: both bindings' summaries are new.
        outcomes.listing_started("p", API);
        outcomes.listing_done("p", API);
        let mut first = vec![next(&mut stream).await, next(&mut stream).await];
        first.sort();
        assert_eq!(first, vec![Some("a".into()), Some("b".into())]);
        // A conflict in namespace a concerns the Binding there only.
        outcomes.record(
            "p",
            API,
            Some("a"),
            "w",
            Outcome::failure(Reason::ForeignObjectExists),
        );
        assert_eq!(next(&mut stream).await, Some("a".into()));
        // Something the summaries do not show changes nothing.
        outcomes.record("p", "gadgets.example.org", Some("b"), "g", Outcome::InSync);
        assert_eq!(next(&mut stream).await, None);
    }
}
