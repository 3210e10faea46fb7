//! The built-in schema synthesis: from discovery facts and the provider's OpenAPI v3
//! document for each version, the apiextensions.k8s.io/v1 CustomResourceDefinition the
//! konnector installs on the consumer.
//!
//! ```text
//! discovery facts ──┐
//!                   ├─▶ per version: find the kind's schema (x-kubernetes-group-version-kind)
//! /openapi/v3 doc ──┘       └─▶ structural::root_schema (inline $refs, structural rules)
//!                                  └─▶ CRD {names, scope, versions[served, storage, status]}
//! ```
//!
//! Served and storage flags come from discovery as given; exactly one version must be the
//! storage version. The status subresource is enabled for a version when discovery lists
//! `status` for it. Errors name the input field or the JSON pointer in the OpenAPI document.
//!
//! A document the apiextensions apiserver publishes for CRDs ([`Origin::Crd`]) already holds a
//! structural schema: it is carried over as published, defaults and all ([`fidelity`] lists
//! what publishing itself changes). Documents of aggregated servers ([`Origin::GoTypes`]) are
//! made structural by the rules in [`structural`].

pub mod fidelity;
mod rules;
pub mod structural;

pub use structural::Origin;

use kbind_policy_sdk::openapi::Document;
use kbind_policy_sdk::schema::{Guest, ResourceScope, SchemaInput, SynthesisError};
use serde_json::{Value, json};

/// The built-in policy, exported as the component's `kbind:policy/schema` interface.
pub struct BuiltinSchemaSynthesis;

impl Guest for BuiltinSchemaSynthesis {
    /// Takes no settings: an empty document, or the module is refused with a message naming
    /// what was given.
    fn configure(settings: String) -> Result<(), String> {
        kbind_policy_sdk::settings::none(&settings)
    }

    fn synthesize(input: SchemaInput) -> Result<String, SynthesisError> {
        let crd = synthesize(&input)?;
        serde_json::to_string(&crd)
            .map_err(|e| SynthesisError::at("", format!("serialising the CRD: {e}")))
    }
}

kbind_policy_sdk::export_schema_synthesis!(BuiltinSchemaSynthesis);

/// Builds the CRD as a JSON value.
pub fn synthesize(input: &SchemaInput) -> Result<Value, SynthesisError> {
    validate_facts(input)?;
    let mut versions = Vec::with_capacity(input.versions.len());
    for (i, v) in input.versions.iter().enumerate() {
        let doc = Document::parse(&v.openapi)
            .map_err(|e| SynthesisError::at(format!("versions/{i}/openapi"), e.message))?;
        let (pointer, kind_schema) = doc.schema_for_kind(&input.group, &v.name, &input.kind)?;
        let origin = Origin::of(&doc);
        let selectable = selectable_fields(kind_schema, origin);
        let schema = structural::root_schema(&doc, &pointer, origin)?;
        let mut version = json!({
            "name": v.name,
            "served": v.served,
            "storage": v.storage,
            "schema": {"openAPIV3Schema": schema},
        });
        if v.subresources.iter().any(|s| s == "status") {
            version["subresources"] = json!({"status": {}});
        }
        if !selectable.is_empty() {
            version["selectableFields"] = Value::Array(selectable);
        }
        versions.push(version);
    }
    let singular = if input.singular.is_empty() {
        input.kind.to_lowercase()
    } else {
        input.singular.clone()
    };
    let mut names = json!({
        "plural": input.resource,
        "singular": singular,
        "kind": input.kind,
        "listKind": format!("{}List", input.kind),
    });
    if !input.short_names.is_empty() {
        names["shortNames"] = json!(input.short_names);
    }
    if !input.categories.is_empty() {
        names["categories"] = json!(input.categories);
    }
    Ok(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{}.{}", input.resource, input.group)},
        "spec": {
            "group": input.group,
            "names": names,
            "scope": match input.scope {
                ResourceScope::Namespaced => "Namespaced",
                ResourceScope::Cluster => "Cluster",
            },
            "versions": versions,
        },
    }))
}

/// A CRD's `selectableFields`, which the apiserver publishes as the kind's
/// `x-kubernetes-selectable-fields` (`{fieldPath: "spec.color"}` for `{jsonPath:
/// ".spec.color"}`). Only a CRD's are carried: those of Go types name fields (`metadata.name`)
/// that a CRD may not list.
fn selectable_fields(kind_schema: &Value, origin: Origin) -> Vec<Value> {
    if origin != Origin::Crd {
        return Vec::new();
    }
    kind_schema
        .get("x-kubernetes-selectable-fields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|f| f.get("fieldPath").and_then(Value::as_str))
        .map(|path| json!({"jsonPath": format!(".{path}")}))
        .collect()
}

fn validate_facts(input: &SchemaInput) -> Result<(), SynthesisError> {
    if !input.group.contains('.') {
        return Err(SynthesisError::at(
            "group",
            format!(
                "group {:?} cannot be served by a CRD: a CRD group must be a domain name with at least one dot",
                input.group
            ),
        ));
    }
    if input.resource.is_empty() {
        return Err(SynthesisError::at(
            "resource",
            "the plural resource name is empty",
        ));
    }
    if input.kind.is_empty() {
        return Err(SynthesisError::at("kind", "the kind is empty"));
    }
    if input.versions.is_empty() {
        return Err(SynthesisError::at("versions", "discovery lists no version"));
    }
    let storage: Vec<&str> = input
        .versions
        .iter()
        .filter(|v| v.storage)
        .map(|v| v.name.as_str())
        .collect();
    if storage.len() != 1 {
        return Err(SynthesisError::at(
            "versions",
            format!(
                "exactly one version must be the storage version, found {}: {storage:?}",
                storage.len()
            ),
        ));
    }
    Ok(())
}
