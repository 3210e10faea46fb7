//! The Connection controller: validates the provider kubeconfig, pins both cluster
//! identities, discovers exported APIs, installs schemas for `pullPolicy: All`, maintains the
//! autoBind ClusterBinding, renews the provider heartbeat, and engages the provider client
//! for the binding and sync machinery while the Connection is Ready.
//!
//! ```text
//! Connection/Secret event ─▶ finalizers ─▶ kubeconfig ─▶ identities ─▶ discovery
//!        ─▶ [pullPolicy All: install] ─▶ [autoBind] ─▶ heartbeat ─▶ Ready ─▶ engage
//! ```
//!
//! Each failing step sets its condition with a reason, disengages the provider, persists
//! the status and stops; see `apply`. Deletion is in `cleanup`. Persisting a status that
//! changed state publishes the Events that tell the operator (`events`): a Warning per failure
//! reason, a Normal one on becoming Ready.

mod apply;
mod autobind;
mod cleanup;
mod events;
mod follow;
mod grace;
mod secret;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::Event;
use kube::runtime::finalizer::{self, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{info, instrument, warn};

use crate::api::names::{CLEANUP_FINALIZER, DEFAULT_SECRET_NAMESPACE};
use crate::api::{Binding, ClusterBinding, Connection, ConnectionStatus};
use crate::backoff::Backoff;
use crate::k8s;
use crate::provider::kubeconfig::Transport;
use crate::recent::RecentWrites;
use crate::schema::AppliedSchemas;
use crate::shared::Shared;
use crate::telemetry::metrics;

/// Timings and the credential namespace of the Connection controller.
#[derive(Debug, Clone)]
pub struct Config {
    /// Requeue after a successful (or settled) reconcile; spec default 30 s.
    pub resync: Duration,
    /// Requeue while a deleting Connection waits for bindings; spec: 2 s.
    pub drain_requeue: Duration,
    /// The only namespace credential Secrets may live in.
    pub secret_namespace: String,
    /// How long to wait for an installed CRD to become Established.
    pub schema_wait: Duration,
    /// Upper bound of the per-object error backoff.
    pub max_backoff: Duration,
    /// Which provider transports kubeconfigs may use (`--allow-insecure-provider`).
    pub provider_transport: Transport,
    /// How long an engaged Connection rides out transient provider failures (no answer, 429,
    /// 5xx) while staying Ready, before it turns not Ready and disengages.
    pub provider_grace_period: Duration,
    /// When a Connection's own policy module that could not be had is asked for again.
    pub policy_retry: crate::policy::retry::RetrySchedule,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            resync: Duration::from_secs(30),
            drain_requeue: Duration::from_secs(2),
            secret_namespace: DEFAULT_SECRET_NAMESPACE.to_string(),
            schema_wait: Duration::from_secs(30),
            max_backoff: Duration::from_secs(60),
            provider_transport: Transport::VerifiedTls,
            provider_grace_period: Duration::from_secs(60),
            policy_retry: crate::policy::retry::RetrySchedule::default(),
        }
    }
}

/// What the Connection controller needs; shared by every reconcile.
pub struct Context {
    /// The consumer client, registries and policies every controller shares; this
    /// controller is the one writer of `shared.engagements`.
    pub shared: Shared,
    /// Timings and namespaces.
    pub config: Config,
    /// Which consumer CRDs were applied from which provider schema (`pullPolicy: All`), so
    /// an unchanged one is not applied again.
    pub applied_schemas: AppliedSchemas,
    /// Statuses this controller just wrote, standing in for a cache that has not seen them, so
    /// that a reconcile right after a write neither writes nor announces the change again.
    recent: RecentWrites<Connection>,
    failures: Backoff<String>,
    /// How long each Connection's provider (and each of its API groups) has been failing.
    grace: grace::Grace,
}

impl Context {
    /// The Connection controller's context over the konnector's shared one.
    pub fn new(shared: Shared, config: Config) -> Self {
        Self {
            shared,
            applied_schemas: AppliedSchemas::default(),
            recent: RecentWrites::default(),
            failures: Backoff::new(Duration::from_secs(1), config.max_backoff),
            grace: grace::Grace::new(config.provider_grace_period),
            config,
        }
    }

    async fn publish(&self, connection: &Connection, event: &Event) {
        if let Err(error) = self
            .shared
            .recorder
            .publish(event, &connection.object_ref(&()))
            .await
        {
            warn!(%error, "publishing an Event failed");
        }
    }
}

/// Why a Connection reconcile failed; each is retried with backoff unless noted.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the credential Secret failed.
    #[error("reading Secret {0}: {1}")]
    ReadSecret(String, #[source] kube::Error),
    /// Adding or removing the Secret's cleanup finalizer failed.
    #[error("updating the finalizer of Secret {0}: {1}")]
    SecretFinalizer(String, #[source] kube::Error),
    /// Reading an identity failed for another reason than RBAC.
    #[error(transparent)]
    Identity(#[from] crate::provider::identity::IdentityError),
    /// Discovery failed for another reason than RBAC.
    #[error(transparent)]
    Discovery(#[from] crate::provider::discovery::DiscoveryError),
    /// Writing the Connection status failed.
    #[error("writing Connection status: {0}")]
    WriteStatus(#[source] kube::Error),
    /// Reading an exported API's consumer CRD (to tell whether kbind may install it) failed.
    #[error("reading CustomResourceDefinition {0} on the consumer: {1}")]
    ReadCrd(String, #[source] kube::Error),
    /// Reading or re-pinning a consumer CRD pinned to a Connection that is gone failed.
    #[error(transparent)]
    Handover(#[from] crate::schema::handover::HandoverError),
    /// Maintaining the autoBind ClusterBinding failed.
    #[error("maintaining the autoBind ClusterBinding: {0}")]
    AutoBind(#[source] kube::Error),
    /// Listing bindings during deletion failed.
    #[error("listing bindings that reference the Connection: {0}")]
    ListBindings(#[source] kube::Error),
    /// Listing Connections (to find one sharing the Secret) failed.
    #[error("listing Connections: {0}")]
    ListConnections(#[source] kube::Error),
    /// This replica stopped holding the Connection's shard during the reconcile; the replica
    /// that holds it now does the work.
    #[error("stopped: this replica no longer holds Connection {0}'s shard")]
    ShardLost(String),
    /// A deleting Connection waits for bindings (requeued after the drain interval, not an error
    /// backoff).
    #[error("waiting for {0} binding(s) that reference this Connection to be deleted")]
    Draining(usize),
}

type Result<T, E = Error> = std::result::Result<T, E>;

/// Runs the Connection controller until `shutdown` is cancelled.
pub async fn run(ctx: Arc<Context>, shutdown: CancellationToken) {
    let connections: Api<Connection> = Api::all(ctx.shared.consumer.clone());
    let secrets: Api<Secret> =
        Api::namespaced(ctx.shared.consumer.clone(), &ctx.config.secret_namespace);
    let controller = Controller::new(connections, watcher::Config::default().any_semantic());
    let store = controller.store();
    controller
        // A Secret change re-reconciles every Connection that references it (spec: "watches
        // Connections and their referenced Secrets").
        .watches(
            secrets,
            watcher::Config::default().any_semantic(),
            move |secret| {
                let (namespace, name) = (secret.namespace().unwrap_or_default(), secret.name_any());
                store
                    .state()
                    .into_iter()
                    .filter(|c| {
                        let r = &c.spec.kubeconfig_secret_ref;
                        r.namespace == namespace && r.name == name
                    })
                    .map(|c| ObjectRef::from_obj(&*c))
                    .collect::<Vec<_>>()
            },
        )
        // A Connection shard acquired or given up: its Connection is reconciled at once, as
        // owner or as follower.
        .reconcile_all_on(ctx.shared.shards.connection_changes())
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "connection reconcile ended with an error");
            }
        })
        .await;
}

#[instrument(skip(connection, ctx), fields(connection = %connection.name_any()))]
async fn reconcile(
    connection: Arc<Connection>,
    ctx: Arc<Context>,
) -> Result<Action, finalizer::Error<Error>> {
    let mut timer = metrics().reconcile("connection");
    let api: Api<Connection> = Api::all(ctx.shared.consumer.clone());
    let name = connection.name_any();
    // Held for the whole reconcile: the shard is not handed over while it writes.
    let Some(_work) = ctx.shared.shards.claim_connection(&name) else {
        // Another replica holds this Connection's shard: engage for the API shards run here,
        // write nothing (not even the finalizer).
        return follow::follow(&connection, &ctx)
            .await
            .map_err(finalizer::Error::ApplyFailed);
    };
    let work = finalizer(&api, CLEANUP_FINALIZER, connection, |event| async {
        match event {
            finalizer::Event::Apply(connection) => apply::apply(&connection, &ctx).await,
            finalizer::Event::Cleanup(connection) => cleanup::cleanup(&connection, &ctx).await,
        }
    });
    // Its writes need the shard's hold.
    let hold = crate::fencing::hold::connection_key(&name);
    let work = crate::fencing::hold::within(&hold, work);
    let result = tokio::select! {
        result = work => result,
        // The shard lapsed (its Lease could not be renewed): stop here, mid-way if need be.
        () = ctx.shared.shards.connection_lost(&name) => {
            Err(finalizer::Error::ApplyFailed(Error::ShardLost(name.clone())))
        }
    };
    match &result {
        Ok(_) => ctx.failures.succeeded(&name),
        // Waiting for bindings to drain is the expected path of a deletion, not a failure.
        Err(finalizer::Error::CleanupFailed(Error::Draining(_))) => {}
        Err(_) => timer.fail(),
    }
    result
}

fn error_policy(
    connection: Arc<Connection>,
    error: &finalizer::Error<Error>,
    ctx: Arc<Context>,
) -> Action {
    if let finalizer::Error::CleanupFailed(Error::Draining(_)) = error {
        return Action::requeue(ctx.config.drain_requeue);
    }
    // The backoff grows per failure; a server that said when to come back is not asked sooner.
    let asked = k8s::retry_after_in(error).unwrap_or_default();
    let delay = ctx.failures.failed(connection.name_any()).max(asked);
    warn!(connection = %connection.name_any(), %error, retry_in = ?delay, "connection reconcile failed");
    Action::requeue(delay)
}

/// Writes the status through the status subresource when it differs from what is stored, then
/// publishes the Events for the conditions that changed state.
async fn persist_status(
    ctx: &Context,
    connection: &Connection,
    status: ConnectionStatus,
) -> Result<()> {
    let newer = ctx
        .recent
        .newer(None, &connection.name_any(), Some(connection));
    let stored = newer.as_ref().unwrap_or(connection);
    if stored.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let api: Api<Connection> = Api::all(ctx.shared.consumer.clone());
    let written = k8s::apply_status(&api, connection, &status)
        .await
        .map_err(Error::WriteStatus)?;
    ctx.recent.remember(&written);
    info!(connection = %connection.name_any(), "status updated");
    let before = stored
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    for announcement in events::announcements(before, &status.conditions) {
        ctx.publish(connection, &announcement.event()).await;
    }
    Ok(())
}

/// Whether any Binding or ClusterBinding references the Connection.
async fn referencing_bindings(client: &kube::Client, connection: &str) -> Result<usize> {
    let bindings: Api<Binding> = Api::all(client.clone());
    let cluster_bindings: Api<ClusterBinding> = Api::all(client.clone());
    let params = kube::api::ListParams::default();
    let namespaced = bindings.list(&params).await.map_err(Error::ListBindings)?;
    let clustered = cluster_bindings
        .list(&params)
        .await
        .map_err(Error::ListBindings)?;
    Ok(namespaced
        .items
        .iter()
        .filter(|b| b.spec.connection_ref.name == connection)
        .count()
        + clustered
            .items
            .iter()
            .filter(|b| b.spec.connection_ref.name == connection)
            .count())
}
