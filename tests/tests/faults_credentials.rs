//! Fault: the Connection's kubeconfig Secret rotated, mid-sync, to the admin kubeconfig of a
//! third cluster that serves and exports the same API. The real Connection controller reports
//! `ClusterIdentityChanged` and nothing reaches the third cluster (no Widget, no namespace, no
//! kbind Lease); rotated back, the 300 instances converge one to one.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kbind_tests::faults::Sides;
use kbind_tests::fixtures::{
    has_condition, private_cluster, put_kubeconfig_secret, shared_konnector, unique,
    wait_connection, wait_ready,
};
use kbind_tests::syncenv::{TestApi, stays};
use kbind_tests::testenv::shared_pair;
use konnector::api::names::MANAGED_LABEL;
use kube::Api;
use kube::api::ListParams;

const INSTANCES: usize = 300;
const ROTATE_AT: usize = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_to_another_clusters_kubeconfig_mid_sync_writes_nothing_there()
-> anyhow::Result<()> {
    let pair = shared_pair()?;
    shared_konnector(pair)?;
    let third = tokio::task::spawn_blocking(|| private_cluster("third")).await??;
    pair.diagnose(async {
        let name = unique("faults-rotate");
        let sides = Sides::on(pair, TestApi::namespaced("rotate.faults.kbind.io"), &name).await?;
        let (consumer, other) = (&sides.consumer, third.client().await?);
        // The other cluster serves and exports the same API: only the identity pin stops
        // writes there.
        sides.api.install_on_provider(&other).await?;
        sides.connect(&pair.provider, &name).await?;
        let rotate = async || {
            put_kubeconfig_secret(consumer, &name, &third.admin().kubeconfig_yaml()?).await?;
            wait_connection(consumer, &name, "ClusterIdentityChanged", |c| {
                has_condition(c, "Ready", "False", "ClusterIdentityChanged")
            })
            .await
        };
        sides.fault_mid_sync(INSTANCES, ROTATE_AT, rotate).await?;
        let (widgets, leases) = (sides.api.all(&other), Api::<Lease>::all(other.clone()));
        let namespaces = Api::<Namespace>::all(other);
        let managed = ListParams::default().labels(MANAGED_LABEL);
        stays("nothing written there", Duration::from_secs(5), || async {
            let widgets = widgets.list_metadata(&Default::default()).await?.items;
            let leases = leases.list_metadata(&managed).await?.items;
            let namespace = namespaces.get_opt(&name).await?;
            Ok(widgets.is_empty() && namespace.is_none() && leases.is_empty())
        })
        .await?;

        put_kubeconfig_secret(consumer, &name, &pair.provider.admin().kubeconfig_yaml()?).await?;
        wait_ready(consumer, &name).await?;
        sides.converged(INSTANCES).await
    })
    .await
}
