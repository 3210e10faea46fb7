//! autoBind, the heartbeat Lease, deletion, and what exports cannot reach on the consumer.

use super::*;
use konnector::api::ConditionType::Ready;
use konnector::conditions::is_true;

#[tokio::test]
async fn auto_bind_keeps_its_cluster_binding_to_the_exports_and_drains_what_leaves()
-> anyhow::Result<()> {
    with_private_provider("autobind", async |_, consumer, cluster, provider| {
        let group = "autobind.example.org";
        install_crd(provider, &widget_crd(group, "Widget", true)?).await?;
        let name = unique("autobind");
        connect(consumer, cluster, &name, crd_source(), true).await?;
        let first = wait_cluster_binding(consumer, &name, |_| true).await?;
        let managed = first.labels().get(MANAGED_LABEL).map(String::as_str);
        assert_eq!(managed, Some("true"));
        assert_eq!(first.spec.connection_ref.name, name);
        let (widgets, gadgets) = (format!("widgets.{group}"), format!("gadgets.{group}"));
        assert_eq!(api_names(&first), [widgets.as_str()]);

        // A new export joins the ClusterBinding, and both sync.
        install_crd(provider, &widget_crd(group, "Gadget", true)?).await?;
        let both = [gadgets.as_str(), widgets.as_str()];
        wait_cluster_binding(consumer, &name, |b| api_names(b) == both).await?;
        ensure_namespace(consumer, &name).await?;
        let resource =
            |kind: &str| ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", kind));
        let on = |client: &Client, kind: &str| {
            Api::<DynamicObject>::namespaced_with(client.clone(), &name, &resource(kind))
        };
        let params = PostParams::default();
        for kind in ["Widget", "Gadget"] {
            let object = DynamicObject::new("x", &resource(kind)).data(json!({"spec": {}}));
            let consumer_api = on(consumer, kind);
            eventually(CONVERGE, || consumer_api.create(&params, &object)).await?;
            let provider_api = on(provider, kind);
            eventually(CONVERGE, || provider_api.get("x")).await?;
        }

        // The provider stops exporting Gadgets (the CRD stays): the API leaves the
        // ClusterBinding and its instances are drained.
        let unlabel = Patch::Merge(json!({"metadata": {"labels": {EXPORTED_LABEL: null}}}));
        let crds: Api<CustomResourceDefinition> = Api::all(provider.clone());
        crds.patch(&gadgets, &Default::default(), &unlabel).await?;
        wait_cluster_binding(consumer, &name, |b| api_names(b) == [widgets.as_str()]).await?;
        let (consumer_gadgets, provider_gadgets) = (on(consumer, "Gadget"), on(provider, "Gadget"));
        absent(&provider_gadgets, "x").await?;
        wait_for("the Gadget released by its syncer", CONVERGE, || async {
            Ok((!holds_syncer_finalizer(&consumer_gadgets.get("x").await?)).then_some(()))
        })
        .await?;
        delete(&consumer_gadgets, "x").await?;
        absent(&consumer_gadgets, "x").await?;
        // The API still exported keeps its copy.
        assert!(on(provider, "Widget").get_opt("x").await?.is_some());

        // With no export left, the ClusterBinding goes.
        delete(&on(consumer, "Widget"), "x").await?;
        absent(&on(consumer, "Widget"), "x").await?;
        for api in [&widgets, &gadgets] {
            crds.delete(api, &DeleteParams::default()).await?;
        }
        absent(&Api::<ClusterBinding>::all(consumer.clone()), &name).await
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
            let renewed = leases.get(&lease_name).await?.spec;
            Ok(renewed.and_then(|s| s.renew_time).filter(|t| t.0 > first))
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
            {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
                "verbs": ["get", "list", "watch"]},
        ]);
        connect_as(pair, consumer, &name, rules, crd_source()).await?;
        wait_ready(consumer, &name).await?;
        let lease = heartbeat_lease_name(&name, &cluster_uid(consumer).await?);
        let leases: Api<Lease> = Api::namespaced(pair.provider.client().await?, "kbind");
        let written = leases.get_opt(&lease).await?;
        assert!(written.is_none(), "the denied heartbeat wrote nothing");
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
        let guarded = secret_guarded(consumer, &name).await?;
        assert!(guarded, "credentials stay guarded while draining");
        bindings.delete("uses-it", &DeleteParams::default()).await?;
        absent(&Api::<Connection>::all(consumer.clone()), &name).await?;
        let guarded = secret_guarded(consumer, &name).await?;
        assert!(!guarded, "the Secret is released, not deleted");
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
        let params = PostParams::default();
        for name in [&first, &second] {
            let connection = connection(name, &secret, crd_source(), false);
            connections.create(&params, &connection).await?;
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

#[tokio::test]
async fn an_auto_bind_name_clash_is_one_warning_and_a_condition_while_it_lasts()
-> anyhow::Result<()> {
    on_consumer(async |pair, consumer| {
        let name = unique("events-taken");
        // A ClusterBinding of the consumer's own under the name autoBind would use; it points
        // elsewhere, so it never holds up this Connection's deletion.
        elsewhere_cluster_binding(consumer, &name, &name).await?;
        connect(consumer, &pair.provider, &name, crd_source(), true).await?;

        let reason = "AutoBindNameTaken";
        let warning = published_once(consumer, &name, "Warning", reason).await?;
        let note = warning.note.unwrap_or_default();
        let names_it = note.contains(&format!("ClusterBinding {name} exists"));
        assert!(names_it, "{note}");
        assert_eq!(warning.action.as_deref(), Some("AutoBind"));
        let taken = wait_reason(consumer, &name, "AutoBindInSync=False", reason).await?;
        let ready = has_condition(&taken, "Ready", "True", "AsExpected");
        assert!(ready, "a name clash does not make the Connection unready");
        let bindings: Api<ClusterBinding> = Api::all(consumer.clone());
        let theirs = bindings.get(&name).await?;
        let managed = theirs.labels().contains_key(MANAGED_LABEL);
        assert!(!managed, "autoBind left the other ClusterBinding alone");

        // autoBind off: nothing left to report.
        let off = Patch::Merge(json!({ "spec": { "autoBind": false } }));
        let connections: Api<Connection> = Api::all(consumer.clone());
        connections.patch(&name, &Default::default(), &off).await?;
        wait_connection(consumer, &name, "no AutoBindInSync condition", |c| {
            condition(c, "AutoBindInSync").is_none()
        })
        .await?;
        delete_connection(consumer, &name).await?;
        bindings.delete(&name, &DeleteParams::default()).await?;
        anyhow::Ok(())
    })
    .await
}

// What a provider's exports cannot reach on the consumer: a provider labelling kbind's own
// `clusterbindings.core.kbind.io` exported, and exporting an API whose name a consumer CRD of
// the consumer's own already has. autoBind never lists either, and deleting the Connection
// leaves the consumer's core CRD, its ClusterBindings, and its own CRD and objects.
const CORE: &str = "clusterbindings.core.kbind.io";

#[tokio::test]
async fn auto_bind_never_lists_kbinds_own_api_or_a_consumer_owned_crd() -> anyhow::Result<()> {
    with_private_provider("exports", async |_, consumer, cluster, provider| {
        let group = "exports.example.org";
        // The provider: kbind's core CRDs with ClusterBindings labelled exported, an ordinary
        // export, and an export whose name the consumer already uses for a CRD of its own.
        for (_, mut crd) in konnector::api::core_crds() {
            if crd.name_any() == CORE {
                crd.labels_mut()
                    .insert(EXPORTED_LABEL.into(), "true".into());
            }
            install_crd(provider, &crd).await?;
        }
        for kind in ["Widget", "Gadget"] {
            install_crd(provider, &widget_crd(group, kind, true)?).await?;
        }
        let gadgets = format!("gadgets.{group}");
        install_crd(consumer, &widget_crd(group, "Gadget", false)?).await?;
        let name = unique("exports");
        ensure_namespace(consumer, &name).await?;
        let gadget = ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", "Gadget"));
        let own_objects = Api::namespaced_with(consumer.clone(), &name, &gadget);
        for i in 0..3 {
            let object = DynamicObject::new(&format!("own-{i}"), &gadget);
            let object = object.data(json!({"spec": {"size": i}}));
            own_objects.create(&PostParams::default(), &object).await?;
        }
        // A ClusterBinding of the consumer's own that has nothing to do with this provider.
        let bystander = format!("{name}-bystander");
        elsewhere_cluster_binding(consumer, &bystander, &name).await?;

        connect(consumer, cluster, &name, crd_source(), true).await?;
        let ready = |b: &ClusterBinding| b.status.iter().any(|s| is_true(&s.conditions, Ready));
        let auto = wait_cluster_binding(consumer, &name, ready).await?;
        let widgets = format!("widgets.{group}");
        // autoBind lists only the bindable export.
        assert_eq!(api_names(&auto), [&widgets]);
        let seen = wait_reason(consumer, &name, "SchemaInSync=False", "CRDNotManaged").await?;
        let exported = exported_names(&seen);
        let core_exported = exported.contains(&CORE.to_string());
        assert!(!core_exported, "kbind's own API is never exported");
        let message = message(&seen, "SchemaInSync")?;
        let names_both = message.contains(CORE) && message.contains(&gadgets);
        assert!(names_both, "{message}");
        let still_ready = has_condition(&seen, "Ready", "True", "AsExpected");
        assert!(still_ready, "still Ready");
        let warnings = events_with(consumer, &name, "CRDNotManaged").await?;
        assert!(!warnings.is_empty(), "a Warning Event on the Connection");

        delete_connection(consumer, &name).await?;
        absent(&Api::<Connection>::all(consumer.clone()), &name).await?;
        // The kbind-installed CRD of the ordinary export goes with the last ClusterBinding; the
        // rest stays.
        let crds: Api<CustomResourceDefinition> = Api::all(consumer.clone());
        absent(&crds, &widgets).await?;
        for kept in [CORE, &gadgets] {
            let deleting = crds.get(kept).await?.metadata.deletion_timestamp;
            assert_eq!(deleting, None, "{kept} CRD deleted");
        }
        let own_left = own_objects.list(&Default::default()).await?.items.len();
        assert_eq!(own_left, 3, "the consumer's own objects deleted");
        let bindings: Api<ClusterBinding> = Api::all(consumer.clone());
        let bystander_left = bindings.get_opt(&bystander).await?.is_some();
        assert!(bystander_left, "an unrelated ClusterBinding deleted");
        bindings.delete(&bystander, &Default::default()).await?;
        anyhow::Ok(())
    })
    .await
}
