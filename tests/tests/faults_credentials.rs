//! Fault: the Connection's kubeconfig Secret rotated, mid-sync, to a kubeconfig of another
//! cluster: nothing is written there.
//!
//! Injected: while 300 consumer instances are being created and synced by the in-process
//! konnector (all controllers, the real Connection controller included), the Secret is
//! rewritten with the admin kubeconfig of a third cluster, which serves and exports the same
//! API. After the Connection reports `ClusterIdentityChanged`, the Secret is rotated back.
//!
//! Counted on the third cluster: Widgets in every namespace (0), the instances' namespace
//! (absent), kbind-managed Leases (0). Then, back on the right provider: 300 instances, 300
//! copies, 300 distinct UID markers ([`check_converged`]).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kbind_tests::faults::{
    check_converged, count_copies, create_instances, create_ready_binding, wait_copies,
};
use kbind_tests::fixtures::{
    connect, has_condition, private_cluster, put_kubeconfig_secret, shared_konnector, unique,
    wait_connection,
};
use kbind_tests::syncenv::{TestApi, stays, wait_for};
use kbind_tests::testenv::shared_pair;
use konnector::api::names::MANAGED_LABEL;
use konnector::api::{SchemaPolicy, SchemaSource};
use kube::api::ListParams;
use kube::{Api, ResourceExt};

const INSTANCES: usize = 300;
const ROTATE_AFTER: usize = 50;
const WAIT: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_to_another_clusters_kubeconfig_mid_sync_writes_nothing_there()
-> anyhow::Result<()> {
    let pair = shared_pair()?;
    shared_konnector(pair)?;
    let third = tokio::task::spawn_blocking(|| private_cluster("third")).await??;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let provider = pair.provider.client().await?;
        let third_client = third.client().await?;
        let name = unique("faults-rotate");
        let ns = name.as_str();
        let api = TestApi::namespaced("rotate.faults.kbind.io");
        api.install_on_provider(&provider).await?;
        // The other cluster serves and exports the same API: only the identity pin stops
        // writes there.
        api.install_on_provider(&third_client).await?;
        let schema = SchemaPolicy {
            source: SchemaSource::Crd,
            ..SchemaPolicy::default()
        };
        connect(&consumer, &pair.provider, &name, schema, false).await?;
        wait_connection(&consumer, &name, "Ready", |c| {
            has_condition(c, "Ready", "True", "AsExpected")
        })
        .await?;
        create_ready_binding(&consumer, ns, &name, &[&api], WAIT).await?;

        let creating = {
            let (api, consumer, ns) = (api.clone(), consumer.clone(), name.clone());
            tokio::spawn(
                async move { create_instances(&api, &consumer, &ns, "w", 0..INSTANCES).await },
            )
        };
        wait_for("copies before the rotation", WAIT, || async {
            let n = count_copies(&api, &provider, ns).await?;
            Ok((n >= ROTATE_AFTER).then_some(()))
        })
        .await?;
        // Fault: the credentials now point at another cluster.
        put_kubeconfig_secret(&consumer, &name, &third.admin().kubeconfig_yaml()?).await?;
        wait_connection(&consumer, &name, "ClusterIdentityChanged", |c| {
            has_condition(c, "Ready", "False", "ClusterIdentityChanged")
        })
        .await?;
        creating.await??;
        stays(
            "nothing written to the other cluster",
            Duration::from_secs(5),
            || async {
                let widgets = api
                    .all(&third_client)
                    .list_metadata(&ListParams::default())
                    .await?;
                let namespace = Api::<Namespace>::all(third_client.clone())
                    .get_opt(ns)
                    .await?;
                let leases = Api::<Lease>::all(third_client.clone())
                    .list_metadata(&ListParams::default().labels(MANAGED_LABEL))
                    .await?;
                Ok(widgets.items.is_empty() && namespace.is_none() && leases.items.is_empty())
            },
        )
        .await?;
        let namespaces = Api::<Namespace>::all(third_client.clone())
            .list_metadata(&ListParams::default())
            .await?;
        println!(
            "third cluster after rotation: 0 Widgets, namespaces {:?}",
            namespaces
                .items
                .iter()
                .map(|n| n.name_any())
                .collect::<Vec<_>>()
        );

        // Back to the right provider: everything converges.
        put_kubeconfig_secret(&consumer, &name, &pair.provider.admin().kubeconfig_yaml()?).await?;
        wait_connection(&consumer, &name, "Ready", |c| {
            has_condition(c, "Ready", "True", "AsExpected")
        })
        .await?;
        wait_copies(&api, &provider, ns, INSTANCES, WAIT).await?;
        let counted = check_converged(&api, &consumer, &provider, ns).await?;
        println!("credential rotation: {counted:?}");
        assert_eq!(counted.distinct_markers, INSTANCES);
        anyhow::Ok(())
    })
    .await
}
