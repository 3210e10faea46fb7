//! What a related copy carries: the source's payload fields only, the marker naming the
//! binding, the source's resourceVersion and a digest of the payload in canonical form, so
//! that metadata alone tells whether a copy is up to date.

use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::api::names::{
    RELATED_BINDING_ANNOTATION, RELATED_DIGEST_ANNOTATION, RELATED_SOURCE_VERSION_ANNOTATION,
};
use crate::api::{RelatedResource, RelatedResourceKind};

use super::resource;

/// The payload fields a copy carries (spec: "data, stringData, binaryData, type, and
/// immutable when present, not arbitrary source metadata").
pub(super) const PAYLOAD_FIELDS: [&str; 5] =
    ["data", "stringData", "binaryData", "type", "immutable"];

/// The copy: namespace/name, the marker, the payload's digest and the source's
/// resourceVersion, and only the payload fields present on the source.
pub fn payload(entry: &RelatedResource, source: &DynamicObject, binding_uid: &str) -> Value {
    let (kind, ar) = match entry.resource {
        RelatedResourceKind::Secrets => ("Secret", resource(entry.resource)),
        RelatedResourceKind::Configmaps => ("ConfigMap", resource(entry.resource)),
    };
    let mut fields = Map::new();
    if let Some(source_fields) = source.data.as_object() {
        for field in PAYLOAD_FIELDS {
            if let Some(value) = source_fields.get(field).filter(|v| !v.is_null()) {
                fields.insert(field.into(), value.clone());
            }
        }
    }
    let mut annotations = Map::new();
    annotations.insert(RELATED_BINDING_ANNOTATION.into(), json!(binding_uid));
    annotations.insert(RELATED_DIGEST_ANNOTATION.into(), json!(digest(&fields)));
    if let Some(version) = &source.metadata.resource_version {
        annotations.insert(RELATED_SOURCE_VERSION_ANNOTATION.into(), json!(version));
    }
    let mut body = Map::new();
    body.insert("apiVersion".into(), json!(ar.api_version));
    body.insert("kind".into(), json!(kind));
    body.insert(
        "metadata".into(),
        json!({
            "name": source.name_any(),
            "namespace": source.metadata.namespace,
            "annotations": annotations,
        }),
    );
    body.extend(fields);
    Value::Object(body)
}

/// sha256 (hex) of payload fields in canonical form: object keys sorted at every level, no
/// whitespace, so the same payload always gives the same digest whatever order it came in.
pub fn digest(fields: &Map<String, Value>) -> String {
    let mut canonical = String::new();
    write_canonical(&Value::Object(fields.clone()), &mut canonical);
    let hash = Sha256::digest(canonical.as_bytes());
    hash.iter().map(|b| format!("{b:02x}")).collect()
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<_> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::entry;
    use super::*;

    fn secret() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {
                "name": "s", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "labels": { "a": "b" }, "annotations": { "x": "y" },
                "finalizers": ["f"], "ownerReferences": [],
            },
            "data": { "k": "dg==" }, "type": "Opaque", "immutable": true,
        }))
        .unwrap_or_else(|e| panic!("fixture: {e}"))
    }

    #[test]
    fn payload_carries_only_payload_fields_and_the_marker() {
        let body = payload(&entry(RelatedResourceKind::Secrets), &secret(), "b-uid");
        assert_eq!(
            body,
            json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {
                    "name": "s", "namespace": "ns",
                    "annotations": {
                        RELATED_BINDING_ANNOTATION: "b-uid",
                        RELATED_DIGEST_ANNOTATION: digest(&payload_fields()),
                        RELATED_SOURCE_VERSION_ANNOTATION: "7",
                    },
                },
                "data": { "k": "dg==" }, "type": "Opaque", "immutable": true,
            })
        );
    }

    fn payload_fields() -> Map<String, Value> {
        let fields = json!({ "data": { "k": "dg==" }, "type": "Opaque", "immutable": true });
        fields.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn digest_is_the_same_whatever_the_key_order_and_differs_with_the_payload() {
        let a = json!({ "type": "Opaque", "data": { "b": "Mg==", "a": "MQ==" } });
        let b = json!({ "data": { "a": "MQ==", "b": "Mg==" }, "type": "Opaque" });
        let (a, b) = (
            a.as_object().cloned().unwrap_or_default(),
            b.as_object().cloned().unwrap_or_default(),
        );
        assert_eq!(digest(&a), digest(&b));
        assert_eq!(digest(&a), digest(&a.clone()), "deterministic");
        assert_eq!(digest(&a).len(), 64, "sha256 in hex");
        let mut changed = a.clone();
        changed.insert("data".into(), json!({ "a": "MQ==", "b": "Mw==" }));
        assert_ne!(digest(&a), digest(&changed));
    }
}
