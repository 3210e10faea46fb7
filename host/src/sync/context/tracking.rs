//! What each reconcile of a syncer leaves behind: the per-instance backoff (and the instances
//! waiting on a provider that did not answer, woken together when it answers again), and the
//! outcome registry's record of what the instance came to, for the binding summaries.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::watcher;
use std::time::Duration;
use tracing::info;

use super::{SyncContext, lock};
use crate::markers::key_of;
use crate::registry::Outcome;
use crate::sync::cache::instance::CachedInstance;
use crate::sync::recovery;

impl SyncContext {
    /// Resets the backoff of the instance with `meta`, found in sync without a request: it
    /// no longer waits on the provider, and proves nothing about it.
    pub(crate) fn forget_failures(&self, meta: &ObjectMeta) {
        if !self.failures.is_empty() {
            let key = failure_key(meta);
            self.failures.succeeded(&key);
            self.stop_waiting(&key);
        }
    }

    /// Resets the backoff of the instance with `meta` after a successful full reconcile. If
    /// it was waiting on the provider, the provider answers again: every other instance
    /// waiting on it is queued now instead of at the end of its backoff.
    pub(crate) fn reconciled(&self, meta: &ObjectMeta) {
        if self.failures.is_empty() {
            return;
        }
        let key = failure_key(meta);
        self.failures.succeeded(&key);
        let woken = {
            let mut waiting = lock(&self.waiting);
            if waiting.is_empty() {
                return;
            }
            waiting.succeeded(&key)
        };
        if !woken.is_empty() {
            info!(
                connection = %self.spec.connection,
                api = %self.spec.api,
                instances = woken.len(),
                "the provider answers again; retrying the instances waiting on it now"
            );
        }
        for key in woken {
            // Fails only once the controller has stopped: nothing left to wake.
            let _ = self.wake.unbounded_send(key);
        }
    }

    /// Forgets every backoff entry: the syncer stopped.
    pub(in crate::sync) fn forget_all_failures(&self) {
        self.failures.clear();
        lock(&self.waiting).clear();
    }

    /// Counts a failed reconcile of the instance with `meta` and says how long to wait before
    /// the next one: the backoff, or at most `recovery_probe` for the instance probing a
    /// provider that did not answer. A failure of another kind ends the instance's wait on the
    /// provider (a probe hands over).
    pub(in crate::sync) fn failed(&self, meta: &ObjectMeta, provider_down: bool) -> Duration {
        let key = failure_key(meta);
        let delay = self.failures.failed(key.clone());
        if !provider_down {
            self.stop_waiting(&key);
            return delay;
        }
        if lock(&self.waiting).failed(key) {
            delay.min(self.settings.recovery_probe)
        } else {
            delay
        }
    }

    /// `key` waits on the provider no longer; a probe that goes hands over, now.
    fn stop_waiting(&self, key: &recovery::Key) {
        let next = {
            let mut waiting = lock(&self.waiting);
            if waiting.is_empty() {
                return;
            }
            waiting.forget(key)
        };
        if let Some(next) = next {
            let _ = self.wake.unbounded_send(next);
        }
    }

    /// Leaves what reconciling `obj` came to in the outcome registry.
    pub(crate) fn record_outcome(&self, obj: &impl Resource, outcome: Outcome) {
        let meta = obj.meta();
        self.shared.outcomes.record_at(
            &self.outcome_api,
            &meta.namespace,
            meta.name.as_deref().unwrap_or_default(),
            outcome,
        );
    }

    /// Whether a Ready binding selects this syncer's API in `namespace`.
    pub(crate) fn selects(&self, namespace: Option<&str>) -> bool {
        self.shared
            .index
            .read(|i| i.selecting(&self.spec.connection, &self.spec.api, namespace))
            .is_some()
    }

    /// Counts an instance reconcile that found the copy in sync and sent nothing.
    pub(crate) fn count_in_sync_check(&self) {
        self.in_sync_checks.inc();
    }

    /// Tells the outcome registry what the consumer watch saw.
    pub(in crate::sync) fn follow_listing(&self, event: &watcher::Event<CachedInstance>) {
        let (connection, api) = (&self.spec.connection, &self.spec.api);
        match event {
            watcher::Event::Init => self.shared.outcomes.listing_started(connection, api),
            watcher::Event::InitApply(obj) => {
                let (connection, api, ns, name) = self.outcome_key(obj);
                self.shared.outcomes.listed(connection, api, ns, &name);
            }
            watcher::Event::InitDone => self.shared.outcomes.listing_done(connection, api),
            watcher::Event::Delete(obj) => {
                self.forget_outcome(obj);
                self.placements.release(&key_of(obj));
                // A deleted object's backoff entry goes with it (the controller never
                // reconciles it again to reset it).
                let key = failure_key(&obj.metadata);
                self.failures.forget(&key);
                self.stop_waiting(&key);
            }
            watcher::Event::Apply(_) => {}
        }
    }

    /// A reconcile of `obj` failed before it had an outcome to record.
    pub(crate) fn attempted(&self, obj: &impl Resource) {
        let (connection, api, ns, name) = self.outcome_key(obj);
        self.shared.outcomes.attempted(connection, api, ns, &name);
    }

    /// Removes `obj` from the outcome registry: deleted, or no longer selected.
    pub(crate) fn forget_outcome(&self, obj: &impl Resource) {
        let (connection, api, ns, name) = self.outcome_key(obj);
        self.shared.outcomes.forget(connection, api, ns, &name);
    }

    /// Where the outcome registry keeps `obj`: this syncer's Connection and API, and the
    /// instance's namespace and name.
    fn outcome_key<'a>(
        &'a self,
        obj: &'a impl Resource,
    ) -> (&'a str, &'a str, Option<&'a str>, String) {
        let meta = obj.meta();
        let name = meta.name.clone().unwrap_or_default();
        (
            &self.spec.connection,
            &self.spec.api,
            meta.namespace.as_deref(),
            name,
        )
    }
}
/// The backoff key of an instance: namespace and name.
fn failure_key(meta: &ObjectMeta) -> recovery::Key {
    (
        meta.namespace.clone(),
        meta.name.clone().unwrap_or_default(),
    )
}
