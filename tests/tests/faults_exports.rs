//! A provider's change of exports never deletes anything, on either side: an API the provider
//! stops exporting is released (its sync stops, the consumer CRD, instances and provider copies
//! stay), and exporting it again resumes sync on the same copies.
//!
//! Both tests run the whole konnector (the Connection controller discovers the exports) on the
//! shared consumer; the autoBind test has a provider of its own, since autoBind binds every
//! API its provider exports.

use anyhow::ensure;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_tests::exports::{Exports, binding_until, released};
use kbind_tests::fixtures::{
    connect, connect_ready, crd_source, private_cluster, shared_konnector, unique, wait_ready,
};
use kbind_tests::syncenv::remains::Left::{Gone, Kept, Released};
use kbind_tests::syncenv::remains::{delete_gone, kind, wait_left};
use kbind_tests::syncenv::{
    TestApi, ensure_namespace, events_for, holds_syncer_finalizer, wait_for,
};
use kbind_tests::testenv::shared_pair;
use konnector::api::{
    ApiReference, Binding, BindingSpec, ClusterBinding, ConflictPolicy, ConnectionReference,
};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

/// Two test APIs in groups of their own, `<prefix>-a` and `<prefix>-b`.
fn two_apis(prefix: &str) -> [TestApi; 2] {
    ["a", "b"].map(|x| TestApi::namespaced(&format!("{prefix}-{x}.e2e.kbind.io")))
}

#[test]
fn unexport_every_api_under_autobind_releases_and_keeps_data() -> anyhow::Result<()> {
    kbind_tests::runtime()?.block_on(async {
        let pair = shared_pair()?;
        shared_konnector(pair)?;
        pair.diagnose(async {
            let cluster = tokio::task::spawn_blocking(|| private_cluster("exports")).await??;
            let provider = cluster.client().await?;
            let consumer = pair.consumer.client().await?;
            let name = unique("unexport-all");
            let apis = two_apis(&name);
            let both: Vec<&TestApi> = apis.iter().collect();
            let names: Vec<String> = apis.iter().map(TestApi::name).collect();
            for api in &apis {
                api.install_on_provider(&provider).await?;
            }
            connect(&consumer, &cluster, &name, crd_source(), true).await?;
            wait_ready(&consumer, &name).await?;
            let cluster_bindings: Api<ClusterBinding> = Api::all(consumer.clone());
            binding_until(&cluster_bindings, &name, "Ready", |s| {
                kbind_tests::syncenv::has(s, "Ready", "True", "AsExpected")
            })
            .await?;
            ensure_namespace(&consumer, &name).await?;
            let side = Exports {
                consumer: &consumer,
                provider: &provider,
                namespace: &name,
            };
            for api in &apis {
                side.create_copied(api, "x").await?;
            }
            side.create_copied(&apis[0], "y").await?;
            let before = side.uids(&both, "x").await?;
            let y_uid = side.uids(&both[..1], "y").await?;

            // The provider stops exporting both APIs.
            for api in &apis {
                api.set_exported(&provider, false).await?;
            }
            // Both released: nothing syncs, which Ready says for a reason no one must fix.
            let what = "both APIs released, Ready=False APIReleased";
            let auto = binding_until(&cluster_bindings, &name, what, |s| {
                released(&names)(s) && kbind_tests::syncenv::has(s, "Ready", "False", "APIReleased")
            })
            .await?;
            let listed: Vec<&str> = auto.spec.apis.iter().map(|a| a.name.as_str()).collect();
            ensure!(
                listed == names,
                "the ClusterBinding still lists both: {listed:?}"
            );
            let (x, y) = (format!("{name}/x"), format!("{name}/y"));
            let mut rows = Vec::new();
            for api in &apis {
                rows.push((
                    &consumer,
                    kind::<CustomResourceDefinition>(),
                    api.name(),
                    Kept,
                ));
                rows.push((&consumer, api.resource(), x.clone(), Released));
                rows.push((&provider, api.resource(), x.clone(), Kept));
            }
            let rows: Vec<_> = rows
                .iter()
                .map(|(c, k, p, l)| (*c, k.clone(), p.as_str(), *l))
                .collect();
            wait_left(&rows).await?;
            ensure!(
                side.uids(&both, "x").await? == before,
                "the provider copies are the same"
            );
            let events = events_for(&consumer, None, &name).await?;
            let warned = events.iter().any(|e| {
                e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some("APIReleased")
            });
            ensure!(
                warned,
                "a Warning APIReleased Event on the ClusterBinding: {events:?}"
            );

            // Deleting an instance meanwhile is not held by a finalizer; its copy stays.
            delete_gone(&consumer, apis[0].resource(), &y).await?;
            wait_left(&[(&provider, apis[0].resource(), &y, Kept)]).await?;
            ensure!(
                side.uids(&both[..1], "y").await? == y_uid,
                "y's copy is kept as it was"
            );

            // Exported again: sync resumes on the same copies.
            for api in &apis {
                api.set_exported(&provider, true).await?;
            }
            binding_until(&cluster_bindings, &name, "nothing released", released(&[])).await?;
            for api in &apis {
                side.spec_reaches_provider(api, "x", json!({"size": 2}))
                    .await?;
                let instances = side.instances(api);
                wait_for(
                    "x holding the syncer finalizer again",
                    kbind_tests::exports::WAIT,
                    || async {
                        Ok(holds_syncer_finalizer(&instances.get("x").await?).then_some(()))
                    },
                )
                .await?;
            }
            ensure!(
                side.uids(&both, "x").await? == before,
                "nothing was recreated"
            );
            wait_left(&[
                (&consumer, apis[0].resource(), &y, Gone),
                (&provider, apis[0].resource(), &y, Kept),
            ])
            .await
        })
        .await
    })
}

#[test]
fn unexport_one_of_two_keeps_the_other_syncing() -> anyhow::Result<()> {
    kbind_tests::runtime()?.block_on(async {
        let pair = shared_pair()?;
        shared_konnector(pair)?;
        pair.diagnose(async {
            let provider = pair.provider.client().await?;
            let consumer = pair.consumer.client().await?;
            let name = unique("unexport-one");
            let [kept, dropped] = two_apis(&name);
            for api in [&kept, &dropped] {
                api.install_on_provider(&provider).await?;
            }
            connect_ready(&consumer, &pair.provider, &name).await?;
            ensure_namespace(&consumer, &name).await?;
            let spec = BindingSpec {
                connection_ref: ConnectionReference { name: name.clone() },
                apis: [&kept, &dropped]
                    .map(|a| ApiReference { name: a.name() })
                    .to_vec(),
                conflict_policy: ConflictPolicy::Fail,
                related_resources: vec![],
            };
            let bindings: Api<Binding> = Api::namespaced(consumer.clone(), &name);
            bindings
                .create(&PostParams::default(), &Binding::new("both", spec))
                .await?;
            let side = Exports {
                consumer: &consumer,
                provider: &provider,
                namespace: &name,
            };
            for api in [&kept, &dropped] {
                side.create_copied(api, "x").await?;
            }
            let before = side.uids(&[&kept, &dropped], "x").await?;

            // The provider stops exporting one of the two.
            dropped.set_exported(&provider, false).await?;
            let one = [dropped.name()];
            let binding = binding_until(&bindings, "both", "one API released", |s| {
                released(&one)(s) && kbind_tests::syncenv::has(s, "Ready", "True", "AsExpected")
            })
            .await?;
            ensure!(binding.spec.apis.len() == 2, "the Binding is untouched");
            let x = format!("{name}/x");
            wait_left(&[
                (
                    &consumer,
                    kind::<CustomResourceDefinition>(),
                    &dropped.name(),
                    Kept,
                ),
                (&consumer, dropped.resource(), &x, Released),
                (&provider, dropped.resource(), &x, Kept),
            ])
            .await?;
            // The other API keeps syncing both ways.
            side.spec_reaches_provider(&kept, "x", json!({"size": 3}))
                .await?;
            side.status_reaches_consumer(&kept, "x", json!({"phase": "Running"}))
                .await?;

            // Exported again: sync resumes on the same copy.
            dropped.set_exported(&provider, true).await?;
            binding_until(&bindings, "both", "nothing released", released(&[])).await?;
            side.spec_reaches_provider(&dropped, "x", json!({"size": 4}))
                .await?;
            ensure!(
                side.uids(&[&kept, &dropped], "x").await? == before,
                "nothing was recreated"
            );
            anyhow::Ok(())
        })
        .await
    })
}
