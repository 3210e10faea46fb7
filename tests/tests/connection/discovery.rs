//! Discovery per schema source, schema installation, updatePolicy, synthesis round trip.

use super::*;

#[tokio::test]
async fn crd_source_exports_only_labelled_crds() -> anyhow::Result<()> {
    on_consumer(async |pair, consumer| {
        let provider = pair.provider.client().await?;
        let group = format!("{}.crd.example.org", unique("g"));
        install_crd(&provider, &widget_crd(&group, "Widget", true)?).await?;
        install_crd(&provider, &widget_crd(&group, "Gadget", false)?).await?;
        let name = unique("crd-source");
        connect(consumer, &pair.provider, &name, crd_source(), false).await?;
        let seen = wait_connection(consumer, &name, "exports", |c| {
            exported_names(c).contains(&format!("widgets.{group}"))
        })
        .await?;
        assert!(
            !exported_names(&seen).contains(&format!("gadgets.{group}")),
            "unlabelled CRDs are not exported"
        );
        let widget = seen
            .status
            .as_ref()
            .and_then(|s| s.exported_apis.iter().find(|a| a.group == group))
            .context("widget")?;
        assert_eq!(
            (widget.resource.as_str(), widget.versions.as_slice()),
            ("widgets", &["v1".to_string()][..])
        );
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn openapi_source_exports_served_apis_without_labels() -> anyhow::Result<()> {
    on_consumer(async |pair, consumer| {
        let provider = pair.provider.client().await?;
        let group = format!("{}.openapi.example.org", unique("g"));
        install_crd(&provider, &widget_crd(&group, "Gizmo", false)?).await?;
        let name = unique("openapi-source");
        let schema = SchemaPolicy {
            source: SchemaSource::OpenApi,
            ..SchemaPolicy::default()
        };
        connect(consumer, &pair.provider, &name, schema, false).await?;
        let seen = wait_connection(consumer, &name, "exports", |c| {
            exported_names(c).contains(&format!("gizmos.{group}"))
        })
        .await?;
        assert_eq!(
            seen.status
                .as_ref()
                .and_then(|s| s.active_schema_source.as_deref()),
            Some("OpenAPI")
        );
        assert!(
            exported_names(&seen)
                .iter()
                .all(|n| !n.ends_with(".k8s.io") && n.contains('.')),
            "built-in groups are never exported: {:?}",
            exported_names(&seen)
        );
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn auto_falls_back_to_openapi_only_after_an_empty_list() -> anyhow::Result<()> {
    with_private_provider("auto", async |_, consumer, provider_cluster, provider| {
        install_crd(
            provider,
            &widget_crd("auto.example.org", "Sprocket", false)?,
        )
        .await?;
        let name = unique("auto");
        connect(
            consumer,
            provider_cluster,
            &name,
            SchemaPolicy::default(),
            false,
        )
        .await?;
        wait_connection(consumer, &name, "OpenAPI after an empty list", |c| {
            c.status
                .as_ref()
                .and_then(|s| s.active_schema_source.as_deref())
                == Some("OpenAPI")
                && exported_names(c).contains(&"sprockets.auto.example.org".to_string())
        })
        .await?;
        install_crd(provider, &widget_crd("auto.example.org", "Cog", true)?).await?;
        let seen = wait_connection(consumer, &name, "CRD once something is labelled", |c| {
            c.status
                .as_ref()
                .and_then(|s| s.active_schema_source.as_deref())
                == Some("CRD")
        })
        .await?;
        assert_eq!(
            exported_names(&seen),
            vec!["cogs.auto.example.org".to_string()]
        );
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn auto_does_not_fall_back_after_a_list_error() -> anyhow::Result<()> {
    on_consumer(async |pair, consumer| {
        let name = unique("auto-denied");
        // May identify the cluster, may not list CRDs.
        let rules = vec![rule(&[""], &["namespaces"], &["get"])];
        connect_as(pair, consumer, &name, rules, SchemaPolicy::default()).await?;
        let seen = wait_connection(consumer, &name, "PermissionDenied from the CRD list", |c| {
            has_condition(c, "PermissionDenied", "True", "Forbidden")
                && has_condition(c, "Ready", "False", "Forbidden")
        })
        .await?;
        assert_ne!(
            seen.status
                .as_ref()
                .and_then(|s| s.active_schema_source.as_deref()),
            Some("OpenAPI")
        );
        let message = message(&seen, "PermissionDenied")?;
        assert!(message.contains("CRD"), "{message}");
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn pull_policy_all_installs_established_crds_and_update_policy_once_pins_them()
-> anyhow::Result<()> {
    with_private_provider("pull-all", async |_, consumer, provider_cluster, provider| {
        let (plain_group, once_group) = ("plain.pull.example.org", "once.pull.example.org");
        install_crd(provider, &widget_crd(plain_group, "Widget", true)?).await?;
        install_crd(provider, &widget_crd(once_group, "Widget", true)?).await?;
        let name = unique("pull-all");
        pull_all(consumer, provider_cluster, &name, SchemaSource::Crd, UpdatePolicy::Once).await?;
        let consumer_crds: Api<CustomResourceDefinition> = Api::all(consumer.clone());
        for group in [plain_group, once_group] {
            let installed = consumer_crds.get(&format!("widgets.{group}")).await?;
            assert_eq!(installed.annotations().get(CONNECTION_ANNOTATION), Some(&name));
            let established = installed.status.and_then(|s| s.conditions).unwrap_or_default();
            assert!(established.iter().any(|c| c.type_ == "Established" && c.status == "True"));
        }
        // The provider schema changes; with updatePolicy Once the consumer copy stays pinned.
        let mut changed = widget_crd(once_group, "Widget", true)?;
        changed.spec.versions[0].schema = serde_json::from_value(json!({"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"size": {"type": "integer"}, "color": {"type": "string"}, "shape": {"type": "string"}}},
            "status": {"type": "object", "properties": {"phase": {"type": "string"}}}
        }}}))?;
        install_crd(provider, &changed).await?;
        tokio::time::sleep(Duration::from_secs(4)).await;
        let pinned = consumer_crds.get(&format!("widgets.{once_group}")).await?;
        let spec_props = serde_json::to_value(&pinned.spec.versions[0].schema)?;
        assert!(
            spec_props.pointer("/openAPIV3Schema/properties/spec/properties/shape").is_none(),
            "updatePolicy Once keeps the first pulled schema"
        );
        // Switching the policy to Always makes the consumer follow the provider.
        let patch = json!({"spec": {"schema": {"updatePolicy": "Always"}}});
        Api::<Connection>::all(consumer.clone()).patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        eventually(CONVERGE, || async {
            let crd = consumer_crds.get(&format!("widgets.{once_group}")).await?;
            let schema = serde_json::to_value(&crd.spec.versions[0].schema)?;
            schema
                .pointer("/openAPIV3Schema/properties/spec/properties/shape")
                .map(|_| ())
                .context("consumer CRD has not followed the provider yet")
        })
        .await?;
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn newly_labelled_crd_appears_on_periodic_requeue() -> anyhow::Result<()> {
    on_consumer(async |pair, consumer| {
        let provider = pair.provider.client().await?;
        let group = format!("{}.late.example.org", unique("g"));
        install_crd(&provider, &widget_crd(&group, "Widget", false)?).await?;
        let name = unique("late");
        connect(consumer, &pair.provider, &name, crd_source(), false).await?;
        wait_ready(consumer, &name).await?;
        let crds: Api<CustomResourceDefinition> = Api::all(provider.clone());
        let label = json!({"metadata": {"labels": {EXPORTED_LABEL: "true"}}});
        crds.patch(
            &format!("widgets.{group}"),
            &PatchParams::default(),
            &Patch::Merge(&label),
        )
        .await?;
        wait_connection(consumer, &name, "the new export", |c| {
            exported_names(c).contains(&format!("widgets.{group}"))
        })
        .await?;
        anyhow::Ok(())
    })
    .await
}

/// A provider CRD with the constructs schema synthesis must carry over.
fn rich_crd() -> anyhow::Result<CustomResourceDefinition> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gears.rich.example.org"},
        "spec": {
            "group": "rich.example.org",
            "names": {"plural": "gears", "singular": "gear", "kind": "Gear", "listKind": "GearList", "shortNames": ["gr"], "categories": ["machines"]},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "required": ["size"], "properties": {
                            "size": {"type": "integer", "minimum": 1},
                            "mode": {"type": "string", "enum": ["fast", "slow"]},
                            "port": {"x-kubernetes-int-or-string": true},
                            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                            "teeth": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                                "items": {"type": "object", "required": ["name"], "properties": {
                                    "name": {"type": "string"},
                                    "angle": {"type": "number"}
                                }}},
                            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                            "nested": {"type": "object", "properties": {"inner": {"type": "object", "properties": {"flag": {"type": "boolean"}}}}}
                        }},
                        "status": {"type": "object", "properties": {"phase": {"type": "string"}, "observed": {"type": "integer"}}}
                    }
                }}
            }]
        }
    }))?)
}

#[tokio::test]
async fn openapi_source_with_pull_all_synthesizes_a_crd_that_round_trips_every_field()
-> anyhow::Result<()> {
    with_private_provider("synth", async |_, consumer, provider_cluster, provider| {
        install_crd(provider, &rich_crd()?).await?;
        let name = unique("synth");
        pull_all(
            consumer,
            provider_cluster,
            &name,
            SchemaSource::OpenApi,
            UpdatePolicy::Always,
        )
        .await?;

        let installed = Api::<CustomResourceDefinition>::all(consumer.clone())
            .get("gears.rich.example.org")
            .await?;
        assert_eq!(
            installed.annotations().get(CONNECTION_ANNOTATION),
            Some(&name)
        );
        assert_eq!(
            installed.spec.names.short_names.as_deref(),
            Some(&["gr".to_string()][..])
        );
        let version = &installed.spec.versions[0];
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "status subresource carried over"
        );

        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("rich.example.org", "v1", "Gear"),
            "gears",
        );
        ensure_namespace(consumer, &name).await?;
        let gears: Api<DynamicObject> = Api::namespaced_with(consumer.clone(), &name, &resource);
        let spec = json!({
            "size": 3,
            "mode": "fast",
            "port": "http",
            "labels": {"a": "b"},
            "teeth": [{"name": "t1", "angle": 1.5}, {"name": "t2", "angle": 2.5}],
            "tags": ["x", "y"],
            "extra": {"anything": {"goes": [1, 2]}},
            "nested": {"inner": {"flag": true}}
        });
        let mut gear = DynamicObject::new("g1", &resource).within(&name);
        gear.data = json!({"spec": spec});
        gears.create(&PostParams::default(), &gear).await?;
        let read = gears.get("g1").await?;
        assert_eq!(
            read.data["spec"], spec,
            "every field survives the synthesized schema"
        );

        let mut bad = DynamicObject::new("g2", &resource).within(&name);
        bad.data = json!({"spec": {"size": 3, "mode": "sideways"}});
        let refused = gears.create(&PostParams::default(), &bad).await;
        assert!(
            matches!(refused, Err(kube::Error::Api(ref s)) if s.code == 422),
            "enum kept: {refused:?}"
        );
        anyhow::Ok(())
    })
    .await
}
