//! Reconciling a binding when something its reconcile reads from the shared registries
//! changed, and only then: its Connection's engagement (engaged or not, client epoch, exports,
//! schema revisions) or the Connection pinned for one of its APIs. Any other binding's index
//! write, or another Connection's engagement, leaves it alone, so N bindings cost N reconciles
//! per relevant change instead of N for every change of any one of them.
//!
//! ```text
//! engagements / index (watch ticks) ─▶ snapshot what bindings read ─▶ diff with the last one
//!   ─▶ changed Connections, changed pins ─▶ bindings referencing / listing them ─▶ reconcile
//! ```

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use futures::Stream;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::watch;

use crate::api::ExportedApi;
use crate::registry::{BindingIndex, Engaged};

use super::object::BindingObject;

/// What bindings read of one engagement.
#[derive(Clone, Debug, PartialEq, Eq)]
struct EngagementFacts {
    epoch: u64,
    exported: Vec<ExportedApi>,
    revisions: BTreeMap<String, String>,
}

/// What bindings read of the registries at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Snapshot {
    engaged: BTreeMap<String, EngagementFacts>,
    pins: BTreeMap<String, String>,
}

impl Snapshot {
    fn of(engaged: &Engaged, index: &BindingIndex) -> Self {
        Self {
            engaged: engaged
                .all()
                .map(|e| {
                    let facts = EngagementFacts {
                        epoch: e.epoch,
                        exported: e.exported.clone(),
                        revisions: e.schema_revisions.clone(),
                    };
                    (e.connection.clone(), facts)
                })
                .collect(),
            pins: index
                .pins()
                .into_iter()
                .map(|(api, connection)| (api.to_string(), connection.to_string()))
                .collect(),
        }
    }

    /// The Connections and APIs whose facts differ between `self` and `next`.
    fn changes(&self, next: &Self) -> (BTreeSet<String>, BTreeSet<String>) {
        (
            differing(&self.engaged, &next.engaged),
            differing(&self.pins, &next.pins),
        )
    }
}

/// Keys present in one map and not the other, or with different values.
fn differing<V: PartialEq>(a: &BTreeMap<String, V>, b: &BTreeMap<String, V>) -> BTreeSet<String> {
    a.keys()
        .chain(b.keys())
        .filter(|key| a.get(*key) != b.get(*key))
        .cloned()
        .collect()
}

struct State<K: BindingObject> {
    engaged: watch::Receiver<Engaged>,
    index: watch::Receiver<BindingIndex>,
    bindings: Store<K>,
    last: Snapshot,
    due: VecDeque<ObjectRef<K>>,
}

/// The bindings (of the controller's `bindings` store) that a change of the engagements or
/// of the index concerns.
pub(super) fn dependency_changes<K: BindingObject>(
    mut engaged: watch::Receiver<Engaged>,
    mut index: watch::Receiver<BindingIndex>,
    bindings: Store<K>,
) -> impl Stream<Item = ObjectRef<K>> + Send + 'static {
    let last = Snapshot::of(&engaged.borrow_and_update(), &index.borrow_and_update());
    let state = State {
        engaged,
        index,
        bindings,
        last,
        due: VecDeque::new(),
    };
    futures::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(next) = state.due.pop_front() {
                return Some((next, state));
            }
            tokio::select! {
                changed = state.engaged.changed() => changed.ok()?,
                changed = state.index.changed() => changed.ok()?,
            }
            let now = Snapshot::of(
                &state.engaged.borrow_and_update(),
                &state.index.borrow_and_update(),
            );
            let (connections, apis) = state.last.changes(&now);
            state.last = now;
            for binding in state.bindings.state() {
                let spec = binding.binding_spec();
                let concerned = connections.contains(&spec.connection_ref.name)
                    || spec.apis.iter().any(|api| apis.contains(&api.name));
                if concerned {
                    state.due.push_back(ObjectRef::from_obj(&*binding));
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher;

    use super::*;
    use crate::api::{ApiReference, Binding, BindingSpec, ConflictPolicy, ConnectionReference};
    use crate::registry::{BindingKey, Engagement, Engagements, Entry, SharedIndex};

    fn binding(namespace: &str, connection: &str, api: &str) -> Binding {
        let mut b = Binding::new(
            "widgets",
            BindingSpec {
                connection_ref: ConnectionReference {
                    name: connection.into(),
                },
                apis: vec![ApiReference { name: api.into() }],
                conflict_policy: ConflictPolicy::Fail,
                related_resources: vec![],
            },
        );
        b.metadata.namespace = Some(namespace.into());
        b
    }

    fn engagement(connection: &str) -> Result<Engagement, kube::Error> {
        let config = kube::Config::new(http::Uri::from_static("https://127.0.0.1:1"));
        Ok(Engagement {
            connection: connection.into(),
            provider: kube::Client::try_from(config)?,
            provider_uid: "p".into(),
            consumer_uid: "c".into(),
            exported: vec![],
            schema_revisions: BTreeMap::new(),
            isolation: Default::default(),
            heartbeat_namespace: "kbind".into(),
            credentials_digest: "d".into(),
            epoch: 0,
        })
    }

    fn entry(connection: &str, api: &str) -> Entry {
        Entry {
            connection: connection.into(),
            apis: [(api.to_string(), None)].into(),
            conflict_policy: ConflictPolicy::Fail,
            ready: false,
            created: None,
        }
    }

    async fn next<S: Stream<Item = ObjectRef<Binding>> + Unpin>(stream: &mut S) -> Option<String> {
        crate::binding::triggers::tests::next_namespace(stream, Duration::from_millis(500)).await
    }

    #[tokio::test]
    async fn only_bindings_whose_connection_or_pin_changed_are_reconciled() -> anyhow::Result<()> {
        let (engagements, index) = (Engagements::default(), SharedIndex::default());
        let mut writer = Writer::<Binding>::default();
        writer.apply_watcher_event(&watcher::Event::Apply(binding("a", "p", "x.example")));
        writer.apply_watcher_event(&watcher::Event::Apply(binding("b", "q", "y.example")));
        let mut stream = Box::pin(dependency_changes(
            engagements.subscribe(),
            index.subscribe(),
            writer.as_reader(),
        ));
        engagements.engage(engagement("p")?);
        assert_eq!(next(&mut stream).await, Some("a".into()), "p engaged");
        assert_eq!(next(&mut stream).await, None);

        let key = |ns: &str| BindingKey::Namespaced {
            namespace: ns.into(),
            name: "widgets".into(),
        };
        index.apply(key("b"), entry("q", "y.example"));
        assert_eq!(next(&mut stream).await, Some("b".into()), "y pinned to q");
        // The same pins with a Ready flag flipped: no binding's readiness reads that.
        index.apply(
            key("b"),
            Entry {
                ready: true,
                ..entry("q", "y.example")
            },
        );
        assert_eq!(next(&mut stream).await, None);
        Ok(())
    }
}
