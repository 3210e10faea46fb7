//! Pruning the `boundAPIs` fields of replicas that are gone. Each sharded replica applies its
//! entries under a field manager of its own (`shard_status`) and gives them up when it loses a
//! shard or shuts down; a replica killed, cut off or stopped too slowly leaves its field
//! manager behind, and with it entries no live replica explains. The holder of the binding's
//! Connection shard gives those up in the gone replica's name (an apply of nothing under its
//! field manager), so no phantom entry outlives a rollout and a dropped API's drain is not repeated
//! for an entry nobody writes.
//!
//! ```text
//! managedFields of status ──▶ kbind-konnector-shard-<replica> managers
//! membership Leases (held now) ──▶ live replicas ──┐
//!                                                  ▼
//!                  managers of no live replica ──▶ an apply of nothing as that manager
//! ```
//!
//! Entries of live replicas are theirs to give up; the Connection shard's holder drops its own
//! fields of an API neither listed nor draining with its own apply.

use std::collections::BTreeSet;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use tracing::{info, warn};

use super::shard_status::{FIELD_MANAGER_PREFIX, field_manager, give_up_as};
use crate::binding::Context;
use crate::binding::object::BindingObject;
use crate::k8s::ApiErrorExt;
use crate::sharding::{MEMBER_LABEL, live_holder};

/// The replica field managers holding fields of a binding's status (server-side apply, status
/// subresource).
pub(crate) fn shard_managers(meta: &ObjectMeta) -> BTreeSet<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref() == Some("status"))
        .filter(|m| m.operation.as_deref() == Some("Apply"))
        .filter_map(|m| m.manager.clone())
        .filter(|m| m.starts_with(FIELD_MANAGER_PREFIX))
        .collect()
}

/// The managers among `managers` of no replica in `live`.
pub(crate) fn gone<'a>(managers: &'a BTreeSet<String>, live: &BTreeSet<String>) -> Vec<&'a String> {
    let live: BTreeSet<String> = live.iter().map(|id| field_manager(id)).collect();
    managers.iter().filter(|m| !live.contains(*m)).collect()
}

/// The replicas whose membership Lease is held now.
async fn live_replicas(ctx: &Context) -> Result<BTreeSet<String>, kube::Error> {
    let leases: Api<Lease> = Api::namespaced(
        ctx.shared.consumer.clone(),
        ctx.shared.shards.lease_namespace(),
    );
    let now = Timestamp::now();
    let list = leases
        .list(&ListParams::default().labels(MEMBER_LABEL))
        .await?;
    Ok(list
        .items
        .iter()
        .filter_map(|lease| live_holder(lease, now).map(str::to_string))
        .collect())
}

/// Gives up, in their name, the `boundAPIs` fields of replicas that are gone. Called by the
/// holder of the binding's Connection shard; a failure is logged and retried on the next
/// reconcile (a phantom entry is not drained meanwhile, see `teardown`).
pub(crate) async fn entries_of_gone_replicas<K: BindingObject>(obj: &K, ctx: &Context) {
    if !ctx.shared.shards.sharded() {
        return;
    }
    let managers = shard_managers(obj.meta());
    let mine = field_manager(ctx.shared.shards.identity());
    if managers.iter().all(|m| *m == mine) {
        return;
    }
    let live = match live_replicas(ctx).await {
        Ok(live) => live,
        Err(error) => {
            warn!(%error, "listing the membership Leases failed; boundAPIs entries of gone replicas are pruned on the next reconcile");
            return;
        }
    };
    let api = obj.api_for(ctx.shared.consumer.clone());
    let name = obj.name_any();
    let namespace = obj.meta().namespace.clone();
    for manager in gone(&managers, &live) {
        match give_up_as(&api, &name, namespace.as_deref(), manager).await {
            Ok(_) => info!(
                %manager,
                "pruned the boundAPIs entries of a replica that holds no membership Lease"
            ),
            Err(error) if error.is_not_found() => return,
            Err(error) => {
                warn!(%manager, %error, "pruning the boundAPIs entries of a gone replica failed; retried on the next reconcile");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    fn managed(manager: &str, operation: &str, subresource: Option<&str>) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            subresource: subresource.map(str::to_string),
            ..ManagedFieldsEntry::default()
        }
    }

    #[test]
    fn only_replica_status_appliers_count_as_shard_managers() {
        let meta = ObjectMeta {
            managed_fields: Some(vec![
                managed("kbind-konnector", "Apply", Some("status")),
                managed("kbind-konnector-shard-a", "Apply", Some("status")),
                managed("kbind-konnector-shard-b", "Update", Some("status")),
                managed("kbind-konnector-shard-c", "Apply", None),
                managed("kubectl", "Apply", Some("status")),
            ]),
            ..ObjectMeta::default()
        };
        let managers = shard_managers(&meta);
        assert_eq!(
            managers,
            BTreeSet::from(["kbind-konnector-shard-a".to_string()])
        );
    }

    #[test]
    fn managers_of_replicas_without_a_live_membership_are_gone() {
        let managers: BTreeSet<String> = ["a", "b", "old-0"]
            .iter()
            .map(|id| field_manager(id))
            .collect();
        let live: BTreeSet<String> = ["a".to_string(), "b".to_string(), "c".to_string()].into();
        assert_eq!(gone(&managers, &live), vec!["kbind-konnector-shard-old-0"]);
        let everyone: BTreeSet<String> = ["a", "b", "old-0"].map(String::from).into();
        assert!(gone(&managers, &everyone).is_empty());
    }
}
