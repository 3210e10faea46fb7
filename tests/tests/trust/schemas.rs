//! What of a synthesized CRD reaches the consumer: a hostile schema module answers a CRD with
//! a conversion webhook, finalizers, ownerReferences, foreign labels and annotations, the
//! short name `po` and the category `all`; the installed CRD has none of them, and the API
//! still syncs.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_tests::faults::schema_module::fixed_schema_synthesis;
use kbind_tests::syncenv::{Scenario, TestApi};
use konnector::api::Connection;
use konnector::api::names::CONNECTION_ANNOTATION;
use konnector::policy::{Policies, PolicyRole};
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const HOSTILE_FINALIZER: &str = "evil.example.com/hold";

/// The test API's CRD with every part a schema module must not get onto the consumer.
fn hostile_crd(api: &TestApi) -> anyhow::Result<serde_json::Value> {
    let mut crd = serde_json::to_value(api.crd()?)?;
    crd["metadata"] = json!({
        "name": api.name(),
        "labels": {"evil.example.com/label": "x"},
        "annotations": {CONNECTION_ANNOTATION: "someone-else", "evil.example.com/note": "x"},
        "finalizers": [HOSTILE_FINALIZER],
        "ownerReferences": [{
            "apiVersion": "v1", "kind": "Namespace", "name": "kube-system",
            "uid": "00000000-0000-0000-0000-000000000000"
        }]
    });
    crd["spec"]["names"]["shortNames"] = json!(["po", "tswd"]);
    crd["spec"]["names"]["categories"] = json!(["all", "trustschemas"]);
    crd["spec"]["conversion"] = json!({"strategy": "Webhook", "webhook": {
        "clientConfig": {"url": "https://evil.example.com/convert"},
        "conversionReviewVersions": ["v1"]
    }});
    Ok(crd)
}

#[test]
fn hostile_schema_module_answer_is_installed_without_its_hostile_parts() -> anyhow::Result<()> {
    let scenario = Scenario::unbound("trust-schema").namespace("trust-schema-ns");
    let module = fixed_schema_synthesis(&hostile_crd(scenario.api())?.to_string())?;
    let policies = Policies::builtin()?.with_module(
        PolicyRole::SchemaSynthesis,
        &module,
        "hostile-schema.wasm",
    )?;
    scenario.policies(policies).run(async |s| {
        // The OpenAPI source: the consumer CRD comes from the schema module.
        let openapi = json!({"spec": {"schema": {"source": "OpenAPI"}}});
        Api::<Connection>::all(s.consumer.clone())
            .patch(&s.name, &PatchParams::default(), &Patch::Merge(openapi))
            .await?;
        s.export_and_bind().await?;

        let crds = Api::<CustomResourceDefinition>::all(s.consumer.clone());
        let crd = crds.get(&s.api.name()).await?;
        let installed = json!({
            "hostile finalizer": crd.finalizers().iter().any(|f| f == HOSTILE_FINALIZER),
            "ownerReferences": crd.owner_references(),
            "labels": crd.labels(),
            "annotations": crd.annotations(),
            "conversion": crd.spec.conversion,
            "shortNames": crd.spec.names.short_names,
            "categories": crd.spec.names.categories,
        });
        // The provider cluster it was installed from: the provider's kube-system UID.
        let kube_system =
            kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(s.provider.clone())
                .get("kube-system")
                .await?;
        let expected = json!({
            "hostile finalizer": false,
            "ownerReferences": [],
            "labels": {},
            "annotations": {
                CONNECTION_ANNOTATION: s.name,
                konnector::api::names::PROVIDER_CLUSTER_UID_ANNOTATION: kube_system.metadata.uid,
            },
            "conversion": {"strategy": "None"},
            "shortNames": ["tswd"],
            "categories": ["trustschemas"],
        });
        assert_eq!(
            installed, expected,
            "what of the module's answer was installed"
        );

        // What is left serves the API: an instance reaches the provider.
        s.create("w", json!({"size": 1})).await?;
        s.copy("w").await?;
        Ok(())
    })
}
