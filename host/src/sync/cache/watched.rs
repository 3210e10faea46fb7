//! An object as a syncer's watches read it: the whole object but its managedFields, which are
//! skipped while the JSON is read instead of being built and dropped.
//!
//! ```text
//! watch event / list item ──▶ Watched: apiVersion, kind, metadata (no managedFields), the rest
//!                              as JSON values ──▶ CachedInstance / CachedCopy
//! ```
//!
//! managedFields are often larger than the object they describe (an entry per field manager,
//! each a tree of every field it owns), and nothing a cache keeps is made of them. Read into a
//! `DynamicObject`, every event of every watched object built that tree and freed it again.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::api::DynamicObject;
use kube::core::{ApiResource, DynamicResourceScope, Resource, TypeMeta};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A watched object, managedFields left out.
#[derive(Clone, Debug, Serialize)]
#[serde(transparent)]
pub struct Watched(pub DynamicObject);

impl Resource for Watched {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::kind(dt)
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::group(dt)
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::version(dt)
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::api_version(dt)
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

/// `ObjectMeta` as it is read here: every field but managedFields (which serde skips
/// unparsed, as any field a struct does not name).
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Metadata {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

impl From<Metadata> for ObjectMeta {
    fn from(m: Metadata) -> Self {
        Self {
            annotations: m.annotations,
            creation_timestamp: m.creation_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp,
            finalizers: m.finalizers,
            generate_name: m.generate_name,
            generation: m.generation,
            labels: m.labels,
            managed_fields: None,
            name: m.name,
            namespace: m.namespace,
            owner_references: m.owner_references,
            resource_version: m.resource_version,
            self_link: m.self_link,
            uid: m.uid,
        }
    }
}

impl<'de> Deserialize<'de> for Watched {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ObjectVisitor)
    }
}

/// Reads the top level of an object: its type, its metadata, and every other field as is.
struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = Watched;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Watched, A::Error> {
        let (mut api_version, mut kind, mut metadata) = (None, None, None);
        let mut data = Map::new();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "apiVersion" => api_version = Some(map.next_value::<String>()?),
                "kind" => kind = Some(map.next_value::<String>()?),
                "metadata" => {
                    if metadata.is_some() {
                        return Err(de::Error::duplicate_field("metadata"));
                    }
                    metadata = Some(map.next_value::<Option<Metadata>>()?.unwrap_or_default());
                }
                _ => {
                    data.insert(key.into_owned(), map.next_value::<Value>()?);
                }
            }
        }
        let types = match (api_version, kind) {
            (Some(api_version), Some(kind)) => Some(TypeMeta { api_version, kind }),
            _ => None,
        };
        Ok(Watched(DynamicObject {
            types,
            metadata: metadata.unwrap_or_default().into(),
            data: Value::Object(data),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object() -> Value {
        json!({
            "apiVersion": "example.org/v1",
            "kind": "Widget",
            "metadata": {
                "name": "w",
                "namespace": "ns",
                "uid": "u-1",
                "resourceVersion": "42",
                "generation": 3,
                "labels": {"app": "x"},
                "annotations": {"core.kbind.io/conflict": "none"},
                "finalizers": ["core.kbind.io/syncer"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "o-1"}],
                "creationTimestamp": "2026-12-05T10:00:00Z",
                "deletionTimestamp": "2026-12-05T11:00:00Z",
                "managedFields": [{
                    "manager": "kubectl",
                    "operation": "Apply",
                    "apiVersion": "example.org/v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:size": {}}}
                }]
            },
            "spec": {"size": 3, "tags": ["a"]},
            "status": {"phase": "Ready"}
        })
    }

    #[test]
    fn an_object_reads_as_a_dynamic_object_without_managed_fields() -> anyhow::Result<()> {
        let text = serde_json::to_string(&object())?;
        let watched: Watched = serde_json::from_str(&text)?;
        let mut expected: DynamicObject = serde_json::from_str(&text)?;
        assert!(expected.metadata.managed_fields.is_some());
        expected.metadata.managed_fields = None;
        assert_eq!(watched.0, expected);
        Ok(())
    }

    #[test]
    fn absent_or_null_parts_read_as_absent() -> anyhow::Result<()> {
        let watched: Watched = serde_json::from_str(r#"{"metadata": null, "spec": {"a": 1}}"#)?;
        assert_eq!(watched.0.types, None);
        assert_eq!(watched.0.metadata, ObjectMeta::default());
        assert_eq!(watched.0.data, json!({"spec": {"a": 1}}));
        Ok(())
    }

    #[test]
    fn a_malformed_object_is_an_error_not_a_guess() {
        for text in [
            r#"[]"#,
            r#"{"metadata": {"name": 3}}"#,
            r#"{"metadata": {}, "metadata": {}}"#,
        ] {
            assert!(serde_json::from_str::<Watched>(text).is_err(), "{text}");
        }
    }
}
