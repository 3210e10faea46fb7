//! The keyword tables and small rules of the structural conversion: which OpenAPI keywords
//! a CRD keeps, drops or refuses, and the Kubernetes-specific patterns (int-or-string,
//! zero-value defaults, list-map keys, metadata) that `structural` applies.

use serde_json::{Map, Value, json};

/// Keywords a CRD schema may carry unchanged.
pub(crate) const KEPT: &[&str] = &[
    "description",
    "type",
    "format",
    "title",
    "default",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "multipleOf",
    "enum",
    "maxProperties",
    "minProperties",
    "required",
    "nullable",
    "example",
    "externalDocs",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
];

/// Keywords dropped because they only guide clients or documentation, or (`uniqueItems`)
/// because CRDs forbid them; the provider still enforces its own validation.
pub(crate) const DROPPED: &[&str] = &[
    "x-kubernetes-group-version-kind",
    "x-kubernetes-patch-strategy",
    "x-kubernetes-patch-merge-key",
    "x-kubernetes-unions",
    "x-kubernetes-selectable-fields",
    "readOnly",
    "writeOnly",
    "deprecated",
    "xml",
    "discriminator",
    "uniqueItems",
];

/// Keywords that only constrain values; allowed inside `oneOf`/`anyOf`/`allOf`/`not`.
pub(crate) const VALUE_ONLY: &[&str] = &[
    "description",
    "format",
    "title",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "multipleOf",
    "enum",
    "maxProperties",
    "minProperties",
    "required",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
];

pub(crate) const TYPES: &[&str] = &["object", "array", "string", "integer", "number", "boolean"];

/// A key of a `x-kubernetes-list-type: map` list must be required or have a default. Built-in
/// types give optional keys a zero-value default (dropped above), so put it back there.
pub(crate) fn restore_list_map_key_defaults(array: &mut Map<String, Value>) {
    let keys: Vec<String> = array
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|k| k.as_str().map(str::to_owned))
        .collect();
    let Some(items) = array.get_mut("items").and_then(Value::as_object_mut) else {
        return;
    };
    let required: Vec<String> = items
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|k| k.as_str().map(str::to_owned))
        .collect();
    let Some(props) = items.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    for key in keys.iter().filter(|k| !required.contains(k)) {
        if let Some(prop) = props.get_mut(key).and_then(Value::as_object_mut) {
            if prop.contains_key("default") {
                continue;
            }
            let zero = match prop.get("type").and_then(Value::as_str) {
                Some("string") => json!(""),
                Some("integer" | "number") => json!(0),
                Some("boolean") => json!(false),
                _ => continue,
            };
            prop.insert("default".into(), zero);
        }
    }
}

/// Whether a `default` is a Go zero value (`""`, `0`, `false`, `{}`, `[]`). kube-openapi
/// publishes these for every non-pointer field of built-in types; they are not defaults the
/// server applies, and as CRD defaults they fail the schema's own `enum` and `required`
/// rules. The provider applies its real defaults to the copy either way.
pub(crate) fn is_zero_value(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// Whether a schema is Kubernetes' int-or-string (or a string-or-number `Quantity`).
pub(crate) fn is_int_or_string(schema: &Map<String, Value>) -> bool {
    if schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true)
        || schema.get("format").and_then(Value::as_str) == Some("int-or-string")
    {
        return true;
    }
    let alternatives = schema
        .get("oneOf")
        .or_else(|| schema.get("anyOf"))
        .and_then(Value::as_array);
    let Some(alternatives) = alternatives else {
        return false;
    };
    let mut types: Vec<&str> = alternatives
        .iter()
        .filter_map(|a| a.as_object())
        .filter(|a| a.len() == 1)
        .filter_map(|a| a.get("type").and_then(Value::as_str))
        .collect();
    types.sort_unstable();
    alternatives.len() == 2 && (types == ["integer", "string"] || types == ["number", "string"])
}

/// `metadata` may say nothing but its type (not even a description): the API server
/// rejects anything else as "implicitly specified".
pub(crate) fn metadata_schema() -> Value {
    json!({"type": "object"})
}

pub(crate) fn string_schema(source: &Value) -> Value {
    let mut m = Map::new();
    m.insert("type".into(), json!("string"));
    if let Some(d) = source.get("description") {
        m.insert("description".into(), d.clone());
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn int_or_string_is_recognised_in_every_published_form() {
        assert!(is_int_or_string(&obj(
            json!({"x-kubernetes-int-or-string": true})
        )));
        assert!(is_int_or_string(&obj(
            json!({"format": "int-or-string", "type": "string"})
        )));
        assert!(is_int_or_string(&obj(
            json!({"oneOf": [{"type": "string"}, {"type": "integer"}]})
        )));
        assert!(is_int_or_string(&obj(
            json!({"anyOf": [{"type": "integer"}, {"type": "string"}]})
        )));
        assert!(is_int_or_string(&obj(
            json!({"oneOf": [{"type": "string"}, {"type": "number"}]})
        )));
    }

    #[test]
    fn other_alternatives_are_not_int_or_string() {
        assert!(!is_int_or_string(&obj(json!({"type": "string"}))));
        assert!(!is_int_or_string(&obj(
            json!({"oneOf": [{"type": "string"}, {"type": "boolean"}]})
        )));
        assert!(!is_int_or_string(&obj(
            json!({"oneOf": [{"required": ["a"]}, {"required": ["b"]}]})
        )));
    }

    #[test]
    fn only_go_zero_values_count_as_zero_defaults() {
        for zero in [
            json!(""),
            json!(0),
            json!(0.0),
            json!(false),
            json!({}),
            json!([]),
        ] {
            assert!(is_zero_value(&zero), "{zero}");
        }
        for real in [
            json!("Always"),
            json!(1),
            json!(true),
            json!({"a": 1}),
            json!([1]),
        ] {
            assert!(!is_zero_value(&real), "{real}");
        }
    }

    #[test]
    fn optional_list_map_keys_get_a_default_back() {
        let mut array = obj(json!({
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name", "port"],
            "items": {"type": "object", "required": ["port"],
                      "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}
        }));
        restore_list_map_key_defaults(&mut array);
        let props = &array["items"]["properties"];
        assert_eq!(props["name"]["default"], json!(""));
        assert!(
            props["port"].get("default").is_none(),
            "required keys need no default"
        );
    }
}
