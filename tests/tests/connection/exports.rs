//! What a provider's exports cannot reach on the consumer: a provider labelling kbind's own
//! `clusterbindings.core.kbind.io` exported, and exporting an API whose name a consumer CRD of
//! the consumer's own already has. autoBind never lists either, and deleting the Connection
//! leaves the consumer's core CRD, its ClusterBindings, and its own CRD and objects.

use super::*;

use kbind_tests::syncenv::events_for;

const CORE: &str = "clusterbindings.core.kbind.io";

#[tokio::test]
async fn auto_bind_never_lists_kbinds_own_api_or_a_consumer_owned_crd() -> anyhow::Result<()> {
    with_private_provider(
        "exports",
        async |_, consumer, provider_cluster, provider| {
            let group = "exports.example.org";
            // The provider: kbind's core CRDs with ClusterBindings labelled exported, an ordinary
            // export, and an export whose name the consumer already uses for a CRD of its own.
            for (_, mut crd) in konnector::api::core_crds() {
                if crd.name_any() == CORE {
                    crd.metadata.labels =
                        Some([(EXPORTED_LABEL.to_string(), "true".to_string())].into());
                }
                install_crd(provider, &crd).await?;
            }
            install_crd(provider, &widget_crd(group, "Widget", true)?).await?;
            install_crd(provider, &widget_crd(group, "Gadget", true)?).await?;
            let gadgets = format!("gadgets.{group}");
            install_crd(consumer, &widget_crd(group, "Gadget", false)?).await?;
            let name = unique("exports");
            ensure_namespace(consumer, &name).await?;
            let gadget = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(group, "v1", "Gadget"),
                "gadgets",
            );
            let own_objects: Api<DynamicObject> =
                Api::namespaced_with(consumer.clone(), &name, &gadget);
            for i in 0..3 {
                let mut object = DynamicObject::new(&format!("own-{i}"), &gadget).within(&name);
                object.data = json!({"spec": {"size": i}});
                own_objects.create(&PostParams::default(), &object).await?;
            }
            // A ClusterBinding of the consumer's own that has nothing to do with this provider.
            let bindings: Api<ClusterBinding> = Api::all(consumer.clone());
            let bystander = elsewhere_cluster_binding(&format!("{name}-bystander"), &name);
            bindings.create(&PostParams::default(), &bystander).await?;

            connect(consumer, provider_cluster, &name, crd_source(), true).await?;
            let auto = eventually(CONVERGE, || async {
                let auto = bindings.get(&name).await?;
                let ready = auto.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                });
                anyhow::ensure!(
                    ready,
                    "autoBind ClusterBinding not Ready: {:?}",
                    auto.status
                );
                Ok(auto)
            })
            .await?;
            let listed: Vec<String> = auto.spec.apis.iter().map(|a| a.name.clone()).collect();
            assert_eq!(
                listed,
                vec![format!("widgets.{group}")],
                "autoBind lists only the bindable export"
            );
            let seen = wait_connection(consumer, &name, "SchemaInSync=False CRDNotManaged", |c| {
                has_condition(c, "SchemaInSync", "False", "CRDNotManaged")
            })
            .await?;
            assert!(
                !exported_names(&seen).contains(&CORE.to_string()),
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
            let events = events_for(consumer, None, &name).await?;
            assert!(
                events
                    .iter()
                    .any(|e| e.reason.as_deref() == Some("CRDNotManaged")),
                "a Warning Event on the Connection"
            );

            Api::<Connection>::all(consumer.clone())
                .delete(&name, &DeleteParams::default())
                .await?;
            eventually(CONVERGE, || async {
                let gone = Api::<Connection>::all(consumer.clone())
                    .get_opt(&name)
                    .await?
                    .is_none();
                anyhow::ensure!(gone, "Connection still exists");
                Ok(())
            })
            .await?;

            let crds: Api<CustomResourceDefinition> = Api::all(consumer.clone());
            let core_crd = crds.get_opt(CORE).await?;
            let own_crd = crds.get_opt(&gadgets).await?;
            let own_left = own_objects.list(&Default::default()).await?.items.len();
            let bystander_left = bindings.get_opt(&bystander.name_any()).await?.is_some();
            let (core_left, own_crd_left) = (core_crd.is_some(), own_crd.is_some());
            println!("survived: {CORE} CRD {core_left}, {gadgets} CRD {own_crd_left}");
            println!("survived: {own_left} of its objects, bystander {bystander_left}");
            assert!(
                core_crd.is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
                "kbind's own CRD deleted"
            );
            assert!(
                own_crd.is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
                "the consumer's own CRD deleted"
            );
            assert_eq!(own_left, 3, "the consumer's own objects deleted");
            assert!(bystander_left, "an unrelated ClusterBinding deleted");
            // The kbind-installed CRD of the ordinary export went with the last ClusterBinding.
            eventually(CONVERGE, || async {
                anyhow::ensure!(
                    crds.get_opt(&format!("widgets.{group}")).await?.is_none(),
                    "widgets CRD still there"
                );
                Ok(())
            })
            .await?;
            bindings
                .delete(&bystander.name_any(), &DeleteParams::default())
                .await?;
            anyhow::Ok(())
        },
    )
    .await
}
