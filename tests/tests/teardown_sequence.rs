//! Deleting the Connection last, end to end: the three-command teardown (binding, Connection,
//! credential Secret) against the real manager (Connection controller, binding controllers,
//! syncers), in its own test binary so that its konnector handles every binding of the pair
//! without meeting the per-test stacks of `teardown.rs`.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kbind_tests::fixtures::{SECRET_NAMESPACE, connect, shared_konnector, wait_ready};
use kbind_tests::syncenv::related::{put_plain_secret, wait_secret};
use kbind_tests::syncenv::remains::Left::{Gone, Kept, Released};
use kbind_tests::syncenv::remains::{delete_gone, expect_left, kind};
use kbind_tests::syncenv::{TestApi, cluster_uid, ensure_namespace, wait_for};
use kbind_tests::testenv::shared_pair;
use konnector::api::names::{DEFAULT_HEARTBEAT_NAMESPACE, heartbeat_lease_name};
use konnector::api::{Binding, Connection, SchemaPolicy};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

/// The teardown sequence against the real manager (Connection controller included):
/// `delete binding` → `delete connection` → `delete secret`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teardown_in_order_deletes_copies_and_releases_credentials_keeping_the_rest()
-> anyhow::Result<()> {
    let pair = shared_pair()?;
    shared_konnector(pair)?;
    let (name, ns) = ("td-full", "td-full-ns");
    let api = TestApi::namespaced("td-full.e2e.kbind.io");
    let provider = pair.provider.client().await?;
    let consumer = pair.consumer.client().await?;
    pair.diagnose(async {
        api.install_on_provider(&provider).await?;
        connect(
            &consumer,
            &pair.provider,
            name,
            SchemaPolicy::default(),
            false,
        )
        .await?;
        wait_ready(&consumer, name).await?;
        put_plain_secret(&provider, ns, "creds", &[]).await?;
        let binding = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "connectionRef": {"name": name},
                "apis": [{"name": api.name()}],
                "relatedResources": [{
                    "resource": "secrets", "direction": "FromProvider",
                    "selector": {"names": ["creds"]},
                }],
            },
        }))?;
        ensure_namespace(&consumer, ns).await?;
        Api::<Binding>::namespaced(consumer.clone(), ns)
            .create(&PostParams::default(), &binding)
            .await?;
        wait_for("the instance created on the consumer", WAIT, || async {
            Ok(api.create(&consumer, Some(ns), "g", json!({})).await.ok())
        })
        .await?;
        let copies = api.api(&provider, Some(ns));
        wait_for("the provider copy", WAIT, || async {
            Ok(copies.get_opt("g").await?)
        })
        .await?;
        wait_secret(&consumer, ns, "creds").await?;

        // kubectl -n ns delete bindings.core.kbind.io <name>; kubectl delete connection
        // <name>; kubectl -n kbind delete secret <name>: released, so it goes.
        delete_gone(&consumer, kind::<Binding>(), Some(ns), name).await?;
        delete_gone(&consumer, kind::<Connection>(), None, name).await?;
        delete_gone(&consumer, kind::<Secret>(), Some(SECRET_NAMESPACE), name).await?;

        // Provider: the instance copy is gone; the namespace, the heartbeat Lease and the
        // related source remain. Consumer: the related copy is gone; the instance remains,
        // released.
        let lease = heartbeat_lease_name(name, &cluster_uid(&consumer).await?);
        expect_left(&[
            (&provider, api.resource(), Some(ns), "g", Gone),
            (&provider, kind::<Namespace>(), None, ns, Kept),
            (
                &provider,
                kind::<Lease>(),
                Some(DEFAULT_HEARTBEAT_NAMESPACE),
                &lease,
                Kept,
            ),
            (&provider, kind::<Secret>(), Some(ns), "creds", Kept),
            (&consumer, kind::<Secret>(), Some(ns), "creds", Gone),
            (&consumer, api.resource(), Some(ns), "g", Released),
        ])
        .await
    })
    .await
}
