//! What a syncer keeps of each consumer instance: the metadata its reconciles read and the
//! instance's `spec` and `status` as JSON text, instead of the whole object as a
//! `serde_json::Value` tree.
//!
//! ```text
//! consumer watch event (DynamicObject) ──▶ CachedInstance ──▶ consumer cache, queue
//!   name, namespace, uid, resourceVersion,      spec digest ──▶ "does the copy match?"
//!   generation, deletionTimestamp, finalizers,  confirmed   ──▶ "nothing changed since the
//!   kbind's own annotations                                     last in-sync reconcile"
//!   spec and status as JSON text                object()    ──▶ the full reconcile, parsed
//! ```
//!
//! An instance is kept for as long as its syncer runs, so its size is what the konnector's
//! memory grows by per instance, beside its provider copy ([`super::copy`]). Labels,
//! other annotations, owner references and managedFields are not kept: nothing written to the
//! provider or back to the instance is made of them. The spec's digest is taken once, when the
//! instance arrives, so the periodic resync compares digests instead of hashing the spec again.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;
use kube::core::{DynamicResourceScope, Resource};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::CacheType;
use super::copy::{CachedCopy, SpecDigest, spec_digest};

/// The prefix of the annotations kbind reads on instances (conflict, deletion policy).
pub(crate) const KBIND_ANNOTATION_PREFIX: &str = "core.kbind.io/";

/// The part of a consumer instance that reconciles read.
#[derive(Debug)]
pub(crate) struct CachedInstance {
    /// Name, namespace, uid, resourceVersion, generation, deletionTimestamp, finalizers and the
    /// `core.kbind.io/` annotations; nothing else.
    pub metadata: ObjectMeta,
    /// `spec` as JSON text; `None` when absent or null.
    spec: Option<Box<str>>,
    /// The digest of `spec`, as [`spec_digest`] takes it.
    spec_digest: Option<SpecDigest>,
    /// `status` as JSON text; `None` when absent or null.
    status: Option<Box<str>>,
    /// What the last reconcile that found this very instance in sync, and wrote nothing,
    /// found it in sync with (see [`Confirmation`]); 0 when none did.
    confirmed: AtomicU64,
}

impl CachedInstance {
    /// What is kept of `obj`.
    pub(crate) fn of(obj: DynamicObject) -> Self {
        let DynamicObject {
            metadata, mut data, ..
        } = obj;
        let spec = take_present(&mut data, "spec");
        let status = take_present(&mut data, "status");
        Self {
            metadata: pruned(metadata),
            spec_digest: spec.as_ref().map(spec_digest),
            // A `Value` always serialises: its map keys are strings.
            spec: spec.and_then(|s| text(&s)),
            status: status.and_then(|s| text(&s)),
            confirmed: AtomicU64::new(0),
        }
    }

    /// This instance's work-queue key: its namespace and name.
    pub(crate) fn key(&self) -> Option<(Option<String>, String)> {
        Some((self.metadata.namespace.clone(), self.metadata.name.clone()?))
    }

    /// The instance as the rest of the reconcile reads it: the kept metadata, with `spec` and
    /// `status` parsed back.
    pub(crate) fn object(&self) -> DynamicObject {
        let mut data = serde_json::Map::new();
        for (field, value) in [("spec", &self.spec), ("status", &self.status)] {
            // Text this type wrote from a `Value` always parses back.
            if let Some(value) = value.as_deref().and_then(|t| serde_json::from_str(t).ok()) {
                data.insert(field.to_string(), value);
            }
        }
        DynamicObject {
            types: None,
            metadata: self.metadata.clone(),
            data: Value::Object(data),
        }
    }

    /// The digest of the instance's `spec`; `None` when it has none.
    pub(crate) fn spec_digest(&self) -> Option<&SpecDigest> {
        self.spec_digest.as_ref()
    }

    /// Whether the instance carries `finalizer`.
    pub(crate) fn has_finalizer(&self, finalizer: &str) -> bool {
        self.metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|x| x == finalizer))
    }

    /// Whether a reconcile of this instance found it in sync with `confirmation` and wrote
    /// nothing.
    pub(crate) fn confirmed_with(&self, confirmation: Confirmation) -> bool {
        self.confirmed.load(Ordering::Relaxed) == confirmation.0
    }

    /// Records that this instance was found in sync with `confirmation`, nothing written.
    pub(crate) fn confirm(&self, confirmation: Confirmation) {
        self.confirmed.store(confirmation.0, Ordering::Relaxed);
    }

    /// Takes over what `written` was confirmed with, when it is this very version of this
    /// instance (the konnector's own write, now seen by the watch).
    pub(crate) fn take_confirmation_of(&self, written: &CachedInstance) {
        let (mine, theirs) = (&self.metadata, &written.metadata);
        if mine.uid.is_some()
            && mine.uid == theirs.uid
            && mine.resource_version.is_some()
            && mine.resource_version == theirs.resource_version
        {
            let confirmed = written.confirmed.load(Ordering::Relaxed);
            if confirmed != 0 {
                self.confirmed.store(confirmed, Ordering::Relaxed);
            }
        }
    }
}

/// What an in-sync verdict rested on besides the instance itself: the provider copy's
/// resourceVersion and whether the API's schema prunes the `Synced` condition. When neither
/// changed and the instance is the same, a reconcile would read the same inputs and come to
/// the same verdict, so the periodic resync need not compute it again. Never 0, which means
/// "not confirmed".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Confirmation(u64);

impl Confirmation {
    /// The confirmation of an in-sync verdict against `copy`.
    pub(crate) fn of(copy: &CachedCopy, conditions_pruned: bool) -> Self {
        let mut hasher = std::hash::DefaultHasher::new();
        copy.resource_version.hash(&mut hasher);
        copy.namespace.hash(&mut hasher);
        copy.name.hash(&mut hasher);
        conditions_pruned.hash(&mut hasher);
        Self(hasher.finish() | 1)
    }
}

impl Clone for CachedInstance {
    fn clone(&self) -> Self {
        Self {
            metadata: self.metadata.clone(),
            spec: self.spec.clone(),
            spec_digest: self.spec_digest,
            status: self.status.clone(),
            confirmed: AtomicU64::new(self.confirmed.load(Ordering::Relaxed)),
        }
    }
}

/// Only what reconciles read: the rest of an instance's metadata (labels, other annotations,
/// owner references, managedFields) is often larger than the instance.
fn pruned(meta: ObjectMeta) -> ObjectMeta {
    let annotations = meta.annotations.map(|all| {
        all.into_iter()
            .filter(|(key, _)| key.starts_with(KBIND_ANNOTATION_PREFIX))
            .collect::<BTreeMap<_, _>>()
    });
    ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        generation: meta.generation,
        deletion_timestamp: meta.deletion_timestamp,
        finalizers: meta.finalizers,
        annotations: annotations.filter(|a| !a.is_empty()),
        ..ObjectMeta::default()
    }
}

/// Takes `data[field]` out, unless absent or null.
fn take_present(data: &mut Value, field: &str) -> Option<Value> {
    data.as_object_mut()?
        .remove(field)
        .filter(|value| !value.is_null())
}

fn text(value: &Value) -> Option<Box<str>> {
    serde_json::to_string(value)
        .ok()
        .map(String::into_boxed_str)
}

/// The consumer cache is keyed like a cache of full objects, by the API's shared
/// [`CacheType`] and the instance's namespace and name.
impl Resource for CachedInstance {
    type DynamicType = CacheType;
    type Scope = DynamicResourceScope;

    fn kind(dt: &CacheType) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn group(dt: &CacheType) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &CacheType) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn api_version(dt: &CacheType) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &CacheType) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Read as the watches read the object it is kept of (the controller asks for it to be
/// deserialisable).
impl<'de> Deserialize<'de> for CachedInstance {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        super::watched::Watched::deserialize(deserializer).map(|watched| Self::of(watched.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use serde_json::json;

    use crate::sync::testing::consumer_widget;

    fn instance() -> DynamicObject {
        let mut obj = consumer_widget(json!({
            "spec": { "size": 3, "tags": ["a", "b"] },
            "status": { "phase": "Ready", "conditions": [{ "type": "Synced", "status": "True" }] },
        }));
        let meta = &mut obj.metadata;
        meta.uid = Some("obj-uid".into());
        meta.resource_version = Some("42".into());
        meta.generation = Some(3);
        meta.finalizers = Some(vec!["core.kbind.io/syncer".into()]);
        meta.labels = Some(BTreeMap::from([("app".into(), "x".into())]));
        meta.annotations = Some(BTreeMap::from([
            ("note".into(), "private".into()),
            ("core.kbind.io/conflict".into(), "OwnedByAnother: x".into()),
        ]));
        meta.owner_references = Some(vec![OwnerReference {
            name: "owner".into(),
            ..Default::default()
        }]);
        obj
    }

    #[test]
    fn spec_and_status_read_back_as_they_were() {
        let obj = instance();
        let kept = CachedInstance::of(obj.clone()).object();
        assert_eq!(kept.data["spec"], obj.data["spec"]);
        assert_eq!(kept.data["status"], obj.data["status"]);
        assert_eq!(kept.metadata.uid, obj.metadata.uid);
        assert_eq!(kept.metadata.generation, Some(3));
        assert_eq!(kept.metadata.finalizers, obj.metadata.finalizers);
    }

    #[test]
    fn only_kbind_annotations_are_kept_and_no_labels_or_owners() {
        let kept = CachedInstance::of(instance());
        let annotations = kept.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations.keys().collect::<Vec<_>>(),
            ["core.kbind.io/conflict"]
        );
        assert_eq!(kept.metadata.labels, None);
        assert_eq!(kept.metadata.owner_references, None);
    }

    #[test]
    fn absent_and_null_spec_and_status_are_kept_as_absent() {
        let kept = CachedInstance::of(consumer_widget(json!({ "spec": null })));
        assert_eq!(kept.spec_digest(), None);
        assert_eq!(kept.object().data, json!({}));
    }

    #[test]
    fn the_spec_digest_is_the_one_a_copy_of_the_same_spec_has() {
        let obj = instance();
        let kept = CachedInstance::of(obj.clone());
        assert_eq!(kept.spec_digest(), Some(&spec_digest(&obj.data["spec"])));
    }

    #[test]
    fn a_confirmation_holds_for_the_same_copy_version_only() {
        let kept = CachedInstance::of(instance());
        let mut copy = consumer_widget(json!({ "spec": {} }));
        copy.metadata.resource_version = Some("7".into());
        let seven = Confirmation::of(&CachedCopy::of(&copy), false);
        assert!(!kept.confirmed_with(seven), "nothing is confirmed at first");
        kept.confirm(seven);
        assert!(kept.confirmed_with(seven));
        assert!(
            !kept.confirmed_with(Confirmation::of(&CachedCopy::of(&copy), true)),
            "a schema found to prune conditions since asks again"
        );
        copy.metadata.resource_version = Some("8".into());
        assert!(!kept.confirmed_with(Confirmation::of(&CachedCopy::of(&copy), false)));
    }

    #[test]
    fn the_watched_version_of_a_settled_write_takes_its_confirmation_and_no_other_does() {
        let mut copy = consumer_widget(json!({ "spec": {} }));
        copy.metadata.resource_version = Some("7".into());
        let seven = Confirmation::of(&CachedCopy::of(&copy), false);
        let written = CachedInstance::of(instance());
        written.confirm(seven);
        let watched = CachedInstance::of(instance());
        watched.take_confirmation_of(&written);
        assert!(watched.confirmed_with(seven));
        type Change = fn(&mut ObjectMeta);
        let others: [(&str, Change); 2] = [
            ("version", |m| m.resource_version = Some("43".into())),
            ("uid", |m| m.uid = Some("another".into())),
        ];
        for (what, change) in others {
            let mut obj = instance();
            change(&mut obj.metadata);
            let watched = CachedInstance::of(obj);
            watched.take_confirmation_of(&written);
            assert!(!watched.confirmed_with(seven), "another {what}");
        }
    }
}
