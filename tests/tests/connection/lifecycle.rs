//! autoBind, the heartbeat Lease, and deletion.

use super::*;

#[tokio::test]
async fn auto_bind_creates_updates_and_deletes_its_cluster_binding() -> anyhow::Result<()> {
    with_private_provider(
        "autobind",
        async |_, consumer, provider_cluster, provider| {
            let group = "autobind.example.org";
            install_crd(provider, &widget_crd(group, "Widget", true)?).await?;
            let name = unique("autobind");
            connect(consumer, provider_cluster, &name, crd_source(), true).await?;
            let bindings: Api<ClusterBinding> = Api::all(consumer.clone());
            let apis = |b: &ClusterBinding| {
                b.spec
                    .apis
                    .iter()
                    .map(|a| a.name.clone())
                    .collect::<Vec<_>>()
            };
            let first = eventually(CONVERGE, || async { bindings.get(&name).await }).await?;
            assert_eq!(
                first.labels().get(MANAGED_LABEL).map(String::as_str),
                Some("true")
            );
            assert_eq!(first.spec.connection_ref.name, name);
            assert_eq!(apis(&first), vec![format!("widgets.{group}")]);
            install_crd(provider, &widget_crd(group, "Gadget", true)?).await?;
            eventually(CONVERGE, || async {
                let current = bindings.get(&name).await?;
                let expected = vec![format!("gadgets.{group}"), format!("widgets.{group}")];
                anyhow::ensure!(apis(&current) == expected, "apis are {:?}", apis(&current));
                Ok(())
            })
            .await?;
            let crds: Api<CustomResourceDefinition> = Api::all(provider.clone());
            for kind in ["widgets", "gadgets"] {
                crds.delete(&format!("{kind}.{group}"), &DeleteParams::default())
                    .await?;
            }
            eventually(CONVERGE, || async {
                anyhow::ensure!(
                    bindings.get_opt(&name).await?.is_none(),
                    "the managed ClusterBinding still exists"
                );
                Ok(())
            })
            .await?;
            anyhow::Ok(())
        },
    )
    .await
}

#[tokio::test]
async fn auto_bind_drains_an_api_the_provider_stops_exporting() -> anyhow::Result<()> {
    with_private_provider(
        "unexport",
        async |_, consumer, provider_cluster, provider| {
            let group = "unexport.example.org";
            install_crd(provider, &widget_crd(group, "Widget", true)?).await?;
            install_crd(provider, &widget_crd(group, "Gadget", true)?).await?;
            let name = unique("unexport");
            connect(consumer, provider_cluster, &name, crd_source(), true).await?;
            ensure_namespace(consumer, &name).await?;
            let resource =
                |kind: &str| ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", kind));
            let on = |client: &kube::Client, kind: &str| {
                Api::<DynamicObject>::namespaced_with(client.clone(), &name, &resource(kind))
            };
            for kind in ["Widget", "Gadget"] {
                let object: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": format!("{group}/v1"), "kind": kind,
                    "metadata": {"name": "x", "namespace": name}, "spec": {},
                }))?;
                let consumer_api = on(consumer, kind);
                eventually(CONVERGE, || async {
                    consumer_api.create(&PostParams::default(), &object).await
                })
                .await?;
                let provider_api = on(provider, kind);
                eventually(CONVERGE, || async { provider_api.get("x").await }).await?;
            }

            // The provider stops exporting Gadgets; the CRD itself stays there.
            Api::<CustomResourceDefinition>::all(provider.clone())
                .patch(
                    &format!("gadgets.{group}"),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {EXPORTED_LABEL: null}}})),
                )
                .await?;
            let bindings: Api<ClusterBinding> = Api::all(consumer.clone());
            eventually(CONVERGE, || async {
                let apis: Vec<String> = bindings
                    .get(&name)
                    .await?
                    .spec
                    .apis
                    .iter()
                    .map(|a| a.name.clone())
                    .collect();
                anyhow::ensure!(
                    apis == vec![format!("widgets.{group}")],
                    "apis are {apis:?}"
                );
                Ok(())
            })
            .await?;
            let (consumer_gadgets, provider_gadgets) =
                (on(consumer, "Gadget"), on(provider, "Gadget"));
            eventually(CONVERGE, || async {
                anyhow::ensure!(
                    provider_gadgets.get_opt("x").await?.is_none(),
                    "the un-exported API's provider copy still exists"
                );
                let gadget = consumer_gadgets.get("x").await?;
                anyhow::ensure!(
                    !gadget.finalizers().iter().any(|f| f == SYNCER_FINALIZER),
                    "the un-exported API's instance still holds its syncer finalizer"
                );
                Ok(())
            })
            .await?;
            // Deleting it completes.
            consumer_gadgets
                .delete("x", &DeleteParams::default())
                .await?;
            eventually(CONVERGE, || async {
                anyhow::ensure!(
                    consumer_gadgets.get_opt("x").await?.is_none(),
                    "still there"
                );
                Ok(())
            })
            .await?;
            // The API still exported keeps its copy.
            assert!(on(provider, "Widget").get_opt("x").await?.is_some());
            anyhow::Ok(())
        },
    )
    .await
}

#[tokio::test]
async fn heartbeat_lease_is_created_and_renewed() -> anyhow::Result<()> {
    on_consumer(async |pair, consumer| {
        let provider = pair.provider.client().await?;
        let name = unique("heartbeat");
        connect(consumer, &pair.provider, &name, crd_source(), false).await?;
        wait_ready(consumer, &name).await?;
        let consumer_uid = kube_system_uid(consumer).await?;
        let lease_name = format!("{name}-{}", &consumer_uid[..10]);
        let leases: Api<Lease> = Api::namespaced(provider.clone(), "kbind");
        let lease = eventually(CONVERGE, || async { leases.get(&lease_name).await }).await?;
        let spec = lease.spec.clone().context("lease spec")?;
        assert_eq!(spec.holder_identity.as_deref(), Some(consumer_uid.as_str()));
        assert_eq!(spec.lease_duration_seconds, Some(60));
        assert_eq!(
            lease.labels().get(MANAGED_LABEL).map(String::as_str),
            Some("true")
        );
        assert_eq!(
            lease
                .annotations()
                .get("core.kbind.io/consumer-cluster-uid"),
            Some(&consumer_uid)
        );
        assert_eq!(lease.annotations().get(CONNECTION_ANNOTATION), Some(&name));
        let first_renewal = spec.renew_time.context("renewTime")?;
        eventually(CONVERGE, || async {
            let renewed = leases
                .get(&lease_name)
                .await?
                .spec
                .and_then(|s| s.renew_time)
                .context("renewTime")?;
            anyhow::ensure!(renewed.0 > first_renewal.0, "not renewed yet");
            Ok(())
        })
        .await?;
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn heartbeat_denied_by_rbac_keeps_the_connection_ready() -> anyhow::Result<()> {
    on_consumer(async |pair, consumer| {
        let name = unique("no-lease");
        let rules = vec![
            rule(&[""], &["namespaces"], &["get"]),
            rule(
                &["apiextensions.k8s.io"],
                &["customresourcedefinitions"],
                &["get", "list", "watch"],
            ),
        ];
        connect_as(pair, consumer, &name, rules, crd_source()).await?;
        wait_ready(consumer, &name).await?;
        let provider = pair.provider.client().await?;
        let consumer_uid = kube_system_uid(consumer).await?;
        let lease = Api::<Lease>::namespaced(provider, "kbind")
            .get_opt(&format!("{name}-{}", &consumer_uid[..10]))
            .await?;
        assert!(lease.is_none(), "the denied heartbeat wrote nothing");
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn deletion_waits_in_draining_bindings_while_a_binding_references_it() -> anyhow::Result<()> {
    on_consumer(async |pair, consumer| {
        let name = unique("draining");
        connect(consumer, &pair.provider, &name, crd_source(), false).await?;
        wait_ready(consumer, &name).await?;
        ensure_namespace(consumer, &name).await?;
        let bindings: Api<Binding> = Api::namespaced(consumer.clone(), &name);
        let binding = Binding::new(
            "uses-it",
            BindingSpec {
                connection_ref: ConnectionReference { name: name.clone() },
                apis: vec![ApiReference {
                    name: "widgets.example.org".into(),
                }],
                conflict_policy: Default::default(),
                related_resources: Vec::new(),
            },
        );
        bindings.create(&PostParams::default(), &binding).await?;
        let connections: Api<Connection> = Api::all(consumer.clone());
        connections.delete(&name, &DeleteParams::default()).await?;
        wait_connection(consumer, &name, "DrainingBindings", |c| {
            has_condition(c, "Ready", "False", "DrainingBindings")
        })
        .await?;
        let secret = Api::<Secret>::namespaced(consumer.clone(), SECRET_NAMESPACE)
            .get(&name)
            .await?;
        assert!(
            secret.finalizers().contains(&CLEANUP_FINALIZER.to_string()),
            "credentials stay guarded while draining"
        );
        bindings.delete("uses-it", &DeleteParams::default()).await?;
        eventually(CONVERGE, || async {
            anyhow::ensure!(
                connections.get_opt(&name).await?.is_none(),
                "Connection still exists"
            );
            Ok(())
        })
        .await?;
        let secret = Api::<Secret>::namespaced(consumer.clone(), SECRET_NAMESPACE)
            .get(&name)
            .await?;
        assert!(
            !secret.finalizers().contains(&CLEANUP_FINALIZER.to_string()),
            "the Secret is released, not deleted"
        );
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn shared_secret_keeps_its_finalizer_until_the_last_connection_is_gone() -> anyhow::Result<()>
{
    on_consumer(async |pair, consumer| {
        let secret_name = unique("shared-secret");
        put_kubeconfig_secret(
            consumer,
            &secret_name,
            &pair.provider.admin().kubeconfig_yaml()?,
        )
        .await?;
        let connections: Api<Connection> = Api::all(consumer.clone());
        let (first, second) = (unique("share-a"), unique("share-b"));
        for name in [&first, &second] {
            connections
                .create(
                    &PostParams::default(),
                    &connection(name, &secret_name, crd_source(), false),
                )
                .await?;
            wait_ready(consumer, name).await?;
        }
        let secrets: Api<Secret> = Api::namespaced(consumer.clone(), SECRET_NAMESPACE);
        let guarded = |s: &Secret| s.finalizers().contains(&CLEANUP_FINALIZER.to_string());
        connections.delete(&first, &DeleteParams::default()).await?;
        eventually(CONVERGE, || async {
            anyhow::ensure!(
                connections.get_opt(&first).await?.is_none(),
                "first Connection still exists"
            );
            Ok(())
        })
        .await?;
        assert!(
            guarded(&secrets.get(&secret_name).await?),
            "still guarded for the second Connection"
        );
        connections
            .delete(&second, &DeleteParams::default())
            .await?;
        eventually(CONVERGE, || async {
            anyhow::ensure!(
                !guarded(&secrets.get(&secret_name).await?),
                "Secret still guarded"
            );
            Ok(())
        })
        .await?;
        anyhow::Ok(())
    })
    .await
}
