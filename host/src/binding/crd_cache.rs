//! The consumer CRDs kbind installed, as a watch last showed them: a periodic binding
//! reconcile reads its APIs' CRDs here instead of asking the cluster for each (at 50 bound
//! APIs and the 30 s status interval, 200 reads a minute of nothing changing).
//!
//! ```text
//! watch of consumer CRDs ──▶ only those pinned to a Connection ──▶ store
//!                                                                   │ Established: used as read
//!                                                                   │ else / missing: GET
//! ```
//!
//! Only what is read without a decision to write comes from here: the facts a readiness verdict
//! is judged on, and the check that an installed schema is the one last applied. Anything that
//! leads to a write (an install, an update, a release) reads the live object first. A CRD the
//! cache does not show Established is read from the cluster, so one just installed is never
//! judged missing because its watch event is still on the way.

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::runtime::reflector::{self, ObjectRef, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::api::names::CONNECTION_ANNOTATION;
use crate::schema::is_established;

/// The cache and, until [`CrdCache::run`] takes it, the writer that fills it.
pub struct CrdCache {
    store: Store<CustomResourceDefinition>,
    writer: Mutex<Option<reflector::store::Writer<CustomResourceDefinition>>>,
}

impl Default for CrdCache {
    fn default() -> Self {
        let (store, writer) = reflector::store();
        Self {
            store,
            writer: Mutex::new(Some(writer)),
        }
    }
}

impl std::fmt::Debug for CrdCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrdCache")
            .field("crds", &self.store.len())
            .finish()
    }
}

impl CrdCache {
    /// Watches the consumer's CRDs into the cache until `shutdown`. The first call runs the
    /// watch; another returns at once (one writer per cache).
    pub async fn run(&self, client: Client, shutdown: CancellationToken) {
        let writer = match self.writer.lock() {
            Ok(mut writer) => writer.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        let Some(writer) = writer else {
            return;
        };
        let crds = Api::<CustomResourceDefinition>::all(client);
        reflector(
            writer,
            watcher(crds, watcher::Config::default())
                // Listed CRDs that are not kbind's never enter the cache.
                .filter(|event| {
                    let listed_foreign =
                        matches!(event, Ok(watcher::Event::InitApply(crd)) if !pinned(crd));
                    std::future::ready(!listed_foreign)
                })
                .map(|event| event.map(kbind_installed)),
        )
        .default_backoff()
        .take_until(shutdown.cancelled_owned())
        .for_each(|event| async move {
            if let Err(error) = event {
                debug!(%error, "consumer CRD watch");
            }
        })
        .await;
    }

    /// The CRD `name` when the cache shows it Established; `None` means ask the cluster.
    pub fn established(&self, name: &str) -> Option<Arc<CustomResourceDefinition>> {
        self.store
            .get(&ObjectRef::new(name))
            .filter(|crd| is_established(crd))
    }
}

/// Whether kbind installed the CRD (it is pinned to a Connection).
fn pinned(crd: &CustomResourceDefinition) -> bool {
    crd.annotations().contains_key(CONNECTION_ANNOTATION)
}

/// A CRD watch event as the cache keeps it: the CRDs pinned to a Connection, without
/// managedFields. A CRD that loses its pin (or a listed one that is not kbind's, filtered out
/// before) leaves the cache as if deleted.
fn kbind_installed(
    event: watcher::Event<CustomResourceDefinition>,
) -> watcher::Event<CustomResourceDefinition> {
    use watcher::Event;
    let slim = |mut crd: CustomResourceDefinition| {
        crd.metadata.managed_fields = None;
        crd
    };
    match event {
        Event::Apply(crd) if pinned(&crd) => Event::Apply(slim(crd)),
        // Deleting what the store does not hold is a no-op.
        Event::Apply(crd) | Event::Delete(crd) => Event::Delete(slim(crd)),
        Event::InitApply(crd) => Event::InitApply(slim(crd)),
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::store::Writer;

    fn crd(name: &str, pinned_to: Option<&str>) -> CustomResourceDefinition {
        let mut crd = CustomResourceDefinition::default();
        crd.metadata.name = Some(name.into());
        if let Some(connection) = pinned_to {
            crd.annotations_mut()
                .insert(CONNECTION_ANNOTATION.into(), connection.into());
        }
        crd
    }

    #[test]
    fn only_crds_pinned_to_a_connection_are_cached() {
        let mut writer = Writer::<CustomResourceDefinition>::default();
        let store = writer.as_reader();
        for event in [
            watcher::Event::Apply(crd("widgets.example.org", Some("c"))),
            watcher::Event::Apply(crd("gadgets.example.org", None)),
        ] {
            writer.apply_watcher_event(&kbind_installed(event));
        }
        assert!(store.get(&ObjectRef::new("widgets.example.org")).is_some());
        assert!(store.get(&ObjectRef::new("gadgets.example.org")).is_none());
    }

    #[test]
    fn a_crd_that_loses_its_pin_leaves_the_cache() {
        let mut writer = Writer::<CustomResourceDefinition>::default();
        let store = writer.as_reader();
        writer.apply_watcher_event(&kbind_installed(watcher::Event::Apply(crd(
            "widgets.example.org",
            Some("c"),
        ))));
        writer.apply_watcher_event(&kbind_installed(watcher::Event::Apply(crd(
            "widgets.example.org",
            None,
        ))));
        assert!(store.get(&ObjectRef::new("widgets.example.org")).is_none());
    }

    #[test]
    fn a_cached_crd_not_established_is_read_from_the_cluster() {
        let cache = CrdCache::default();
        let writer = cache.writer.lock().ok().and_then(|mut w| w.take());
        let Some(mut writer) = writer else {
            panic!("a new cache holds its writer");
        };
        let mut listed = crd("widgets.example.org", Some("c"));
        writer.apply_watcher_event(&watcher::Event::Apply(listed.clone()));
        assert!(cache.established("widgets.example.org").is_none());
        listed.status = serde_json::from_value(serde_json::json!({
            "conditions": [{"type": "Established", "status": "True"}]
        }))
        .ok();
        writer.apply_watcher_event(&watcher::Event::Apply(listed));
        assert!(cache.established("widgets.example.org").is_some());
    }
}
