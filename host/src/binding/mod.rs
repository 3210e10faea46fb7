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
//! - [`object`]: the trait both kinds implement, so every module below serves either.
//! - [`controller`]: the reconcile shared by both kinds (finalizer `core.kbind.io/cleanup`);
//!   `publish`: writing the status when it changed and announcing changed conditions.
//! - [`facts`]: what readiness is judged on (Connection, engagement, consumer CRDs, pins).
//! - [`readiness`]: when a binding is Ready, and the reason when it is not.
//! - [`namespaces`]: which namespaces may bind through a Connection.
//! - [`schema`]: installing consumer CRDs for `pullPolicy: Bound`.
//! - the binding index (`crate::registry`): which binding selects which instance, under which
//!   conflict policy.
//! - [`status`]: building the status value and deciding whether it changed.
//! - [`summary`]: the instance conditions (Synced, Conflicts, PermissionDenied) from the sync
//!   engine's outcomes; [`triggers`]: reconciling when they change.
//! - [`failure`]: related-resource and teardown failures as conditions.
//! - [`events`]: Events for conditions that changed state.
//! - [`related`]: copying related Secrets/ConfigMaps through the related-selection policy.
//! - [`related_guard`]: the namespaces and Secret types related copies may touch.
//! - [`teardown`]: what deleting a binding, or dropping an API from it, cleans up; `drain`:
//!   draining one API's instances in the binding's scope.
//! - [`drain_provider`]: the provider client a drain deletes through, engaged or not.
//! - [`release`]: an API the provider stopped exporting is released, never drained: its
//!   syncer stops and its finalizers go, nothing is deleted, sync resumes on re-export.
//! - [`shard_status`]: with sharded replicas, each API's entry of the status comes from the
//!   replica running its syncer, and the overall conditions are judged from those entries.
//!
//! [`run`] starts the two binding controllers and the syncer supervisor from one [`Context`];
//! the `konnector run` command wires it next to the Connection controller.

pub mod controller;
pub mod coverage;
pub mod crd_cache;
pub mod dependencies;
mod drain;
pub mod drain_provider;
pub mod events;
pub mod facts;
pub mod failure;
pub mod namespaces;
pub mod object;
mod publish;
pub mod readiness;
pub mod related;
pub mod related_guard;
pub mod release;
pub mod schema;
pub mod shard_status;
pub mod status;
pub mod summary;
pub mod teardown;
pub mod triggers;

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
use crate::sync::SyncSettings;

use object::StatusWrites;
use related_guard::RelatedGuard;

/// Why reconciling a binding failed. Each variant names the operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The binding has no name (or no namespace for a Binding).
    #[error("binding has no name")]
    MissingName,
    /// A deleted binding waits for the syncers of these APIs to stop (the previous
    /// Connection's, or with sharded replicas those another replica runs) before draining.
    #[error("waiting for the syncers of {0:?} to stop before draining them")]
    WaitingForSyncers(Vec<String>),
    /// This replica stopped holding the binding's Connection shard during the reconcile; the
    /// replica that holds it now does the work.
    #[error("stopped: this replica no longer holds Connection {0}'s shard")]
    ShardLost(String),
    /// Reading the referenced Connection.
    #[error("reading the Connection: {0}")]
    ReadConnection(#[source] kube::Error),
    /// Reading the Connection's credential Secret to drain without an engaged Connection.
    #[error("reading credential Secret {secret}: {source}")]
    ReadCredentials {
        /// `namespace/name` of the Secret.
        secret: String,
        /// What the consumer said.
        #[source]
        source: kube::Error,
    },
    /// Reading a Binding's Namespace (its labels decide `bindingNamespaceSelector`).
    #[error("reading Namespace {namespace}: {source}")]
    ReadNamespace {
        /// The namespace.
        namespace: String,
        /// What the consumer said.
        #[source]
        source: kube::Error,
    },
    /// Reading a listed API's consumer CRD.
    #[error("reading CustomResourceDefinition {name}: {source}")]
    ReadCrd {
        /// The CRD (API) name.
        name: String,
        /// What the consumer said.
        #[source]
        source: kube::Error,
    },
    /// Writing the binding status.
    #[error("writing binding status: {0}")]
    WriteStatus(#[source] kube::Error),
    /// Listing related sources or targets.
    #[error("listing related {resource}: {source}")]
    ListRelated {
        /// `secrets` or `configmaps`.
        resource: &'static str,
        /// What the cluster said.
        #[source]
        source: kube::Error,
    },
    /// The related-selection policy failed.
    #[error("related-selection policy: {0}")]
    RelatedPolicy(#[source] crate::policy::PolicyError),
    /// Writing (apply or create) a related copy.
    #[error("applying related {resource} copy {object}: {source}")]
    ApplyRelated {
        /// `secrets` or `configmaps`.
        resource: &'static str,
        /// `namespace/name` of the copy.
        object: String,
        /// What the target cluster said.
        #[source]
        source: kube::Error,
    },
    /// Reading a related source (or a changed copy) in full, to copy it.
    #[error("reading related {resource} {object}: {source}")]
    ReadRelated {
        /// `secrets` or `configmaps`.
        resource: &'static str,
        /// `namespace/name` of the object.
        object: String,
        /// What the cluster said.
        #[source]
        source: kube::Error,
    },
    /// Deleting a related copy.
    #[error("deleting related {resource} copy: {source}")]
    DeleteRelated {
        /// `secrets` or `configmaps`.
        resource: &'static str,
        /// What the target cluster said.
        #[source]
        source: kube::Error,
    },
    /// Creating a namespace for related copies.
    #[error("creating namespace {namespace}: {source}")]
    CreateNamespace {
        /// The namespace.
        namespace: String,
        /// What the target cluster said.
        #[source]
        source: kube::Error,
    },
    /// Building a request body (a copy, a patch) from JSON.
    #[error("building a request body: {0}")]
    BuildRequest(#[from] serde_json::Error),
    /// Listing Bindings and ClusterBindings to find overlapping ones.
    #[error("listing bindings: {0}")]
    ListBindings(#[source] kube::Error),
    /// Listing consumer instances to drain them.
    #[error("listing instances of {api}: {source}")]
    ListInstances {
        /// The API's plural.
        api: String,
        /// What the consumer said.
        #[source]
        source: kube::Error,
    },
    /// Deleting an owned provider instance copy during teardown.
    #[error("deleting provider copy {name}: {source}")]
    DeleteProviderCopy {
        /// The instance name.
        name: String,
        /// What the provider said.
        #[source]
        source: kube::Error,
    },
    /// Reading a provider copy during a drain: it may still exist, so the instance keeps its
    /// finalizer.
    #[error("reading provider copy {name}: {source}")]
    ReadProviderCopy {
        /// The instance name.
        name: String,
        /// What the provider said.
        #[source]
        source: kube::Error,
    },
    /// Reading the provider's identity for a drain through the Connection's credentials
    /// failed in a way that may pass (network, 5xx, 429, RBAC): retried, never a reason to
    /// release finalizers without checking the copies.
    #[error(
        "checking that Connection {connection}'s credentials still reach the pinned provider: {source}"
    )]
    ProviderIdentity {
        /// The Connection.
        connection: String,
        /// Why the identity read failed.
        #[source]
        source: crate::provider::identity::IdentityError,
    },
    /// Some instances of an API could not be drained: their finalizers stay and the drain is
    /// retried; the others were drained.
    #[error("{first} ({failed} instance(s) of {api} not drained yet; their finalizers stay)")]
    DrainIncomplete {
        /// The API's plural.
        api: String,
        /// How many instances failed.
        failed: usize,
        /// The first failure.
        first: Box<Error>,
    },
    /// Releasing `core.kbind.io/syncer` from a consumer instance during teardown.
    #[error("releasing the syncer finalizer of {name}: {source}")]
    ReleaseFinalizer {
        /// The instance name.
        name: String,
        /// What the consumer said.
        #[source]
        source: kube::Error,
    },
    /// Deleting the consumer CRD for the last ClusterBinding.
    #[error("deleting CustomResourceDefinition {name}: {source}")]
    DeleteCrd {
        /// The CRD name.
        name: String,
        /// What the consumer said.
        #[source]
        source: kube::Error,
    },
    /// Adding or removing `core.kbind.io/cleanup`, or the apply/cleanup wrapped by it.
    #[error("binding finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

/// Result of binding operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Timings and scope of the binding controllers, and the sync engine's settings.
#[derive(Clone, Debug)]
pub struct Settings {
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
    pub sync: SyncSettings,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            status_interval: Duration::from_secs(30),
            pending_requeue: Duration::from_secs(5),
            schema_wait: Duration::from_secs(30),
            binding_selector: None,
            secret_namespace: DEFAULT_SECRET_NAMESPACE.to_string(),
            konnector_namespace: None,
            provider_transport: crate::provider::kubeconfig::Transport::default(),
            sync: SyncSettings::default(),
        }
    }
}

/// What the binding controllers work with: the konnector's shared context and their own
/// settings and backoff.
pub struct Context {
    /// The consumer client, registries and policies every controller shares.
    pub shared: Shared,
    /// Timings.
    pub settings: Settings,
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
    pub fn new(shared: Shared, settings: Settings) -> Self {
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

    fn api_error() -> kube::Error {
        kube::Error::LinesCodecMaxLineLengthExceeded
    }

    #[test]
    fn error_texts_name_their_operation() {
        let read = Error::ReadCrd {
            name: "widgets.example.org".into(),
            source: api_error(),
        };
        assert!(
            read.to_string()
                .starts_with("reading CustomResourceDefinition widgets.example.org")
        );
        assert!(
            Error::ReadConnection(api_error())
                .to_string()
                .starts_with("reading the Connection")
        );
        assert!(
            Error::WriteStatus(api_error())
                .to_string()
                .starts_with("writing binding status")
        );
    }

    #[test]
    fn related_and_teardown_error_texts_name_their_operation() {
        let cases = [
            (
                Error::ListRelated {
                    resource: "secrets",
                    source: api_error(),
                },
                "listing related secrets",
            ),
            (
                Error::ApplyRelated {
                    resource: "configmaps",
                    object: "ns/c".into(),
                    source: api_error(),
                },
                "applying related configmaps copy ns/c",
            ),
            (
                Error::ReadRelated {
                    resource: "secrets",
                    object: "ns/s".into(),
                    source: api_error(),
                },
                "reading related secrets ns/s",
            ),
            (
                Error::DeleteRelated {
                    resource: "secrets",
                    source: api_error(),
                },
                "deleting related secrets copy",
            ),
            (
                Error::CreateNamespace {
                    namespace: "ns".into(),
                    source: api_error(),
                },
                "creating namespace ns",
            ),
            (Error::ListBindings(api_error()), "listing bindings"),
            (
                Error::ReadCredentials {
                    secret: "kbind/p".into(),
                    source: api_error(),
                },
                "reading credential Secret kbind/p",
            ),
            (
                Error::ListInstances {
                    api: "widgets".into(),
                    source: api_error(),
                },
                "listing instances of widgets",
            ),
            (
                Error::DeleteProviderCopy {
                    name: "w".into(),
                    source: api_error(),
                },
                "deleting provider copy w",
            ),
            (
                Error::ReleaseFinalizer {
                    name: "w".into(),
                    source: api_error(),
                },
                "releasing the syncer finalizer of w",
            ),
            (
                Error::DeleteCrd {
                    name: "widgets.example.org".into(),
                    source: api_error(),
                },
                "deleting CustomResourceDefinition widgets.example.org",
            ),
        ];
        for (error, prefix) in cases {
            assert!(error.to_string().starts_with(prefix), "{error} vs {prefix}");
        }
    }

    #[test]
    fn default_settings_follow_the_spec_periods() {
        let settings = Settings::default();
        assert_eq!(settings.status_interval, Duration::from_secs(30));
        assert!(settings.binding_selector.is_none());
    }
}
