//! Which konnector replica runs what, when the konnector shards its work over replicas
//! (`konnector run --sharding`): read from the shard Leases in the konnector's namespace, each
//! naming its shard (`<connection>` or `<connection>/<api>`) in an annotation and the replica
//! that holds it in `holderIdentity`. Without shard Leases (one active konnector, the default)
//! there is nothing to show.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use konnector::sharding::{SHARD_ANNOTATION, SHARD_KIND_LABEL, live_holder};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use serde::Serialize;

/// Where a shard of a sharded konnector runs.
#[derive(Serialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Shard {
    /// The replica (Pod name) holding the shard's Lease; `None` when nobody holds it (released
    /// and not yet taken, or its holder stopped renewing): then that work runs nowhere.
    pub holder: Option<String>,
}

/// The live holder of every shard, by key.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Holders(BTreeMap<String, Option<String>>);

impl Holders {
    /// The holders recorded on `leases` as of `now` (a Lease released or not renewed within
    /// its duration has no holder).
    pub fn of(leases: &[Lease], now: Timestamp) -> Self {
        let holders = leases.iter().filter_map(|lease| {
            let key = lease.annotations().get(SHARD_ANNOTATION)?;
            Some((key.clone(), live_holder(lease, now).map(str::to_string)))
        });
        Self(holders.collect())
    }

    /// The shard of a Connection's own work.
    pub fn connection(&self, connection: &str) -> Shard {
        self.shard(connection)
    }

    /// The shard of one API's syncer through a Connection.
    pub fn api(&self, connection: &str, api: &str) -> Shard {
        self.shard(&format!("{connection}/{api}"))
    }

    fn shard(&self, key: &str) -> Shard {
        Shard {
            holder: self.0.get(key).cloned().flatten(),
        }
    }
}

/// The shard holders in the konnector's namespace; `None` when the konnector does not shard
/// (no shard Lease there) or the Leases cannot be read (the caller may not read that
/// namespace's Leases: the report then shows what it can without them).
pub async fn read(client: &Client, namespace: &str) -> Option<Holders> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let listed = leases
        .list(&ListParams::default().labels(SHARD_KIND_LABEL))
        .await
        .ok()?;
    (!listed.items.is_empty()).then(|| Holders::of(&listed.items, Timestamp::now()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use k8s_openapi::jiff::SignedDuration;
    use kube::api::ObjectMeta;

    fn lease(key: &str, holder: Option<&str>, renewed_secs_ago: i64) -> Lease {
        let renewed = Timestamp::now()
            .checked_sub(SignedDuration::from_secs(renewed_secs_ago))
            .unwrap_or(Timestamp::UNIX_EPOCH);
        Lease {
            metadata: ObjectMeta {
                annotations: Some([(SHARD_ANNOTATION.to_string(), key.to_string())].into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                renew_time: Some(MicroTime(renewed)),
                lease_duration_seconds: Some(15),
                ..LeaseSpec::default()
            }),
        }
    }

    /// Holders of freshly renewed (or released) Leases, by shard key.
    pub(crate) fn holders(leases: &[(&str, Option<&str>)]) -> Holders {
        let leases: Vec<Lease> = leases
            .iter()
            .map(|(key, holder)| lease(key, *holder, 1))
            .collect();
        Holders::of(&leases, Timestamp::now())
    }

    #[test]
    fn a_shard_runs_on_its_live_holder_and_on_nobody_once_released_or_expired() {
        let holders = Holders::of(
            &[
                lease("provider", Some("konnector-0"), 1),
                lease("provider/widgets.example.org", Some("konnector-1"), 1),
                lease("provider/gadgets.example.org", Some("konnector-2"), 60),
                lease("provider/things.example.org", None, 1),
            ],
            Timestamp::now(),
        );
        let holder = |shard: Shard| shard.holder;
        assert_eq!(
            holder(holders.connection("provider")).as_deref(),
            Some("konnector-0")
        );
        assert_eq!(
            holder(holders.api("provider", "widgets.example.org")).as_deref(),
            Some("konnector-1")
        );
        assert_eq!(holder(holders.api("provider", "gadgets.example.org")), None);
        assert_eq!(holder(holders.api("provider", "things.example.org")), None);
        // An API nobody has taken a Lease for yet has no holder either.
        assert_eq!(holder(holders.api("provider", "new.example.org")), None);
    }
}
