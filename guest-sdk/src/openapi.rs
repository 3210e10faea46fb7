//! Walking OpenAPI v3 documents as served by a kube-apiserver at
//! `/openapi/v3/apis/<group>/<version>`, and resolving their `$ref`s.
//!
//! Kubernetes publishes every named type under `components.schemas` and refers to it either
//! directly (`{"$ref": "#/components/schemas/X"}`) or wrapped so that it can carry its own
//! description and default (`{"allOf": [{"$ref": "..."}], "description": ..., "default": {}}`).
//! [`Document::deref`] treats both forms alike: the referenced schema with the wrapper's
//! own keywords laid over it. Only local references (`#/...`) exist in these documents;
//! anything else is an error, as is a reference cycle when inlining.
//!
//! Errors carry a JSON pointer into the document so an operator can find the construct.

use serde_json::{Map, Value};
use std::fmt;

/// A problem at one place in the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenApiError {
    /// JSON pointer into the document (`""` for the whole document).
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

impl OpenApiError {
    /// An error at `path`.
    pub fn at(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for OpenApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "at {}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for OpenApiError {}

/// A schema reached while walking: where it is in the document, and the schema itself with
/// any `$ref` already followed.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// JSON pointer of the schema that was reached (the `$ref` target when one was followed).
    pub pointer: String,
    /// The name of the `components.schemas` entry that was followed, if any.
    pub via_ref: Option<String>,
    /// The schema object, with the wrapper's own keywords laid over the target's.
    pub schema: Map<String, Value>,
}

/// A parsed OpenAPI v3 document.
#[derive(Debug, Clone)]
pub struct Document {
    root: Value,
}

const SCHEMAS_PREFIX: &str = "#/components/schemas/";

impl Document {
    /// Parses a document from JSON.
    pub fn parse(json: &str) -> Result<Self, OpenApiError> {
        let root: Value = serde_json::from_str(json)
            .map_err(|e| OpenApiError::at("", format!("not a JSON document: {e}")))?;
        Self::from_value(root)
    }

    /// Wraps an already parsed document.
    pub fn from_value(root: Value) -> Result<Self, OpenApiError> {
        if !root.is_object() {
            return Err(OpenApiError::at(
                "",
                "an OpenAPI document must be a JSON object",
            ));
        }
        Ok(Self { root })
    }

    /// The whole document.
    pub fn root(&self) -> &Value {
        &self.root
    }

    /// The value at a JSON pointer (`/components/schemas/X`), if any.
    pub fn pointer(&self, pointer: &str) -> Option<&Value> {
        self.root.pointer(pointer)
    }

    /// The named schemas under `components.schemas`, in document order.
    pub fn schemas(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.root
            .pointer("/components/schemas")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|m| m.iter().map(|(k, v)| (k.as_str(), v)))
    }

    /// Finds the schema of a kind by its `x-kubernetes-group-version-kind` extension.
    /// Returns the schema's pointer and the schema.
    pub fn schema_for_kind(
        &self,
        group: &str,
        version: &str,
        kind: &str,
    ) -> Result<(String, &Value), OpenApiError> {
        for (name, schema) in self.schemas() {
            let gvks = schema
                .get("x-kubernetes-group-version-kind")
                .and_then(Value::as_array);
            let found = gvks.into_iter().flatten().any(|gvk| {
                gvk.get("group").and_then(Value::as_str).unwrap_or_default() == group
                    && gvk.get("version").and_then(Value::as_str) == Some(version)
                    && gvk.get("kind").and_then(Value::as_str) == Some(kind)
            });
            if found {
                return Ok((
                    format!("/components/schemas/{}", escape_token(name)),
                    schema,
                ));
            }
        }
        Err(OpenApiError::at(
            "/components/schemas",
            format!(
                "no schema has x-kubernetes-group-version-kind {{group: {group:?}, version: {version:?}, kind: {kind:?}}}"
            ),
        ))
    }

    /// Resolves a local reference (`#/components/schemas/X`) found at `at`.
    pub fn resolve_ref(&self, reference: &str, at: &str) -> Result<(String, &Value), OpenApiError> {
        let Some(pointer) = reference.strip_prefix('#') else {
            return Err(OpenApiError::at(
                at,
                format!(
                    "$ref {reference:?} is not a local reference (only \"#/...\" is supported)"
                ),
            ));
        };
        let target = self
            .root
            .pointer(pointer)
            .ok_or_else(|| OpenApiError::at(at, format!("$ref {reference:?} points at nothing")))?;
        Ok((pointer.to_owned(), target))
    }

    /// Follows a schema's reference, if it has one (`$ref`, or `allOf` with a single
    /// `$ref` element), laying the schema's other keywords over the target. Schemas
    /// without a reference come back unchanged. Chains of references are followed.
    pub fn deref(&self, schema: &Value, pointer: &str) -> Result<Resolved, OpenApiError> {
        let mut current = as_schema(schema, pointer)?.clone();
        let mut current_pointer = pointer.to_owned();
        let mut via_ref = None;
        let mut seen: Vec<String> = Vec::new();
        loop {
            let (reference, overlay) = match split_ref(&current) {
                Some(parts) => parts,
                None => {
                    return Ok(Resolved {
                        pointer: current_pointer,
                        via_ref,
                        schema: current,
                    });
                }
            };
            if seen.contains(&reference) {
                return Err(OpenApiError::at(
                    current_pointer,
                    format!("$ref {reference:?} refers to itself"),
                ));
            }
            let (target_pointer, target) = self.resolve_ref(&reference, &current_pointer)?;
            let mut merged = as_schema(target, &target_pointer)?.clone();
            for (k, v) in overlay {
                merged.insert(k, v);
            }
            via_ref = reference.strip_prefix(SCHEMAS_PREFIX).map(str::to_owned);
            seen.push(reference);
            current = merged;
            current_pointer = target_pointer;
        }
    }

    /// Returns the schema at `pointer` with every reference inlined, recursively. A schema
    /// that (indirectly) contains itself cannot be inlined and is an error naming the
    /// reference and where the cycle closed.
    pub fn inline(&self, pointer: &str) -> Result<Value, OpenApiError> {
        let schema = self
            .root
            .pointer(pointer)
            .ok_or_else(|| OpenApiError::at(pointer, "no schema here"))?;
        let mut stack = Vec::new();
        self.inline_at(schema, pointer, &mut stack)
    }

    fn inline_at(
        &self,
        schema: &Value,
        pointer: &str,
        stack: &mut Vec<String>,
    ) -> Result<Value, OpenApiError> {
        let resolved = self.deref(schema, pointer)?;
        if let Some(name) = &resolved.via_ref {
            if stack.contains(name) {
                return Err(OpenApiError::at(
                    pointer,
                    format!(
                        "recursive schema: {name} contains itself ({} -> {name})",
                        stack.join(" -> ")
                    ),
                ));
            }
            stack.push(name.clone());
        }
        let mut out = Map::new();
        for (key, value) in &resolved.schema {
            let child_ptr = format!("{}/{}", resolved.pointer, escape_token(key));
            let inlined = match key.as_str() {
                "properties" | "patternProperties" | "definitions" => {
                    let props = value.as_object().ok_or_else(|| {
                        OpenApiError::at(&child_ptr, format!("{key} must be an object"))
                    })?;
                    let mut m = Map::new();
                    for (name, sub) in props {
                        let p = format!("{child_ptr}/{}", escape_token(name));
                        m.insert(name.clone(), self.inline_at(sub, &p, stack)?);
                    }
                    Value::Object(m)
                }
                "items" | "additionalProperties" | "not" | "additionalItems"
                    if value.is_object() =>
                {
                    self.inline_at(value, &child_ptr, stack)?
                }
                "allOf" | "anyOf" | "oneOf" => {
                    let items = value.as_array().ok_or_else(|| {
                        OpenApiError::at(&child_ptr, format!("{key} must be an array"))
                    })?;
                    let mut v = Vec::with_capacity(items.len());
                    for (i, sub) in items.iter().enumerate() {
                        v.push(self.inline_at(sub, &format!("{child_ptr}/{i}"), stack)?);
                    }
                    Value::Array(v)
                }
                _ => value.clone(),
            };
            out.insert(key.clone(), inlined);
        }
        if resolved.via_ref.is_some() {
            stack.pop();
        }
        Ok(Value::Object(out))
    }
}

/// Splits a schema into (reference, other keywords) when it is a reference or a single-`$ref`
/// `allOf` wrapper.
fn split_ref(schema: &Map<String, Value>) -> Option<(String, Map<String, Value>)> {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let mut rest = schema.clone();
        rest.remove("$ref");
        return Some((r.to_owned(), rest));
    }
    let all_of = schema.get("allOf")?.as_array()?;
    if all_of.len() != 1 {
        return None;
    }
    let only = all_of.first()?.as_object()?;
    let r = only.get("$ref")?.as_str()?;
    if only.len() != 1 {
        return None;
    }
    let mut rest = schema.clone();
    rest.remove("allOf");
    Some((r.to_owned(), rest))
}

fn as_schema<'a>(v: &'a Value, pointer: &str) -> Result<&'a Map<String, Value>, OpenApiError> {
    v.as_object()
        .ok_or_else(|| OpenApiError::at(pointer, "a schema must be a JSON object"))
}

/// Escapes one JSON pointer token (`~` → `~0`, `/` → `~1`).
pub fn escape_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(v: Value) -> Document {
        match Document::from_value(v) {
            Ok(d) => d,
            Err(e) => panic!("{e}"),
        }
    }

    fn sample() -> Document {
        doc(json!({
            "openapi": "3.0.0",
            "components": {"schemas": {
                "a.v1.Thing": {
                    "type": "object",
                    "x-kubernetes-group-version-kind": [{"group": "a", "version": "v1", "kind": "Thing"}],
                    "properties": {
                        "spec": {"allOf": [{"$ref": "#/components/schemas/a.v1.Spec"}], "default": {}, "description": "the spec"},
                        "items": {"type": "array", "items": {"$ref": "#/components/schemas/a.v1.Item"}}
                    }
                },
                "a.v1.Spec": {"type": "object", "description": "Spec type", "properties": {"n": {"type": "integer"}}},
                "a.v1.Item": {"type": "string"},
                "a.v1.Loop": {"type": "object", "properties": {"next": {"$ref": "#/components/schemas/a.v1.Loop"}}},
                "a/b": {"type": "string"}
            }}
        }))
    }

    #[test]
    fn finds_schema_by_group_version_kind() {
        let d = sample();
        let (ptr, _) = d
            .schema_for_kind("a", "v1", "Thing")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ptr, "/components/schemas/a.v1.Thing");
        let e = d.schema_for_kind("a", "v2", "Thing").err();
        assert!(e.is_some_and(|e| e.message.contains("version: \"v2\"")));
    }

    #[test]
    fn allof_wrapper_keeps_its_own_keywords_over_the_target() {
        let d = sample();
        let spec = d
            .pointer("/components/schemas/a.v1.Thing/properties/spec")
            .cloned();
        let r = d
            .deref(&spec.unwrap_or_default(), "/x")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.pointer, "/components/schemas/a.v1.Spec");
        assert_eq!(r.via_ref.as_deref(), Some("a.v1.Spec"));
        assert_eq!(r.schema.get("description"), Some(&json!("the spec")));
        assert_eq!(r.schema.get("default"), Some(&json!({})));
        assert_eq!(r.schema.get("type"), Some(&json!("object")));
        assert!(!r.schema.contains_key("allOf"));
    }

    #[test]
    fn inline_resolves_nested_refs() {
        let d = sample();
        let v = d
            .inline("/components/schemas/a.v1.Thing")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            v.pointer("/properties/spec/properties/n/type"),
            Some(&json!("integer"))
        );
        assert_eq!(
            v.pointer("/properties/items/items/type"),
            Some(&json!("string"))
        );
    }

    #[test]
    fn inline_reports_recursive_schemas_with_their_path() {
        let d = sample();
        let e = d.inline("/components/schemas/a.v1.Loop").err();
        let e = e.unwrap_or_else(|| panic!("a recursive schema cannot be inlined"));
        assert_eq!(e.path, "/components/schemas/a.v1.Loop/properties/next");
        assert!(
            e.message.contains("recursive schema: a.v1.Loop"),
            "{}",
            e.message
        );
    }

    #[test]
    fn remote_and_dangling_refs_are_errors() {
        let d = sample();
        assert!(
            d.resolve_ref("other.json#/x", "/p")
                .is_err_and(|e| e.message.contains("not a local reference"))
        );
        assert!(
            d.resolve_ref("#/components/schemas/nope", "/p")
                .is_err_and(|e| e.message.contains("points at nothing") && e.path == "/p")
        );
    }

    #[test]
    fn pointer_tokens_are_escaped() {
        assert_eq!(escape_token("a/b~c"), "a~1b~0c");
        let d = sample();
        assert!(
            d.pointer(&format!("/components/schemas/{}", escape_token("a/b")))
                .is_some()
        );
    }

    #[test]
    fn non_json_documents_are_errors() {
        assert!(
            Document::parse("not json").is_err_and(|e| e.message.contains("not a JSON document"))
        );
        assert!(Document::parse("[]").is_err());
    }
}
