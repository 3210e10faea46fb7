//! Deleting the Connection last, end to end: the three-command teardown (binding, Connection,
//! credential Secret) against the real manager (Connection controller, binding controllers,
//! syncers), in its own test binary so that its konnector handles every binding of the pair
//! without meeting the per-test stacks of `teardown.rs`.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kbind_tests::fixtures::{connect, shared_konnector, wait_ready};
use kbind_tests::syncenv::related::{put_plain_secret, wait_secret};
use kbind_tests::syncenv::remains::Left::{Gone, Kept, Released};
use kbind_tests::syncenv::remains::{delete_gone, expect_left, kind, wait_left};
use kbind_tests::syncenv::{TestApi, WAIT, cluster_uid, ensure_namespace, wait_for};
use kbind_tests::testenv::shared_pair;
use konnector::api::names::heartbeat_lease_name;
use konnector::api::{Binding, Connection, SchemaPolicy};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

/// The teardown sequence against the real manager (Connection controller included):
/// `delete binding` → `delete connection` → `delete secret`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teardown_in_order_deletes_copies_and_releases_credentials_keeping_the_rest()
-> anyhow::Result<()> {
    let pair = shared_pair()?;
    shared_konnector(pair)?;
    let name = "td-full";
    let api = TestApi::namespaced("td-full.e2e.kbind.io");
    let provider = pair.provider.client().await?;
    let consumer = pair.consumer.client().await?;
    pair.diagnose(async {
        api.install_on_provider(&provider).await?;
        let schema = SchemaPolicy::default();
        connect(&consumer, &pair.provider, name, schema, false).await?;
        wait_ready(&consumer, name).await?;
        put_plain_secret(&provider, name, "creds", &[]).await?;
        let binding = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": name},
            "spec": {"connectionRef": {"name": name}, "apis": [{"name": api.name()}],
                "relatedResources": [{"resource": "secrets", "direction": "FromProvider",
                    "selector": {"names": ["creds"]}}]},
        }))?;
        ensure_namespace(&consumer, name).await?;
        Api::<Binding>::namespaced(consumer.clone(), name)
            .create(&PostParams::default(), &binding)
            .await?;
        wait_for("the instance created on the consumer", WAIT, || async {
            Ok(api.create(&consumer, Some(name), "g", json!({})).await.ok())
        })
        .await?;
        wait_left(&[(&provider, api.resource(), "td-full/g", Kept)]).await?;
        wait_secret(&consumer, name, "creds").await?;

        // kubectl -n td-full delete bindings.core.kbind.io td-full; kubectl delete connection
        // td-full; kubectl -n kbind delete secret td-full: released, so it goes.
        delete_gone(&consumer, kind::<Binding>(), "td-full/td-full").await?;
        delete_gone(&consumer, kind::<Connection>(), "td-full").await?;
        delete_gone(&consumer, kind::<Secret>(), "kbind/td-full").await?;

        // Provider: the instance copy is gone; the namespace, the heartbeat Lease and the
        // related source remain. Consumer: the related copy is gone; the instance remains,
        // released.
        let lease = heartbeat_lease_name(name, &cluster_uid(&consumer).await?);
        expect_left(&[
            (&provider, api.resource(), "td-full/g", Gone),
            (&provider, kind::<Namespace>(), "td-full", Kept),
            (&provider, kind::<Lease>(), &format!("kbind/{lease}"), Kept),
            (&provider, kind::<Secret>(), "td-full/creds", Kept),
            (&consumer, kind::<Secret>(), "td-full/creds", Gone),
            (&consumer, api.resource(), "td-full/g", Released),
        ])
        .await
    })
    .await
}
