//! Related Secrets and ConfigMaps on a provider shared by many consumers: they follow the
//! Connection's isolation like instances do, so under `Namespaced` a copy lands next to the
//! instances of its namespace (names kept, references by name keep working) and under
//! `Prefixed` its name gets the consumer prefix.
//!
//! ```text
//! consumer coordinates (ns, name) ──placement policy──▶ provider coordinates
//!   FromConsumer: each source's target is placed; provider targets listed in the placed
//!                 namespace and mapped back
//!   FromProvider: sources listed in the placed namespace and mapped back; a source that is
//!                 not one of this consumer's places (another tenant's, or unrelated) is not
//!                 in scope
//! ```
//!
//! The selection policy sees consumer coordinates on both sides, as without isolation. A
//! provider object maps back only when placing its candidate consumer coordinates (its
//! namespace or name without the consumer prefix) gives exactly it, so a mapping is never
//! guessed. Under `None` everything is where it is and no policy is asked.

use std::collections::BTreeMap;

use crate::api::{IsolationInForce, IsolationStrategy, RelatedResourceKind};
use crate::markers::protected;
use crate::policy::{Placement, PlacementInput, Policies};
use crate::registry::Engagement;

use super::Objects;

/// A namespace and name.
pub(super) type Coordinates = (String, String);

/// How one entry's related objects are placed on the provider.
pub(super) struct Placing<'a> {
    engagement: &'a Engagement,
    policies: &'a Policies,
    kind: RelatedResourceKind,
}

impl<'a> Placing<'a> {
    /// The placing of `kind` objects through `engagement`'s Connection.
    pub(super) fn new(
        engagement: &'a Engagement,
        policies: &'a Policies,
        kind: RelatedResourceKind,
    ) -> Self {
        Self {
            engagement,
            policies,
            kind,
        }
    }

    fn isolation(&self) -> &IsolationInForce {
        &self.engagement.isolation
    }

    /// Whether related objects are placed elsewhere on the provider than on the consumer.
    pub(super) fn active(&self) -> bool {
        self.isolation().strategy != IsolationStrategy::None
    }

    /// Where the consumer object `(namespace, name)` goes on the provider; `None` when the
    /// policy gives no usable answer or a protected namespace (nothing is written there).
    pub(super) async fn place(&self, (namespace, name): &Coordinates) -> Option<Coordinates> {
        if !self.active() {
            return Some((namespace.clone(), name.clone()));
        }
        let input = PlacementInput::related(
            self.kind,
            &self.engagement.consumer_uid,
            &self.engagement.connection,
            namespace,
            name,
            self.isolation().clone(),
        );
        self.placed(&input).await
    }

    /// The policy's answer to `input` when it is a place copies may go.
    async fn placed(&self, input: &PlacementInput) -> Option<Coordinates> {
        let (namespace, name) = (input.namespace.as_deref().unwrap_or_default(), &input.name);
        let policies = self.policies.for_connection(&self.engagement.connection);
        match policies.place(input).await {
            Ok(Placement {
                namespace: Some(placed_ns),
                name: placed,
            }) if protected(&placed_ns, &self.engagement.heartbeat_namespace).is_none() => {
                Some((placed_ns, placed))
            }
            Ok(answer) => {
                tracing::warn!(%namespace, %name, ?answer, "related object placed where copies may not go; not copied");
                None
            }
            Err(error) => {
                tracing::warn!(%namespace, %name, %error, "related object could not be placed; not copied");
                None
            }
        }
    }

    /// The provider namespace a Binding in `namespace` reads and writes related objects in;
    /// `None` for a ClusterBinding (every namespace) or an unplaceable namespace.
    pub(super) async fn provider_namespace(&self, namespace: &str) -> Option<String> {
        if !self.active() {
            return Some(namespace.to_string());
        }
        let input = PlacementInput::namespace_of(
            namespace,
            &self.engagement.consumer_uid,
            &self.engagement.connection,
            self.isolation().clone(),
        );
        self.placed(&input).await.map(|(ns, _)| ns)
    }

    /// The consumer coordinates of a provider object, if it is one of this consumer's places.
    async fn consumer_of(&self, (namespace, name): &Coordinates) -> Option<Coordinates> {
        if !self.active() {
            return Some((namespace.clone(), name.clone()));
        }
        let prefix = format!("{}-", self.isolation().prefix);
        let candidate = match self.isolation().strategy {
            IsolationStrategy::Namespaced => {
                (namespace.strip_prefix(&prefix)?.to_string(), name.clone())
            }
            _ => (namespace.clone(), name.strip_prefix(&prefix)?.to_string()),
        };
        let placed = self.place(&candidate).await?;
        (placed == (namespace.clone(), name.clone())).then_some(candidate)
    }

    /// Provider-side `objects` keyed by consumer coordinates, each remembering where it is;
    /// objects that are not this consumer's places are left out.
    pub(super) async fn to_consumer(
        &self,
        objects: Objects,
        at: &mut BTreeMap<Coordinates, Coordinates>,
    ) -> Objects {
        let mut mapped = Objects::new();
        for (real, meta) in objects {
            if let Some(key) = self.consumer_of(&real).await {
                at.insert(key.clone(), real);
                mapped.insert(key, meta);
            }
        }
        mapped
    }
}

/// Where each object of one entry's plan is on each side, by its consumer coordinates; an
/// object not listed here is at its consumer coordinates.
#[derive(Debug, Default)]
pub(super) struct Sites {
    /// Sources that are elsewhere (FromProvider under isolation).
    pub(super) source: BTreeMap<Coordinates, Coordinates>,
    /// Targets that are elsewhere (FromConsumer under isolation).
    pub(super) target: BTreeMap<Coordinates, Coordinates>,
}

impl Sites {
    /// Where the source of `key` is.
    pub(super) fn source_of<'k>(&'k self, key: &'k Coordinates) -> &'k Coordinates {
        self.source.get(key).unwrap_or(key)
    }

    /// Where the target of `key` is.
    pub(super) fn target_of<'k>(&'k self, key: &'k Coordinates) -> &'k Coordinates {
        self.target.get(key).unwrap_or(key)
    }
}
