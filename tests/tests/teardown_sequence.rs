//! Deleting the Connection last, end to end: the three-command teardown (binding, Connection,
//! credential Secret) against the real manager (Connection controller, binding controllers,
//! syncers), in its own test binary so that its konnector handles every binding of the pair
//! without meeting the per-test stacks of `teardown.rs`.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kbind_tests::fixtures::{
    SECRET_NAMESPACE, connect, has_condition, install_crd, shared_konnector, wait_connection,
    widget_crd,
};
use kbind_tests::syncenv::related::{entry, put_secret, wait_secret};
use kbind_tests::syncenv::{ensure_namespace, wait_for};
use kbind_tests::testenv::shared_pair;
use konnector::api::names::SYNCER_FINALIZER;
use konnector::api::{
    ApiReference, Binding, BindingSpec, ConflictPolicy, Connection, ConnectionReference,
    RelatedDirection, RelatedResourceKind, SchemaPolicy,
};
use kube::api::{DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, ResourceExt};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

/// The teardown sequence against the real manager (Connection controller included):
/// `delete binding` → `delete connection` → `delete secret`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teardown_in_order_deletes_copies_and_releases_credentials_keeping_the_rest()
-> anyhow::Result<()> {
    let pair = shared_pair()?;
    shared_konnector(pair)?;
    let name = "td-full";
    let ns = "td-full-ns";
    let group = "td-full.e2e.kbind.io";
    let provider = pair.provider.client().await?;
    let consumer = pair.consumer.client().await?;
    pair.diagnose(async {
        install_crd(&provider, &widget_crd(group, "Gadget", true)?).await?;
        connect(
            &consumer,
            &pair.provider,
            name,
            SchemaPolicy::default(),
            false,
        )
        .await?;
        wait_connection(&consumer, name, "Ready", |c| {
            has_condition(c, "Ready", "True", "AsExpected")
        })
        .await?;
        ensure_namespace(&consumer, ns).await?;
        put_secret(&provider, ns, "creds", &[], &[("k", "v")], None).await?;
        let binding = Binding::new(
            name,
            BindingSpec {
                connection_ref: ConnectionReference { name: name.into() },
                apis: vec![ApiReference {
                    name: format!("gadgets.{group}"),
                }],
                conflict_policy: ConflictPolicy::Fail,
                related_resources: vec![entry(
                    RelatedResourceKind::Secrets,
                    RelatedDirection::FromProvider,
                    &["creds"],
                    &[],
                )],
            },
        );
        let bindings = Api::<Binding>::namespaced(consumer.clone(), ns);
        bindings.create(&PostParams::default(), &binding).await?;
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", "Gadget"));
        let consumer_gadgets = Api::<DynamicObject>::namespaced_with(consumer.clone(), ns, &ar);
        let provider_gadgets = Api::<DynamicObject>::namespaced_with(provider.clone(), ns, &ar);
        let gadget: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{group}/v1"), "kind": "Gadget",
            "metadata": {"name": "g", "namespace": ns}, "spec": {},
        }))?;
        wait_for("the Gadget created on the consumer", WAIT, || async {
            Ok(consumer_gadgets
                .create(&PostParams::default(), &gadget)
                .await
                .ok())
        })
        .await?;
        wait_for("the provider copy", WAIT, || async {
            Ok(provider_gadgets.get_opt("g").await?)
        })
        .await?;
        wait_secret(&consumer, ns, "creds").await?;

        // 1. kubectl -n ns delete bindings.core.kbind.io <name>
        bindings.delete(name, &DeleteParams::default()).await?;
        wait_for("the Binding gone", WAIT, || async {
            Ok(bindings.get_opt(name).await?.is_none().then_some(()))
        })
        .await?;
        // 2. kubectl delete connection <name>
        let connections = Api::<Connection>::all(consumer.clone());
        connections.delete(name, &DeleteParams::default()).await?;
        wait_for("the Connection gone", WAIT, || async {
            Ok(connections.get_opt(name).await?.is_none().then_some(()))
        })
        .await?;
        // 3. kubectl -n kbind delete secret <name>: released, so it goes.
        let secrets = Api::<Secret>::namespaced(consumer.clone(), SECRET_NAMESPACE);
        secrets.delete(name, &DeleteParams::default()).await?;
        wait_for("the credential Secret gone", WAIT, || async {
            Ok(secrets.get_opt(name).await?.is_none().then_some(()))
        })
        .await?;

        // Provider: the instance copy is gone; the namespace and the heartbeat Lease remain;
        // the related source is kept.
        anyhow::ensure!(provider_gadgets.get_opt("g").await?.is_none(), "copy left");
        anyhow::ensure!(
            Api::<Namespace>::all(provider.clone())
                .get_opt(ns)
                .await?
                .is_some(),
            "provider namespace removed"
        );
        let leases = Api::<Lease>::all(provider.clone())
            .list(&Default::default())
            .await?;
        anyhow::ensure!(
            leases
                .items
                .iter()
                .any(|l| l.name_any().starts_with(&format!("{name}-"))),
            "heartbeat Lease removed"
        );
        anyhow::ensure!(
            Api::<Secret>::namespaced(provider.clone(), ns)
                .get_opt("creds")
                .await?
                .is_some(),
            "related source deleted"
        );
        // Consumer: the related copy is gone; the CRD and the instance remain, released.
        anyhow::ensure!(
            Api::<Secret>::namespaced(consumer.clone(), ns)
                .get_opt("creds")
                .await?
                .is_none(),
            "related copy left"
        );
        let g = consumer_gadgets.get("g").await?;
        anyhow::ensure!(
            !g.finalizers().iter().any(|f| f == SYNCER_FINALIZER),
            "instance finalizer kept"
        );
        anyhow::Ok(())
    })
    .await
}
