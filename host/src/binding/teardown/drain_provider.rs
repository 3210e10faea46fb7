//! The provider client a drain deletes through: the Connection's engagement when it is Ready,
//! otherwise a client built from the Connection's credential Secret, checked against the
//! pinned provider identity.
//!
//! ```text
//! drain ─▶ engaged? ── yes ─▶ the engaged client
//!            └─ no ─▶ Connection ▶ pinned UIDs ▶ Secret (credential namespace) ▶ kubeconfig
//!                       ▶ provider identity == pinned remoteClusterUID ─▶ a client for this drain
//!                     Connection gone, never pinned, credentials unusable, another cluster
//!                       ─▶ Unavailable(why): the drain releases finalizers only, and the
//!                          binding says so (Drained=False, Warning Event)
//!                     identity read failed (timeout, 5xx, 429, 403) ─▶ Err: retried with
//!                       backoff, finalizers kept
//! ```
//!
//! Why the drain builds its own client rather than the Connection controller re-engaging: a
//! deleting Connection is never engaged again (after a restart it goes straight to waiting for
//! its bindings), and engaging it would also restart syncers for a Connection on its way out.
//! A client used only for deletes, and only after the provider proves to be the pinned
//! cluster, drains exactly what the engaged client would have. The spec's "best-effort if
//! credentials cannot be built" remains for credentials that cannot be built and a provider
//! that is provably another cluster, with a condition and an Event; unlike the spec, a
//! provider read that fails is retried, never taken as licence to leave copies unchecked.

use crate::heartbeat::LeaseLocation;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use tracing::{info, warn};

use crate::api::{ConditionType, Connection, Reason};
use crate::conditions::Desired;
use crate::k8s::warning;
use crate::provider::identity;
use crate::provider::kubeconfig;
use crate::registry::Engagement;

use crate::binding::object::BindingObject;
use crate::binding::{Context, Error, Result};

/// Why a drain has no provider client; the text goes into a condition and an Event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Unavailable(pub String);

/// The client a drain of `connection`'s instances deletes provider copies through.
/// `Err(Unavailable)`: none could be built (the drain is then best-effort); `Err` of the outer
/// result: a consumer read failed and the drain should be retried.
pub(crate) async fn resolve(
    ctx: &Context,
    connection: &str,
) -> Result<std::result::Result<Engagement, Unavailable>> {
    if let Some(engagement) = ctx.shared.engagements.get(connection) {
        return Ok(Ok(engagement));
    }
    let unavailable = |why: String| Ok(Err(Unavailable(why)));
    let Some(conn) = Api::<Connection>::all(ctx.shared.consumer.clone())
        .get_opt(connection)
        .await
        .map_err(Error::ReadConnection)?
    else {
        return unavailable(format!("Connection {connection} does not exist"));
    };
    let status = conn.status.clone().unwrap_or_default();
    let (Some(pinned_provider), Some(consumer_uid)) =
        (status.remote_cluster_uid, status.local_cluster_uid)
    else {
        return unavailable(format!(
            "Connection {connection} never connected, so no provider identity is pinned to check a client against"
        ));
    };
    let reference = &conn.spec.kubeconfig_secret_ref;
    if reference.namespace != ctx.settings.secret_namespace {
        return unavailable(format!(
            "Connection {connection} references a Secret outside the credential namespace {}",
            ctx.settings.secret_namespace
        ));
    }
    let secret = Api::<Secret>::namespaced(ctx.shared.consumer.clone(), &reference.namespace)
        .get_opt(&reference.name)
        .await
        .map_err(|source| Error::ReadCredentials {
            secret: format!("{}/{}", reference.namespace, reference.name),
            source,
        })?;
    let credentials =
        match kubeconfig::credentials(reference, secret.as_ref(), ctx.settings.provider_transport)
            .await
        {
            Ok(credentials) => credentials,
            Err(e) => return unavailable(format!("Connection {connection}: {e}")),
        };
    match identity::cluster_uid(&credentials.client).await {
        Ok(uid) if uid == pinned_provider => {}
        Ok(uid) => {
            return unavailable(format!(
                "Connection {connection}'s credentials now reach cluster {uid}, not the pinned provider {pinned_provider}"
            ));
        }
        // A provider without the object it is identified by is provably not the pinned one.
        Err(e @ identity::IdentityError::Missing { .. }) => {
            return unavailable(format!("Connection {connection}: {e}"));
        }
        // A timeout, a 5xx, a 429 or a refusal may pass: retry with backoff rather than release
        // finalizers with the copies unchecked.
        Err(source) => {
            return Err(Error::ProviderIdentity {
                connection: connection.to_string(),
                source,
            });
        }
    }
    info!(%connection, "Connection not engaged: draining through a client built from its credentials");
    // The copies are where the isolation in force placed them; a Connection that never
    // recorded one placed them by `None`.
    let isolation = status
        .isolation
        .clone()
        .unwrap_or_else(|| crate::api::Isolation::default().in_force(&consumer_uid));
    let heartbeat_namespace = LeaseLocation::new(
        connection,
        &consumer_uid,
        credentials.context_namespace.as_deref(),
    )
    .namespace;
    Ok(Ok(Engagement {
        connection: connection.to_string(),
        provider: credentials.client,
        provider_uid: pinned_provider,
        consumer_uid,
        exported: Vec::new(),
        schema_revisions: Default::default(),
        isolation,
        heartbeat_namespace,
        credentials_digest: credentials.digest,
        epoch: 0,
    }))
}

/// Tells the operator that a drain of `apis` released finalizers without a provider client:
/// a Warning Event on the binding, and the `Drained=False` condition to store.
pub(crate) async fn report_unavailable<K: BindingObject>(
    obj: &K,
    ctx: &Context,
    apis: &[String],
    why: &Unavailable,
) -> Desired {
    let message = format!(
        "draining {} without a provider client ({}): consumer finalizers were released, but owned provider copies may remain. \
         On the provider they carry the label core.kbind.io/managed=true and this cluster's core.kbind.io/consumer-cluster-uid; \
         check both UID annotations and delete them there",
        apis.join(", "),
        why.0
    );
    warn!(apis = ?apis, why = %why.0, "drain without a provider client; provider copies may remain");
    let event = warning(Reason::NoProviderClient.as_str(), message.clone(), "Drain");
    if let Err(error) = ctx
        .shared
        .recorder
        .publish(&event, &obj.object_ref(&()))
        .await
    {
        warn!(%error, "publishing an Event failed");
    }
    Desired::falsy(ConditionType::Drained, Reason::NoProviderClient, message)
}
