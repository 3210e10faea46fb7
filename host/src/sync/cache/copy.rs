//! What a syncer keeps of each provider copy: only what its reconciles read, in a compact
//! form, instead of the whole object as a `serde_json::Value` tree.
//!
//! ```text
//! provider watch event (DynamicObject) ──▶ CachedCopy ──▶ provider cache (Store<CachedCopy>)
//!   name, namespace, resourceVersion          "does the copy match?"  (labels, markers,
//!   kbind's two labels, both UID markers                               origin, spec digest)
//!   the consumer object it records            "what status goes back?" (status, as JSON text,
//!   sha256 of its spec, its status as JSON                              and the generation its
//!   its generation                                                      observedGeneration means)
//! ```
//!
//! A provider copy is kept once per instance for as long as the syncer runs, so its size is
//! what the konnector's memory grows by per instance. The spec is needed only to tell whether
//! the copy already is what the consumer asks for, which a digest answers; the status only when
//! it is copied back, which parsing its text on demand serves.

use std::borrow::Cow;

use kube::api::DynamicObject;
use kube::runtime::reflector::{Lookup, ObjectRef};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::api::IsolationStrategy;
use crate::api::names::{
    CONSUMER_CLUSTER_LABEL, CONSUMER_NAME_ANNOTATION, CONSUMER_NAMESPACE_ANNOTATION, MANAGED_LABEL,
};

use super::CacheType;
use crate::markers::{InstanceKey, OwnershipMarkers};
use crate::provider::limits::limits;

/// The sha256 of a `spec` in an unambiguous encoding of its JSON value (see [`spec_digest`]).
pub(crate) type SpecDigest = [u8; 32];

/// The part of a provider copy that reconciles read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CachedCopy {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`; `None` for a cluster-scoped copy.
    pub namespace: Option<String>,
    /// `metadata.resourceVersion`, for the write that follows and for telling a newer
    /// version of the copy from an older one.
    pub resource_version: Option<String>,
    /// `metadata.generation`: what the provider's controllers mean by the `observedGeneration`
    /// they write into the copy's status.
    pub generation: Option<i64>,
    /// Whether the copy carries `core.kbind.io/managed: "true"`.
    managed: bool,
    /// The value of the copy's `core.kbind.io/consumer-cluster` label.
    consumer_cluster: Option<String>,
    /// Both UID ownership markers.
    pub markers: OwnershipMarkers,
    /// The consumer object the copy records (`core.kbind.io/consumer-namespace` and
    /// `core.kbind.io/consumer-name`), when it records one.
    recorded_origin: Option<InstanceKey>,
    /// The digest of the copy's `spec`; `None` when it has none (absent or null).
    spec: Option<SpecDigest>,
    /// The copy's `status` as JSON text; `None` when it has none (absent or null) or when it
    /// is larger than the cap (`status_dropped`).
    status: Option<Box<str>>,
    /// The size in bytes of a status not kept because it is larger than the cap
    /// ([`crate::provider::limits::Limits::copy_status`]).
    status_dropped: Option<usize>,
}

impl CachedCopy {
    /// What is kept of `copy`.
    pub(crate) fn of(copy: &DynamicObject) -> Self {
        let meta = &copy.metadata;
        let label = |key: &str| meta.labels.as_ref().and_then(|l| l.get(key));
        let annotation = |key: &str| meta.annotations.as_ref().and_then(|a| a.get(key));
        let recorded_origin = annotation(CONSUMER_NAME_ANNOTATION).map(|name| {
            (
                annotation(CONSUMER_NAMESPACE_ANNOTATION).cloned(),
                name.clone(),
            )
        });
        // A `Value` always serialises: its map keys are strings. A provider decides a copy's
        // status size; the konnector holds at most the cap of it per copy.
        let status_text = present(copy, "status").and_then(|s| serde_json::to_string(s).ok());
        let (status, status_dropped) = match status_text {
            Some(text) if text.len() > limits().copy_status => (None, Some(text.len())),
            text => (text.map(String::into_boxed_str), None),
        };
        let markers = meta
            .annotations
            .as_ref()
            .map(OwnershipMarkers::from_annotations)
            .unwrap_or_default();
        Self {
            name: meta.name.clone().unwrap_or_default(),
            namespace: meta.namespace.clone(),
            resource_version: meta.resource_version.clone(),
            generation: meta.generation,
            managed: label(MANAGED_LABEL).is_some_and(|v| v == "true"),
            consumer_cluster: label(CONSUMER_CLUSTER_LABEL).cloned(),
            markers,
            recorded_origin,
            spec: present(copy, "spec").map(spec_digest),
            status,
            status_dropped,
        }
    }

    /// The size of the copy's status when it was not kept for being larger than the cap; the
    /// instance is then told so instead of getting a status.
    pub(crate) fn status_too_large(&self) -> Option<usize> {
        self.status_dropped
    }

    /// Whether both of kbind's labels are on the copy, naming `consumer_cluster_uid`.
    pub(crate) fn labelled_for(&self, consumer_cluster_uid: &str) -> bool {
        self.managed && self.consumer_cluster.as_deref() == Some(consumer_cluster_uid)
    }

    /// Whether both UID markers name exactly this consumer cluster and object.
    pub(crate) fn owned_by(&self, consumer_cluster_uid: &str, consumer_object_uid: &str) -> bool {
        self.markers.cluster_uid.as_deref() == Some(consumer_cluster_uid)
            && self.markers.object_uid.as_deref() == Some(consumer_object_uid)
    }

    /// The consumer object this copy is of (as [`crate::markers::origin_of`] tells it for a
    /// full object): the one it records when isolation places copies elsewhere, else the one
    /// with its own namespace and name.
    pub(crate) fn origin(&self, strategy: IsolationStrategy) -> InstanceKey {
        match &self.recorded_origin {
            Some(recorded) if strategy != IsolationStrategy::None => recorded.clone(),
            _ => (self.namespace.clone(), self.name.clone()),
        }
    }

    /// Whether the copy is of the consumer object `namespace/name` (as [`Self::origin`] tells
    /// it), without building its key.
    pub(crate) fn is_of(
        &self,
        strategy: IsolationStrategy,
        namespace: Option<&str>,
        name: &str,
    ) -> bool {
        match &self.recorded_origin {
            Some((ns, recorded)) if strategy != IsolationStrategy::None => {
                ns.as_deref() == namespace && recorded == name
            }
            _ => self.namespace.as_deref() == namespace && self.name == name,
        }
    }

    /// Whether the copy's `spec` is `spec` (both absent counts as equal); the engine compares
    /// digests ([`Self::spec_digest_is`]), the tests compare values through it.
    #[cfg(test)]
    pub(crate) fn spec_is(&self, spec: Option<&Value>) -> bool {
        self.spec == spec.map(spec_digest)
    }

    /// Whether the copy's `spec` has `digest` (both absent counts as equal).
    pub(crate) fn spec_digest_is(&self, digest: Option<&SpecDigest>) -> bool {
        self.spec.as_ref() == digest
    }

    /// The copy's `status`, parsed; `None` when it has none.
    pub(crate) fn status(&self) -> Option<Value> {
        // Text this type wrote from a `Value` always parses back.
        serde_json::from_str(self.status.as_deref()?).ok()
    }
}

/// `obj.data[field]`, unless absent or null.
fn present<'a>(obj: &'a DynamicObject, field: &str) -> Option<&'a Value> {
    obj.data.get(field).filter(|v| !v.is_null())
}

/// The sha256 of `spec` in an encoding where equal digests mean equal values: each value is
/// tagged with its type, strings and collections carry their length, and object members come
/// in key order (serde_json's map is ordered).
pub(crate) fn spec_digest(spec: &Value) -> SpecDigest {
    let mut hasher = Sha256::new();
    feed(&mut hasher, spec);
    hasher.finalize().into()
}

fn feed(hasher: &mut Sha256, value: &Value) {
    let len = |n: usize| (n as u64).to_le_bytes();
    match value {
        Value::Null => hasher.update([0]),
        Value::Bool(b) => hasher.update([1, u8::from(*b)]),
        Value::Number(n) => {
            let text = n.to_string();
            hasher.update([2]);
            hasher.update(len(text.len()));
            hasher.update(text.as_bytes());
        }
        Value::String(s) => {
            hasher.update([3]);
            hasher.update(len(s.len()));
            hasher.update(s.as_bytes());
        }
        Value::Array(items) => {
            hasher.update([4]);
            hasher.update(len(items.len()));
            for item in items {
                feed(hasher, item);
            }
        }
        Value::Object(members) => {
            hasher.update([5]);
            hasher.update(len(members.len()));
            for (key, item) in members {
                hasher.update(len(key.len()));
                hasher.update(key.as_bytes());
                feed(hasher, item);
            }
        }
    }
}

/// The provider cache is keyed like a cache of the full objects: by the API's shared
/// [`CacheType`] and the copy's namespace and name.
impl Lookup for CachedCopy {
    type DynamicType = CacheType;

    fn kind(dyntype: &CacheType) -> Cow<'_, str> {
        dyntype.kind.as_str().into()
    }

    fn group(dyntype: &CacheType) -> Cow<'_, str> {
        dyntype.group.as_str().into()
    }

    fn version(dyntype: &CacheType) -> Cow<'_, str> {
        dyntype.version.as_str().into()
    }

    fn api_version(dyntype: &CacheType) -> Cow<'_, str> {
        dyntype.api_version.as_str().into()
    }

    fn plural(dyntype: &CacheType) -> Cow<'_, str> {
        dyntype.plural.as_str().into()
    }

    fn name(&self) -> Option<Cow<'_, str>> {
        Some(self.name.as_str().into())
    }

    fn namespace(&self) -> Option<Cow<'_, str>> {
        self.namespace.as_deref().map(Cow::Borrowed)
    }

    fn resource_version(&self) -> Option<Cow<'_, str>> {
        self.resource_version.as_deref().map(Cow::Borrowed)
    }

    fn uid(&self) -> Option<Cow<'_, str>> {
        // Not kept: nothing reads a copy's UID.
        None
    }

    /// The cache's key: type, namespace and name. The default would keep a second copy of
    /// the resourceVersion in every key, which nothing reads (a key keeps the version of the
    /// copy's first event however often it changes).
    fn to_object_ref(&self, dyntype: CacheType) -> ObjectRef<Self> {
        let mut key = ObjectRef::new_with(&self.name, dyntype);
        key.namespace.clone_from(&self.namespace);
        key
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn copy(data: Value) -> DynamicObject {
        let mut obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.org/v1",
            "kind": "Widget",
            "metadata": {
                "name": "w",
                "namespace": "east-team-a",
                "resourceVersion": "7",
                "uid": "provider-uid",
                "labels": {
                    "core.kbind.io/managed": "true",
                    "core.kbind.io/consumer-cluster": "c",
                    "app": "x",
                },
                "annotations": {
                    "core.kbind.io/consumer-cluster-uid": "c",
                    "core.kbind.io/consumer-object-uid": "o",
                    "core.kbind.io/consumer-namespace": "team-a",
                    "core.kbind.io/consumer-name": "db",
                    "note": "kept out",
                },
            },
        }))
        .expect("valid object");
        obj.data = data;
        obj
    }

    #[test]
    fn keeps_what_reconciles_read() {
        let kept = CachedCopy::of(&copy(json!({
            "spec": { "size": 3 }, "status": { "phase": "Ready" } })));
        assert!(kept.labelled_for("c") && !kept.labelled_for("other"));
        assert!(kept.owned_by("c", "o") && !kept.owned_by("c", "other"));
        assert_eq!(kept.resource_version.as_deref(), Some("7"));
        assert_eq!(
            kept.origin(IsolationStrategy::Namespaced),
            (Some("team-a".into()), "db".into())
        );
        assert_eq!(
            kept.origin(IsolationStrategy::None),
            (Some("east-team-a".into()), "w".into()),
            "under None a copy is its object's namesake"
        );
        assert!(kept.spec_is(Some(&json!({ "size": 3 }))));
        assert_eq!(kept.status(), Some(json!({ "phase": "Ready" })));
    }

    #[test]
    fn spec_digest_tells_every_change_and_only_changes() {
        let kept = CachedCopy::of(&copy(json!({ "spec": { "a": [1, "x"], "b": null } })));
        assert!(kept.spec_is(Some(&json!({ "b": null, "a": [1, "x"] }))));
        for other in [
            json!({ "a": [1, "x"] }),
            json!({ "a": [1, "x"], "b": false }),
            json!({ "a": ["1", "x"], "b": null }),
            json!({ "a": [1.0, "x"], "b": null }),
            json!({ "a": [[1], "x"], "b": null }),
            json!({ "a": [1, "x", null], "b": null }),
        ] {
            assert!(!kept.spec_is(Some(&other)), "{other}");
        }
        assert!(!kept.spec_is(None));
        // Lengths keep neighbouring strings apart.
        assert_ne!(
            spec_digest(&json!(["ab", "c"])),
            spec_digest(&json!(["a", "bc"]))
        );
    }

    #[test]
    fn a_status_over_the_cap_is_not_kept_and_its_size_is() {
        let cap = limits().copy_status;
        let big = "x".repeat(cap + 1);
        let kept = CachedCopy::of(&copy(json!({ "status": { "blob": big } })));
        assert_eq!(kept.status(), None);
        assert!(kept.status_too_large().is_some_and(|size| size > cap));
        let small = CachedCopy::of(&copy(json!({ "status": { "phase": "Ready" } })));
        assert_eq!(small.status_too_large(), None);
    }

    #[test]
    fn absent_and_null_spec_and_status_are_none() {
        let kept = CachedCopy::of(&copy(json!({ "spec": null })));
        assert!(kept.spec_is(None));
        assert_eq!(kept.status(), None);
        assert!(CachedCopy::of(&copy(json!({}))).spec_is(None));
    }
}
