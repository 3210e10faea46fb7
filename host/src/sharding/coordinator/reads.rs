//! What a coordinator tick reads for assignment, beside its renewals: the membership Leases,
//! the shards there are (Connections, and the APIs the Ready bindings use) and the shard
//! Leases, or under leader election the one leader Lease; every read bounded so a slow consumer
//! never holds up the next renewal.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};

use super::{Coordinator, bounded};
use crate::api::Connection;
use crate::sharding::{MEMBER_LABEL, Plan, SHARD_KIND_LABEL, Shard};

/// What one tick read for assignment.
pub(in crate::sharding) struct World {
    /// Membership Leases by name (none under leader election).
    pub(in crate::sharding) members: BTreeMap<String, Lease>,
    /// Every shard there is.
    pub(in crate::sharding) shards: BTreeSet<Shard>,
    /// Shard Leases (or the leader Lease) by name.
    pub(in crate::sharding) recorded: BTreeMap<String, Lease>,
}

impl Coordinator {
    /// How long a read of the tick may take: half the renew deadline (at least a retry
    /// period), so a slow consumer still lets assignment happen without a renewal lapsing.
    /// Also the least a renewal is given: a renewal's answer is good until its start plus the
    /// renew deadline, so one of a lapsed hold bounded by the retry period alone would never
    /// come back over a link slower than that period.
    pub(in crate::sharding) fn read_bound(&self) -> Duration {
        (self.config.renew_deadline / 2).max(self.config.retry_period)
    }

    /// Lists the Leases carrying `label` within the read bound.
    async fn list(&self, label: &str, what: &str) -> Result<BTreeMap<String, Lease>, String> {
        match bounded(self.read_bound(), self.leases.list(label)).await {
            Some(Ok(listed)) => Ok(listed),
            Some(Err(error)) => Err(format!("listing {what}: {error}")),
            None => Err(format!(
                "listing {what}: no answer within {:?}",
                self.read_bound()
            )),
        }
    }

    /// What assignment reads, all at once: under leader election the leader Lease; sharded,
    /// the membership Leases, the shards there are and the shard Leases.
    pub(in crate::sharding) async fn read_world(&self) -> Result<World, String> {
        if let Plan::Leader { lease } = &self.config.plan {
            return Ok(World {
                members: BTreeMap::new(),
                shards: BTreeSet::from([Shard::Leader(lease.clone())]),
                recorded: self.get(lease).await?,
            });
        }
        let (members, shards, recorded) = futures::try_join!(
            self.list(MEMBER_LABEL, "membership Leases"),
            self.shards(),
            self.list(SHARD_KIND_LABEL, "shard Leases"),
        )?;
        Ok(World {
            members,
            shards,
            recorded,
        })
    }

    /// The Lease `name`, as a one-entry listing (empty when it does not exist yet).
    async fn get(&self, name: &str) -> Result<BTreeMap<String, Lease>, String> {
        match bounded(self.read_bound(), self.leases.get(name)).await {
            Some(Ok(found)) => Ok(found.into_iter().map(|l| (name.to_string(), l)).collect()),
            Some(Err(error)) => Err(format!("reading Lease {name}: {error}")),
            None => Err(format!(
                "reading Lease {name}: no answer within {:?}",
                self.read_bound()
            )),
        }
    }

    /// Every shard there is: one per Connection, one per (Connection, API) the Ready bindings
    /// use.
    async fn shards(&self) -> Result<BTreeSet<Shard>, String> {
        let api: Api<Connection> = Api::all(self.leases.client());
        let listed = bounded(self.read_bound(), api.list_metadata(&ListParams::default())).await;
        let connections: BTreeSet<String> = match listed {
            Some(Ok(list)) => list
                .items
                .into_iter()
                .filter_map(|c| c.metadata.name)
                .collect(),
            Some(Err(error)) => return Err(format!("listing Connections: {error}")),
            None => {
                let bound = self.read_bound();
                return Err(format!("listing Connections: no answer within {bound:?}"));
            }
        };
        let apis = self.shared.index.read(|index| index.active());
        let mut shards: BTreeSet<Shard> = apis
            .into_keys()
            .filter(|(connection, _)| connections.contains(connection))
            .map(|(connection, api)| Shard::Api { connection, api })
            .collect();
        shards.extend(connections.into_iter().map(Shard::Connection));
        Ok(shards)
    }
}
