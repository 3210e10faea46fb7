//! Binding status from many writers (`--sharding`): each replica applies, for every binding, the
//! `boundAPIs` entries of the APIs whose syncer it runs (counts, what fails, the replica's
//! name) with server-side apply under a field manager of its own; the replica holding the
//! binding's Connection writes the rest (CRD hashes, released APIs, the overall conditions)
//! under `kbind-konnector`, judging from those entries.
//!
//! ```text
//! API shard owner ──apply (kbind-konnector-shard-<replica>)──▶ boundAPIs[name].{instances, conflictCount, syncer, report}
//! Connection shard owner ──apply (kbind-konnector), those fields left out──▶ boundAPIs[name].{crdHash, released},
//!        ▲                                                                    conditions, conflictCount
//!        └─ reads the entries back (summary_from_entries) ◀───────────────────┘
//! ```
//!
//! `boundAPIs` is a list map keyed by name, so the apiserver merges the entries of all
//! managers; a replica's apply lists every entry it owns in that binding (an apply that left
//! one out would give it up).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kube::Api;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::api::{ApiReport, Binding, BindingStatus, BoundApi, ClusterBinding, FailingInstances};
use crate::k8s::{self, ApiErrorExt};
use crate::registry::Failing;
use crate::registry::outcomes::EXAMPLES;
use crate::registry::{BindingKey, Summary};

use super::summary::instance_failure;
use crate::binding::Context;

/// The fields of a `boundAPIs` entry that the replica running the API's syncer writes.
const SYNCER_FIELDS: [&str; 4] = ["instances", "conflictCount", "syncer", "report"];

/// The field manager of replica `identity`'s entries (field managers hold at most 128 bytes).
pub(crate) fn field_manager(identity: &str) -> String {
    let mut manager = format!("kbind-konnector-shard-{identity}");
    manager.truncate(128);
    manager
}

/// The entry replica `identity` applies for `api`, from its syncer's summary of the binding's
/// scope.
pub(crate) fn entry(api: &str, identity: &str, summary: &Summary) -> BoundApi {
    let failing = summary
        .failing
        .iter()
        .map(|(reason, failing)| FailingInstances {
            reason: reason.as_str().to_string(),
            count: failing.count,
            examples: failing.examples.clone(),
        })
        .collect();
    BoundApi {
        name: api.to_string(),
        conflict_count: summary.conflicts(),
        instances: summary.per_api.get(api).copied(),
        syncer: Some(identity.to_string()),
        report: Some(ApiReport {
            settling: summary.settling,
            failing,
            provider_denied: summary.denied_apis.get(api).cloned(),
            consumer_denied: summary.consumer_denied_apis.get(api).cloned(),
        }),
        ..BoundApi::default()
    }
}

/// A binding's summary from its stored entries: what the replica holding its Connection judges
/// the instance conditions on. An API without a syncer's entry yet is settling.
pub(crate) fn summary_from_entries<'a>(
    status: Option<&BindingStatus>,
    apis: impl IntoIterator<Item = &'a str>,
) -> Summary {
    let mut summary = Summary::default();
    for api in apis {
        let stored = status.and_then(|s| s.bound_apis.iter().find(|b| b.name == api));
        let (Some(entry), Some(report)) = (stored, stored.and_then(|b| b.report.as_ref())) else {
            summary.settling = true;
            summary.per_api.entry(api.to_string()).or_default();
            continue;
        };
        summary
            .per_api
            .insert(api.to_string(), entry.instances.unwrap_or_default());
        summary.settling |= report.settling;
        for failing in &report.failing {
            let Some(reason) = instance_failure(&failing.reason) else {
                continue;
            };
            let merged: &mut Failing = summary.failing.entry(reason).or_default();
            merged.count += failing.count;
            let room = EXAMPLES.saturating_sub(merged.examples.len());
            merged
                .examples
                .extend(failing.examples.iter().take(room).cloned());
        }
        if let Some(said) = &report.provider_denied {
            summary.denied_apis.insert(api.to_string(), said.clone());
        }
        if let Some(said) = &report.consumer_denied {
            summary
                .consumer_denied_apis
                .insert(api.to_string(), said.clone());
        }
    }
    summary
}

/// The status the Connection shard's owner applies: its own, without the fields the syncers'
/// replicas write, so its apply neither overwrites nor takes them over.
pub(crate) fn without_syncer_fields(status: &BindingStatus) -> Result<Value, serde_json::Error> {
    let mut value = serde_json::to_value(status)?;
    if let Some(entries) = value.get_mut("boundAPIs").and_then(Value::as_array_mut) {
        for entry in entries.iter_mut().filter_map(Value::as_object_mut) {
            for field in SYNCER_FIELDS {
                entry.remove(field);
            }
        }
    }
    Ok(value)
}

/// Applies this replica's entries for every binding, whenever its syncers' outcomes or its
/// shards change, until `shutdown`. Runs only on sharded replicas.
pub async fn run(ctx: Arc<Context>, shutdown: CancellationToken) {
    let mut outcomes = ctx.shared.outcomes.subscribe();
    let mut shards = ctx.shared.shards.subscribe();
    let mut written: BTreeMap<BindingKey, Vec<BoundApi>> = BTreeMap::new();
    let mut tick = tokio::time::interval(ctx.settings.status_interval);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            changed = outcomes.changed() => if changed.is_err() { return },
            changed = shards.changed() => if changed.is_err() { return },
            _ = tick.tick() => {}
        }
        // Coalesce a burst of outcomes into one write per binding.
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        publish(&ctx, &mut written).await;
    }
}

/// One pass: the entries this replica owes every binding, applied where they changed.
async fn publish(ctx: &Context, written: &mut BTreeMap<BindingKey, Vec<BoundApi>>) {
    let identity = ctx.shared.shards.identity().to_string();
    let owned = ctx.shared.shards.current();
    let mut wanted: BTreeMap<BindingKey, Vec<BoundApi>> = BTreeMap::new();
    for (connection, api) in &owned.apis {
        let keys: Vec<BindingKey> = ctx.shared.index.read(|index| {
            index
                .listing(api)
                .into_iter()
                .filter(|key| index.get(key).is_some_and(|e| &e.connection == connection))
                .cloned()
                .collect()
        });
        for key in keys {
            let namespace = match &key {
                BindingKey::Namespaced { namespace, .. } => Some(namespace.as_str()),
                BindingKey::Cluster { .. } => None,
            };
            let summary = ctx
                .shared
                .outcomes
                .summarise(connection, [api.as_str()], namespace);
            wanted
                .entry(key)
                .or_default()
                .push(entry(api, &identity, &summary));
        }
    }
    // Bindings this replica wrote before and owes nothing now: an empty apply gives the
    // entries up.
    let keys: BTreeSet<BindingKey> = wanted.keys().chain(written.keys()).cloned().collect();
    for key in keys {
        let entries = wanted.remove(&key).unwrap_or_default();
        if written.get(&key) == Some(&entries) {
            continue;
        }
        match apply(ctx, &key, &identity, &entries).await {
            Ok(()) if entries.is_empty() => {
                written.remove(&key);
            }
            Ok(()) => {
                written.insert(key, entries);
            }
            Err(error) if error.is_not_found() => {
                written.remove(&key);
            }
            Err(error) => {
                warn!(binding = %key, %error, "applying this replica's boundAPIs entries failed; retried on the next change");
            }
        }
    }
}

async fn apply(
    ctx: &Context,
    key: &BindingKey,
    identity: &str,
    entries: &[BoundApi],
) -> Result<(), kube::Error> {
    let manager = field_manager(identity);
    let status = if entries.is_empty() {
        json!({})
    } else {
        json!({ "boundAPIs": entries })
    };
    let client = ctx.shared.consumer.clone();
    debug!(binding = %key, apis = entries.len(), "applying boundAPIs entries");
    match key {
        BindingKey::Cluster { name } => {
            let api = Api::<ClusterBinding>::all(client);
            k8s::apply_status_as(&api, name, None, &manager, &status)
                .await
                .map(drop)
        }
        BindingKey::Namespaced { namespace, name } => {
            let api = Api::<Binding>::namespaced(client, namespace);
            k8s::apply_status_as(&api, name, Some(namespace), &manager, &status)
                .await
                .map(drop)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{InstanceCounts, Reason};

    fn summary_of(api: &str) -> Summary {
        let mut summary = Summary::default();
        summary.per_api.insert(
            api.into(),
            InstanceCounts {
                synced: 3,
                conflicting: 1,
                failing: 0,
                pending: 0,
            },
        );
        summary.failing.insert(
            Reason::ForeignObjectExists,
            Failing {
                count: 1,
                examples: vec!["team/w".into()],
            },
        );
        summary
    }

    #[test]
    fn entries_written_by_syncers_read_back_as_the_same_summary() {
        let api = "widgets.example.org";
        let status = BindingStatus {
            bound_apis: vec![entry(api, "konnector-1", &summary_of(api))],
            ..BindingStatus::default()
        };
        let read = summary_from_entries(Some(&status), [api]);
        assert_eq!(read, summary_of(api));
        assert_eq!(status.bound_apis[0].conflict_count, 1);
        assert_eq!(status.bound_apis[0].syncer.as_deref(), Some("konnector-1"));
    }

    #[test]
    fn an_api_without_a_syncer_entry_is_settling() {
        let read = summary_from_entries(None, ["widgets.example.org"]);
        assert!(read.settling);
        assert_eq!(read.in_sync(), 0);
    }

    #[test]
    fn the_connection_owner_applies_no_syncer_field() {
        let api = "widgets.example.org";
        let mut mine = entry(api, "konnector-1", &summary_of(api));
        mine.crd_hash = Some("abc".into());
        let status = BindingStatus {
            bound_apis: vec![mine],
            ..BindingStatus::default()
        };
        let applied = without_syncer_fields(&status).unwrap_or_default();
        let entry = &applied["boundAPIs"][0];
        assert_eq!(entry["name"], api);
        assert_eq!(entry["crdHash"], "abc");
        for field in SYNCER_FIELDS {
            assert!(entry.get(field).is_none(), "{field} in {entry}");
        }
    }

    #[test]
    fn field_managers_stay_within_the_apiserver_limit() {
        assert_eq!(field_manager("r1"), "kbind-konnector-shard-r1");
        assert!(field_manager(&"x".repeat(300)).len() <= 128);
    }
}
