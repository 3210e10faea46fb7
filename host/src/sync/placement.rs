//! Where an instance's provider copy lives, under the Connection's isolation strategy.
//!
//! ```text
//! strategy None ─────────────────────────────────────────────▶ same namespace and name
//! otherwise: reserved or observed for this object? ─ yes ────▶ that place (stable)
//!            └ no ─▶ placement policy (Wasm) ─▶ host checks: names, scope, protected
//!                    namespaces, one object per place ─▶ reserve ─▶ that place
//!                    refused ─▶ PolicyFailed, nothing written
//! ```
//!
//! The host enforces what must hold whatever the module answers. A copy placed elsewhere than
//! its object records the object's namespace and name (`core.kbind.io/consumer-namespace`,
//! `core.kbind.io/consumer-name`): the provider watch maps copies back through them, and every
//! copy the watch shows is recorded as its object's place, so an object with a copy is never
//! placed again: swapping the module or its answers moves nothing.
//!
//! Under `None` the module is not asked and nothing is recorded: copies stay exactly what they
//! were before isolation existed.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::ResourceExt;
use kube::api::DynamicObject;

use crate::api::IsolationStrategy;
use crate::api::names::{CONSUMER_NAME_ANNOTATION, CONSUMER_NAMESPACE_ANNOTATION};
use crate::markers::{InstanceKey, origin_of};
use crate::policy::Placement;

/// The place of a copy that keeps its object's namespace and name.
pub(super) fn same_place(key: &InstanceKey) -> Placement {
    Placement {
        namespace: key.0.clone(),
        name: key.1.clone(),
    }
}

/// The annotations a copy at `place` records for the instance `key`: none when it is where
/// its object is.
pub(super) fn origin_annotations(
    key: &InstanceKey,
    place: &Placement,
) -> Vec<(&'static str, String)> {
    if *place == same_place(key) {
        return Vec::new();
    }
    let mut recorded = vec![(CONSUMER_NAME_ANNOTATION, key.1.clone())];
    if let Some(ns) = &key.0 {
        recorded.push((CONSUMER_NAMESPACE_ANNOTATION, ns.clone()));
    }
    recorded
}

/// Why the host refuses a placement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The answer is a namespace copies may never go to.
    #[error(
        "the placement policy placed {object} in namespace {namespace}, which is protected ({why}); nothing was written"
    )]
    Protected {
        /// The instance, `namespace/name`.
        object: String,
        /// The namespace answered.
        namespace: String,
        /// What the namespace is for.
        why: &'static str,
    },
    /// The answer is the place of another instance's copy.
    #[error(
        "the placement policy placed {object} at {place}, which is already the place of {holder}; two objects never share one provider copy, nothing was written"
    )]
    Taken {
        /// The instance, `namespace/name`.
        object: String,
        /// The place answered.
        place: String,
        /// The instance holding it.
        holder: String,
    },
}

/// Namespace and name as one string, for messages.
pub(super) fn display(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// The places one syncer's instances have: observed on their copies or reserved before a
/// first write. Both directions are kept so that a place is given to one instance only.
#[derive(Debug, Default)]
pub(super) struct Placements {
    inner: Mutex<Places>,
}

#[derive(Debug, Default)]
struct Places {
    by_instance: HashMap<InstanceKey, Placement>,
    by_place: HashMap<Placement, InstanceKey>,
}

impl Placements {
    /// The place recorded for `key`, if any.
    pub(super) fn get(&self, key: &InstanceKey) -> Option<Placement> {
        lock(&self.inner).by_instance.get(key).cloned()
    }

    /// Records a copy the provider watch shows: it is its instance's place from now on,
    /// whatever was reserved before (the copy is what exists).
    pub(super) fn observed(&self, copy: &DynamicObject, strategy: IsolationStrategy) {
        let origin = origin_of(copy, strategy);
        let place = Placement {
            namespace: copy.metadata.namespace.clone(),
            name: copy.name_any(),
        };
        let mut places = lock(&self.inner);
        if places.by_instance.get(&origin) == Some(&place) {
            return;
        }
        if let Some(previous) = places.by_place.insert(place.clone(), origin.clone())
            && previous != origin
        {
            places.by_instance.remove(&previous);
        }
        if let Some(old) = places.by_instance.insert(origin.clone(), place.clone())
            && old != place
            && places.by_place.get(&old) == Some(&origin)
        {
            places.by_place.remove(&old);
        }
    }

    /// Reserves `place` for `key`, unless another instance has it.
    pub(super) fn reserve(&self, key: &InstanceKey, place: &Placement) -> Result<(), InstanceKey> {
        let mut places = lock(&self.inner);
        match places.by_place.get(place) {
            Some(holder) if holder != key => return Err(holder.clone()),
            _ => {}
        }
        places.by_place.insert(place.clone(), key.clone());
        if let Some(old) = places.by_instance.insert(key.clone(), place.clone())
            && old != *place
        {
            places.by_place.remove(&old);
        }
        Ok(())
    }

    /// Forgets the place of a deleted instance. Its copy, if one stays (Orphan), is still seen
    /// by the cache check of a later placement.
    pub(super) fn release(&self, key: &InstanceKey) {
        let mut places = lock(&self.inner);
        if let Some(place) = places.by_instance.remove(key)
            && places.by_place.get(&place) == Some(key)
        {
            places.by_place.remove(&place);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::markers::protected;
    use kube::api::ObjectMeta;
    use std::collections::BTreeMap;

    fn key(ns: &str, name: &str) -> InstanceKey {
        (Some(ns.into()), name.into())
    }

    fn place(ns: &str, name: &str) -> Placement {
        Placement {
            namespace: Some(ns.into()),
            name: name.into(),
        }
    }

    fn copy(ns: &str, name: &str, origin: Option<(&str, &str)>) -> DynamicObject {
        let annotations = origin.map(|(ons, oname)| {
            BTreeMap::from([
                (CONSUMER_NAMESPACE_ANNOTATION.to_string(), ons.to_string()),
                (CONSUMER_NAME_ANNOTATION.to_string(), oname.to_string()),
            ])
        });
        DynamicObject {
            types: None,
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                annotations,
                ..ObjectMeta::default()
            },
            data: serde_json::Value::Null,
        }
    }

    #[test]
    fn a_copy_maps_back_through_its_recorded_origin() {
        assert_eq!(
            origin_of(
                &copy("c1-team-a", "db", Some(("team-a", "db"))),
                IsolationStrategy::Namespaced
            ),
            key("team-a", "db")
        );
        assert_eq!(
            origin_of(&copy("team-a", "db", None), IsolationStrategy::Prefixed),
            key("team-a", "db")
        );
        assert_eq!(
            origin_of(
                &copy("team-a", "db", Some(("team-b", "x"))),
                IsolationStrategy::None
            ),
            key("team-a", "db"),
            "under None a copy is its object's whatever it records"
        );
    }

    #[test]
    fn a_copy_where_its_object_is_records_nothing() {
        assert!(origin_annotations(&key("team-a", "db"), &place("team-a", "db")).is_empty());
        let recorded = origin_annotations(&key("team-a", "db"), &place("c1-team-a", "db"));
        assert_eq!(recorded.len(), 2);
    }

    #[test]
    fn two_objects_never_get_one_place() {
        let places = Placements::default();
        places
            .reserve(&key("team-a", "x"), &place("shared", "one"))
            .expect("first reservation");
        assert_eq!(
            places.reserve(&key("team-b", "y"), &place("shared", "one")),
            Err(key("team-a", "x"))
        );
        places.release(&key("team-a", "x"));
        assert!(
            places
                .reserve(&key("team-b", "y"), &place("shared", "one"))
                .is_ok()
        );
    }

    #[test]
    fn an_observed_copy_is_its_objects_place() {
        let places = Placements::default();
        places
            .reserve(&key("team-a", "x"), &place("elsewhere", "x"))
            .expect("reserved");
        places.observed(
            &copy("c1-team-a", "x", Some(("team-a", "x"))),
            IsolationStrategy::Namespaced,
        );
        assert_eq!(
            places.get(&key("team-a", "x")),
            Some(place("c1-team-a", "x"))
        );
        assert!(
            places
                .reserve(&key("team-b", "z"), &place("elsewhere", "x"))
                .is_ok(),
            "the abandoned reservation is free again"
        );
        assert_eq!(
            places.reserve(&key("team-b", "z"), &place("c1-team-a", "x")),
            Err(key("team-a", "x"))
        );
    }

    #[test]
    fn system_and_heartbeat_namespaces_are_protected() {
        for ns in ["kube-system", "kube-public", "kube-node-lease", "kbind"] {
            assert!(protected(ns, "kbind").is_some(), "{ns}");
        }
        assert_eq!(protected("c1-team-a", "kbind"), None);
    }
}
