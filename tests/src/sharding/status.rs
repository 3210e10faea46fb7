//! Binding status from many writers, as the sharding tests read it back: each replica applies
//! the `boundAPIs` entries of the API shards it holds under a field manager of its own
//! (`kbind-konnector-shard-<replica>`); what the tests check is that every one of those
//! applies landed whole and that no replica's entry outlives the replica or the API.
//!
//! ```text
//! shard Leases ──▶ holder of <connection>/<api> ──┐
//!                                                 ▼
//! Binding status.boundAPIs[api] ─▶ syncer == holder, instances.synced == per API
//! Binding managedFields (status) ─▶ shard managers == the holders' (no other replica's)
//! replica logs ─▶ no apply failure, one drain per removed API
//! ```

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Context as _;
use konnector::api::{Binding, BindingStatus};
use kube::{Api, Client};
use serde_json::Value;

use super::leases::Holders;

/// What every replica's status field manager starts with.
pub const SHARD_MANAGER_PREFIX: &str = "kbind-konnector-shard-";

/// The replicas' status field managers on `binding`.
pub fn shard_managers(binding: &Binding) -> BTreeSet<String> {
    binding
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref() == Some("status"))
        .filter_map(|m| m.manager.clone())
        .filter(|m| m.starts_with(SHARD_MANAGER_PREFIX))
        .collect()
}

/// Binding `namespace/widgets`.
pub async fn binding(consumer: &Client, namespace: &str) -> anyhow::Result<Binding> {
    let bindings: Api<Binding> = Api::namespaced(consumer.clone(), namespace);
    bindings
        .get("widgets")
        .await
        .with_context(|| format!("reading Binding {namespace}/widgets"))
}

/// Checks that every API `binding` lists through `connection` has the entry its API shard's
/// holder applied, read back whole (`syncer` naming the holder, `instances` with `per_api`
/// synced and nothing pending), and that the binding's replica field managers are exactly
/// the holders' (no other replica's fields left). Returns what is wrong, if anything.
pub fn entries_of_the_holders(
    binding: &Binding,
    connection: &str,
    holders: &Holders,
    per_api: u64,
) -> Vec<String> {
    let mut wrong = Vec::new();
    let status = binding.status.clone().unwrap_or_default();
    let mut expected_managers = BTreeSet::new();
    for listed in &binding.spec.apis {
        let key = format!("{connection}/{}", listed.name);
        let Some(Some(holder)) = holders.get(&key) else {
            wrong.push(format!("{key} has no holder"));
            continue;
        };
        expected_managers.insert(format!("{SHARD_MANAGER_PREFIX}{holder}"));
        let entry = status.bound_apis.iter().find(|b| b.name == listed.name);
        let Some(entry) = entry else {
            wrong.push(format!("{key}: no boundAPIs entry"));
            continue;
        };
        if entry.syncer.as_deref() != Some(holder.as_str()) {
            wrong.push(format!(
                "{key}: entry written by {:?}, its shard is held by {holder}",
                entry.syncer
            ));
        }
        match entry.instances {
            Some(counts) if counts.synced == per_api && counts.pending == 0 => {}
            other => wrong.push(format!(
                "{key}: instances {other:?}, {per_api} synced wanted"
            )),
        }
        if entry.report.is_none() {
            wrong.push(format!("{key}: no report"));
        }
    }
    let managers = shard_managers(binding);
    if managers != expected_managers {
        wrong.push(format!(
            "status field managers {managers:?}, the holders' are {expected_managers:?}"
        ));
    }
    wrong
}

/// The names of `status`'s `boundAPIs` entries.
pub fn entry_names(status: Option<&BindingStatus>) -> BTreeSet<String> {
    status
        .map(|s| s.bound_apis.iter().map(|b| b.name.clone()).collect())
        .unwrap_or_default()
}

/// How many lines of the JSON log at `path` carry `message`, and `api` when given.
pub fn logged(path: &Path, message: &str, api: Option<&str>) -> anyhow::Result<usize> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["fields"]["message"].as_str() == Some(message))
        .filter(|line| api.is_none_or(|api| line["fields"]["api"].as_str() == Some(api)))
        .count())
}
