//! Schema synthesis on OpenAPI v3 documents captured from a real kube-apiserver
//! (`testdata/openapi/`): a CRD with nested objects, arrays, int-or-string, enums, list
//! and map types, embedded resources and a status subresource (`source-widgets-crd.json`
//! is the CRD that was served), and the built-in `batch/v1` and `coordination.k8s.io/v1`
//! groups, whose schemas are built from `$ref`s.

use kbind_policy_schema_synthesis::synthesize;
use kbind_policy_sdk::schema::{ResourceScope, SchemaInput, SynthesisError, VersionFacts};
use serde_json::{Value, json};

fn fixture(name: &str) -> String {
    let path = format!("{}/testdata/openapi/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

fn version(name: &str, storage: bool, status: bool, doc: &str) -> VersionFacts {
    VersionFacts {
        name: name.into(),
        served: true,
        storage,
        subresources: if status {
            vec!["status".into()]
        } else {
            vec![]
        },
        openapi: fixture(doc),
    }
}

/// The built-in groups (`batch`, `coordination.k8s.io`) stand in for an aggregated API
/// server serving the same types under a group a CRD can have: the documents' group-version-
/// kind extensions are moved to `to`.
fn regroup(mut v: VersionFacts, to: &str) -> VersionFacts {
    fn walk(node: &mut Value, to: &str) {
        match node {
            Value::Object(m) => {
                if let Some(Value::Array(gvks)) = m.get_mut("x-kubernetes-group-version-kind") {
                    for gvk in gvks {
                        gvk["group"] = json!(to);
                    }
                }
                m.values_mut().for_each(|v| walk(v, to));
            }
            Value::Array(a) => a.iter_mut().for_each(|v| walk(v, to)),
            _ => {}
        }
    }
    let mut doc: Value = serde_json::from_str(&v.openapi).unwrap_or_else(|e| panic!("{e}"));
    walk(&mut doc, to);
    v.openapi = doc.to_string();
    v
}

fn widgets() -> SchemaInput {
    SchemaInput {
        group: "example.org".into(),
        resource: "widgets".into(),
        kind: "Widget".into(),
        singular: "widget".into(),
        short_names: vec!["wdg".into()],
        categories: vec!["all".into(), "example".into()],
        scope: ResourceScope::Namespaced,
        versions: vec![
            version("v1", true, true, "example.org-v1.json"),
            version("v1beta1", false, false, "example.org-v1beta1.json"),
        ],
    }
}

fn jobs() -> SchemaInput {
    SchemaInput {
        group: "batch.example.org".into(),
        resource: "jobs".into(),
        kind: "Job".into(),
        singular: "job".into(),
        short_names: vec![],
        categories: vec!["all".into()],
        scope: ResourceScope::Namespaced,
        versions: vec![regroup(
            version("v1", true, true, "batch-v1.json"),
            "batch.example.org",
        )],
    }
}

fn ok(input: &SchemaInput) -> Value {
    synthesize(input).unwrap_or_else(|e| panic!("synthesis failed at {}: {}", e.path, e.message))
}

fn err(input: &SchemaInput) -> SynthesisError {
    match synthesize(input) {
        Ok(crd) => panic!("synthesis should fail, got {crd}"),
        Err(e) => e,
    }
}

/// Asserts the rules of a structural schema on every node, returning how many were checked.
fn assert_structural(node: &Value, path: &str) -> usize {
    let obj = node
        .as_object()
        .unwrap_or_else(|| panic!("{path}: not an object"));
    assert!(!obj.contains_key("$ref"), "{path}: $ref left");
    let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&json!(true));
    let preserve = obj.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    assert!(
        obj.contains_key("type") || int_or_string || preserve,
        "{path}: no type"
    );
    for key in obj.keys() {
        assert!(
            !key.starts_with("x-kubernetes-patch") && key != "x-kubernetes-group-version-kind",
            "{path}: client-only keyword {key} kept"
        );
    }
    let mut n = 1;
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        assert!(!obj.contains_key("additionalProperties"), "{path}: both");
        for (k, v) in props {
            n += assert_structural(v, &format!("{path}.{k}"));
        }
    }
    if let Some(ap) = obj.get("additionalProperties") {
        n += assert_structural(ap, &format!("{path}.*"));
    }
    if obj.get("type") == Some(&json!("array")) {
        let items = obj
            .get("items")
            .unwrap_or_else(|| panic!("{path}: array without items"));
        n += assert_structural(items, &format!("{path}[*]"));
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        for member in obj.get(key).and_then(Value::as_array).into_iter().flatten() {
            let m = member
                .as_object()
                .unwrap_or_else(|| panic!("{path}: bad {key}"));
            let structural = ["properties", "items", "additionalProperties", "$ref"];
            assert!(
                structural.iter().all(|s| !m.contains_key(*s)),
                "{path}: structural {key} member"
            );
            if m.contains_key("type") {
                assert!(
                    int_or_string,
                    "{path}: typed {key} member outside int-or-string"
                );
            }
        }
    }
    n
}

fn schema_of(crd: &Value, version: usize) -> &Value {
    &crd["spec"]["versions"][version]["schema"]["openAPIV3Schema"]
}

#[test]
fn crd_carries_names_scope_and_versions_from_discovery() {
    let crd = ok(&widgets());
    assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
    assert_eq!(crd["kind"], "CustomResourceDefinition");
    assert_eq!(crd["metadata"]["name"], "widgets.example.org");
    assert_eq!(crd["spec"]["group"], "example.org");
    assert_eq!(crd["spec"]["scope"], "Namespaced");
    assert_eq!(
        crd["spec"]["names"],
        json!({"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList",
               "shortNames": ["wdg"], "categories": ["all", "example"]})
    );
    let versions: Vec<(&str, bool, bool)> = crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            (
                v["name"].as_str().unwrap_or_default(),
                v["served"] == json!(true),
                v["storage"] == json!(true),
            )
        })
        .collect();
    assert_eq!(versions, [("v1", true, true), ("v1beta1", true, false)]);
}

#[test]
fn status_subresource_only_where_discovery_lists_it() {
    let crd = ok(&widgets());
    assert_eq!(
        crd["spec"]["versions"][0]["subresources"],
        json!({"status": {}})
    );
    assert!(crd["spec"]["versions"][1].get("subresources").is_none());
}

#[test]
fn widget_schema_is_structural_and_keeps_kubernetes_extensions() {
    let crd = ok(&widgets());
    let schema = schema_of(&crd, 0);
    assert!(assert_structural(schema, "") > 20);
    let spec = &schema["properties"]["spec"];
    assert_eq!(spec["required"], json!(["size"]));
    assert_eq!(
        spec["properties"]["size"]["enum"],
        json!(["small", "medium", "large"])
    );
    assert_eq!(spec["properties"]["replicas"]["default"], json!(1));
    assert_eq!(
        spec["properties"]["port"],
        json!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]})
    );
    assert_eq!(spec["properties"]["tags"]["x-kubernetes-list-type"], "set");
    assert_eq!(
        spec["properties"]["endpoints"]["x-kubernetes-list-map-keys"],
        json!(["name"])
    );
    assert_eq!(
        spec["properties"]["labels"]["additionalProperties"]["type"],
        "string"
    );
    assert_eq!(
        spec["properties"]["labels"]["x-kubernetes-map-type"],
        "granular"
    );
    assert_eq!(
        spec["properties"]["config"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
    assert_eq!(
        spec["properties"]["template"]["x-kubernetes-embedded-resource"],
        true
    );
    assert_eq!(
        spec["properties"]["endpoints"]["items"]["properties"]["weight"]["nullable"],
        true
    );
    assert_eq!(
        spec["properties"]["nested"]["properties"]["deeper"]["properties"]["matrix"]["items"]["items"]
            ["format"],
        "int64"
    );
    assert_eq!(
        spec["x-kubernetes-validations"],
        json!([{"rule": "self.replicas <= 10", "message": "at most ten replicas"}])
    );
    let conditions = &schema["properties"]["status"]["properties"]["conditions"];
    assert_eq!(conditions["x-kubernetes-list-type"], "map");
}

#[test]
fn root_metadata_is_left_to_the_api_server() {
    let crd = ok(&widgets());
    let schema = schema_of(&crd, 0);
    assert_eq!(schema["type"], "object");
    let metadata = &schema["properties"]["metadata"];
    assert_eq!(metadata["type"], "object");
    assert!(metadata.get("properties").is_none(), "{metadata}");
    assert_eq!(schema["properties"]["apiVersion"]["type"], "string");
    assert_eq!(schema["properties"]["kind"]["type"], "string");
}

#[test]
fn embedded_resource_metadata_is_left_to_the_api_server() {
    let crd = ok(&widgets());
    let template = &schema_of(&crd, 0)["properties"]["spec"]["properties"]["template"];
    assert_eq!(
        template["properties"]["metadata"],
        json!({"type": "object"})
    );
    assert_eq!(template["properties"]["kind"]["type"], "string");
}

#[test]
fn refs_are_resolved_in_built_in_group_schemas() {
    let crd = ok(&jobs());
    let schema = schema_of(&crd, 0);
    let nodes = assert_structural(schema, "");
    assert!(
        nodes > 500,
        "a Job inlines the whole pod template ({nodes} nodes)"
    );
    assert!(!crd.to_string().contains("$ref"));
    let pod_spec = &schema["properties"]["spec"]["properties"]["template"]["properties"]["spec"];
    let containers = &pod_spec["properties"]["containers"];
    assert_eq!(containers["type"], "array");
    assert_eq!(containers["x-kubernetes-list-map-keys"], json!(["name"]));
    assert_eq!(containers["items"]["required"], json!(["name"]));
    // Nested ObjectMeta (not at the root and not an embedded resource) is inlined.
    let template_meta =
        &schema["properties"]["spec"]["properties"]["template"]["properties"]["metadata"];
    assert_eq!(
        template_meta["properties"]["labels"]["additionalProperties"]["type"],
        "string"
    );
}

#[test]
fn int_or_string_and_quantity_become_int_or_string() {
    let crd = ok(&jobs());
    let pod_spec =
        &schema_of(&crd, 0)["properties"]["spec"]["properties"]["template"]["properties"]["spec"];
    let container = &pod_spec["properties"]["containers"]["items"]["properties"];
    let port = &container["livenessProbe"]["properties"]["httpGet"]["properties"]["port"];
    assert_eq!(port["x-kubernetes-int-or-string"], true, "{port}");
    assert!(port.get("type").is_none() && port.get("format").is_none());
    let limits = &container["resources"]["properties"]["limits"]["additionalProperties"];
    assert_eq!(limits["x-kubernetes-int-or-string"], true, "{limits}");
}

#[test]
fn client_only_extensions_are_dropped() {
    let crd = ok(&jobs()).to_string();
    for dropped in [
        "x-kubernetes-patch-strategy",
        "x-kubernetes-patch-merge-key",
        "x-kubernetes-unions",
        "x-kubernetes-group-version-kind",
    ] {
        assert!(!crd.contains(dropped), "{dropped} kept");
    }
}

#[test]
fn free_form_objects_keep_unknown_fields() {
    let crd = ok(&jobs());
    let managed = &schema_of(&crd, 0)["properties"]["spec"]["properties"]["template"]["properties"]
        ["metadata"]["properties"]["managedFields"];
    assert_eq!(
        managed["items"]["properties"]["fieldsV1"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
}

#[test]
fn cluster_scope_and_times_from_a_lease() {
    let input = SchemaInput {
        group: "coordination.example.org".into(),
        resource: "leases".into(),
        kind: "Lease".into(),
        singular: String::new(),
        short_names: vec![],
        categories: vec![],
        scope: ResourceScope::Cluster,
        versions: vec![regroup(
            version("v1", true, false, "coordination.k8s.io-v1.json"),
            "coordination.example.org",
        )],
    };
    let crd = ok(&input);
    assert_eq!(crd["spec"]["scope"], "Cluster");
    assert_eq!(
        crd["spec"]["names"]["singular"], "lease",
        "singular defaults to the lower-cased kind"
    );
    let spec = &schema_of(&crd, 0)["properties"]["spec"]["properties"];
    assert_eq!(
        spec["renewTime"],
        json!({"description": spec["renewTime"]["description"], "type": "string", "format": "date-time"})
    );
    assert_structural(schema_of(&crd, 0), "");
}

fn with_doc(doc: Value) -> SchemaInput {
    SchemaInput {
        group: "a.example.org".into(),
        resource: "things".into(),
        kind: "Thing".into(),
        singular: String::new(),
        short_names: vec![],
        categories: vec![],
        scope: ResourceScope::Namespaced,
        versions: vec![VersionFacts {
            name: "v1".into(),
            served: true,
            storage: true,
            subresources: vec![],
            openapi: doc.to_string(),
        }],
    }
}

fn thing(spec: Value, extra: Value) -> Value {
    let mut schemas = json!({
        "a.v1.Thing": {
            "type": "object",
            "x-kubernetes-group-version-kind": [{"group": "a.example.org", "version": "v1", "kind": "Thing"}],
            "properties": {"spec": spec}
        }
    });
    if let (Some(s), Some(e)) = (schemas.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    json!({"openapi": "3.0.0", "components": {"schemas": schemas}})
}

#[test]
fn recursive_types_are_an_error_naming_the_path() {
    let doc = thing(
        json!({"$ref": "#/components/schemas/a.v1.Node"}),
        json!({"a.v1.Node": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/components/schemas/a.v1.Node"}}}}}),
    );
    let e = err(&with_doc(doc));
    assert_eq!(
        e.path,
        "/components/schemas/a.v1.Node/properties/children/items"
    );
    assert!(
        e.message.contains("field .spec.children[*]"),
        "{}",
        e.message
    );
    assert!(
        e.message.contains("recursive type a.v1.Node"),
        "{}",
        e.message
    );
}

#[test]
fn properties_with_additional_properties_are_an_error() {
    let doc = thing(
        json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}}),
        json!({}),
    );
    let e = err(&with_doc(doc));
    assert_eq!(
        e.path,
        "/components/schemas/a.v1.Thing/properties/spec/additionalProperties"
    );
    assert!(e.message.contains("field .spec"), "{}", e.message);
}

#[test]
fn structural_one_of_is_an_error() {
    let doc = thing(
        json!({"oneOf": [{"type": "object", "properties": {"a": {"type": "string"}}}, {"type": "array", "items": {"type": "string"}}]}),
        json!({}),
    );
    let e = err(&with_doc(doc));
    assert_eq!(
        e.path,
        "/components/schemas/a.v1.Thing/properties/spec/oneOf/0"
    );
    assert!(
        e.message.contains("may only validate values"),
        "{}",
        e.message
    );
}

#[test]
fn value_only_one_of_is_kept() {
    let doc = thing(
        json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
               "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}),
        json!({}),
    );
    let crd = ok(&with_doc(doc));
    assert_eq!(
        schema_of(&crd, 0)["properties"]["spec"]["oneOf"],
        json!([{"required": ["a"]}, {"required": ["b"]}])
    );
}

#[test]
fn unknown_keywords_are_an_error_naming_them() {
    let doc = thing(
        json!({"type": "object", "patternProperties": {"^x": {"type": "string"}}}),
        json!({}),
    );
    let e = err(&with_doc(doc));
    assert_eq!(
        e.path,
        "/components/schemas/a.v1.Thing/properties/spec/patternProperties"
    );
    assert!(
        e.message.contains("\"patternProperties\" is not supported"),
        "{}",
        e.message
    );
}

#[test]
fn tuple_arrays_are_an_error() {
    let doc = thing(
        json!({"type": "array", "items": [{"type": "string"}]}),
        json!({}),
    );
    assert!(err(&with_doc(doc)).message.contains("tuple-typed arrays"));
}

#[test]
fn missing_kind_in_document_is_an_error() {
    let mut input = widgets();
    input.kind = "Gadget".into();
    let e = err(&input);
    assert_eq!(e.path, "/components/schemas");
    assert!(e.message.contains("kind: \"Gadget\""), "{}", e.message);
}

#[test]
fn exactly_one_storage_version_is_required() {
    let mut input = widgets();
    input.versions[1].storage = true;
    let e = err(&input);
    assert_eq!(e.path, "versions");
    assert!(
        e.message
            .contains("exactly one version must be the storage version, found 2")
    );
    input.versions.iter_mut().for_each(|v| v.storage = false);
    assert!(err(&input).message.contains("found 0"));
}

#[test]
fn core_group_cannot_become_a_crd() {
    let mut input = widgets();
    input.group = String::new();
    assert_eq!(err(&input).path, "group");
}

#[test]
fn invalid_openapi_json_is_an_error_naming_the_version() {
    let mut input = widgets();
    input.versions[1].openapi = "{not json".into();
    let e = err(&input);
    assert_eq!(e.path, "versions/1/openapi");
    assert!(e.message.contains("not a JSON document"));
}
