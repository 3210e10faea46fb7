//! Objects a controller has just written, until the watch that fills its cache shows them: a
//! syncer's provider copies and consumer instances (finalizer, annotation and status writes),
//! and the Connection controller's status writes.
//!
//! A write is followed at once by a reconcile of the same object (our own finalizer patch,
//! or the provider event of the write, races the watch that fills the cache). Without this,
//! that reconcile would find the cache without the copy, or with the version before the
//! write, and spend a create, a live read and a policy call learning what we already know;
//! or find the object without the status just written, write it again and announce its
//! change of state a second time.
//!
//! ```text
//! write ──▶ remember(copy) ──▶ newest(cache, remembered) ──▶ decide
//!                                    └── cache caught up ─▶ forget
//! ```
//!
//! Kubernetes calls resourceVersions opaque; the comparison used here only ever prefers the
//! cache, unless both versions are integers (etcd revisions, as every kube-apiserver serves)
//! and ours is newer. A remembered copy also expires, so a lost watch event cannot pin a
//! stale view for long.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::api::DynamicObject;
use kube::runtime::reflector::Lookup;

/// How long a remembered write may stand in for the cache.
const TTL: Duration = Duration::from_secs(10);

/// `(namespace, name)` of a written object.
type Key = (Option<String>, String);

/// Objects written by one controller whose watch event may not have arrived yet.
#[derive(Debug)]
pub struct RecentWrites<K = DynamicObject> {
    copies: Mutex<HashMap<Key, (K, Instant)>>,
}

impl<K> Default for RecentWrites<K> {
    fn default() -> Self {
        Self {
            copies: Mutex::default(),
        }
    }
}

impl<K: Lookup + Clone> RecentWrites<K> {
    /// Records an object an apiserver just returned from a write.
    pub fn remember(&self, copy: &K) {
        let Some(name) = copy.name() else {
            return;
        };
        let key = (
            copy.namespace().map(|ns| ns.into_owned()),
            name.into_owned(),
        );
        lock(&self.copies).insert(key, (copy.clone(), Instant::now()));
    }

    /// Forgets the copy at `namespace/name` (a write to it failed, or it was deleted).
    pub fn forget(&self, namespace: Option<&str>, name: &str) {
        let mut copies = lock(&self.copies);
        copies.remove(&(namespace.map(str::to_string), name.to_string()));
        release_burst(&mut copies);
    }

    /// The newer of the cached object and the remembered write for `namespace/name`.
    pub fn newest(&self, namespace: Option<&str>, name: &str, cached: Option<K>) -> Option<K> {
        self.newer(namespace, name, cached.as_ref()).or(cached)
    }

    /// The remembered write for `namespace/name` when it is newer than `cached` (or there is
    /// no cached object); `None` when the cache is as new, which also forgets the write.
    pub fn newer(&self, namespace: Option<&str>, name: &str, cached: Option<&K>) -> Option<K> {
        self.newer_or_caught_up(namespace, name, cached, |_| {})
    }

    /// [`Self::newer`], handing the remembered write to `caught_up` when the cache now holds
    /// that very version (what a controller learned of its own write, it may carry over to
    /// the cached object before the write is forgotten).
    pub fn newer_or_caught_up(
        &self,
        namespace: Option<&str>,
        name: &str,
        cached: Option<&K>,
        caught_up: impl FnOnce(&K),
    ) -> Option<K> {
        let mut copies = lock(&self.copies);
        // Most lookups find nothing remembered (every periodic resync): no key is built for them.
        if copies.is_empty() {
            return None;
        }
        let key = (namespace.map(str::to_string), name.to_string());
        let (written, at) = copies.get(&key)?;
        let written_is_newer = match cached {
            None => true,
            Some(cached) => {
                match (version(cached), version(written)) {
                    (Some(cached), Some(written)) => written > cached,
                    // Not comparable: trust the cache.
                    _ => false,
                }
            }
        };
        if written_is_newer && at.elapsed() < TTL {
            return Some(written.clone());
        }
        if let Some(cached) = cached
            && version(cached).is_some()
            && version(cached) == version(written)
        {
            caught_up(written);
        }
        copies.remove(&key);
        release_burst(&mut copies);
        None
    }
}

/// Entries a map of remembered writes keeps room for once empty.
const KEPT_CAPACITY: usize = 16;

/// Frees the room a burst of writes took (a first sync remembers up to a write per reconcile
/// slot and more), once all of them are forgotten: an entry holds the object itself, so an
/// empty table of a thousand slots is half a megabyte per syncer.
fn release_burst<V>(copies: &mut HashMap<Key, V>) {
    if copies.is_empty() && copies.capacity() > KEPT_CAPACITY {
        copies.shrink_to(KEPT_CAPACITY);
    }
}

fn version(obj: &impl Lookup) -> Option<u64> {
    obj.resource_version()?.parse().ok()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The map stays consistent even if a holder panicked.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn copy(rv: &str) -> DynamicObject {
        DynamicObject {
            types: None,
            metadata: ObjectMeta {
                name: Some("w".into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            data: serde_json::json!({}),
        }
    }

    /// A registry that remembers writing version `rv` of `ns/w`.
    fn wrote(rv: &str) -> RecentWrites {
        let recent = RecentWrites::default();
        recent.remember(&copy(rv));
        recent
    }

    /// The version `newest` gives for `ns/w` while the cache holds version `cached`.
    fn newest(recent: &RecentWrites, cached: Option<&str>) -> Option<String> {
        recent
            .newest(Some("ns"), "w", cached.map(copy))
            .and_then(|o| o.metadata.resource_version)
    }

    #[test]
    fn a_write_stands_in_for_a_cache_that_has_not_seen_it() {
        let recent = wrote("12");
        assert_eq!(newest(&recent, None).as_deref(), Some("12"));
        let before_the_write = newest(&recent, Some("11"));
        assert_eq!(before_the_write.as_deref(), Some("12"));
    }

    #[test]
    fn the_cache_wins_once_it_caught_up_and_the_write_is_forgotten() {
        let recent = wrote("12");
        assert_eq!(newest(&recent, Some("12")).as_deref(), Some("12"));
        assert_eq!(newest(&recent, None), None, "forgotten");
    }

    #[test]
    fn a_cache_that_caught_up_is_handed_the_write_of_that_very_version() {
        let handed = |cached: &str| {
            let mut seen = None;
            wrote("12").newer_or_caught_up(Some("ns"), "w", Some(&copy(cached)), |w| {
                seen = w.metadata.resource_version.clone()
            });
            seen
        };
        assert_eq!(handed("12").as_deref(), Some("12"));
        assert_eq!(handed("13"), None, "a newer version is not the write");
        assert_eq!(handed("11"), None, "the write is still newer");
    }

    #[test]
    fn uncomparable_versions_trust_the_cache() {
        assert_eq!(newest(&wrote("b"), Some("a")).as_deref(), Some("a"));
    }

    #[test]
    fn forget_drops_a_write() {
        let recent = wrote("12");
        recent.forget(Some("ns"), "w");
        assert_eq!(newest(&recent, None), None);
    }

    #[test]
    fn a_burst_of_writes_gives_its_room_back_once_all_are_seen() {
        let recent = RecentWrites::default();
        let named = |i: usize| {
            let mut c = copy("5");
            c.metadata.name = Some(format!("w{i}"));
            c
        };
        for i in 0..1000 {
            recent.remember(&named(i));
        }
        for i in 0..999 {
            let cached = named(i);
            assert!(
                recent
                    .newer(Some("ns"), &format!("w{i}"), Some(&cached))
                    .is_none()
            );
        }
        assert!(lock(&recent.copies).capacity() >= 999, "still holding one");
        recent.forget(Some("ns"), "w999");
        assert!(lock(&recent.copies).capacity() <= 2 * KEPT_CAPACITY);
    }
}
