//! Helpers for the fault tests (`tests/tests/faults_*.rs`). [`Sides`] carries the frame they
//! share: instances created, a fault injected mid-sync and cleared, then the convergence
//! check every fault test ends with, counting both sides and comparing identities:
//!
//! ```text
//! consumer instances ──(name)──▶ provider copies
//!   exactly one copy per instance, carrying that instance's UID marker (nothing lost)
//!   no copy without an instance, so no UID marker twice (nothing duplicated)
//!   every instance: one syncer finalizer, no deletionTimestamp (nothing stuck)
//! ```

pub mod policy;
pub mod process;
pub mod refusals;
pub mod schema_module;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use futures::{StreamExt, TryStreamExt};
use konnector::api::names::{CONSUMER_OBJECT_UID_ANNOTATION, MANAGED_LABEL, SYNCER_FINALIZER};
use konnector::api::{ApiReference, Binding, BindingSpec, ConditionType, ConnectionReference};
use konnector::conditions::is_true;
use kube::api::{DynamicObject, ListParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::fixtures::connect_ready;
use crate::syncenv::{Scenario, TestApi, event_note, stays, synced_condition, wait_for};
use crate::testenv::{Cluster, ClusterPair};

/// How long a fault test waits for the konnector: 1 000 instances through a fault included.
pub const FAULT_WAIT: Duration = Duration::from_secs(300);

/// How many creates run at once when a test makes many instances.
pub const CREATE_PARALLELISM: usize = 16;

/// Creates instances `<prefix>-<i>` for every `i` in `indexes` in `namespace`, `spec: {index: i}`.
pub async fn create_instances(
    api: &TestApi,
    consumer: &Client,
    namespace: &str,
    prefix: &str,
    indexes: std::ops::Range<usize>,
) -> anyhow::Result<()> {
    futures::stream::iter(indexes)
        .map(|i| async move {
            api.create(
                consumer,
                Some(namespace),
                &instance_name(prefix, i),
                json!({ "index": i }),
            )
            .await
        })
        .buffer_unordered(CREATE_PARALLELISM)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// The name of instance `i`.
pub fn instance_name(prefix: &str, i: usize) -> String {
    format!("{prefix}-{i:05}")
}

/// How many managed copies of `api` the provider holds in `namespace`.
pub async fn count_copies(
    api: &TestApi,
    provider: &Client,
    namespace: &str,
) -> anyhow::Result<usize> {
    let params = ListParams::default().labels(MANAGED_LABEL);
    Ok(api
        .api(provider, Some(namespace))
        .list_metadata(&params)
        .await?
        .items
        .len())
}

/// One namespace of a bound API on both clusters: what a fault test creates in and counts.
#[derive(Clone)]
pub struct Sides {
    /// The bound API.
    pub api: TestApi,
    /// Consumer admin client.
    pub consumer: Client,
    /// Provider admin client.
    pub provider: Client,
    /// The namespace of the instances and of their copies.
    pub namespace: String,
}

impl Sides {
    /// A scenario's main API in its namespace.
    pub fn of(s: &Scenario) -> Self {
        Self {
            api: s.api.clone(),
            consumer: s.consumer.clone(),
            provider: s.provider.clone(),
            namespace: s.ns().to_string(),
        }
    }

    /// `api` in `namespace` of `pair`, through the admin clients.
    pub async fn on(pair: &ClusterPair, api: TestApi, namespace: &str) -> anyhow::Result<Self> {
        Ok(Self {
            api,
            consumer: pair.consumer.client().await?,
            provider: pair.provider.client().await?,
            namespace: namespace.to_string(),
        })
    }

    /// The same API and namespace in another namespace, for a test that uses several.
    pub fn in_namespace(&self, namespace: &str) -> Self {
        Self {
            namespace: namespace.to_string(),
            ..self.clone()
        }
    }

    /// For a konnector that runs the Connection controller itself: exports the API on the
    /// provider, connects Connection `connection` to `provider`'s admin kubeconfig, waits until
    /// it is Ready, then binds the namespace (Binding `widgets`) and waits until that is Ready.
    pub async fn connect(&self, provider: &Cluster, connection: &str) -> anyhow::Result<()> {
        self.api.install_on_provider(&self.provider).await?;
        connect_ready(&self.consumer, provider, connection).await?;
        create_binding(&self.consumer, &self.namespace, connection, &[&self.api]).await?;
        wait_binding_ready(&self.consumer, &self.namespace, FAULT_WAIT).await
    }

    /// The instances on the consumer.
    pub fn instances(&self) -> Api<DynamicObject> {
        self.api.api(&self.consumer, Some(&self.namespace))
    }

    /// The copies on the provider.
    pub fn copies(&self) -> Api<DynamicObject> {
        self.api.api(&self.provider, Some(&self.namespace))
    }

    /// Creates instance `name` with `spec`.
    pub async fn create(&self, name: &str, spec: Value) -> anyhow::Result<DynamicObject> {
        let ns = Some(self.namespace.as_str());
        self.api.create(&self.consumer, ns, name, spec).await
    }

    /// Creates instances `<prefix>-<i>` ([`create_instances`]).
    pub async fn create_many(
        &self,
        prefix: &str,
        indexes: std::ops::Range<usize>,
    ) -> anyhow::Result<()> {
        create_instances(&self.api, &self.consumer, &self.namespace, prefix, indexes).await
    }

    /// Waits until the provider holds exactly `expected` managed copies.
    pub async fn wait_copies(&self, expected: usize) -> anyhow::Result<()> {
        let what = format!("{expected} provider copies in {}", self.namespace);
        wait_for(&what, FAULT_WAIT, || async {
            let n = count_copies(&self.api, &self.provider, &self.namespace).await?;
            Ok((n == expected).then_some(()))
        })
        .await
    }

    /// Creates instances `w-0..total` in the background and runs `fault` once the provider
    /// holds `at` copies, so that the fault strikes mid-sync; returns `fault`'s value once every
    /// create is done.
    pub async fn fault_mid_sync<T>(
        &self,
        total: usize,
        at: usize,
        fault: impl AsyncFnOnce() -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let creating = {
            let sides = self.clone();
            tokio::spawn(async move { sides.create_many("w", 0..total).await })
        };
        let what = format!("{at} copies before the fault");
        wait_for(&what, FAULT_WAIT, || async {
            let n = count_copies(&self.api, &self.provider, &self.namespace).await?;
            Ok((n >= at).then_some(()))
        })
        .await?;
        let value = fault().await?;
        creating.await??;
        Ok(value)
    }

    /// Waits until the provider holds `expected` copies and both sides correspond one to one
    /// with `expected` instances: nothing lost, duplicated or stuck.
    pub async fn converged(&self, expected: usize) -> anyhow::Result<()> {
        self.wait_copies(expected).await?;
        let what = format!("{expected} instances and copies one to one");
        wait_for(&what, FAULT_WAIT, || async {
            let n = self.check_converged().await?;
            anyhow::ensure!(n == expected, "{n} consumer instances");
            Ok(Some(()))
        })
        .await
    }

    /// Counts both sides and fails unless they correspond one to one: every instance has
    /// exactly one provider object, carrying its UID (so no marker twice), there is no other
    /// provider object, every instance carries the syncer finalizer exactly once and none is
    /// being deleted. Returns how many instances there are.
    async fn check_converged(&self) -> anyhow::Result<usize> {
        let instances = self.instances().list(&ListParams::default()).await?.items;
        let copies = self.copies().list(&ListParams::default()).await?.items;
        let mut uids = BTreeMap::new();
        for instance in &instances {
            let (name, deleting) = (instance.name_any(), &instance.metadata.deletion_timestamp);
            let finalizers = instance.finalizers();
            let finalizers = finalizers.iter().filter(|f| *f == SYNCER_FINALIZER).count();
            anyhow::ensure!(
                deleting.is_none() && finalizers == 1,
                "consumer instance {name}: deleting since {deleting:?}, {finalizers} syncer finalizer(s)"
            );
            uids.insert(name, instance.uid().context("instance without uid")?);
        }
        for copy in &copies {
            let name = copy.name_any();
            let marker = copy.annotations().get(CONSUMER_OBJECT_UID_ANNOTATION);
            anyhow::ensure!(
                marker.is_some() && uids.get(&name) == marker,
                "provider object {name} carries marker {marker:?}, the instance {:?}",
                uids.get(&name)
            );
        }
        let (n, m) = (instances.len(), copies.len());
        anyhow::ensure!(n == m, "{n} consumer instances but {m} provider objects");
        Ok(n)
    }

    /// Waits for a `reason` Warning Event on instance `name` and fails unless its note says
    /// `says`.
    pub async fn warned(&self, name: &str, reason: &str, says: &str) -> anyhow::Result<()> {
        let at = (self.namespace.as_str(), name);
        let note = event_note(&self.consumer, at, reason, Some("Warning"), FAULT_WAIT).await?;
        anyhow::ensure!(
            note.contains(says),
            "{reason} on {name}, not {says:?}: {note}"
        );
        Ok(())
    }

    /// Waits until instance `name` has `Synced` with `status` and `reason`.
    pub async fn synced(&self, name: &str, status: &str, reason: &str) -> anyhow::Result<()> {
        let what = format!("Synced={status} {reason} on {name}");
        wait_for(&what, FAULT_WAIT, || async {
            let synced = synced_condition(&self.instances().get(name).await?);
            Ok(synced.filter(|c| c["status"] == status && c["reason"] == reason))
        })
        .await?;
        Ok(())
    }

    /// Fails if any of the instances `names` has or gets a provider copy within a few seconds.
    pub async fn never_copied(&self, names: &[&str]) -> anyhow::Result<()> {
        let what = format!("no copy of {names:?}");
        stays(&what, Duration::from_secs(3), || async {
            for name in names {
                if self.copies().get_opt(name).await?.is_some() {
                    return Ok(false);
                }
            }
            Ok(true)
        })
        .await
    }
}

/// Writes a ConfigMap on both clusters every 100 ms until aborted, so their etcd revisions
/// move on while the watched resources stay quiet: a watch restarted after this resumes from
/// a revision its apiserver no longer holds (`410 Gone`) and lists again.
pub async fn move_revisions_on(consumer: Client, provider: Client) {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Patch, PatchParams};
    let apply = PatchParams::apply(crate::syncenv::TEST_MANAGER).force();
    for tick in 0u64.. {
        for client in [&consumer, &provider] {
            let cm = serde_json::json!({ "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": "revisions" }, "data": { "tick": tick.to_string() } });
            let api = kube::Api::<ConfigMap>::namespaced(client.clone(), "default");
            let _ = api.patch("revisions", &apply, &Patch::Apply(&cm)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Restarts both clusters of `pair`, one after the other, after [`move_revisions_on`] ran for
/// `churn`: every watch of the konnector has to list again. The watches come back at
/// kube-runtime's backoff, which grows while an apiserver is down (up to 30 s a step).
pub async fn force_relists(pair: &ClusterPair, churn: Duration) -> anyhow::Result<()> {
    let (consumer, provider) = (pair.consumer.client().await?, pair.provider.client().await?);
    let moving = tokio::spawn(move_revisions_on(consumer, provider));
    tokio::time::sleep(churn).await;
    let down = Duration::from_secs(1);
    let restarted = async {
        restart(&pair.provider, down).await?;
        restart(&pair.consumer, down).await
    }
    .await;
    moving.abort();
    restarted
}

/// Stops `cluster`'s apiserver and etcd, waits `down`, and starts them again on the same data,
/// ports and credentials: an outage the konnector has to ride out.
pub async fn restart(cluster: &Cluster, down: Duration) -> anyhow::Result<()> {
    tokio::task::block_in_place(|| cluster.stop());
    tokio::time::sleep(down).await;
    Ok(tokio::task::block_in_place(|| cluster.start())?)
}

/// Creates Binding `widgets` in `namespace` for `apis` through Connection `connection`.
pub async fn create_binding(
    consumer: &Client,
    namespace: &str,
    connection: &str,
    apis: &[&TestApi],
) -> anyhow::Result<()> {
    crate::syncenv::ensure_namespace(consumer, namespace).await?;
    let binding = Binding::new(
        "widgets",
        BindingSpec {
            connection_ref: ConnectionReference {
                name: connection.to_string(),
            },
            apis: apis
                .iter()
                .map(|a| ApiReference { name: a.name() })
                .collect(),
            conflict_policy: Default::default(),
            related_resources: Vec::new(),
        },
    );
    kube::Api::<Binding>::namespaced(consumer.clone(), namespace)
        .create(&kube::api::PostParams::default(), &binding)
        .await
        .with_context(|| format!("creating Binding {namespace}/widgets"))?;
    Ok(())
}

/// Waits until Binding `widgets` in `namespace` is Ready.
pub async fn wait_binding_ready(
    consumer: &Client,
    namespace: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let bindings: kube::Api<Binding> = kube::Api::namespaced(consumer.clone(), namespace);
    wait_for(
        &format!("Binding {namespace}/widgets Ready"),
        timeout,
        || async {
            let b = bindings.get("widgets").await?;
            Ok(b.status
                .as_ref()
                .is_some_and(|s| is_true(&s.conditions, ConditionType::Ready))
                .then_some(()))
        },
    )
    .await
}
