//! Provider CRDs other than the plain one-version `Widget` of [`TestApi::crd`]: an API with two
//! versions and a conversion strategy, or one named like a consumer's built-in resource; and
//! a scenario exporting such a CRD as the Connection controller would discover it.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use konnector::api::names::EXPORTED_LABEL;
use konnector::api::{ApiReference, Binding};
use konnector::provider::discovery::exported_from_crd;
use konnector::registry::Engagement;
use serde_json::{Value, json};

use super::{BINDING, Scenario, TestApi};
use crate::fixtures::install_crd;

/// A spec schema keeping every field.
pub fn free_form() -> Value {
    json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

/// `widgets.<group>` of `api` with two served versions: `v1beta1` whose spec has the schema
/// `beta_spec`, and `v1` (the storage version, with a status subresource) whose spec keeps
/// every field; converted between them by `conversion` (a `spec.conversion` value).
pub fn two_version_crd(
    api: &TestApi,
    beta_spec: Value,
    conversion: Value,
) -> anyhow::Result<CustomResourceDefinition> {
    let schema = |spec: Value| {
        json!({ "openAPIV3Schema": { "type": "object",
            "properties": { "spec": spec, "status": free_form() } } })
    };
    Ok(serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": api.name() },
        "spec": {
            "group": api.group,
            "names": { "kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList" },
            "scope": if api.namespaced { "Namespaced" } else { "Cluster" },
            "conversion": conversion,
            "versions": [
                { "name": "v1beta1", "served": true, "storage": false, "schema": schema(beta_spec) },
                { "name": "v1", "served": true, "storage": true,
                  "subresources": { "status": {} }, "schema": schema(free_form()) },
            ],
        },
    }))?)
}

/// Webhook conversion through a service that does not exist: the provider never calls it for
/// objects read and written in the storage version.
pub fn unreachable_webhook() -> Value {
    json!({ "strategy": "Webhook", "webhook": {
        "clientConfig": { "url": "https://conversion.invalid:8443/convert" },
        "conversionReviewVersions": ["v1"],
    }})
}

/// A namespaced one-version CRD `<plural>.<group>` of kind `kind` (singular: `kind`
/// lowercase), e.g. plural `configmaps` in a custom group.
pub fn named_crd(
    group: &str,
    plural: &str,
    kind: &str,
) -> anyhow::Result<CustomResourceDefinition> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("{plural}.{group}") },
        "spec": {
            "group": group,
            "names": { "kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                       "listKind": format!("{kind}List") },
            "scope": "Namespaced",
            "versions": [{ "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object",
                    "properties": { "spec": free_form() } } } }],
        },
    }))?)
}

/// `(name, served, storage)` of every version of a CRD, in order.
pub fn versions_of(crd: &CustomResourceDefinition) -> Vec<(String, bool, bool)> {
    let versions = crd.spec.versions.iter();
    versions
        .map(|v| (v.name.clone(), v.served, v.storage))
        .collect()
}

impl Scenario {
    /// Installs `crd` on the provider labelled exported, and engages the Connection with the
    /// export record the Connection controller discovers from it (its served versions).
    pub async fn export_crd(&self, crd: &CustomResourceDefinition) -> anyhow::Result<Engagement> {
        let mut crd = crd.clone();
        crd.metadata.labels = Some(BTreeMap::from([(
            EXPORTED_LABEL.to_string(),
            "true".to_string(),
        )]));
        install_crd(&self.provider, &crd).await?;
        let mut engagement = self.engage();
        engagement.exported = vec![exported_from_crd(&crd)];
        Ok(self.engagements.engage(engagement))
    }

    /// The scenario's Binding `<ns>/widgets`, listing the API `name` instead of its own.
    pub fn binding_listing(&self, name: &str) -> Binding {
        let mut binding = self.new_binding();
        binding.spec.apis = vec![ApiReference {
            name: name.to_string(),
        }];
        debug_assert_eq!(binding.metadata.name.as_deref(), Some(BINDING));
        binding
    }
}
