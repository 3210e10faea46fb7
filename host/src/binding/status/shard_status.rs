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

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
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

/// What every replica's field manager starts with, so the Connection shard's holder can tell
/// them from other writers of the status.
pub(crate) const FIELD_MANAGER_PREFIX: &str = "kbind-konnector-shard-";

/// The field manager of replica `identity`'s entries (field managers hold at most 128 bytes).
pub(crate) fn field_manager(identity: &str) -> String {
    let mut manager = format!("{FIELD_MANAGER_PREFIX}{identity}");
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

/// Whether `entry` is only a replica's leftover: a syncer's fields without the Connection shard
/// holder's (`crdHash`), which it drops once an API is neither listed nor draining. Such an
/// entry binds nothing, so nothing is drained for it.
pub(crate) fn leftover(entry: &BoundApi) -> bool {
    entry.syncer.is_some() && entry.crd_hash.is_none()
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

/// How long a replica shutting down spends giving its entries up.
const GIVE_UP_WITHIN: Duration = Duration::from_secs(5);

/// What this replica last read back of its entries, per binding.
type Written = BTreeMap<BindingKey, Vec<BoundApi>>;

/// Applies this replica's entries for every binding, whenever its syncers' outcomes, its
/// shards or the bindings' APIs change, until `shutdown`; then gives them all up. Every status interval it applies
/// them again, so an entry another writer took over or a prune removed comes back. Runs only
/// on sharded replicas.
pub async fn run(ctx: Arc<Context>, shutdown: CancellationToken) {
    let mut outcomes = ctx.shared.outcomes.subscribe();
    let mut shards = ctx.shared.shards.subscribe();
    let mut index = ctx.shared.index.subscribe();
    let mut written = Written::new();
    let mut tick = tokio::time::interval(ctx.settings.status_interval);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            changed = outcomes.changed() => if changed.is_err() { break },
            changed = shards.changed() => if changed.is_err() { break },
            // A binding that stopped listing an API: its entry is given up at once.
            changed = index.changed() => if changed.is_err() { break },
            _ = tick.tick() => {
                // Check every entry against the stored one again: written is what was read
                // back last time, and another writer may have changed it since.
                for entries in written.values_mut() {
                    entries.clear();
                }
            }
        }
        // Coalesce a burst of outcomes into one write per binding.
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        publish(&ctx, &mut written).await;
    }
    give_up(&ctx, &written).await;
}

/// Gives up this replica's entries in every binding it wrote (an apply of nothing under its field
/// manager), so a replica that exits (every rollout: Pods get new names) leaves none behind.
/// What it cannot give up in time, the holder of the binding's Connection shard prunes.
async fn give_up(ctx: &Context, written: &Written) {
    let identity = ctx.shared.shards.identity().to_string();
    let all = async {
        for key in written.keys() {
            match apply(ctx, key, &identity, &[]).await {
                Ok(_) => debug!(binding = %key, "gave this replica's boundAPIs entries up"),
                Err(error) if error.is_not_found() => {}
                Err(error) => {
                    warn!(binding = %key, %error, "giving this replica's boundAPIs entries up failed; the holder of the Connection shard prunes them")
                }
            }
        }
    };
    if tokio::time::timeout(GIVE_UP_WITHIN, all).await.is_err() {
        warn!(
            "giving this replica's boundAPIs entries up took longer than {GIVE_UP_WITHIN:?}; the holder of each Connection shard prunes what is left"
        );
    }
}

/// The entries this replica owes every binding: one per (binding, API) whose API shard it
/// holds, from its syncer's outcomes.
fn wanted(ctx: &Context, identity: &str) -> Written {
    let owned = ctx.shared.shards.current();
    let mut wanted = Written::new();
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
                .push(entry(api, identity, &summary));
        }
    }
    wanted
}

/// One pass: the entries this replica owes every binding, applied where what was read back
/// last differs, and read back again.
async fn publish(ctx: &Context, written: &mut Written) {
    let identity = ctx.shared.shards.identity().to_string();
    let mut wanted = wanted(ctx, &identity);
    // Bindings this replica wrote before and owes nothing now: an empty apply gives the
    // entries up.
    let keys: BTreeSet<BindingKey> = wanted.keys().chain(written.keys()).cloned().collect();
    for key in keys {
        let mut entries = wanted.remove(&key).unwrap_or_default();
        if written.get(&key) == Some(&entries) {
            continue;
        }
        // A shard lost since the pass began is not written again (the new holder writes it).
        let current = ctx.shared.shards.current();
        let connection = ctx
            .shared
            .index
            .read(|index| index.get(&key).map(|b| b.connection.clone()));
        entries.retain(|e| connection.as_ref().is_some_and(|c| current.api(c, &e.name)));
        match apply(ctx, &key, &identity, &entries).await {
            Ok(_) if entries.is_empty() => {
                written.remove(&key);
            }
            Ok(stored) => {
                let read_back = read_back(stored.as_ref(), &entries);
                if read_back != entries {
                    debug!(binding = %key, "the stored boundAPIs entries differ from this replica's apply; applied again on the next pass");
                }
                written.insert(key, read_back);
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

/// The stored entries of the APIs in `applied`, as the apiserver answered an apply: equal to
/// `applied` when the apply took whole.
pub(crate) fn read_back(stored: Option<&BindingStatus>, applied: &[BoundApi]) -> Vec<BoundApi> {
    let stored: Vec<&BoundApi> = stored
        .map(|s| s.bound_apis.iter().collect())
        .unwrap_or_default();
    applied
        .iter()
        .filter_map(|mine| stored.iter().find(|b| b.name == mine.name))
        .map(|b| BoundApi {
            // The Connection shard's holder writes these: not part of this replica's entry.
            crd_hash: None,
            released: false,
            ..(*b).clone()
        })
        .collect()
}

/// Applies `entries` as replica `identity`'s whole share of the binding's `boundAPIs` (none:
/// gives them all up) and returns the stored status.
pub(crate) async fn apply(
    ctx: &Context,
    key: &BindingKey,
    identity: &str,
    entries: &[BoundApi],
) -> Result<Option<BindingStatus>, kube::Error> {
    let manager = field_manager(identity);
    let client = ctx.shared.consumer.clone();
    debug!(binding = %key, apis = entries.len(), %manager, "applying boundAPIs entries");
    let status = json!({ "boundAPIs": entries });
    match key {
        BindingKey::Cluster { name } => {
            let api = Api::<ClusterBinding>::all(client);
            if entries.is_empty() {
                give_up_as(&api, name, None, &manager).await
            } else {
                k8s::apply_status_as(&api, name, None, &manager, &status).await
            }
            .map(|b| b.status)
        }
        BindingKey::Namespaced { namespace, name } => {
            let api = Api::<Binding>::namespaced(client, namespace);
            if entries.is_empty() {
                give_up_as(&api, name, Some(namespace), &manager).await
            } else {
                k8s::apply_status_as(&api, name, Some(namespace), &manager, &status).await
            }
            .map(|b| b.status)
        }
    }
}

/// Gives up every field `manager` holds in the status of `name`: an apply that sets nothing
/// at all (one with an empty `status` would leave the manager holding that empty map, and its
/// entry in `managedFields` with it).
pub(crate) async fn give_up_as<K>(
    api: &Api<K>,
    name: &str,
    namespace: Option<&str>,
    manager: &str,
) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let body = crate::k8s::apply_head::<K>(name, namespace);
    let params = PatchParams::apply(manager).force();
    api.patch_status(name, &params, &Patch::Apply(&body)).await
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
    fn an_entry_read_back_whole_equals_the_apply() {
        let api = "widgets.example.org";
        let mine = entry(api, "konnector-1", &summary_of(api));
        let mut stored = mine.clone();
        stored.crd_hash = Some("abc".into());
        let other = entry("gadgets.example.org", "konnector-2", &summary_of(api));
        let status = BindingStatus {
            bound_apis: vec![other, stored],
            ..BindingStatus::default()
        };
        let applied = vec![mine];
        assert_eq!(read_back(Some(&status), &applied), applied);
    }

    #[test]
    fn an_entry_another_writer_changed_reads_back_different() {
        let api = "widgets.example.org";
        let mine = entry(api, "konnector-1", &summary_of(api));
        let theirs = entry(api, "konnector-2", &Summary::default());
        let status = BindingStatus {
            bound_apis: vec![theirs],
            ..BindingStatus::default()
        };
        let applied = vec![mine];
        assert_ne!(read_back(Some(&status), &applied), applied);
        assert!(read_back(None, &applied).is_empty());
    }

    #[test]
    fn an_entry_only_a_syncer_writes_is_a_leftover() {
        let api = "widgets.example.org";
        let mut entry = entry(api, "konnector-1", &summary_of(api));
        assert!(leftover(&entry));
        entry.crd_hash = Some("abc".into());
        assert!(!leftover(&entry));
        let unsharded = BoundApi {
            name: api.into(),
            ..BoundApi::default()
        };
        assert!(
            !leftover(&unsharded),
            "an entry of an unsharded konnector binds"
        );
    }

    #[test]
    fn field_managers_stay_within_the_apiserver_limit() {
        assert_eq!(field_manager("r1"), "kbind-konnector-shard-r1");
        assert!(field_manager(&"x".repeat(300)).len() <= 128);
    }
}
