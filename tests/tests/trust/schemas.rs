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

fn hostile_crd(api: &TestApi) -> serde_json::Value {
    let free_form = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": api.name(),
            "labels": {"evil.example.com/label": "x"},
            "annotations": {CONNECTION_ANNOTATION: "someone-else", "evil.example.com/note": "x"},
            "finalizers": [HOSTILE_FINALIZER],
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "Namespace", "name": "kube-system",
                "uid": "00000000-0000-0000-0000-000000000000"
            }]
        },
        "spec": {
            "group": api.group,
            "names": {
                "plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList",
                "shortNames": ["po", "tswd"],
                "categories": ["all", "trustschemas"]
            },
            "scope": "Namespaced",
            "conversion": {"strategy": "Webhook", "webhook": {
                "clientConfig": {"url": "https://evil.example.com/convert"},
                "conversionReviewVersions": ["v1"]
            }},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": free_form, "status": free_form}
                }}
            }]
        }
    })
}

#[test]
fn hostile_schema_module_answer_is_installed_without_its_hostile_parts() -> anyhow::Result<()> {
    let scenario = Scenario::unbound("trust-schema").namespace("trust-schema-ns");
    let module = fixed_schema_synthesis(&hostile_crd(scenario.api()).to_string())?;
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

        let crd = Api::<CustomResourceDefinition>::all(s.consumer.clone()).get(&s.api.name()).await?;
        let names = &crd.spec.names;
        let conversion = crd.spec.conversion.clone().unwrap_or_default();
        let hostile_finalizers = crd.finalizers().iter().filter(|f| *f == HOSTILE_FINALIZER).count();
        let owners = crd.owner_references().len();
        let foreign_labels = crd.labels().len();
        let foreign_annotations =
            crd.annotations().keys().filter(|k| *k != CONNECTION_ANNOTATION).count();
        println!(
            "survived: {hostile_finalizers} hostile finalizer(s), {owners} ownerReference(s), {foreign_labels} label(s), {foreign_annotations} foreign annotation(s), conversion {:?}, shortNames {:?}, categories {:?}",
            conversion.strategy, names.short_names, names.categories
        );
        anyhow::ensure!(hostile_finalizers == 0, "{:?}", crd.finalizers());
        anyhow::ensure!(owners == 0, "{:?}", crd.owner_references());
        anyhow::ensure!(foreign_labels == 0, "{:?}", crd.labels());
        anyhow::ensure!(foreign_annotations == 0, "{:?}", crd.annotations());
        let pin = crd.annotations().get(CONNECTION_ANNOTATION);
        anyhow::ensure!(pin == Some(&s.name), "pinned to {pin:?}");
        anyhow::ensure!(
            conversion.strategy == "None" && conversion.webhook.is_none(),
            "{conversion:?}"
        );
        anyhow::ensure!(
            names.short_names.as_deref() == Some(&["tswd".to_string()][..]),
            "{:?}",
            names.short_names
        );
        anyhow::ensure!(
            names.categories.as_deref() == Some(&["trustschemas".to_string()][..]),
            "{:?}",
            names.categories
        );

        // What is left serves the API: an instance reaches the provider.
        s.create("w", json!({"size": 1})).await?;
        s.copy("w").await?;
        Ok(())
    })
}
