//! What a syncer's two caches keep: `copy` of each provider copy, `instance` of each consumer
//! instance (both compact: only what reconciles read), `watched` the objects as both watches
//! decode them (managedFields skipped unparsed), and below, the resource type every cache and
//! queue key carries, shared instead of copied.
//!
//! kube-runtime keys every cache entry, queue entry and scheduled resync with an `ObjectRef`,
//! and an `ObjectRef` carries its type. With `ApiResource` as that type, each key held five
//! strings of its own (group, version, apiVersion, kind, plural) that were cloned, hashed and
//! compared on every lookup; at 100 000 instances that is a sizeable part of the memory and of
//! an idle resync's work. One syncer's keys are all of one type, so this one is shared and
//! contributes nothing to a key's hash.

pub(super) mod copy;
pub(super) mod instance;
pub(super) mod watched;

use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

use kube::core::ApiResource;

/// An `ApiResource` shared by every key of one syncer's caches and queue.
///
/// `pub`, not `pub(crate)`: the entries' kube-runtime `Lookup` impls name it as their
/// `DynamicType`, and a trait's associated type may not be less visible than the trait.
#[allow(unreachable_pub)]
#[derive(Clone, Debug)]
pub struct CacheType(Arc<ApiResource>);

impl CacheType {
    /// The shared type of `ar`.
    pub(super) fn new(ar: ApiResource) -> Self {
        Self(Arc::new(ar))
    }
}

impl Deref for CacheType {
    type Target = ApiResource;

    fn deref(&self) -> &ApiResource {
        &self.0
    }
}

impl PartialEq for CacheType {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl Eq for CacheType {}

/// Equal types hash alike because no type adds anything: the keys of one cache differ only by
/// namespace and name, which `ObjectRef` hashes besides.
impl Hash for CacheType {
    fn hash<H: Hasher>(&self, _: &mut H) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::testing::widgets;

    #[test]
    fn copies_of_one_type_are_equal_and_other_types_are_not() {
        let widgets_type = CacheType::new(widgets());
        assert_eq!(widgets_type, widgets_type.clone());
        assert_eq!(widgets_type, CacheType::new(widgets()));
        let mut gadgets = widgets();
        gadgets.kind = "Gadget".into();
        assert_ne!(widgets_type, CacheType::new(gadgets));
    }
}
