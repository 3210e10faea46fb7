//! What a provider's exports cannot reach on the consumer: a provider labelling kbind's own
//! `clusterbindings.core.kbind.io` exported, and exporting an API whose name a consumer CRD of
//! the consumer's own already has. autoBind never lists either, and deleting the Connection
//! leaves the consumer's core CRD, its ClusterBindings, and its own CRD and objects.

use super::*;

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
        let own_objects: Api<DynamicObject> =
            Api::namespaced_with(consumer.clone(), &name, &gadget);
        for i in 0..3 {
            let object = DynamicObject::new(&format!("own-{i}"), &gadget);
            let object = object.data(json!({"spec": {"size": i}}));
            own_objects.create(&PostParams::default(), &object).await?;
        }
        // A ClusterBinding of the consumer's own that has nothing to do with this provider.
        let bystander = format!("{name}-bystander");
        elsewhere_cluster_binding(consumer, &bystander, &name).await?;

        connect(consumer, cluster, &name, crd_source(), true).await?;
        let auto = wait_cluster_binding(consumer, &name, |b| {
            let conditions = b.status.iter().flat_map(|s| s.conditions.clone());
            konnector::conditions::is_true(&conditions.collect::<Vec<_>>(), ConditionType::Ready)
        })
        .await?;
        let only_widgets = [format!("widgets.{group}")];
        assert_eq!(
            api_names(&auto),
            only_widgets,
            "autoBind lists only the bindable export"
        );
        let seen = wait_reason(consumer, &name, "SchemaInSync=False", "CRDNotManaged").await?;
        let exported = exported_names(&seen);
        assert!(
            !exported.contains(&CORE.to_string()),
            "kbind's own API is never exported"
        );
        let message = message(&seen, "SchemaInSync")?;
        assert!(
            message.contains(CORE) && message.contains(&gadgets),
            "{message}"
        );
        assert!(
            has_condition(&seen, "Ready", "True", "AsExpected"),
            "still Ready"
        );
        let warnings = events_with(consumer, &name, "CRDNotManaged").await?;
        assert!(!warnings.is_empty(), "a Warning Event on the Connection");

        delete_connection(consumer, &name).await?;
        absent(&Api::<Connection>::all(consumer.clone()), &name).await?;
        // The kbind-installed CRD of the ordinary export goes with the last ClusterBinding; the
        // rest stays.
        let crds: Api<CustomResourceDefinition> = Api::all(consumer.clone());
        absent(&crds, &only_widgets[0]).await?;
        for kept in [CORE, &gadgets] {
            let crd = crds.get(kept).await?;
            assert!(
                crd.metadata.deletion_timestamp.is_none(),
                "{kept} CRD deleted"
            );
        }
        let own_left = own_objects.list(&Default::default()).await?.items.len();
        assert_eq!(own_left, 3, "the consumer's own objects deleted");
        let bindings: Api<ClusterBinding> = Api::all(consumer.clone());
        let bystander_left = bindings.get_opt(&bystander).await?.is_some();
        assert!(bystander_left, "an unrelated ClusterBinding deleted");
        bindings
            .delete(&bystander, &DeleteParams::default())
            .await?;
        anyhow::Ok(())
    })
    .await
}
