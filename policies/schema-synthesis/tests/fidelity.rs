//! Schema fidelity: a CRD synthesized from what `/openapi/v3` publishes for a provider CRD
//! keeps everything of the original that changes what the API server stores, accepts or
//! shows. Each test compares the synthesized schema with the original through the
//! differential check (`fidelity::differences`), which must find nothing.
//!
//! `testdata/openapi/fidelity.example.org-v1.json` was captured from a real kube-apiserver
//! serving `source-probes-crd.json`; the hand-made cases wrap an original schema the way the
//! apiextensions apiserver publishes it (title, root apiVersion/kind/metadata, group-version-kind).

use kbind_policy_schema_synthesis::fidelity::differences;
use kbind_policy_schema_synthesis::{Origin, synthesize};
use kbind_policy_sdk::schema::{ResourceScope, SchemaInput, SynthesisError, VersionFacts};
use serde_json::{Value, json};

fn testdata(name: &str) -> String {
    let path = format!("{}/testdata/openapi/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

fn json_file(name: &str) -> Value {
    serde_json::from_str(&testdata(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn input(group: &str, kind: &str, versions: Vec<VersionFacts>) -> SchemaInput {
    SchemaInput {
        group: group.into(),
        resource: format!("{}s", kind.to_lowercase()),
        kind: kind.into(),
        singular: kind.to_lowercase(),
        short_names: vec![],
        categories: vec![],
        scope: ResourceScope::Namespaced,
        versions,
    }
}

fn version(name: &str, storage: bool, doc: String) -> VersionFacts {
    VersionFacts {
        name: name.into(),
        served: true,
        storage,
        subresources: vec![],
        openapi: doc,
    }
}

/// What the apiextensions apiserver publishes at `/openapi/v3/apis/a.example.org/<version>`
/// for a CRD `Thing` whose schema is `original`.
fn published(version: &str, original: &Value) -> String {
    let mut schema = original.clone();
    let described = |d: &str| json!({"type": "string", "description": d});
    schema["properties"]["apiVersion"] = described("APIVersion defines the versioned schema");
    schema["properties"]["kind"] = described("Kind is a string value");
    schema["properties"]["metadata"] = json!({"description": "Standard object's metadata.",
        "allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]});
    schema["x-kubernetes-group-version-kind"] =
        json!([{"group": "a.example.org", "kind": "Thing", "version": version}]);
    json!({"openapi": "3.0.0",
    "info": {"title": Origin::CRD_DOCUMENT_TITLE, "version": "v0.1.0"},
    "components": {"schemas": {
        format!("org.example.a.{version}.Thing"): schema,
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object",
            "properties": {"name": {"type": "string"}}}
    }}})
    .to_string()
}

fn synthesized_schema(input: &SchemaInput, index: usize) -> Value {
    match synthesize(input) {
        Ok(crd) => crd["spec"]["versions"][index]["schema"]["openAPIV3Schema"].clone(),
        Err(e) => panic!("synthesis failed at {}: {}", e.path, e.message),
    }
}

/// Synthesizes `spec` (the schema of `.spec`) and asserts nothing differs from the original.
fn round_trip(spec: Value) -> Value {
    let original = json!({"type": "object", "properties": {"spec": spec}});
    let thing = input(
        "a.example.org",
        "Thing",
        vec![version("v1", true, published("v1", &original))],
    );
    let synthesized = synthesized_schema(&thing, 0);
    let found: Vec<String> = differences(&original, &synthesized)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(found.is_empty(), "differences:\n{}", found.join("\n"));
    synthesized["properties"]["spec"].clone()
}

fn refused(spec: Value) -> SynthesisError {
    let original = json!({"type": "object", "properties": {"spec": spec}});
    let thing = input(
        "a.example.org",
        "Thing",
        vec![version("v1", true, published("v1", &original))],
    );
    match synthesize(&thing) {
        Ok(crd) => panic!("synthesis should fail, got {crd}"),
        Err(e) => e,
    }
}

#[test]
fn a_crd_as_a_real_apiserver_publishes_it_is_synthesized_without_differences() {
    let source = json_file("source-probes-crd.json");
    let probes = input(
        "fidelity.example.org",
        "Probe",
        vec![version(
            "v1",
            true,
            testdata("fidelity.example.org-v1.json"),
        )],
    );
    let original = &source["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let found: Vec<String> = differences(original, &synthesized_schema(&probes, 0))
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(found.is_empty(), "differences:\n{}", found.join("\n"));
}

#[test]
fn the_captured_widgets_crd_is_synthesized_without_differences() {
    let source = json_file("source-widgets-crd.json");
    let widgets = input(
        "example.org",
        "Widget",
        vec![version("v1", true, testdata("example.org-v1.json"))],
    );
    let original = &source["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let found: Vec<String> = differences(original, &synthesized_schema(&widgets, 0))
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(found.is_empty(), "differences:\n{}", found.join("\n"));
}

#[test]
fn empty_and_false_defaults_survive_synthesis() {
    let spec = round_trip(json!({"type": "object", "default": {}, "properties": {
        "empty": {"type": "string", "default": ""},
        "off": {"type": "boolean", "default": false},
        "zero": {"type": "integer", "default": 0},
        "list": {"type": "array", "default": [], "items": {"type": "string"}},
        "mode": {"type": "string", "default": "fast"}
    }}));
    assert_eq!(spec["default"], json!({}));
    assert_eq!(spec["properties"]["empty"]["default"], json!(""));
    assert_eq!(spec["properties"]["off"]["default"], json!(false));
    assert_eq!(spec["properties"]["zero"]["default"], json!(0));
}

#[test]
fn preserve_unknown_fields_only_where_the_original_has_it() {
    let spec = round_trip(json!({"type": "object", "properties": {
        "closed": {"type": "object"},
        "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "anything": {"x-kubernetes-preserve-unknown-fields": true},
        "status": {"type": "object", "properties": {"n": {"type": "integer"}}}
    }}));
    let props = &spec["properties"];
    assert_eq!(props["closed"], json!({"type": "object"}));
    assert_eq!(props["open"]["x-kubernetes-preserve-unknown-fields"], true);
    assert!(spec.get("x-kubernetes-preserve-unknown-fields").is_none());
}

#[test]
fn descriptions_formats_enums_and_nullable_survive_synthesis() {
    round_trip(
        json!({"type": "object", "description": "The spec.", "properties": {
            "when": {"type": "string", "format": "date-time", "nullable": true, "description": "When."},
            "mode": {"type": "string", "enum": ["fast", "slow"]},
            "ratio": {"type": "number", "format": "double", "nullable": true}
        }}),
    );
}

#[test]
fn int_or_string_survives_synthesis() {
    let spec = round_trip(json!({"type": "object", "properties": {
        "bare": {"x-kubernetes-int-or-string": true},
        "spelled": {"x-kubernetes-int-or-string": true,
                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                    "pattern": "^[0-9]+%?$"}
    }}));
    assert_eq!(
        spec["properties"]["bare"]["x-kubernetes-int-or-string"],
        true
    );
    assert_eq!(spec["properties"]["spelled"]["pattern"], "^[0-9]+%?$");
}

#[test]
fn embedded_resources_survive_synthesis() {
    let spec = round_trip(json!({"type": "object", "properties": {
        "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                     "x-kubernetes-preserve-unknown-fields": true},
        "typed": {"type": "object", "x-kubernetes-embedded-resource": true,
                  "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                 "metadata": {"type": "object"}, "data": {"type": "string"}}}
    }}));
    assert_eq!(
        spec["properties"]["typed"]["properties"]["data"]["type"],
        "string"
    );
}

#[test]
fn list_types_and_map_keys_survive_synthesis() {
    round_trip(json!({"type": "object", "properties": {
        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "ports": {"type": "array", "x-kubernetes-list-type": "map",
                  "x-kubernetes-list-map-keys": ["name", "proto"],
                  "items": {"type": "object", "required": ["name"], "properties": {
                      "name": {"type": "string"}, "proto": {"type": "string", "default": "TCP"}}}},
        "atomic": {"type": "array", "x-kubernetes-list-type": "atomic", "items": {"type": "integer"}},
        "labels": {"type": "object", "x-kubernetes-map-type": "granular",
                   "additionalProperties": {"type": "string"}},
        "ref": {"type": "object", "x-kubernetes-map-type": "atomic",
                "properties": {"name": {"type": "string"}}}
    }}));
}

#[test]
fn required_survives_synthesis() {
    let spec = round_trip(
        json!({"type": "object", "required": ["size", "mode"], "properties": {
            "size": {"type": "integer"}, "mode": {"type": "string"},
            "choice": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                       "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}
        }}),
    );
    assert_eq!(spec["required"], json!(["size", "mode"]));
}

#[test]
fn min_max_constraints_survive_synthesis() {
    round_trip(
        json!({"type": "object", "minProperties": 1, "maxProperties": 20, "properties": {
            "n": {"type": "integer", "minimum": 0, "maximum": 10, "exclusiveMaximum": true,
                  "exclusiveMinimum": true, "multipleOf": 2},
            "name": {"type": "string", "minLength": 1, "maxLength": 63, "pattern": "^[a-z]+$"},
            "list": {"type": "array", "minItems": 1, "maxItems": 5, "items": {"type": "string"}},
            "map": {"type": "object", "minProperties": 1, "maxProperties": 3,
                    "additionalProperties": {"type": "string", "maxLength": 8}}
        }}),
    );
}

#[test]
fn cel_validations_and_their_cost_bounds_survive_synthesis() {
    let spec = round_trip(json!({"type": "object",
    "x-kubernetes-validations": [
        {"rule": "self.items.all(i, i.size() < 10)", "message": "short items",
         "fieldPath": ".items", "reason": "FieldValueInvalid"},
        {"rule": "self.name == oldSelf.name", "messageExpression": "'name is immutable'",
         "optionalOldSelf": true}
    ],
    "properties": {
        "items": {"type": "array", "maxItems": 100, "items": {"type": "string", "maxLength": 64}},
        "name": {"type": "string", "maxLength": 253},
        "labels": {"type": "object", "maxProperties": 16,
                   "additionalProperties": {"type": "string", "maxLength": 63},
                   "x-kubernetes-validations": [{"rule": "self.all(k, k.size() < 64)"}]}
    }}));
    assert_eq!(
        spec["x-kubernetes-validations"].as_array().map(Vec::len),
        Some(2)
    );
}

#[test]
fn validation_rules_the_consumer_cannot_carry_are_an_error_not_dropped() {
    let e = refused(json!({"type": "object", "properties": {
        "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                     "x-kubernetes-preserve-unknown-fields": true,
                     "properties": {"kind": {"type": "string",
                         "x-kubernetes-validations": [{"rule": "self == 'Pod'"}]}}}
    }}));
    assert!(
        e.path
            .ends_with("/properties/kind/x-kubernetes-validations"),
        "{}",
        e.path
    );
    assert!(
        e.message.contains("field .spec.template.kind"),
        "{}",
        e.message
    );
    assert!(e.message.contains("cannot be carried"), "{}", e.message);
}

#[test]
fn a_resource_served_only_at_an_alpha_version_gets_it_as_storage() {
    let original = json!({"type": "object", "properties": {"spec": {"type": "object"}}});
    let alpha = input(
        "a.example.org",
        "Thing",
        vec![version("v1alpha1", true, published("v1alpha1", &original))],
    );
    let crd = synthesize(&alpha).unwrap_or_else(|e| panic!("{}: {}", e.path, e.message));
    assert_eq!(
        crd["spec"]["versions"],
        json!([{"name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": synthesized_schema(&alpha, 0)}}])
    );
}

#[test]
fn documents_of_go_types_still_drop_zero_defaults_and_keep_free_form_objects() {
    // An aggregated server's document (kube-openapi, not the CRD title): zero-value defaults
    // are Go's, and an object without fields (RawExtension) holds anything.
    let original = json!({"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"name": {"type": "string", "default": ""}, "raw": {"type": "object"}}}}});
    let mut doc: Value =
        serde_json::from_str(&published("v1", &original)).unwrap_or_else(|e| panic!("{e}"));
    doc["info"]["title"] = json!("Kubernetes");
    let thing = input(
        "a.example.org",
        "Thing",
        vec![version("v1", true, doc.to_string())],
    );
    let spec = &synthesized_schema(&thing, 0)["properties"]["spec"]["properties"];
    assert!(spec["name"].get("default").is_none(), "{spec}");
    assert_eq!(spec["raw"]["x-kubernetes-preserve-unknown-fields"], true);
}

#[test]
fn selectable_fields_of_a_crd_survive_synthesis() {
    let original = json!({"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"color": {"type": "string"}}}}});
    let mut doc: Value =
        serde_json::from_str(&published("v1", &original)).unwrap_or_else(|e| panic!("{e}"));
    // As the apiserver publishes `selectableFields: [{jsonPath: .spec.color}]`.
    doc["components"]["schemas"]["org.example.a.v1.Thing"]["x-kubernetes-selectable-fields"] =
        json!([{"fieldPath": "spec.color"}]);
    let thing = input(
        "a.example.org",
        "Thing",
        vec![version("v1", true, doc.to_string())],
    );
    let crd = synthesize(&thing).unwrap_or_else(|e| panic!("{}: {}", e.path, e.message));
    assert_eq!(
        crd["spec"]["versions"][0]["selectableFields"],
        json!([{"jsonPath": ".spec.color"}])
    );
}
