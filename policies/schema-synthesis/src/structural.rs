//! Conversion of one OpenAPI v3 schema (with `$ref`s) into a structural schema that a
//! kube-apiserver accepts as a CRD version's `openAPIV3Schema`.
//!
//! The rules, in the order Kubernetes' structural-schema validation checks them:
//!
//! * every `$ref` is inlined (both `{"$ref"}` and `{"allOf": [{"$ref"}]}` forms); a type
//!   that contains itself cannot be written without references and is an error;
//! * every node has a `type`, except `x-kubernetes-int-or-string` nodes (published as
//!   `format: int-or-string` or a `oneOf`/`anyOf` of integer and string; `Quantity`'s
//!   string-or-number is treated the same way) and nodes that keep unknown fields;
//! * `oneOf`/`anyOf`/`allOf`/`not` may only carry value validations, never types or
//!   properties; single-member structural `allOf`s are merged into their parent;
//! * objects have `properties` or `additionalProperties`, not both; in a document of Go
//!   types, an object with neither (such as `RawExtension`) and a node without a type keep
//!   unknown fields instead of pruning them, while a CRD's closed object (`type: object`
//!   alone) stays closed: `x-kubernetes-preserve-unknown-fields` is where the CRD has it;
//! * arrays have `items` (one schema, not a tuple);
//! * `metadata` at the root and in embedded resources is just `type: object` (the API
//!   server owns its schema), `apiVersion` and `kind` are strings;
//! * in a document of Go types, zero-value `default`s (`""`, `0`, `false`, `{}`) are dropped:
//!   kube-openapi publishes them for non-pointer fields, where they are not server defaults;
//!   a CRD's defaults are its author's and are all kept (`default: ""` and `false` too);
//! * `x-kubernetes-validations` on a node the API server owns (`metadata`, `apiVersion`,
//!   `kind` at the root or in an embedded resource) cannot be carried and are an error, so
//!   no CRD is installed with part of its rules;
//! * `x-kubernetes-*` extensions that CRDs understand are kept; client hints (`patch`
//!   strategies, unions, group-version-kind) and documentation-only keywords are dropped;
//!   any other keyword is an error naming where it is.

use kbind_policy_sdk::openapi::{Document, escape_token};
use kbind_policy_sdk::schema::SynthesisError;
use serde_json::{Map, Value, json};

use crate::rules::{
    DROPPED, KEPT, TYPES, VALUE_ONLY, is_int_or_string, is_zero_value, metadata_schema,
    restore_list_map_key_defaults, string_schema,
};

/// Who wrote the schemas of a document, which decides how much of them is taken as is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Published by the apiextensions apiserver for CRDs: already structural, every default
    /// and extension the CRD's author's.
    Crd,
    /// Generated from Go types (kube-openapi: aggregated API servers, built-in groups).
    GoTypes,
}

impl Origin {
    /// The title the apiextensions apiserver gives every document it publishes for CRDs.
    pub const CRD_DOCUMENT_TITLE: &str = "Kubernetes CRD Swagger";

    /// The origin of `doc`, told by its `info.title`.
    pub fn of(doc: &Document) -> Self {
        match doc.root().pointer("/info/title").and_then(Value::as_str) {
            Some(Self::CRD_DOCUMENT_TITLE) => Self::Crd,
            _ => Self::GoTypes,
        }
    }
}

/// Converts the schema of one kind (at `pointer` in `doc`) into a CRD root schema.
pub fn root_schema(doc: &Document, pointer: &str, origin: Origin) -> Result<Value, SynthesisError> {
    let schema = doc
        .pointer(pointer)
        .ok_or_else(|| SynthesisError::at(pointer, "no schema here"))?;
    let mut conv = Converter {
        doc,
        origin,
        stack: Vec::new(),
    };
    let mut root = conv.convert(schema, pointer, &Field::root())?;
    let obj = root
        .as_object_mut()
        .ok_or_else(|| SynthesisError::at(pointer, "the kind's schema is not an object schema"))?;
    if obj.get("type").and_then(Value::as_str) != Some("object") {
        return Err(SynthesisError::at(
            pointer,
            "the kind's schema must be of type object",
        ));
    }
    // The API server owns these at the root: apiVersion/kind are plain strings, metadata
    // may not be described (only name/generateName restrictions are allowed; we keep
    // none), and none of them is "required" from the schema's point of view.
    obj.remove("default");
    obj.remove("nullable");
    if let Some(required) = obj.get_mut("required").and_then(Value::as_array_mut) {
        required.retain(|r| !matches!(r.as_str(), Some("apiVersion" | "kind" | "metadata")));
        if required.is_empty() {
            obj.remove("required");
        }
    }
    Ok(root)
}

/// Where a node sits in the resource, for messages (`.spec.template.metadata`).
#[derive(Clone)]
struct Field {
    path: String,
    depth: usize,
    root: bool,
}

impl Field {
    fn root() -> Self {
        Self {
            path: String::new(),
            depth: 0,
            root: true,
        }
    }
    fn child(&self, segment: &str) -> Self {
        Self {
            path: format!("{}{}", self.path, segment),
            depth: self.depth + 1,
            root: false,
        }
    }
    fn show(&self) -> String {
        if self.path.is_empty() {
            "the root".to_owned()
        } else {
            format!("field {}", self.path)
        }
    }
}

struct Converter<'a> {
    doc: &'a Document,
    origin: Origin,
    /// Names of the `components.schemas` entries being inlined, outermost first.
    stack: Vec<String>,
}

impl Converter<'_> {
    fn convert(
        &mut self,
        node: &Value,
        pointer: &str,
        field: &Field,
    ) -> Result<Value, SynthesisError> {
        if field.depth > 64 {
            return Err(SynthesisError::at(
                pointer,
                format!("{} is nested more than 64 levels deep", field.show()),
            ));
        }
        let resolved = self.doc.deref(node, pointer)?;
        if let Some(name) = &resolved.via_ref {
            if self.stack.contains(name) {
                return Err(SynthesisError::at(
                    pointer,
                    format!(
                        "{}: recursive type {name} ({} -> {name}) cannot be expressed in a CRD structural schema",
                        field.show(),
                        self.stack.join(" -> ")
                    ),
                ));
            }
            self.stack.push(name.clone());
        }
        let out = self.convert_resolved(resolved.schema, &resolved.pointer, field);
        if resolved.via_ref.is_some() {
            self.stack.pop();
        }
        out
    }

    fn convert_resolved(
        &mut self,
        mut schema: Map<String, Value>,
        pointer: &str,
        field: &Field,
    ) -> Result<Value, SynthesisError> {
        let at = |key: &str| format!("{pointer}/{}", escape_token(key));
        self.merge_structural_all_of(&mut schema, pointer, field)?;

        let mut out = Map::new();
        let int_or_string = is_int_or_string(&schema);
        for (key, value) in &schema {
            match key.as_str() {
                "properties" | "additionalProperties" | "items" => {}
                "oneOf" | "anyOf" | "allOf" | "not" if int_or_string => {}
                "format" if int_or_string => {}
                "type" if int_or_string => {}
                "oneOf" | "anyOf" | "allOf" | "not" => {
                    out.insert(key.clone(), self.value_only(value, &at(key), field)?);
                }
                "type" => {
                    let t = value
                        .as_str()
                        .filter(|t| TYPES.contains(t))
                        .ok_or_else(|| {
                            SynthesisError::at(
                                at(key),
                                format!("{}: unsupported type {value}", field.show()),
                            )
                        })?;
                    out.insert(key.clone(), json!(t));
                }
                "x-kubernetes-int-or-string" => {}
                "default" if self.origin == Origin::GoTypes && is_zero_value(value) => {}
                k if KEPT.contains(&k) => {
                    out.insert(key.clone(), value.clone());
                }
                k if DROPPED.contains(&k)
                    || k.starts_with("x-") && !k.starts_with("x-kubernetes-") => {}
                k => {
                    return Err(SynthesisError::at(
                        at(k),
                        format!(
                            "{}: keyword {k:?} is not supported in a CRD schema",
                            field.show()
                        ),
                    ));
                }
            }
        }
        if int_or_string {
            out.insert("x-kubernetes-int-or-string".into(), json!(true));
            out.insert(
                "anyOf".into(),
                json!([{"type": "integer"}, {"type": "string"}]),
            );
            return Ok(Value::Object(out));
        }

        let properties = schema.get("properties").and_then(Value::as_object);
        let additional = schema.get("additionalProperties");
        let items = schema.get("items");
        let ty = match out.get("type").and_then(Value::as_str) {
            Some(t) => Some(t.to_owned()),
            None if properties.is_some() || additional.is_some_and(Value::is_object) => {
                Some("object".to_owned())
            }
            None if items.is_some() => Some("array".to_owned()),
            None => None,
        };
        match ty.as_deref() {
            Some("object") => {
                out.insert("type".into(), json!("object"));
                let embedded = schema
                    .get("x-kubernetes-embedded-resource")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                self.convert_object(&mut out, &schema, pointer, field, embedded)?;
            }
            Some("array") => {
                out.insert("type".into(), json!("array"));
                let items_out = match items {
                    Some(i @ Value::Object(_)) => {
                        self.convert(i, &at("items"), &field.child("[*]"))?
                    }
                    Some(_) => {
                        return Err(SynthesisError::at(
                            at("items"),
                            format!(
                                "{}: tuple-typed arrays (items as a list) are not supported in a CRD schema",
                                field.show()
                            ),
                        ));
                    }
                    None => json!({"x-kubernetes-preserve-unknown-fields": true}),
                };
                out.insert("items".into(), items_out);
                if self.origin == Origin::GoTypes {
                    restore_list_map_key_defaults(&mut out);
                }
            }
            Some(_) => {}
            // A CRD's untyped node already says `x-kubernetes-preserve-unknown-fields`.
            None if self.origin == Origin::Crd => {}
            None => {
                // A schema without a type accepts any value: keep it as it is.
                out.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
            }
        }
        Ok(Value::Object(out))
    }

    fn convert_object(
        &mut self,
        out: &mut Map<String, Value>,
        schema: &Map<String, Value>,
        pointer: &str,
        field: &Field,
        embedded: bool,
    ) -> Result<(), SynthesisError> {
        let at = |key: &str| format!("{pointer}/{}", escape_token(key));
        let properties = schema.get("properties").and_then(Value::as_object);
        let additional = schema.get("additionalProperties");
        if properties.is_some_and(|p| !p.is_empty()) && additional.is_some_and(Value::is_object) {
            return Err(SynthesisError::at(
                at("additionalProperties"),
                format!(
                    "{}: properties and additionalProperties together are not allowed in a CRD structural schema",
                    field.show()
                ),
            ));
        }
        let preserve = out
            .get("x-kubernetes-preserve-unknown-fields")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if let Some(props) = properties {
            let mut converted = Map::new();
            for (name, sub) in props {
                let sub_ptr = format!("{}/{}", at("properties"), escape_token(name));
                let child = field.child(&format!(".{name}"));
                let owned = (field.root || embedded)
                    && matches!(name.as_str(), "metadata" | "apiVersion" | "kind");
                if owned && sub.get("x-kubernetes-validations").is_some() {
                    return Err(SynthesisError::at(
                        format!("{sub_ptr}/x-kubernetes-validations"),
                        format!(
                            "{}: validation rules on a field the API server owns cannot be carried into the consumer CRD; \
                             the CRD is not installed without them (move the rules to the enclosing object, or use the CRD schema source)",
                            child.show()
                        ),
                    ));
                }
                let value = if owned && name == "metadata" {
                    metadata_schema()
                } else if owned {
                    string_schema(sub)
                } else {
                    self.convert(sub, &sub_ptr, &child)?
                };
                converted.insert(name.clone(), value);
            }
            out.insert("properties".into(), Value::Object(converted));
        }
        match additional {
            Some(a @ Value::Object(_)) if properties.is_none_or(Map::is_empty) => {
                let value = self.convert(a, &at("additionalProperties"), &field.child(".*"))?;
                out.insert("additionalProperties".into(), value);
            }
            Some(Value::Bool(true)) if properties.is_none_or(Map::is_empty) => {
                out.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
            }
            _ => {}
        }
        if self.origin == Origin::GoTypes
            && properties.is_none_or(Map::is_empty)
            && !out.contains_key("additionalProperties")
            && !preserve
        {
            // An object without a field list (RawExtension, FieldsV1, free-form maps):
            // pruning would drop everything in it, so keep what the provider accepts.
            out.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
        }
        Ok(())
    }

    /// Merges `allOf` members that carry structure (after following references) into the
    /// schema itself; members that only validate values stay in `allOf`.
    fn merge_structural_all_of(
        &mut self,
        schema: &mut Map<String, Value>,
        pointer: &str,
        field: &Field,
    ) -> Result<(), SynthesisError> {
        let Some(Value::Array(members)) = schema.get("allOf").cloned() else {
            return Ok(());
        };
        let mut keep = Vec::new();
        for (i, member) in members.iter().enumerate() {
            let member_ptr = format!("{pointer}/allOf/{i}");
            let resolved = self.doc.deref(member, &member_ptr)?;
            if resolved
                .schema
                .keys()
                .all(|k| VALUE_ONLY.contains(&k.as_str()))
            {
                keep.push(member.clone());
                continue;
            }
            for (k, v) in resolved.schema {
                match (k.as_str(), schema.get_mut(&k)) {
                    ("properties", Some(Value::Object(existing))) => {
                        if let Value::Object(more) = v {
                            existing.extend(more);
                        }
                    }
                    ("required", Some(Value::Array(existing))) => {
                        if let Value::Array(more) = v {
                            existing.extend(more);
                        }
                    }
                    ("type", Some(existing)) if *existing != v => {
                        return Err(SynthesisError::at(
                            member_ptr,
                            format!(
                                "{}: allOf combines type {existing} with type {v}",
                                field.show()
                            ),
                        ));
                    }
                    (_, Some(_)) => {}
                    (_, None) => {
                        schema.insert(k, v);
                    }
                }
            }
        }
        if keep.is_empty() {
            schema.remove("allOf");
        } else {
            schema.insert("allOf".into(), Value::Array(keep));
        }
        Ok(())
    }

    /// Checks a `oneOf`/`anyOf`/`allOf`/`not` value: its members may only validate values.
    fn value_only(
        &mut self,
        value: &Value,
        pointer: &str,
        field: &Field,
    ) -> Result<Value, SynthesisError> {
        let members: Vec<(String, &Value)> = match value {
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("{pointer}/{i}"), v))
                .collect(),
            Value::Object(_) => vec![(pointer.to_owned(), value)],
            _ => {
                return Err(SynthesisError::at(
                    pointer,
                    format!("{}: expected a schema or a list of schemas", field.show()),
                ));
            }
        };
        let mut out = Vec::new();
        for (member_ptr, member) in members {
            let resolved = self.doc.deref(member, &member_ptr)?;
            if let Some(bad) = resolved
                .schema
                .keys()
                .find(|k| !VALUE_ONLY.contains(&k.as_str()))
            {
                return Err(SynthesisError::at(
                    member_ptr,
                    format!(
                        "{}: oneOf/anyOf/allOf/not may only validate values in a CRD structural schema, but a member sets {bad:?}",
                        field.show()
                    ),
                ));
            }
            let mut m = resolved.schema;
            m.remove("description");
            out.push(Value::Object(m));
        }
        Ok(match value {
            Value::Array(_) => Value::Array(out),
            _ => out.pop().unwrap_or(Value::Null),
        })
    }
}
