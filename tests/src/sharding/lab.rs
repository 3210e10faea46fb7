//! One sharding test's frame on one of the binary's cluster pairs: its turn (the tests on a
//! pair run one after the other, since every replica shards every Connection of the consumer),
//! its replicas, and the checks that read Leases, logs and metrics together.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use kube::Client;
use tokio::sync::{Mutex, MutexGuard};

use super::leases::{self, Holders, assigned, misplaced};
use super::logs::{Kind, open_keys};
use super::replicas::{HaMode, Replicas, TIMINGS, Timings};
use super::world::{LEASE_NAMESPACE, World};
use crate::syncenv::wait_for;
use crate::testenv::{ClusterPair, second_pair, shared_pair};

/// How long a test waits for the shards to settle on their rendezvous owners.
pub const SETTLE: Duration = Duration::from_secs(60);

/// One test at a time on the shared pair.
static TURN: Mutex<()> = Mutex::const_new(());
/// One test at a time on the second pair.
static SECOND_TURN: Mutex<()> = Mutex::const_new(());

/// Which of the binary's two cluster pairs a lab runs on: a test that mostly waits (a link
/// slowed for a minute) takes the second, so it runs beside the others instead of after them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// [`shared_pair`], where every other test of the binary runs.
    Shared,
    /// [`second_pair`], started when a test first asks for it.
    Second,
}

/// How a lab is set up: where, over which APIs, in which HA mode, with which Lease timings.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The pair it runs on.
    pub lane: Lane,
    /// The APIs bound.
    pub world: World,
    /// Sharded or leader-elected replicas.
    pub mode: HaMode,
    /// The replicas' Lease timings.
    pub timings: Timings,
}

impl Default for Setup {
    /// The sharding tests' lab: the shared pair, 30 APIs, sharded, [`TIMINGS`].
    fn default() -> Self {
        Self {
            lane: Lane::Shared,
            world: World::default(),
            mode: HaMode::Sharded,
            timings: TIMINGS,
        }
    }
}

impl Lane {
    /// The lane's pair.
    pub fn pair(self) -> anyhow::Result<&'static ClusterPair> {
        Ok(match self {
            Self::Shared => shared_pair()?,
            Self::Second => second_pair()?,
        })
    }

    fn turn(self) -> &'static Mutex<()> {
        match self {
            Self::Shared => &TURN,
            Self::Second => &SECOND_TURN,
        }
    }
}

/// A sharding test's pair, shared set-up, replicas and admin consumer client.
pub struct Lab {
    /// The binary's cluster pair.
    pub pair: &'static ClusterPair,
    /// The bound APIs and Connections.
    pub world: World,
    /// This test's replicas.
    pub replicas: Replicas,
    /// Consumer admin client.
    pub consumer: Client,
    _turn: MutexGuard<'static, ()>,
}

impl Lab {
    /// Waits for this test's turn, installs the shared set-up, starts `count` replicas named
    /// `<name>-<i>` with the admin identity and connects both Connections.
    pub async fn start(
        binary: std::path::PathBuf,
        name: &str,
        count: usize,
    ) -> anyhow::Result<Self> {
        let replicas = (0..count).map(|i| (format!("{name}-{i}"), None)).collect();
        Self::start_in(Setup::default(), binary, name, replicas).await
    }

    /// [`Lab::start`] as `setup` says: `replicas` names each replica and, if it does not use
    /// the admin's, the consumer kubeconfig it runs with (one through a fault proxy).
    pub async fn start_in(
        setup: Setup,
        binary: std::path::PathBuf,
        name: &str,
        replicas: Vec<(String, Option<std::path::PathBuf>)>,
    ) -> anyhow::Result<Self> {
        let Setup {
            lane,
            world,
            mode,
            timings,
        } = setup;
        let turn = lane.turn().lock().await;
        let pair = lane.pair()?;
        world.install(pair).await?;
        let dir = pair.root().join("sharding").join(name);
        let mut lab = Self {
            pair,
            world,
            replicas: Replicas::in_mode(binary, &dir, timings, mode)?,
            consumer: pair.consumer.client().await?,
            _turn: turn,
        };
        for (identity, kubeconfig) in replicas {
            lab.start_replica(&identity, kubeconfig.as_deref()).await?;
        }
        lab.world.connect(pair).await?;
        Ok(lab)
    }

    /// Starts replica `identity`, as the consumer admin or with the given kubeconfig.
    pub async fn start_replica(
        &mut self,
        identity: &str,
        kubeconfig: Option<&Path>,
    ) -> anyhow::Result<()> {
        let admin = self.pair.consumer.admin().kubeconfig_path();
        self.replicas
            .start(identity, kubeconfig.unwrap_or(admin))
            .await
    }

    /// Waits until every shard is held by the replica rendezvous hashing assigns it among the
    /// running replicas, and returns the holders.
    pub async fn settled(&self) -> anyhow::Result<Holders> {
        let members = self.replicas.running();
        let keys = self.world.shard_keys();
        let what = format!(
            "the {} shards on their owners among {members:?}",
            keys.len()
        );
        wait_for(&what, SETTLE, || async {
            let holders =
                leases::holders(&leases::shard_leases(&self.consumer, LEASE_NAMESPACE).await?);
            let wrong = misplaced(&holders, &keys, &members);
            anyhow::ensure!(wrong.is_empty(), "not yet on their owners: {wrong:?}");
            Ok(Some(holders))
        })
        .await
    }

    /// Waits until each running replica runs syncers for exactly the API shards it holds (by
    /// its log) and its `kbind_shards_owned{kind="api"}` says as many.
    pub async fn syncers_follow_the_shards(&self) -> anyhow::Result<()> {
        let api_keys = self.world.api_keys();
        wait_for(
            "each replica's syncers to be its API shards",
            SETTLE,
            || async {
                let holders =
                    leases::holders(&leases::shard_leases(&self.consumer, LEASE_NAMESPACE).await?);
                for identity in self.replicas.running() {
                    let replica = self.replicas.get(&identity)?;
                    let held: BTreeSet<String> = holders
                        .iter()
                        .filter(|(key, holder)| {
                            api_keys.contains(*key) && holder.as_deref() == Some(identity.as_str())
                        })
                        .map(|(key, _)| key.clone())
                        .collect();
                    let running = open_keys(&replica.intervals(Kind::Syncer)?);
                    anyhow::ensure!(
                        running == held,
                        "{identity} runs syncers {running:?} but holds API shards {held:?}"
                    );
                    let owned = replica.metric("kbind_shards_owned{kind=\"api\"}").await?;
                    anyhow::ensure!(
                        owned == held.len() as f64,
                        "{identity}: kbind_shards_owned{{kind=\"api\"}} {owned}, holds {}",
                        held.len()
                    );
                }
                Ok(Some(()))
            },
        )
        .await
    }

    /// Runs `kubectl kbind status -o json` (the binary `kubectl_kbind`) as the consumer admin
    /// and fails unless it names, for both Connections and every bound API, the holder the
    /// shard Leases name in `holders`.
    pub async fn status_names_the_holders(
        &self,
        kubectl_kbind: &Path,
        holders: &Holders,
    ) -> anyhow::Result<()> {
        let admin = self.pair.consumer.admin().kubeconfig_path();
        let output = tokio::process::Command::new(kubectl_kbind)
            .arg("--kubeconfig")
            .arg(admin)
            .args([
                "status",
                "--konnector-namespace",
                LEASE_NAMESPACE,
                "-o",
                "json",
            ])
            .env_remove("KUBECONFIG")
            .output()
            .await?;
        let report: serde_json::Value =
            serde_json::from_slice(&output.stdout).with_context(|| {
                format!(
                    "status printed no JSON: {}",
                    String::from_utf8_lossy(&output.stderr)
                )
            })?;
        let mut named = BTreeMap::new();
        for connection in report["connections"].as_array().into_iter().flatten() {
            let Some(name) = connection["name"].as_str() else {
                continue;
            };
            named.insert(name.to_string(), connection["shard"]["holder"].clone());
            for api in connection["apis"].as_array().into_iter().flatten() {
                if let Some(api_name) = api["name"].as_str() {
                    named.insert(format!("{name}/{api_name}"), api["shard"]["holder"].clone());
                }
            }
        }
        for key in self.world.shard_keys() {
            let holder = holders.get(&key).cloned().flatten();
            let says = named.get(&key);
            anyhow::ensure!(
                says.and_then(|v| v.as_str()) == holder.as_deref(),
                "status says {key} runs on {says:?}, its Lease names {holder:?}"
            );
        }
        Ok(())
    }

    /// The shards held now by `identity`.
    pub fn held_by(holders: &Holders, identity: &str) -> BTreeSet<String> {
        holders
            .iter()
            .filter(|(_, holder)| holder.as_deref() == Some(identity))
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// The owner rendezvous hashing gives each shard among `members`.
    pub fn assignment(&self, members: &BTreeSet<String>) -> BTreeMap<String, Option<String>> {
        let keys = self.world.shard_keys();
        keys.into_iter()
            .map(|key| {
                let owner = assigned(members, &key).map(str::to_string);
                (key, owner)
            })
            .collect()
    }

    /// Ends a test with the `result` of its body: stops the replicas whatever it came to
    /// (releasing their Leases for the next test); a failure carries every replica's log tail
    /// and the pair's report.
    pub async fn finish<T>(mut self, result: anyhow::Result<T>) -> anyhow::Result<T> {
        let report = self.replicas.report();
        let stopped = self.replicas.stop_all().await;
        let value =
            result.map_err(|e| anyhow::anyhow!("{e:#}\n{report}\n{}", self.pair.report()))?;
        stopped?;
        Ok(value)
    }
}
