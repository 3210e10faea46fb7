//! Faults in the shape of a provider API: several versions the provider converts with a
//! webhook the consumer cannot call, and a resource named like one the consumer already
//! serves. The consumer never converts by relabelling `apiVersion` (which drops the fields the
//! storage version lacks without a word), and never lets a bound API take over a name
//! `kubectl get` resolves to a consumer resource.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use kbind_tests::syncenv::provider_crds::{
    free_form, named_crd, two_version_crd, unreachable_webhook, versions_of,
};
use kbind_tests::syncenv::{Scenario, TestApi, message, says};
use konnector::api::names::{CONNECTION_ANNOTATION, VERSIONS_LEFT_OUT_ANNOTATION};

/// The scenario API's resource in version `version`.
fn in_version(api: &TestApi, version: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&api.group, version, "Widget"),
        "widgets",
    )
}

/// `(name, served, storage)` of every version of the consumer CRD of `name`.
async fn consumer_versions(s: &Scenario, name: &str) -> anyhow::Result<Vec<(String, bool, bool)>> {
    let crds: Api<CustomResourceDefinition> = Api::all(s.consumer.clone());
    Ok(versions_of(&crds.get(name).await?))
}

/// Versions written as `(name, served, storage)`.
fn expected(versions: &[(&str, bool, bool)]) -> Vec<(String, bool, bool)> {
    versions
        .iter()
        .map(|(n, a, b)| ((*n).to_string(), *a, *b))
        .collect()
}

#[test]
fn webhook_converted_api_serves_only_the_synced_version() -> anyhow::Result<()> {
    Scenario::unbound("versions-webhook").run(async |s| {
        // v1beta1 has a field v1 lacks; the provider converts with a webhook.
        let beta = json!({"type": "object", "properties": {"legacy": {"type": "string"}}});
        s.export_crd(&two_version_crd(&s.api, beta, unreachable_webhook())?)
            .await?;
        s.bind().await?;

        let name = s.api.name();
        let served = consumer_versions(s, &name).await?;
        assert_eq!(
            served,
            expected(&[("v1", true, true)]),
            "the synced version only"
        );
        let status = s.binding_status().await?.unwrap_or_default();
        says(
            message(&status, "Ready"),
            &[&name, "v1beta1 left out", "webhook", "only v1 is served"],
        );

        // The left-out version is refused by the consumer apiserver, not pruned into v1.
        let beta_api = Api::<DynamicObject>::namespaced_with(
            s.consumer.clone(),
            s.ns(),
            &in_version(&s.api, "v1beta1"),
        );
        let object = DynamicObject::new("old", &in_version(&s.api, "v1beta1"))
            .within(s.ns())
            .data(json!({"spec": {"legacy": "kept?"}}));
        let refused = beta_api.create(&PostParams::default(), &object).await;
        let code = refused.as_ref().err().and_then(|e| match e {
            kube::Error::Api(status) => Some(status.code),
            _ => None,
        });
        assert_eq!(
            code,
            Some(404),
            "writing v1beta1 on the consumer: {refused:?}"
        );

        // The synced version round-trips to the provider.
        s.create("w", json!({"size": 3, "color": "red"})).await?;
        let copy = s.copy("w").await?;
        assert_eq!(copy.data["spec"], json!({"size": 3, "color": "red"}));
        Ok(())
    })
}

#[test]
fn a_left_out_version_still_stored_on_the_consumer_stays_unserved() -> anyhow::Result<()> {
    Scenario::unbound("versions-stored").run(async |s| {
        // An earlier install served both versions with v1beta1 as storage: the apiserver lists
        // it in status.storedVersions, and refuses to drop it from spec.versions.
        let beta = json!({"type": "object", "properties": {"legacy": {"type": "string"}}});
        let mut earlier = two_version_crd(&s.api, beta.clone(), json!({"strategy": "None"}))?;
        earlier.spec.versions[0].storage = true;
        earlier.spec.versions[1].storage = false;
        earlier.metadata.annotations =
            Some([(CONNECTION_ANNOTATION.into(), s.stack.name.clone())].into());
        kbind_tests::fixtures::install_crd(&s.consumer, &earlier).await?;

        s.export_crd(&two_version_crd(&s.api, beta, unreachable_webhook())?)
            .await?;
        s.bind().await?;
        let name = s.api.name();
        let served = consumer_versions(s, &name).await?;
        let kept = expected(&[("v1beta1", false, false), ("v1", true, true)]);
        assert_eq!(served, kept, "v1beta1 kept unserved, v1 served and storage");
        let status = s.binding_status().await?.unwrap_or_default();
        says(
            message(&status, "Ready"),
            &["v1beta1 left out", "storedVersions"],
        );

        s.create("w", json!({"size": 1})).await?;
        s.copy("w").await?;
        Ok(())
    })
}

#[test]
fn none_converted_versions_are_all_served() -> anyhow::Result<()> {
    Scenario::unbound("versions-none").run(async |s| {
        let crd = two_version_crd(&s.api, free_form(), json!({"strategy": "None"}))?;
        s.export_crd(&crd).await?;
        s.bind().await?;

        let name = s.api.name();
        let crds: Api<CustomResourceDefinition> = Api::all(s.consumer.clone());
        let installed = crds.get(&name).await?;
        let served = versions_of(&installed);
        let both = expected(&[("v1beta1", true, false), ("v1", true, true)]);
        assert_eq!(served, both, "every version, as the provider serves them");
        let note = installed.metadata.annotations.unwrap_or_default();
        assert_eq!(note.get(VERSIONS_LEFT_OUT_ANNOTATION), None);

        // An instance written in v1beta1 is synced (in v1) like any other.
        let beta = in_version(&s.api, "v1beta1");
        let object = DynamicObject::new("beta", &beta)
            .within(s.ns())
            .data(json!({"spec": {"size": 2}}));
        Api::<DynamicObject>::namespaced_with(s.consumer.clone(), s.ns(), &beta)
            .create(&PostParams::default(), &object)
            .await?;
        let copy = s.copy("beta").await?;
        assert_eq!(copy.data["spec"], json!({"size": 2}));
        Ok(())
    })
}

#[test]
fn crd_plural_colliding_with_a_consumer_resource_is_refused() -> anyhow::Result<()> {
    Scenario::unbound("versions-collide").run(async |s| {
        // A provider API in a custom group whose plural is the core group's `configmaps`.
        let group = &s.api.group;
        let crd = named_crd(group, "configmaps", "ConfigMap")?;
        let name = format!("configmaps.{group}");
        s.export_crd(&crd).await?;
        s.create_binding(&s.binding_listing(&name)).await?;

        let status = s.binding_has("Ready", "False", "NameCollision").await?;
        says(
            message(&status, "Ready"),
            &[
                &name,
                "plural \"configmaps\"",
                "(configmaps)",
                "kubectl get configmaps",
            ],
        );
        let crds: Api<CustomResourceDefinition> = Api::all(s.consumer.clone());
        assert!(crds.get_opt(&name).await?.is_none(), "{name} installed");
        // `kubectl get configmaps` still resolves to one resource: the core group's.
        let core = s.consumer.list_core_api_versions_aggregated().await?;
        let groups = s.consumer.list_api_groups_aggregated().await?;
        let holders: Vec<String> = [core, groups]
            .iter()
            .flat_map(|list| &list.items)
            .flat_map(|group| {
                let group_name = group.metadata.as_ref().and_then(|m| m.name.clone());
                let resources = group.versions.iter().flat_map(|v| &v.resources);
                let plurals = resources.filter_map(|r| r.resource.clone());
                plurals
                    .filter(|p| p == "configmaps")
                    .map(move |p| format!("{p}.{}", group_name.clone().unwrap_or_default()))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(holders, ["configmaps."], "resources named configmaps");

        let crds_on_provider: Api<CustomResourceDefinition> = Api::all(s.provider.clone());
        crds_on_provider
            .delete(&name, &DeleteParams::default())
            .await?;
        Ok(())
    })
}
