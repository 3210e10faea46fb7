//! The deleting path of a Connection, as the spec's second flowchart draws it: request the
//! autoBind ClusterBinding's deletion, wait while any binding references the Connection,
//! release the Secret's finalizer unless another live Connection shares it, then let the
//! Connection go. Explicit bindings are never deleted here.

use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use tracing::info;

use super::{Context, Error, Result, autobind, persist_status, referencing_bindings, secret};
use crate::api::{ConditionType, Connection, Reason};
use crate::conditions::{self, Desired};

/// Cleans up a deleting Connection; `Err(Draining)` keeps the finalizer and requeues.
pub(super) async fn cleanup(connection: &Connection, ctx: &Context) -> Result<Action> {
    let name = connection.name_any();
    if connection.spec.auto_bind {
        autobind::delete(ctx, &name).await?;
    }
    let remaining = referencing_bindings(&ctx.shared.consumer, &name).await?;
    if remaining > 0 {
        let mut status = connection.status.clone().unwrap_or_default();
        let message = format!(
            "{remaining} binding(s) still reference this Connection; delete them while the konnector and the credentials still work \
             (kubectl get bindings,clusterbindings -A)"
        );
        conditions::set(
            &mut status.conditions,
            Desired::falsy(ConditionType::Ready, Reason::DrainingBindings, message),
            connection.metadata.generation,
        );
        persist_status(ctx, connection, status).await?;
        return Err(Error::Draining(remaining));
    }
    let reference = &connection.spec.kubeconfig_secret_ref;
    let connections: Api<Connection> = Api::all(ctx.shared.consumer.clone());
    let others = connections
        .list(&Default::default())
        .await
        .map_err(Error::ListConnections)?;
    let shared = others.items.iter().any(|other| {
        other.name_any() != name
            && other.metadata.deletion_timestamp.is_none()
            && other.spec.kubeconfig_secret_ref.namespace == reference.namespace
            && other.spec.kubeconfig_secret_ref.name == reference.name
    });
    if !shared {
        secret::release(&ctx.shared.consumer, reference).await?;
    }
    ctx.shared.engagements.disengage(&name);
    ctx.grace.forget(&name);
    ctx.shared.policies.forget_connection(&name);
    info!(connection = %name, secret_shared = shared, "connection released");
    Ok(Action::await_change())
}
