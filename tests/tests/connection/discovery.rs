//! Discovery per schema source, schema installation, updatePolicy, the synthesis round trip,
//! and a consumer CRD applied only when its provider schema changed.

use super::*;
use kbind_policy_schema_synthesis::fidelity::differences;
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
async fn unchanged_provider_schema_is_neither_read_nor_applied_again() -> Result<()> {
    // A provider of its own: Connections of other tests pulling every exported CRD of the
    // shared provider would pin this one to themselves.
    with_private_provider("refresh", async |_, consumer, cluster, provider, name| {
        let group = "refresh.schema.example.org";
        let api = format!("widgets.{group}");
        install_crd(provider, &widget_crd(group, "Widget", true)?).await?;
        pull_all(consumer, cluster, &name, "CRD", "Always").await?;
        let first = applies(&api);
        assert!(first >= 1, "the first reconcile applies the CRD");
        let reads = || {
            served_requests(
                provider,
                "GET",
                "apiextensions.k8s.io",
                "customresourcedefinitions",
            )
        };
        // The first reconciles may still read it while the revision is first recorded.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let read = reads().await?;
        // The test konnector reconciles Connections every second: several periods pass.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(applies(&api), first, "unchanged, not applied again");
        assert_eq!(
            reads().await?,
            read,
            "unchanged, the provider schema is not read again"
        );

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

/// Registers `version` of `group` as served by a Service that does not exist: the aggregator
/// lists the group and answers 503 for it, as for a `metrics.k8s.io` whose backend is down.
async fn register_down_apiservice(provider: &Client, group: &str, version: &str) -> Result<()> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiregistration.k8s.io", "v1", "APIService"),
        "apiservices",
    );
    let apiservices: Api<DynamicObject> = Api::all_with(provider.clone(), &resource);
    let apiservice = DynamicObject::new(&format!("{version}.{group}"), &resource).data(json!({
        "spec": {
            "group": group, "version": version,
            "service": {"namespace": "default", "name": "nowhere", "port": 443},
            "insecureSkipTLSVerify": true, "groupPriorityMinimum": 1000, "versionPriority": 15
        }
    }));
    apiservices
        .create(&PostParams::default(), &apiservice)
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_down_apiservice_leaves_other_groups_discovered_and_holds_a_known_group_for_the_grace_period()
-> Result<()> {
    with_private_provider(
        "apiservice",
        async |_, consumer, cluster, provider, name| {
            let (healthy, held) = ("spare.example.org", "held.example.org");
            install_crd(provider, &widget_crd(healthy, "Sprocket", false)?).await?;
            install_crd(provider, &widget_crd(held, "Widget", false)?).await?;
            let schema: SchemaPolicy = serde_json::from_value(json!({"source": "OpenAPI"}))?;
            connect(consumer, cluster, &name, schema, false).await?;
            let (sprockets, widgets) = (format!("sprockets.{healthy}"), format!("widgets.{held}"));
            let both = |c: &Connection| {
                let names = exported_names(c);
                names.contains(&sprockets) && names.contains(&widgets)
            };
            wait_connection(consumer, &name, "both exports", both).await?;

            // A new group whose backend is down, and a second version of a known group, down too.
            register_down_apiservice(provider, "down.example.org", "v1").await?;
            register_down_apiservice(provider, held, "v2").await?;
            let incomplete = |c: &Connection| {
                has_condition(c, "ProviderDegraded", "True", "DiscoveryIncomplete")
                    && message(c, "ProviderDegraded").contains(held)
            };
            let seen = wait_connection(consumer, &name, "DiscoveryIncomplete", incomplete).await?;
            says(
                message(&seen, "ProviderDegraded"),
                &[
                    "down.example.org",
                    "last known exports, if any, are kept",
                    "apiservices",
                ],
            );
            assert!(
                both(&seen),
                "held and healthy exports stay: {:?}",
                exported_names(&seen)
            );
            assert!(has_condition(&seen, "Ready", "True", "AsExpected"));

            // Past the grace period, the group that still fails is released; the rest stays.
            let released = |c: &Connection| !exported_names(c).contains(&widgets);
            let seen =
                wait_connection(consumer, &name, "the held group released", released).await?;
            assert!(exported_names(&seen).contains(&sprockets));
            assert!(has_condition(&seen, "Ready", "True", "AsExpected"));
            says(
                message(&seen, "ProviderDegraded"),
                &["its APIs are released"],
            );
            published_once(
                consumer,
                &name,
                "Warning",
                "DiscoveryIncomplete",
                &["down.example.org"],
            )
            .await?;
            delete_connection(consumer, &name).await
        },
    )
    .await
}

/// The provider CRD the schema-synthesis fixtures were captured from: every construct
/// `/openapi/v3` publishes (zero defaults, a closed object, rules, bounds, embedded resources).
const PROBES_CRD: &str =
    include_str!("../../../policies/schema-synthesis/testdata/openapi/source-probes-crd.json");

/// A resource of the Probes' group served only at `v1alpha1`, while the group prefers `v1`.
fn alpha_only_crd() -> Result<CustomResourceDefinition> {
    let spec = json!({"type": "object", "properties": {
        "enabled": {"type": "boolean", "default": false},
        "note": {"type": "string", "default": ""}}});
    Ok(serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "sensors.fidelity.example.org"},
        "spec": {"group": "fidelity.example.org", "scope": "Namespaced",
            "names": {"plural": "sensors", "singular": "sensor", "kind": "Sensor",
                      "listKind": "SensorList"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "selectableFields": [{"jsonPath": ".spec.note"}],
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}}}]}
    }))?)
}

/// Every difference between the provider's CRD `name` and the consumer's, version `version`.
async fn schema_differences(
    provider: &Client,
    consumer: &Client,
    name: &str,
    version: &str,
) -> Result<Vec<String>> {
    let schema_of = async |client: &Client| -> Result<Value> {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let crd = serde_json::to_value(crds.get(name).await?)?;
        let versions = crd["spec"]["versions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let found = versions.into_iter().find(|v| v["name"] == version);
        let found = found.with_context(|| format!("{name} has no version {version}"))?;
        Ok(found["schema"]["openAPIV3Schema"].clone())
    };
    let (original, synthesized) = (schema_of(provider).await?, schema_of(consumer).await?);
    Ok(differences(&original, &synthesized)
        .iter()
        .map(ToString::to_string)
        .collect())
}

#[tokio::test]
async fn synthesized_crds_match_the_provider_s_and_take_versions_per_resource() -> Result<()> {
    with_private_provider("fidelity", async |_, consumer, cluster, provider, name| {
        install_crd(provider, &serde_json::from_str(PROBES_CRD)?).await?;
        install_crd(provider, &alpha_only_crd()?).await?;
        pull_all(consumer, cluster, &name, "OpenAPI", "Always").await?;
        for (crd, version) in [
            ("probes.fidelity.example.org", "v1"),
            ("sensors.fidelity.example.org", "v1alpha1"),
        ] {
            let found = schema_differences(provider, consumer, crd, version).await?;
            assert!(found.is_empty(), "{crd}:\n{}", found.join("\n"));
        }
        // The group prefers v1; the Sensors are served only at v1alpha1, which they store.
        let crds: Api<CustomResourceDefinition> = Api::all(consumer.clone());
        let sensors = crds.get("sensors.fidelity.example.org").await?;
        let versions: Vec<_> = sensors
            .spec
            .versions
            .iter()
            .map(|v| (v.name.as_str(), v.served, v.storage))
            .collect();
        assert_eq!(versions, [("v1alpha1", true, true)]);
        let selectable = serde_json::to_value(&sensors.spec.versions[0].selectable_fields)?;
        assert_eq!(selectable, json!([{"jsonPath": ".spec.note"}]));
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn pull_all_takes_over_a_crd_pinned_to_a_deleted_connection_only_from_the_same_provider()
-> Result<()> {
    with_private_provider(
        "handover-all",
        async |_, consumer, cluster, provider, name| {
            let group = "handover-all.example.org";
            for kind in ["Widget", "Gadget"] {
                install_crd(provider, &widget_crd(group, kind, true)?).await?;
            }
            let (widgets, gadgets) = (format!("widgets.{group}"), format!("gadgets.{group}"));
            // As a deleted Connection left them: widgets installed from this provider cluster,
            // gadgets from another.
            let gone = format!("{name}-gone");
            let uid = cluster_uid(provider).await?;
            for (kind, recorded) in [("Widget", uid.as_str()), ("Gadget", "another-cluster")] {
                let mut crd = widget_crd(group, kind, false)?;
                let annotations = crd.annotations_mut();
                annotations.insert(CONNECTION_ANNOTATION.into(), gone.clone());
                annotations.insert(PROVIDER_CLUSTER_UID_ANNOTATION.into(), recorded.into());
                install_crd(consumer, &crd).await?;
            }
            let schema = json!({"source": "CRD", "pullPolicy": "All"});
            connect(
                consumer,
                cluster,
                &name,
                serde_json::from_value(schema)?,
                false,
            )
            .await?;
            let how = format!("{CONNECTION_ANNOTATION}={name} --overwrite");
            let told = |c: &Connection| {
                holds(c, "SchemaInSync=False", "CRDNotManaged")
                    && message(c, "SchemaInSync").contains(&how)
            };
            let seen =
                wait_connection(consumer, &name, "told how to hand gadgets over", told).await?;
            says(
                message(&seen, "SchemaInSync"),
                &[
                    &gadgets,
                    &format!("pinned to Connection {gone}, which no longer exists"),
                ],
            );
            assert!(
                !message(&seen, "SchemaInSync").contains(&widgets),
                "widgets is taken over, not refused: {}",
                message(&seen, "SchemaInSync")
            );
            let crds: Api<CustomResourceDefinition> = Api::all(consumer.clone());
            let pinned = async |api: &str| -> Result<Option<String>> {
                let crd = crds.get(api).await?;
                Ok(crd.annotations().get(CONNECTION_ANNOTATION).cloned())
            };
            assert_eq!(pinned(&widgets).await?, Some(name.clone()), "re-pinned");
            assert_eq!(pinned(&gadgets).await?, Some(gone), "left as it was");
            Ok(())
        },
    )
    .await
}
