//! The autoBind ClusterBinding: one per Connection, named after it, labelled as managed,
//! listing every exported API, and keeping the ones the provider stopped exporting.
//!
//! An un-export is not a deletion: the API stays listed and the binding reports it released
//! (`crate::binding::release`), its consumer CRD, instances and provider copies kept, so a
//! re-export resumes sync on the same copies. The ClusterBinding is not deleted when nothing
//! is exported any more (the spec says "Delete it if no APIs are exported"; we deviate on
//! purpose: deleting it would tear down every consumer CRD and instance, the source of truth,
//! because of a provider's change). It goes when its Connection is deleted, or when the
//! consumer deletes it; an API leaves it when the consumer removes it from `apis` while it is
//! not exported (a drain), or when its consumer CRD turns out not to be kbind's (refused).
//!
//! Its state is the Connection's `AutoBindInSync` condition: False with reason
//! `AutoBindNameTaken` while a ClusterBinding of that name is someone else's. The Warning Event
//! follows from the condition changing state (`super::events`), so a name clash that lasts is
//! announced once, not on every periodic reconcile.

use std::collections::{BTreeMap, BTreeSet};

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

/// `AutoBindInSync=True` once the managed ClusterBinding lists the `apis` bindable exported
/// APIs and keeps the `released` ones (or is absent because nothing was ever exported).
pub fn in_sync(name: &str, apis: usize) -> Desired {
    in_sync_keeping(name, apis, 0)
}

/// [`in_sync`] with the count of the listed APIs the provider no longer exports.
pub fn in_sync_keeping(name: &str, apis: usize, released: usize) -> Desired {
    let message = match (apis, released) {
        (0, 0) => format!("nothing is exported: no autoBind ClusterBinding {name}"),
        (_, 0) => format!("ClusterBinding {name} lists the {apis} bindable exported API(s)"),
        _ => format!(
            "ClusterBinding {name} lists the {apis} bindable exported API(s) and keeps {released} the provider no longer exports (released, nothing deleted)"
        ),
    };
    Desired::truthy(ConditionType::AutoBindInSync, Reason::AsExpected, message)
}

/// The `apis` of the managed ClusterBinding, sorted: every `bindable` export, and every API
/// it lists now (`current`) that is not `refused` (an un-exported API stays, released).
pub fn desired_apis(
    current: &[ApiReference],
    bindable: &[ExportedApi],
    refused: &BTreeSet<&str>,
) -> Vec<ApiReference> {
    let names: BTreeSet<&str> = current
        .iter()
        .map(|a| a.name.as_str())
        .filter(|a| !refused.contains(a))
        .chain(bindable.iter().map(|a| a.name.as_str()))
        .collect();
    names
        .into_iter()
        .map(|name| ApiReference {
            name: name.to_string(),
        })
        .collect()
}

/// Brings the managed ClusterBinding in line with the `bindable` exported APIs, keeping the
/// ones no longer exported and dropping the `refused` ones; returns the `AutoBindInSync`
/// condition saying how that went.
pub(super) async fn sync(
    ctx: &Context,
    connection: &Connection,
    bindable: &[ExportedApi],
    refused: &BTreeSet<&str>,
) -> Result<Desired> {
    let name = connection.name_any();
    let api: Api<ClusterBinding> = Api::all(ctx.shared.consumer.clone());
    let existing = api.get_opt(&name).await.map_err(Error::AutoBind)?;
    if let Some(existing) = &existing
        && !is_managed(existing)
    {
        return Ok(name_taken(&name));
    }
    let current: Option<Vec<ApiReference>> = existing.map(|b| b.spec.apis.clone());
    let apis = desired_apis(current.as_deref().unwrap_or_default(), bindable, refused);
    let released = apis
        .iter()
        .filter(|a| !bindable.iter().any(|b| b.name == a.name))
        .count();
    if apis.is_empty() && current.is_none() {
        return Ok(in_sync(&name, 0));
    }
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
    if current.as_ref() != Some(&apis) {
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&desired),
        )
        .await
        .map_err(Error::AutoBind)?;
        info!(connection = %name, apis = apis.len(), released, "autoBind ClusterBinding updated");
    }
    Ok(in_sync_keeping(&name, apis.len() - released, released))
}

/// Requests deletion of the managed ClusterBinding, if it exists and is managed: only for a
/// deleting Connection (a consumer's action), never because of what the provider exports.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ResourceScope;

    fn export(name: &str) -> ExportedApi {
        ExportedApi {
            name: name.into(),
            group: "example.org".into(),
            resource: "widgets".into(),
            scope: ResourceScope::Namespaced,
            versions: vec!["v1".into()],
        }
    }

    fn listed(names: &[&str]) -> Vec<ApiReference> {
        names
            .iter()
            .map(|n| ApiReference { name: (*n).into() })
            .collect()
    }

    #[test]
    fn new_exports_join_sorted() {
        let apis = desired_apis(
            &listed(&["w.x"]),
            &[export("w.x"), export("g.x")],
            &BTreeSet::new(),
        );
        assert_eq!(apis, listed(&["g.x", "w.x"]));
    }

    #[test]
    fn an_unexported_api_stays_listed_even_when_nothing_is_exported() {
        let none = BTreeSet::new();
        let one_left = desired_apis(&listed(&["g.x", "w.x"]), &[export("w.x")], &none);
        assert_eq!(one_left, listed(&["g.x", "w.x"]));
        let nothing_left = desired_apis(&listed(&["g.x", "w.x"]), &[], &none);
        assert_eq!(nothing_left, listed(&["g.x", "w.x"]));
    }

    #[test]
    fn a_refused_api_leaves_and_nothing_listed_nothing_exported_is_empty() {
        let refused = BTreeSet::from(["g.x"]);
        let apis = desired_apis(&listed(&["g.x", "w.x"]), &[export("w.x")], &refused);
        assert_eq!(apis, listed(&["w.x"]));
        assert!(desired_apis(&[], &[], &BTreeSet::new()).is_empty());
    }

    #[test]
    fn the_condition_counts_the_released_apis() {
        let c = in_sync_keeping("p", 1, 2);
        assert!(c.status);
        assert!(c.message.contains("keeps 2"), "{}", c.message);
        assert!(in_sync("p", 0).message.contains("nothing is exported"));
    }
}
