//! autoBind, the heartbeat Lease, and deletion.

use super::*;

#[tokio::test]
async fn auto_bind_creates_updates_and_deletes_its_cluster_binding() -> anyhow::Result<()> {
    with_private_provider("autobind", async |_, consumer, cluster, provider| {
        let group = "autobind.example.org";
        install_crd(provider, &widget_crd(group, "Widget", true)?).await?;
        let name = unique("autobind");
        connect(consumer, cluster, &name, crd_source(), true).await?;
        let first = wait_cluster_binding(consumer, &name, |_| true).await?;
        let managed = first.labels().get(MANAGED_LABEL).map(String::as_str);
        assert_eq!(managed, Some("true"));
        assert_eq!(first.spec.connection_ref.name, name);
        assert_eq!(api_names(&first), [format!("widgets.{group}")]);

        install_crd(provider, &widget_crd(group, "Gadget", true)?).await?;
        let both = [format!("gadgets.{group}"), format!("widgets.{group}")];
        wait_cluster_binding(consumer, &name, |b| api_names(b) == both).await?;
        let crds: Api<CustomResourceDefinition> = Api::all(provider.clone());
        for api in both {
            crds.delete(&api, &DeleteParams::default()).await?;
        }
        absent(&Api::<ClusterBinding>::all(consumer.clone()), &name).await
    })
    .await
}

#[tokio::test]
async fn auto_bind_drains_an_api_the_provider_stops_exporting() -> anyhow::Result<()> {
    with_private_provider("unexport", async |_, consumer, cluster, provider| {
        let group = "unexport.example.org";
        for kind in ["Widget", "Gadget"] {
            install_crd(provider, &widget_crd(group, kind, true)?).await?;
        }
        let name = unique("unexport");
        connect(consumer, cluster, &name, crd_source(), true).await?;
        ensure_namespace(consumer, &name).await?;
        let on = |client: &kube::Client, kind: &str| {
            let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", kind));
            Api::<DynamicObject>::namespaced_with(client.clone(), &name, &resource)
        };
        let params = PostParams::default();
        for kind in ["Widget", "Gadget"] {
            let object: DynamicObject = serde_json::from_value(json!({
                "apiVersion": format!("{group}/v1"), "kind": kind,
                "metadata": {"name": "x"}, "spec": {},
            }))?;
            let consumer_api = on(consumer, kind);
            eventually(CONVERGE, || consumer_api.create(&params, &object)).await?;
            let provider_api = on(provider, kind);
            eventually(CONVERGE, || provider_api.get("x")).await?;
        }

        // The provider stops exporting Gadgets; the CRD itself stays there.
        let unlabel = json!({"metadata": {"labels": {EXPORTED_LABEL: null}}});
        Api::<CustomResourceDefinition>::all(provider.clone())
            .patch(
                &format!("gadgets.{group}"),
                &PatchParams::default(),
                &Patch::Merge(unlabel),
            )
            .await?;
        let widgets = [format!("widgets.{group}")];
        wait_cluster_binding(consumer, &name, |b| api_names(b) == widgets).await?;
        let (consumer_gadgets, provider_gadgets) = (on(consumer, "Gadget"), on(provider, "Gadget"));
        absent(&provider_gadgets, "x").await?;
        wait_for("the Gadget released by its syncer", CONVERGE, || async {
            Ok((!holds_syncer_finalizer(&consumer_gadgets.get("x").await?)).then_some(()))
        })
        .await?;
        // Deleting it completes.
        consumer_gadgets
            .delete("x", &DeleteParams::default())
            .await?;
        absent(&consumer_gadgets, "x").await?;
        // The API still exported keeps its copy.
        assert!(on(provider, "Widget").get_opt("x").await?.is_some());
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn heartbeat_lease_is_created_and_renewed() -> anyhow::Result<()> {
    on_consumer(async |pair, consumer| {
        let name = unique("heartbeat");
        connect_ready(consumer, &pair.provider, &name).await?;
        let consumer_uid = cluster_uid(consumer).await?;
        let lease_name = heartbeat_lease_name(&name, &consumer_uid);
        let leases: Api<Lease> = Api::namespaced(pair.provider.client().await?, "kbind");
        let lease = eventually(CONVERGE, || leases.get(&lease_name)).await?;
        let spec = lease.spec.clone().context("lease spec")?;
        assert_eq!(spec.holder_identity.as_ref(), Some(&consumer_uid));
        assert_eq!(spec.lease_duration_seconds, Some(60));
        let managed = lease.labels().get(MANAGED_LABEL).map(String::as_str);
        assert_eq!(managed, Some("true"));
        let annotations = lease.annotations();
        let uid = annotations.get("core.kbind.io/consumer-cluster-uid");
        assert_eq!(uid, Some(&consumer_uid));
        assert_eq!(annotations.get(CONNECTION_ANNOTATION), Some(&name));
        let first = spec.renew_time.context("renewTime")?.0;
        wait_for("the Lease renewed", CONVERGE, || async {
            let renewed = leases
                .get(&lease_name)
                .await?
                .spec
                .and_then(|s| s.renew_time);
            Ok(renewed.filter(|t| t.0 > first))
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
        let rules = json!([
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
            {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get", "list", "watch"]},
        ]);
        connect_as(pair, consumer, &name, rules, crd_source()).await?;
        wait_ready(consumer, &name).await?;
        let lease = heartbeat_lease_name(&name, &cluster_uid(consumer).await?);
        let leases: Api<Lease> = Api::namespaced(pair.provider.client().await?, "kbind");
        assert!(leases.get_opt(&lease).await?.is_none(), "the denied heartbeat wrote nothing");
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn deletion_waits_in_draining_bindings_while_a_binding_references_it() -> anyhow::Result<()> {
    on_consumer(async |pair, consumer| {
        let name = unique("draining");
        connect_ready(consumer, &pair.provider, &name).await?;
        ensure_namespace(consumer, &name).await?;
        let bindings: Api<Binding> = Api::namespaced(consumer.clone(), &name);
        let binding = Binding::new("uses-it", binding_spec(&name, "widgets.example.org")?);
        bindings.create(&PostParams::default(), &binding).await?;
        delete_connection(consumer, &name).await?;
        wait_reason(consumer, &name, "Ready=False", "DrainingBindings").await?;
        assert!(
            secret_guarded(consumer, &name).await?,
            "credentials stay guarded while draining"
        );
        bindings.delete("uses-it", &DeleteParams::default()).await?;
        absent(&Api::<Connection>::all(consumer.clone()), &name).await?;
        assert!(
            !secret_guarded(consumer, &name).await?,
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
        let secret = unique("shared-secret");
        put_kubeconfig_secret(consumer, &secret, &pair.provider.admin().kubeconfig_yaml()?).await?;
        let connections: Api<Connection> = Api::all(consumer.clone());
        let (first, second) = (unique("share-a"), unique("share-b"));
        for name in [&first, &second] {
            let connection = connection(name, &secret, crd_source(), false);
            connections
                .create(&PostParams::default(), &connection)
                .await?;
            wait_ready(consumer, name).await?;
        }
        delete_connection(consumer, &first).await?;
        absent(&connections, &first).await?;
        let guarded = secret_guarded(consumer, &secret).await?;
        assert!(guarded, "still guarded for the second Connection");
        delete_connection(consumer, &second).await?;
        wait_for("the shared Secret released", CONVERGE, || async {
            Ok((!secret_guarded(consumer, &secret).await?).then_some(()))
        })
        .await
    })
    .await
}
