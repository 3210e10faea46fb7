//! Helpers for the fault tests (`tests/tests/faults_*.rs`): creating many instances, and the
//! convergence check every fault test ends with: count both sides and compare identities.
//!
//! ```text
//! consumer instances ──(name)──▶ provider copies
//!   exactly one copy per instance, carrying that instance's UID marker (nothing lost)
//!   no copy without an instance, no UID marker twice (nothing duplicated)
//!   every instance: one syncer finalizer, no deletionTimestamp (nothing stuck)
//! ```

pub mod policy;
pub mod process;
pub mod schema_module;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::Context as _;
use futures::{StreamExt, TryStreamExt};
use konnector::api::names::{CONSUMER_OBJECT_UID_ANNOTATION, MANAGED_LABEL, SYNCER_FINALIZER};
use konnector::api::{ApiReference, Binding, BindingSpec, ConditionType, ConnectionReference};
use konnector::conditions::is_true;
use kube::api::ListParams;
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::syncenv::{TestApi, wait_for};

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

/// Waits until the provider holds exactly `expected` managed copies in `namespace`.
pub async fn wait_copies(
    api: &TestApi,
    provider: &Client,
    namespace: &str,
    expected: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    wait_for(
        &format!("{expected} provider copies in {namespace}"),
        timeout,
        || async {
            let n = count_copies(api, provider, namespace).await?;
            Ok((n == expected).then_some(()))
        },
    )
    .await
}

/// What [`check_converged`] counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Convergence {
    /// Consumer instances in the namespace.
    pub consumer: usize,
    /// Provider objects in the namespace (managed or not).
    pub provider: usize,
    /// Distinct consumer-object UID markers on the provider.
    pub distinct_markers: usize,
}

/// Counts both sides of `namespace` and fails unless they correspond one to one: every consumer
/// instance has exactly one provider copy carrying its UID, there is no other provider object,
/// no UID marker appears twice, every instance carries the syncer finalizer exactly once and
/// none is being deleted.
pub async fn check_converged(
    api: &TestApi,
    consumer: &Client,
    provider: &Client,
    namespace: &str,
) -> anyhow::Result<Convergence> {
    let params = ListParams::default();
    let instances = api
        .api(consumer, Some(namespace))
        .list(&params)
        .await?
        .items;
    let copies = api
        .api(provider, Some(namespace))
        .list(&params)
        .await?
        .items;
    let mut by_name = BTreeMap::new();
    for instance in &instances {
        let name = instance.name_any();
        anyhow::ensure!(
            instance.metadata.deletion_timestamp.is_none(),
            "consumer instance {name} is stuck deleting"
        );
        let finalizers = instance
            .finalizers()
            .iter()
            .filter(|f| *f == SYNCER_FINALIZER)
            .count();
        anyhow::ensure!(
            finalizers == 1,
            "consumer instance {name} carries the syncer finalizer {finalizers} times"
        );
        by_name.insert(name, instance.uid().context("instance without uid")?);
    }
    let mut markers = BTreeSet::new();
    for copy in &copies {
        let name = copy.name_any();
        let marker = copy
            .annotations()
            .get(CONSUMER_OBJECT_UID_ANNOTATION)
            .with_context(|| format!("provider object {name} has no object UID marker"))?;
        anyhow::ensure!(
            by_name.get(&name) == Some(marker),
            "provider copy {name} carries marker {marker}, the consumer instance has {:?}",
            by_name.get(&name)
        );
        anyhow::ensure!(
            markers.insert(marker.clone()),
            "marker {marker} appears twice"
        );
    }
    anyhow::ensure!(
        copies.len() == instances.len(),
        "{} consumer instances but {} provider objects",
        instances.len(),
        copies.len()
    );
    Ok(Convergence {
        consumer: instances.len(),
        provider: copies.len(),
        distinct_markers: markers.len(),
    })
}

/// Creates Binding `widgets` in `namespace` for `apis` through Connection `connection`
/// (no stack label: for a konnector that handles every binding) and waits until it is Ready.
pub async fn create_ready_binding(
    consumer: &Client,
    namespace: &str,
    connection: &str,
    apis: &[&TestApi],
    timeout: Duration,
) -> anyhow::Result<()> {
    create_binding(consumer, namespace, connection, apis).await?;
    wait_binding_ready(consumer, namespace, timeout).await
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
