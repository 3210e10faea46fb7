//! What the sharding tests share on one cluster pair: 30 exported APIs bound through two
//! Connections to the same provider (each with its own credential Secret), so 32 shards (2
//! Connection shards, 30 API shards). Each test binds them again in namespaces of its own and
//! counts only its own instances there; the shards stay the same 32 from test to test.
//!
//! ```text
//! provider: a00.shard.kbind.io … a29.shard.kbind.io (widgets, exported)
//! consumer: Connection east ─▶ even APIs ─▶ Binding <test>-east/widgets
//!           Connection west ─▶ odd APIs  ─▶ Binding <test>-west/widgets
//! ```

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::{StreamExt, TryStreamExt};
use konnector::api::Connection;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use crate::access::grant;
use crate::faults::{CREATE_PARALLELISM, FAULT_WAIT, Sides, create_binding, instance_name};
use crate::fixtures::{SECRET_NAMESPACE, connect_ready, install_core_crds, wait_ready};
use crate::syncenv::{TestApi, ensure_namespace};
use crate::testenv::ClusterPair;

/// The namespace of the membership and shard Leases (the replicas' default).
pub const LEASE_NAMESPACE: &str = SECRET_NAMESPACE;
/// The two Connections, both to the same provider.
pub const CONNECTIONS: [&str; 2] = ["east", "west"];
/// How many APIs the sharding tests bind.
pub const APIS: usize = 30;
/// The RBAC objects (ClusterRole, Roles and their bindings) of a restricted replica.
const REPLICA_RBAC: &str = "sharded-replica";
/// The Role granting a restricted replica its Leases.
const LEASES_ROLE: &str = "sharded-replica-leases";

/// The bound APIs, each with the Connection it is bound through.
#[derive(Clone, Debug)]
pub struct World {
    /// `(connection, api)`.
    pub apis: Vec<(String, TestApi)>,
}

impl Default for World {
    fn default() -> Self {
        Self::of(APIS)
    }
}

impl World {
    /// `count` APIs, bound alternately through each Connection.
    pub fn of(count: usize) -> Self {
        let apis = (0..count)
            .map(|i| {
                let connection = CONNECTIONS[i % CONNECTIONS.len()].to_string();
                (
                    connection,
                    TestApi::namespaced(&format!("a{i:02}.shard.kbind.io")),
                )
            })
            .collect();
        Self { apis }
    }

    /// Every shard key: one per Connection, one per (Connection, API).
    pub fn shard_keys(&self) -> BTreeSet<String> {
        let mut keys = self.api_keys();
        keys.extend(CONNECTIONS.map(String::from));
        keys
    }

    /// The API shard keys, `<connection>/<api>`.
    pub fn api_keys(&self) -> BTreeSet<String> {
        let keys = self
            .apis
            .iter()
            .map(|(c, api)| format!("{c}/{}", api.name()));
        keys.collect()
    }

    /// What must exist before a replica starts: the core CRDs, the credential and Lease
    /// namespace, and the exported provider CRDs. Idempotent.
    pub async fn install(&self, pair: &ClusterPair) -> anyhow::Result<()> {
        let (consumer, provider) = (pair.consumer.client().await?, pair.provider.client().await?);
        install_core_crds(&consumer).await?;
        ensure_namespace(&consumer, SECRET_NAMESPACE).await?;
        futures::stream::iter(&self.apis)
            .map(|(_, api)| api.install_on_provider(&provider))
            .buffer_unordered(CREATE_PARALLELISM)
            .try_collect::<Vec<_>>()
            .await?;
        Ok(())
    }

    /// Connects both Connections (once; later calls only wait until they are Ready). Needs
    /// running replicas: the Connection controller runs where a Connection's shard is held.
    pub async fn connect(&self, pair: &ClusterPair) -> anyhow::Result<()> {
        let consumer = pair.consumer.client().await?;
        for connection in CONNECTIONS {
            let existing = Api::<Connection>::all(consumer.clone())
                .get_opt(connection)
                .await?;
            match existing {
                Some(_) => wait_ready(&consumer, connection).await.map(drop)?,
                None => connect_ready(&consumer, &pair.provider, connection)
                    .await
                    .map(drop)?,
            }
        }
        Ok(())
    }

    /// Binds every API again, in namespaces `<prefix>-east` and `<prefix>-west` (Binding
    /// `widgets` in each), waits until both are Ready, and returns each API in its namespace.
    pub async fn bind(&self, pair: &ClusterPair, prefix: &str) -> anyhow::Result<Vec<Sides>> {
        let consumer = pair.consumer.client().await?;
        let mut all = Vec::new();
        for connection in CONNECTIONS {
            let namespace = format!("{prefix}-{connection}");
            let apis: Vec<&TestApi> = self
                .apis
                .iter()
                .filter(|(c, _)| c == connection)
                .map(|(_, api)| api)
                .collect();
            create_binding(&consumer, &namespace, connection, &apis).await?;
            for api in apis {
                all.push(Sides::on(pair, api.clone(), &namespace).await?);
            }
        }
        for connection in CONNECTIONS {
            let namespace = format!("{prefix}-{connection}");
            crate::faults::wait_binding_ready(&consumer, &namespace, FAULT_WAIT).await?;
        }
        Ok(all)
    }
}

/// Creates instances `w-<i>` for every `i` in `indexes` of every API in `sides`, counting each
/// create in `created`.
pub async fn create_everywhere(
    sides: &[Sides],
    indexes: std::ops::Range<usize>,
    created: Arc<AtomicUsize>,
) -> anyhow::Result<()> {
    let all = sides
        .iter()
        .flat_map(|s| indexes.clone().map(move |i| (s, i)));
    futures::stream::iter(all)
        .map(|(sides, i)| {
            let created = created.clone();
            async move {
                sides
                    .create(&instance_name("w", i), json!({ "index": i }))
                    .await?;
                created.fetch_add(1, Ordering::Relaxed);
                anyhow::Ok(())
            }
        })
        .buffer_unordered(CREATE_PARALLELISM)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Waits until every API in `sides` holds exactly `per_api` instances and copies, one to one
/// (nothing lost, nothing written twice, nothing stuck).
pub async fn converged_everywhere(sides: &[Sides], per_api: usize) -> anyhow::Result<()> {
    for s in sides {
        s.converged(per_api).await?;
    }
    Ok(())
}

/// Grants consumer user `user` what the chart grants the konnector, with the bound API groups
/// named one by one (a `*` group would include Leases), and the Leases of the Lease namespace
/// through a Role of their own, [`revoke_lease_writes`] takes writes from.
pub async fn grant_replica(admin: &kube::Client, world: &World, user: &str) -> anyhow::Result<()> {
    let groups: Vec<&str> = world.apis.iter().map(|(_, a)| a.group.as_str()).collect();
    let crud = [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ];
    let cluster = json!([
        { "apiGroups": ["core.kbind.io"], "resources": ["connections", "bindings", "clusterbindings"], "verbs": crud },
        { "apiGroups": ["core.kbind.io"], "resources": [
            "connections/status", "bindings/status", "clusterbindings/status",
            "connections/finalizers", "bindings/finalizers", "clusterbindings/finalizers"],
          "verbs": ["get", "update", "patch"] },
        { "apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": crud },
        { "apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch", "create"] },
        { "apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"] },
        { "apiGroups": groups, "resources": ["*"], "verbs": crud },
    ]);
    let subject = ("User", user);
    grant(admin, None, REPLICA_RBAC, cluster, subject).await?;
    let secrets = json!([{ "apiGroups": [""], "resources": ["secrets"],
        "verbs": ["get", "list", "watch", "update", "patch"] }]);
    grant(admin, Some(LEASE_NAMESPACE), REPLICA_RBAC, secrets, subject).await?;
    let leases = lease_rules(&crud);
    grant(admin, Some(LEASE_NAMESPACE), LEASES_ROLE, leases, subject).await
}

/// Takes `update` and `patch` on Leases from the replica [`grant_replica`] granted: every
/// renewal (and release) of a Lease it holds is refused from now on; it may still read them.
pub async fn revoke_lease_writes(admin: &kube::Client) -> anyhow::Result<()> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
    ));
    let roles: Api<DynamicObject> = Api::namespaced_with(admin.clone(), LEASE_NAMESPACE, &resource);
    let rules = lease_rules(&["get", "list", "watch", "create", "delete"]);
    roles
        .patch(
            LEASES_ROLE,
            &PatchParams::default(),
            &Patch::Merge(json!({ "rules": rules })),
        )
        .await?;
    Ok(())
}

fn lease_rules(verbs: &[&str]) -> Value {
    json!([{ "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": verbs }])
}
