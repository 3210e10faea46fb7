//! Discovery per schema source, schema installation, updatePolicy, the synthesis round trip,
//! and a consumer CRD applied only when its provider schema changed.

use super::*;
use konnector::schema::is_established;
use konnector::telemetry::{ApiLabels, metrics};

#[tokio::test]
async fn crd_source_exports_exactly_the_labelled_crds_as_labels_change() -> Result<()> {
    on_consumer("crd-source", async |pair, consumer, name| {
        let provider = pair.provider.client().await?;
        let group = format!("{name}.crd.example.org");
        install_crd(&provider, &widget_crd(&group, "Widget", true)?).await?;
        install_crd(&provider, &widget_crd(&group, "Gadget", false)?).await?;
        let seen = connect_ready(consumer, &pair.provider, &name).await?;
        let all = &seen.status.as_ref().context("status")?.exported_apis;
        let ours: Vec<_> = all.iter().filter(|a| a.group == group).collect();
        let widgets = TestApi::namespaced(&group).exported();
        assert_eq!(ours, [&widgets], "unlabelled CRDs are not exported");
        // A label added later is picked up on a periodic requeue.
        let gadgets = format!("gadgets.{group}");
        set_exported(&provider, &gadgets, true).await?;
        let new_export = |c: &Connection| exported_names(c).contains(&gadgets);
        wait_connection(consumer, &name, "the new export", new_export).await?;
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn auto_falls_back_to_openapi_only_after_an_empty_list() -> Result<()> {
    with_private_provider("auto", async |_, consumer, cluster, provider, name| {
        let group = "auto.example.org";
        install_crd(provider, &widget_crd(group, "Sprocket", false)?).await?;
        connect(consumer, cluster, &name, SchemaPolicy::default(), false).await?;
        // The unlabelled Sprockets are exported only through OpenAPI discovery.
        let sprockets = |c: &Connection| exported_names(c).contains(&format!("sprockets.{group}"));
        let seen = wait_connection(consumer, &name, "the Sprocket export", sprockets).await?;
        assert_eq!(active_source(&seen), Some("OpenAPI"));
        install_crd(provider, &widget_crd(group, "Cog", true)?).await?;
        let crd = |c: &Connection| active_source(c) == Some("CRD");
        let seen = wait_connection(consumer, &name, "CRD", crd).await?;
        assert_eq!(exported_names(&seen), [format!("cogs.{group}")]);
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn auto_does_not_fall_back_after_a_list_error() -> Result<()> {
    on_consumer("auto-denied", async |pair, consumer, name| {
        // May identify the cluster, may not list CRDs.
        let rules = json!([{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}]);
        connect_as(pair, consumer, &name, rules, SchemaPolicy::default()).await?;
        let denied = "PermissionDenied=True Ready=False";
        let seen = wait_reason(consumer, &name, denied, "Forbidden").await?;
        assert_ne!(active_source(&seen), Some("OpenAPI"));
        says(message(&seen, "PermissionDenied"), &["CRD"]);
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn pull_policy_all_installs_established_crds_and_update_policy_once_pins_them() -> Result<()>
{
    with_private_provider("pull-all", async |_, consumer, cluster, provider, name| {
        let (plain_group, once_group) = ("plain.pull.example.org", "once.pull.example.org");
        install_crd(provider, &widget_crd(plain_group, "Widget", true)?).await?;
        install_crd(provider, &widget_crd(once_group, "Widget", true)?).await?;
        pull_all(consumer, cluster, &name, "CRD", "Once").await?;
        let consumer_crds: Api<CustomResourceDefinition> = Api::all(consumer.clone());
        for group in [plain_group, once_group] {
            let installed = consumer_crds.get(&format!("widgets.{group}")).await?;
            let ours = installed.annotations().get(CONNECTION_ANNOTATION) == Some(&name);
            assert!(ours && is_established(&installed), "{group}: {installed:?}");
        }
        // The provider schema changes; with updatePolicy Once the consumer copy stays pinned.
        let once_api = format!("widgets.{once_group}");
        install_crd(provider, &reshaped_widget_crd(once_group)?).await?;
        tokio::time::sleep(Duration::from_secs(4)).await;
        let followed = reshaped(consumer, &once_api).await?;
        assert!(!followed, "updatePolicy Once keeps the first pulled schema");
        let always = json!({"schema": {"updatePolicy": "Always"}});
        patch_spec(consumer, &name, always).await?;
        wait_reshaped(consumer, &once_api).await
    })
    .await
}

/// A provider CRD `Gear` with each construct schema synthesis must carry over.
fn rich_crd() -> Result<CustomResourceDefinition> {
    let string = json!({"type": "string"});
    let tooth = json!({"type": "object", "required": ["name"],
        "properties": {"name": string, "angle": {"type": "number"}}});
    let inner = json!({"type": "object", "properties": {"flag": {"type": "boolean"}}});
    let spec = json!({"type": "object", "required": ["size"], "properties": {
        "size": {"type": "integer", "minimum": 1},
        "mode": {"type": "string", "enum": ["fast", "slow"]},
        "port": {"x-kubernetes-int-or-string": true},
        "labels": {"type": "object", "additionalProperties": string},
        "teeth": {"type": "array", "items": tooth,
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": string},
        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "nested": {"type": "object", "properties": {"inner": inner}}
    }});
    let mut crd = serde_json::to_value(widget_crd("rich.example.org", "Gear", false)?)?;
    crd["spec"]["names"]["shortNames"] = json!(["gr"]);
    crd["spec"]["names"]["categories"] = json!(["machines"]);
    *crd.pointer_mut(SPEC_SCHEMA).context("spec schema")? = spec;
    Ok(serde_json::from_value(crd)?)
}

#[tokio::test]
async fn openapi_source_with_pull_all_synthesizes_a_crd_that_round_trips_every_field() -> Result<()>
{
    with_private_provider("synth", async |_, consumer, cluster, provider, name| {
        install_crd(provider, &rich_crd()?).await?;
        pull_all(consumer, cluster, &name, "OpenAPI", "Always").await?;
        // Discovered from OpenAPI, without labels, and never a built-in group.
        let seen = wait_ready(consumer, &name).await?;
        assert_eq!(active_source(&seen), Some("OpenAPI"));
        let mut built_in = exported_names(&seen).into_iter();
        let built_in = built_in.find(|n| n.ends_with(".k8s.io") || !n.contains('.'));
        assert_eq!(built_in, None, "built-in groups are never exported");

        let crds: Api<CustomResourceDefinition> = Api::all(consumer.clone());
        let installed = serde_json::to_value(crds.get("gears.rich.example.org").await?)?;
        let carried = json!({"owner": installed["metadata"]["annotations"][CONNECTION_ANNOTATION],
            "shortNames": installed["spec"]["names"]["shortNames"],
            "subresources": installed["spec"]["versions"][0]["subresources"]});
        let expected = json!({"owner": name, "shortNames": ["gr"], "subresources": {"status": {}}});
        assert_eq!(carried, expected, "carried over");

        let resource =
            ApiResource::from_gvk(&GroupVersionKind::gvk("rich.example.org", "v1", "Gear"));
        ensure_namespace(consumer, &name).await?;
        let gears: Api<DynamicObject> = Api::namespaced_with(consumer.clone(), &name, &resource);
        let spec = json!({
            "size": 3, "mode": "fast", "port": "http", "labels": {"a": "b"}, "tags": ["x", "y"],
            "teeth": [{"name": "t1", "angle": 1.5}, {"name": "t2", "angle": 2.5}],
            "extra": {"anything": {"goes": [1, 2]}}, "nested": {"inner": {"flag": true}}
        });
        let gear = DynamicObject::new("g1", &resource).data(json!({ "spec": spec }));
        let read = gears.create(&PostParams::default(), &gear).await?;
        assert_eq!(read.data["spec"], spec, "every field survives");

        let bad = json!({"spec": {"size": 3, "mode": "sideways"}});
        let bad = DynamicObject::new("g2", &resource).data(bad);
        let refused = gears.create(&PostParams::default(), &bad).await;
        expect_refused(refused, (422, "Invalid"), "spec.mode")
    })
    .await
}

/// How often the konnector applied the consumer CRD of `api`.
fn applies(api: &str) -> u64 {
    let labels = ApiLabels { api: api.into() };
    metrics().schema_applies.get_or_create(&labels).get()
}

#[tokio::test]
async fn unchanged_provider_schema_is_not_applied_again() -> Result<()> {
    // A provider of its own: Connections of other tests pulling every exported CRD of the
    // shared provider would pin this one to themselves.
    with_private_provider("refresh", async |_, consumer, cluster, provider, name| {
        let group = "refresh.schema.example.org";
        let api = format!("widgets.{group}");
        install_crd(provider, &widget_crd(group, "Widget", true)?).await?;
        pull_all(consumer, cluster, &name, "CRD", "Always").await?;
        let first = applies(&api);
        assert!(first >= 1, "the first reconcile applies the CRD");
        // The test konnector reconciles Connections every second: several periods pass.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(applies(&api), first, "unchanged, not applied again");

        install_crd(provider, &reshaped_widget_crd(group)?).await?;
        wait_reshaped(consumer, &api).await?;
        let after_change = applies(&api);
        assert!(after_change > first);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(applies(&api), after_change, "applied once, then left alone");
        anyhow::Ok(())
    })
    .await
}
