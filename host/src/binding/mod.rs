//! Bindings: which consumer instances of which exported APIs are synced through which
//! Connection, and the one entry point that runs everything downstream of a Connection.
//!
//! ```text
//! Connection ──(Ready)──▶ engagement registry ─────────────┐
//!                                                          ▼
//! Binding / ClusterBinding ──▶ controller ──▶ index ──▶ syncer supervisor ──▶ syncers
//!                                  ▲  │                      (crate::sync)          │
//!                                  │  │                                             ▼
//!                                  │  │          instance outcomes (crate::registry::outcomes)
//!                                  │  └──▶ status: Ready, Synced, Conflicts, PermissionDenied,
//!                                  │       conflictCount ◀── summary of the binding's scope
//!                                  └────── summary changed (triggers) ◀────────────┘
//! ```
//!
//! - `object`: the trait both kinds implement, so every module below serves either.
//! - `controller`: the reconcile shared by both kinds (finalizer `core.kbind.io/cleanup`).
//! - `facts`: what readiness is judged on (Connection, engagement, consumer CRDs, pins);
//!   `readiness`: when a binding is Ready, and the reason when it is not; `namespaces`: which
//!   namespaces may bind through a Connection; `crd_cache`: the consumer CRDs kbind installed,
//!   watched.
//! - `schema`: installing consumer CRDs for `pullPolicy: Bound`.
//! - `dependencies`: reconciling a binding when something it depends on changes;
//!   `triggers`: reconciling when the summary of its instances changes.
//! - the binding index (`crate::registry`): which binding selects which instance, under which
//!   conflict policy.
//! - `status/`: building the status value and deciding whether it changed; `summary`: the
//!   instance conditions (Synced, Conflicts, PermissionDenied) from the sync engine's
//!   outcomes; `publish`: writing it when it changed; `events`: Events for conditions that
//!   changed state; `failure`: teardown and drain failures as conditions; `shard_status`:
//!   with sharded replicas, each API's entry comes from the replica running its syncer.
//! - `teardown/`: what deleting a binding, or dropping an API from it, cleans up; `drain`:
//!   draining one API's instances in the binding's scope; `drain_provider`: the provider
//!   client a drain deletes through, engaged or not; `coverage`: what other bindings still
//!   cover; `release`: an API the provider stopped exporting is released, never drained.
//! - `error`: why a reconcile failed, one variant per operation.
//!
//! Related Secrets/ConfigMaps are copied by [`crate::related`], called from the reconcile.
//!
//! [`run`] starts the two binding controllers and the syncer supervisor from one [`Context`];
//! the `konnector run` command wires it next to the Connection controller.

#![warn(unreachable_pub)]

mod controller;
mod crd_cache;
mod dependencies;
mod error;
mod facts;
mod namespaces;
mod object;
mod readiness;
mod schema;
mod status;
mod teardown;
mod triggers;

pub use error::{Error, Result};
pub use object::{BindingObject, StatusWrites};
pub use readiness::is_definitive;
pub use status::shard_status::run as run_shard_status;
pub use teardown::coverage::{Consumer, Covered, Holder, Others};
pub use teardown::gather::{consumer as read_teardown_facts, holder};

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::Event;
use tokio_util::sync::CancellationToken;

use crate::api::names::DEFAULT_SECRET_NAMESPACE;
use crate::api::{Binding, ClusterBinding};
use crate::backoff::Backoff;
use crate::k8s::warning;
use crate::schema::AppliedSchemas;
use crate::shared::Shared;
use crate::sync::SyncConfig;

use crate::related::RelatedGuard;

/// Timings and scope of the binding controllers, and the sync engine's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Periodic reconcile of a Ready binding: conflict counting and status refresh
    /// (spec: "normally every 30 seconds").
    pub status_interval: Duration,
    /// Requeue of a binding that is not Ready yet (waiting on a CRD, a Connection...).
    pub pending_requeue: Duration,
    /// How long schema installation (`pullPolicy: Bound`) waits for a CRD to be Established.
    pub schema_wait: Duration,
    /// Only bindings matching this label selector are handled (`None`: all). Lets several
    /// konnectors share one consumer cluster, each with its own bindings.
    pub binding_selector: Option<String>,
    /// The credential namespace (`--secret-namespace`): related copies never touch it, and a
    /// drain without an engaged Connection reads the Connection's Secret only from there.
    pub secret_namespace: String,
    /// The konnector's own namespace (the Pod's), when known: related copies never touch it.
    pub konnector_namespace: Option<String>,
    /// Which provider transports a drain's own client may use: the same rule as the
    /// Connection controller's (`--allow-insecure-provider`).
    pub provider_transport: crate::provider::kubeconfig::Transport,
    /// The instance sync engine's settings.
    pub sync: SyncConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            status_interval: Duration::from_secs(30),
            pending_requeue: Duration::from_secs(5),
            schema_wait: Duration::from_secs(30),
            binding_selector: None,
            secret_namespace: DEFAULT_SECRET_NAMESPACE.to_string(),
            konnector_namespace: None,
            provider_transport: crate::provider::kubeconfig::Transport::default(),
            sync: SyncConfig::default(),
        }
    }
}

/// What the binding controllers work with: the konnector's shared context and their own
/// settings and backoff.
pub struct Context {
    /// The consumer client, registries and policies every controller shares.
    pub shared: Shared,
    /// Timings.
    pub settings: Config,
    /// What related copies may touch, from the settings.
    pub related_guard: RelatedGuard,
    /// Which consumer CRDs were applied from which provider schema, so an unchanged one is
    /// not applied again.
    pub applied_schemas: AppliedSchemas,
    /// The consumer CRDs kbind installed, as last watched.
    pub crds: crd_cache::CrdCache,
    /// Statuses just written, newer than the cache until it catches up.
    status_writes: StatusWrites,
    failures: Backoff<String>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// The binding controllers' context over the konnector's shared one.
    pub fn new(shared: Shared, settings: Config) -> Self {
        Self {
            shared,
            failures: Backoff::new(
                settings.sync.error_backoff_base,
                settings.sync.error_backoff_max,
            ),
            related_guard: RelatedGuard::new(
                &settings.secret_namespace,
                settings.konnector_namespace.as_deref(),
            ),
            applied_schemas: AppliedSchemas::default(),
            crds: crd_cache::CrdCache::default(),
            status_writes: StatusWrites::default(),
            settings,
        }
    }

    /// Publishes a Warning Event on a binding, reported under `action` (the step that went
    /// wrong); a failure to publish is only logged.
    pub(crate) async fn warn(
        &self,
        binding: &ObjectReference,
        reason: &str,
        note: String,
        action: &str,
    ) {
        self.publish(&warning(reason, note, action), binding).await;
    }

    /// Publishes an Event on a binding; a failure to publish is only logged.
    pub(crate) async fn publish(&self, event: &Event, binding: &ObjectReference) {
        if let Err(error) = self.shared.recorder.publish(event, binding).await {
            tracing::warn!(%error, "publishing an Event failed");
        }
    }
}

/// Whether the syncer of `api` through `connection` may still write: it runs here, or (with
/// sharded replicas) its API shard is held by some replica. Drains and releases wait for it.
pub(crate) async fn syncer_may_write(ctx: &Context, connection: &str, api: &str) -> bool {
    ctx.shared.syncers.contains(connection, api)
        || crate::sharding::api_shard_held(&ctx.shared, connection, api).await
}

/// Runs the Binding and ClusterBinding controllers until `shutdown`; stopping deletes
/// nothing.
pub async fn run(ctx: Arc<Context>, shutdown: CancellationToken) {
    tokio::join!(
        ctx.crds.run(ctx.shared.consumer.clone(), shutdown.clone()),
        controller::run::<Binding>(ctx.clone(), shutdown.clone()),
        controller::run::<ClusterBinding>(ctx.clone(), shutdown),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_settings_follow_the_spec_periods() {
        let settings = Config::default();
        assert_eq!(settings.status_interval, Duration::from_secs(30));
        assert!(settings.binding_selector.is_none());
    }
}
