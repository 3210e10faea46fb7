//! A Connection whose shard another replica holds (`--sharding`): this replica writes nothing
//! for it, but runs syncers of its API shards, so it engages a provider client of its own,
//! from what the Connection's owner recorded in the status:
//!
//! ```text
//! status Ready=True, pins, exports, isolation ─▶ Secret ─▶ own provider client
//!   ─▶ both identities equal to the pins (before the first write through it) ─▶ engage
//! anything else ─▶ disengage (its syncers here stop; nothing is deleted)
//! ```
//!
//! The owner's reconcile is the one that judges, reports and heals; a follower only ever
//! engages what the owner has already found Ready, and checks the identities itself, so a
//! Secret swapped to another cluster is refused here too before anything is written.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use tracing::{info, warn};

use super::{Context, Error, Result};
use crate::api::{ConditionType, Connection};
use crate::conditions;
use crate::heartbeat::LeaseLocation;
use crate::provider::identity;
use crate::provider::kubeconfig;
use crate::registry::Engagement;

/// Engages (or disengages) a Connection owned by another replica; writes nothing.
pub(super) async fn follow(connection: &Connection, ctx: &Context) -> Result<Action> {
    let name = connection.name_any();
    let requeue = Action::requeue(ctx.config.resync);
    let status = connection.status.clone().unwrap_or_default();
    let ready = conditions::is_true(&status.conditions, ConditionType::Ready);
    let (Some(provider_pin), Some(consumer_pin), Some(isolation), true, None) = (
        status.remote_cluster_uid,
        status.local_cluster_uid,
        status.isolation,
        ready,
        connection.metadata.deletion_timestamp.as_ref(),
    ) else {
        ctx.shared.engagements.disengage(&name);
        return Ok(requeue);
    };
    let reference = &connection.spec.kubeconfig_secret_ref;
    if reference.namespace != ctx.config.secret_namespace {
        ctx.shared.engagements.disengage(&name);
        return Ok(requeue);
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.shared.consumer.clone(), &reference.namespace);
    let found = secrets
        .get_opt(&reference.name)
        .await
        .map_err(|e| Error::ReadSecret(format!("{}/{}", reference.namespace, reference.name), e))?;
    let credentials = match kubeconfig::credentials(
        reference,
        found.as_ref(),
        ctx.config.provider_transport,
    )
    .await
    {
        Ok(credentials) => credentials,
        Err(error) => {
            warn!(connection = %name, %error, "the Connection's credentials are unusable here; its syncers on this replica stop");
            ctx.shared.engagements.disengage(&name);
            return Ok(requeue);
        }
    };
    let engaged = ctx.shared.engagements.get(&name);
    let unchanged = engaged.as_ref().is_some_and(|e| {
        e.credentials_digest == credentials.digest
            && e.provider_uid == provider_pin
            && e.consumer_uid == consumer_pin
    });
    let client = match (&engaged, unchanged) {
        (Some(engaged), true) => engaged.provider.clone(),
        _ => {
            // Before the first write through a new client: both clusters are the pinned ones.
            let provider_uid = identity::cluster_uid(&credentials.client).await?;
            let consumer_uid = identity::cluster_uid(&ctx.shared.consumer).await?;
            if provider_uid != provider_pin || consumer_uid != consumer_pin {
                warn!(connection = %name, %provider_uid, %provider_pin, %consumer_uid, %consumer_pin,
                    "the credentials reach another cluster than the Connection is pinned to; nothing is written through them");
                ctx.shared.engagements.disengage(&name);
                return Ok(requeue);
            }
            credentials.client
        }
    };
    let heartbeat_namespace = LeaseLocation::new(
        &name,
        &consumer_pin,
        credentials.context_namespace.as_deref(),
    )
    .namespace;
    let engaged = ctx.shared.engagements.engage(Engagement {
        connection: name.clone(),
        provider: client,
        provider_uid: provider_pin,
        consumer_uid: consumer_pin,
        exported: status.exported_apis,
        schema_revisions: BTreeMap::new(),
        isolation,
        heartbeat_namespace,
        credentials_digest: credentials.digest,
        epoch: 0,
    });
    if !unchanged {
        info!(connection = %name, epoch = engaged.epoch, "following connection owned by another replica");
    }
    Ok(requeue)
}
