//! The autoBind ClusterBinding: one per Connection, named after it, labelled as managed,
//! listing every exported API; deleted when nothing is exported.
//!
//! Its state is the Connection's `AutoBindInSync` condition: False with reason
//! `AutoBindNameTaken` while a ClusterBinding of that name is someone else's. The Warning Event
//! follows from the condition changing state (`super::events`), so a name clash that lasts is
//! announced once, not on every periodic reconcile.

use std::collections::BTreeMap;

use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::info;

use super::{Context, Error, Result};
use crate::api::names::{FIELD_MANAGER, MANAGED_LABEL};
use crate::api::{ApiReference, ClusterBinding, ConditionType, Connection, ExportedApi, Reason};
use crate::conditions::Desired;

/// Whether a ClusterBinding is the one autoBind manages.
pub fn is_managed(binding: &ClusterBinding) -> bool {
    binding
        .labels()
        .get(MANAGED_LABEL)
        .is_some_and(|v| v == "true")
}

/// `AutoBindInSync=False` for a ClusterBinding named `name` that autoBind does not manage.
pub fn name_taken(name: &str) -> Desired {
    Desired::falsy(
        ConditionType::AutoBindInSync,
        Reason::AutoBindNameTaken,
        format!(
            "ClusterBinding {name} exists without label {MANAGED_LABEL}=true; autoBind leaves it alone and binds nothing. Rename it (delete and re-create it under another name) or turn autoBind off"
        ),
    )
}

/// `AutoBindInSync=True` once the managed ClusterBinding lists the `apis` exported APIs (or is
/// absent because nothing is exported).
pub fn in_sync(name: &str, apis: usize) -> Desired {
    let message = if apis == 0 {
        format!("nothing is exported: no autoBind ClusterBinding {name}")
    } else {
        format!("ClusterBinding {name} lists the {apis} bindable exported API(s)")
    };
    Desired::truthy(ConditionType::AutoBindInSync, Reason::AsExpected, message)
}

/// Brings the managed ClusterBinding in line with the exported APIs; returns the
/// `AutoBindInSync` condition saying how that went.
pub(super) async fn sync(
    ctx: &Context,
    connection: &Connection,
    exported: &[ExportedApi],
) -> Result<Desired> {
    let name = connection.name_any();
    let api: Api<ClusterBinding> = Api::all(ctx.shared.consumer.clone());
    let existing = api.get_opt(&name).await.map_err(Error::AutoBind)?;
    if let Some(existing) = &existing
        && !is_managed(existing)
    {
        return Ok(name_taken(&name));
    }
    if exported.is_empty() {
        if existing.is_some() {
            delete(ctx, &name).await?;
        }
        return Ok(in_sync(&name, 0));
    }
    let apis: Vec<ApiReference> = exported
        .iter()
        .map(|a| ApiReference {
            name: a.name.clone(),
        })
        .collect();
    let desired = json!({
        "apiVersion": ClusterBinding::api_version(&()),
        "kind": ClusterBinding::kind(&()),
        "metadata": ObjectMeta {
            name: Some(name.clone()),
            labels: Some(BTreeMap::from([(MANAGED_LABEL.to_string(), "true".to_string())])),
            ..ObjectMeta::default()
        },
        "spec": {
            "connectionRef": {"name": name},
            "apis": apis,
        },
    });
    let current: Option<Vec<ApiReference>> = existing.map(|b| b.spec.apis.clone());
    if current.as_ref() != Some(&apis) {
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&desired),
        )
        .await
        .map_err(Error::AutoBind)?;
        info!(connection = %name, apis = apis.len(), "autoBind ClusterBinding updated");
    }
    Ok(in_sync(&name, apis.len()))
}

/// Requests deletion of the managed ClusterBinding, if it exists and is managed.
pub(super) async fn delete(ctx: &Context, name: &str) -> Result<()> {
    let api: Api<ClusterBinding> = Api::all(ctx.shared.consumer.clone());
    match api.get_opt(name).await.map_err(Error::AutoBind)? {
        Some(binding) if is_managed(&binding) && binding.metadata.deletion_timestamp.is_none() => {
            api.delete(name, &DeleteParams::default())
                .await
                .map_err(Error::AutoBind)?;
            info!(connection = %name, "autoBind ClusterBinding deletion requested");
            Ok(())
        }
        _ => Ok(()),
    }
}
