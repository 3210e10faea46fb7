//! The differential check of schema synthesis: every difference between a provider CRD's
//! own `openAPIV3Schema` and the one synthesized from its `/openapi/v3` document, by path and
//! keyword, apart from what the API server changes when it publishes a CRD ([`NOT_PUBLISHED`]).
//!
//! ```text
//! original openAPIV3Schema ──┐
//!                            ├─▶ walk both (properties, additionalProperties, items)
//! synthesized schema ────────┘       └─▶ per node: normalise, skip the allow-list, compare
//!                                         every keyword ──▶ [Difference { path, what }]
//! ```
//!
//! Tests run it over hand-made and captured CRDs; a corpus of real-world CRDs can run it too.
//! An empty list means the consumer stores, accepts and shows what the provider does.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::{Map, Value, json};

/// What `/openapi/v3` publishes differently from the CRD it was built from, so that a
/// synthesized schema cannot carry it; the check does not count these as differences.
pub const NOT_PUBLISHED: &[(&str, &str)] = &[
    (
        "apiVersion, kind and metadata at the root and in x-kubernetes-embedded-resource objects",
        "the API server publishes its own schemas for them (and requires apiVersion and kind of \
         an embedded resource); synthesis leaves metadata as `type: object` and the other two \
         as strings",
    ),
    (
        "exclusiveMinimum: false, exclusiveMaximum: false",
        "not published; the same as leaving them out",
    ),
    (
        "anyOf [integer, string] beside x-kubernetes-int-or-string: true",
        "published for every int-or-string field; the same as leaving it out",
    ),
];

/// One way the synthesized schema differs from the original.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    /// Where, as a field path (`.spec.ports[*].name`; empty for the root).
    pub path: String,
    /// What differs (`default: original "", synthesized none`).
    pub what: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "<root>"
        } else {
            &self.path
        };
        write!(f, "{path}: {}", self.what)
    }
}

/// Every difference between `original` (a CRD version's `openAPIV3Schema`) and
/// `synthesized`, apart from [`NOT_PUBLISHED`]; empty when synthesis carried everything.
pub fn differences(original: &Value, synthesized: &Value) -> Vec<Difference> {
    let mut found = Vec::new();
    compare(original, synthesized, "", Place::Root, &mut found);
    found
}

/// Where a node sits, for the allow-list.
#[derive(Clone, Copy, PartialEq)]
enum Place {
    Root,
    Inner,
}

/// Keywords holding subschemas, compared node by node rather than as values.
const NESTED: &[&str] = &["properties", "additionalProperties", "items"];

/// Fields the API server owns at the root and in embedded resources.
const SERVER_OWNED: &[&str] = &["apiVersion", "kind", "metadata"];

fn compare(
    original: &Value,
    synthesized: &Value,
    path: &str,
    place: Place,
    out: &mut Vec<Difference>,
) {
    let (Some(a), Some(b)) = (original.as_object(), synthesized.as_object()) else {
        if !same(original, synthesized) {
            out.push(Difference {
                path: path.to_owned(),
                what: format!("schema: original {original}, synthesized {synthesized}"),
            });
        }
        return;
    };
    let owned_here = place == Place::Root || is_embedded(a) || is_embedded(b);
    let (a, b) = (normalise(a, owned_here), normalise(b, owned_here));
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for key in keys.into_iter().filter(|k| !NESTED.contains(&k.as_str())) {
        match (a.get(key), b.get(key)) {
            (Some(x), Some(y)) if same(x, y) => {}
            (x, y) => out.push(Difference {
                path: path.to_owned(),
                what: format!("{key}: original {}, synthesized {}", show(x), show(y)),
            }),
        }
    }
    // Fields.
    let empty = Map::new();
    let props_a = a
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let props_b = b
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let names: BTreeSet<&String> = props_a.keys().chain(props_b.keys()).collect();
    for name in names {
        if owned_here && SERVER_OWNED.contains(&name.as_str()) {
            continue;
        }
        let child = format!("{path}.{name}");
        match (props_a.get(name), props_b.get(name)) {
            (Some(x), Some(y)) => compare(x, y, &child, Place::Inner, out),
            (Some(_), None) => out.push(Difference {
                path: child,
                what: "field missing from the synthesized schema".into(),
            }),
            (None, Some(_)) => out.push(Difference {
                path: child,
                what: "field the original does not have".into(),
            }),
            (None, None) => {}
        }
    }
    for (key, suffix) in [("additionalProperties", ".*"), ("items", "[*]")] {
        match (a.get(key), b.get(key)) {
            (Some(x), Some(y)) => compare(x, y, &format!("{path}{suffix}"), Place::Inner, out),
            (None, None) => {}
            (x, y) => out.push(Difference {
                path: path.to_owned(),
                what: format!("{key}: original {}, synthesized {}", show(x), show(y)),
            }),
        }
    }
}

/// JSON equality with numbers compared by value: a client that reads a CRD through typed
/// structs (float bounds) writes `maximum: 65535` back as `65535.0`, the same bound.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

fn is_embedded(node: &Map<String, Value>) -> bool {
    node.get("x-kubernetes-embedded-resource") == Some(&json!(true))
}

/// A node with the allow-listed changes of publishing taken out of it.
fn normalise(node: &Map<String, Value>, owned_here: bool) -> Map<String, Value> {
    let mut node = node.clone();
    for key in ["exclusiveMinimum", "exclusiveMaximum"] {
        if node.get(key) == Some(&json!(false)) {
            node.remove(key);
        }
    }
    if node.get("x-kubernetes-int-or-string") == Some(&json!(true))
        && node.get("anyOf") == Some(&json!([{"type": "integer"}, {"type": "string"}]))
    {
        node.remove("anyOf");
    }
    if owned_here && let Some(Value::Array(required)) = node.get_mut("required") {
        required.retain(|r| !r.as_str().is_some_and(|r| SERVER_OWNED.contains(&r)));
        if required.is_empty() {
            node.remove("required");
        }
    }
    node
}

fn show(value: Option<&Value>) -> String {
    value.map_or_else(|| "none".to_owned(), Value::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whats(original: Value, synthesized: Value) -> Vec<String> {
        differences(&original, &synthesized)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn equal_schemas_have_no_difference() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"a": {"type": "string", "default": ""}}}}});
        assert!(whats(schema.clone(), schema).is_empty());
    }

    #[test]
    fn a_lost_default_and_an_added_preserve_are_named_with_their_paths() {
        let original = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"a": {"type": "string", "default": ""}, "o": {"type": "object"}}}}});
        let synthesized = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"a": {"type": "string"},
                           "o": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}});
        assert_eq!(
            whats(original, synthesized),
            [
                r#".spec.a: default: original "", synthesized none"#,
                ".spec.o: x-kubernetes-preserve-unknown-fields: original none, synthesized true",
            ]
        );
    }

    #[test]
    fn missing_and_extra_fields_items_and_maps_are_differences() {
        let original = json!({"type": "object", "properties": {
            "gone": {"type": "string"},
            "list": {"type": "array", "items": {"type": "string", "maxLength": 3}},
            "map": {"type": "object", "additionalProperties": {"type": "integer"}}}});
        let synthesized = json!({"type": "object", "properties": {
            "new": {"type": "string"},
            "list": {"type": "array", "items": {"type": "string"}},
            "map": {"type": "object", "additionalProperties": {"type": "string"}}}});
        assert_eq!(
            whats(original, synthesized),
            [
                ".gone: field missing from the synthesized schema",
                ".list[*]: maxLength: original 3, synthesized none",
                r#".map.*: type: original "integer", synthesized "string""#,
                ".new: field the original does not have",
            ]
        );
    }

    #[test]
    fn what_publishing_changes_is_not_a_difference() {
        let original = json!({"type": "object", "properties": {
            "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": {
                "n": {"type": "integer", "minimum": 0, "exclusiveMinimum": false},
                "port": {"x-kubernetes-int-or-string": true},
                "t": {"type": "object", "x-kubernetes-embedded-resource": true,
                      "x-kubernetes-preserve-unknown-fields": true}}}}});
        let synthesized = json!({"type": "object", "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion defines ..."},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": {
                "n": {"type": "integer", "minimum": 0},
                "port": {"x-kubernetes-int-or-string": true,
                         "anyOf": [{"type": "integer"}, {"type": "string"}]},
                "t": {"type": "object", "x-kubernetes-embedded-resource": true,
                      "x-kubernetes-preserve-unknown-fields": true,
                      "required": ["kind", "apiVersion"],
                      "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                     "metadata": {"type": "object"}}}}}}});
        assert_eq!(whats(original, synthesized), Vec::<String>::new());
    }

    #[test]
    fn server_owned_names_count_below_the_root_outside_embedded_resources() {
        let original = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"kind": {"type": "string", "enum": ["A"]}}}}});
        let synthesized = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"kind": {"type": "string"}}}}});
        assert_eq!(
            whats(original, synthesized),
            [r#".spec.kind: enum: original ["A"], synthesized none"#]
        );
    }

    #[test]
    fn numbers_are_compared_by_value() {
        let original = json!({"type": "integer", "minimum": 1, "maximum": 65535, "default": 80});
        let typed = json!({"type": "integer", "minimum": 1.0, "maximum": 65535.0, "default": 80});
        assert_eq!(whats(original.clone(), typed), Vec::<String>::new());
        let other = json!({"type": "integer", "minimum": 1, "maximum": 65534, "default": 80});
        assert_eq!(
            whats(original, other),
            ["<root>: maximum: original 65535, synthesized 65534"]
        );
    }

    #[test]
    fn validation_rules_are_compared_whole() {
        let original = json!({"type": "string",
            "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "immutable"}]});
        let synthesized = json!({"type": "string",
            "x-kubernetes-validations": [{"rule": "self == oldSelf"}]});
        assert_eq!(whats(original, synthesized).len(), 1);
    }
}
