//! The Rust-facing inputs and outputs of the four policy roles, mirroring the WIT records
//! of `kbind:policy@0.1.0` with the konnector's own API types where they exist.
//!
//! All of them are serde-able: `konnector policy eval` and the fixture folders use exactly
//! these JSON shapes (camelCase field names, like the Kubernetes objects they come from).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::api::names::RELATED_BINDING_ANNOTATION;
use crate::api::{
    ConflictPolicy, IsolationInForce, Reason, RelatedDirection, RelatedResource,
    RelatedResourceKind, ResourceScope,
};
pub use crate::markers::OwnershipMarkers;

/// What the conflict policy is asked before a provider write.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ConflictInput {
    /// UID of this consumer cluster.
    pub consumer_cluster_uid: String,
    /// UID of the consumer instance being synchronised.
    pub consumer_object_uid: String,
    /// The selecting binding's `spec.conflictPolicy`.
    #[serde(default)]
    pub conflict_policy: ConflictPolicy,
    /// The ownership markers of the provider object at the same namespace/name, or `None`
    /// when no such object exists.
    #[serde(default)]
    pub target: Option<OwnershipMarkers>,
}

/// The conflict policy's verdict.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "decision", rename_all = "PascalCase")]
pub enum ConflictDecision {
    /// No target exists: create it with this consumer's markers.
    Create,
    /// The target carries exactly this consumer's markers: update it.
    UpdateOwned,
    /// The target is unmarked and the policy is Adopt: stamp the markers and update it.
    Adopt,
    /// Leave the target untouched and report the conflict.
    Conflict {
        /// The condition/Event reason.
        reason: ConflictReason,
        /// A human-readable explanation for the conflict annotation.
        message: String,
    },
}

impl ConflictDecision {
    /// Whether the konnector may write (create, update or adopt) the target.
    pub fn allows_write(&self) -> bool {
        !matches!(self, Self::Conflict { .. })
    }
}

/// Why a write is refused.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConflictReason {
    /// The target exists without markers and the policy is Fail.
    ForeignObjectExists,
    /// The target carries another consumer's or object's markers, or only one marker.
    OwnedByAnother,
}

impl From<ConflictReason> for Reason {
    fn from(r: ConflictReason) -> Self {
        match r {
            ConflictReason::ForeignObjectExists => Reason::ForeignObjectExists,
            ConflictReason::OwnedByAnother => Reason::OwnedByAnother,
        }
    }
}

/// Discovery facts and OpenAPI documents for one provider resource.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SchemaInput {
    /// API group (must contain a dot to be a CRD group).
    pub group: String,
    /// Plural resource name.
    pub resource: String,
    /// Kind.
    pub kind: String,
    /// Singular name; the lower-cased kind when empty.
    #[serde(default)]
    pub singular: String,
    /// Short names.
    #[serde(default)]
    pub short_names: Vec<String>,
    /// Categories.
    #[serde(default)]
    pub categories: Vec<String>,
    /// Namespaced or Cluster.
    pub scope: ResourceScope,
    /// The versions to install, in the provider's order of preference.
    pub versions: Vec<SchemaVersion>,
}

/// One discovered version with its OpenAPI v3 document.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SchemaVersion {
    /// Version name.
    pub name: String,
    /// Whether the provider serves it.
    pub served: bool,
    /// Whether it is the storage (preferred) version; exactly one must be.
    pub storage: bool,
    /// Subresources discovery lists for it (`status` is carried over).
    #[serde(default)]
    pub subresources: Vec<String>,
    /// The provider's `/openapi/v3/apis/<group>/<version>` document.
    pub openapi: serde_json::Value,
}

/// One `relatedResources` entry of a binding with the objects on both sides.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RelatedInput {
    /// UID of the binding (the `core.kbind.io/related-binding` value of its copies).
    pub binding_uid: String,
    /// The namespace of a Binding; `None` for a ClusterBinding.
    #[serde(default)]
    pub binding_namespace: Option<String>,
    /// The entry, as written in the binding's spec.
    pub entry: RelatedResource,
    /// Objects of the entry's kind on the source side.
    #[serde(default)]
    pub sources: Vec<RelatedSource>,
    /// Objects of the entry's kind on the target side.
    #[serde(default)]
    pub targets: Vec<RelatedTarget>,
}

/// A candidate source object.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RelatedSource {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// An existing object on the target side.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RelatedTarget {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its `core.kbind.io/related-binding` annotation, if present.
    #[serde(default)]
    pub related_binding: Option<String>,
}

impl RelatedTarget {
    /// Builds a target from an object's namespace, name and annotations.
    pub fn from_annotations(
        namespace: impl Into<String>,
        name: impl Into<String>,
        annotations: &BTreeMap<String, String>,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            related_binding: annotations.get(RELATED_BINDING_ANNOTATION).cloned(),
        }
    }
}

/// What to do for one entry.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RelatedPlan {
    /// Garbage-collection key: the binding UID...
    pub binding_uid: String,
    /// ...the kind...
    pub resource: RelatedResourceKind,
    /// ...and the direction.
    pub direction: RelatedDirection,
    /// Sources to copy (create the target, or update this binding's copy).
    pub copy: Vec<ObjectRef>,
    /// Selected sources whose target belongs to someone else; left untouched.
    pub skip: Vec<SkippedObject>,
    /// This binding's copies that no longer match; delete them.
    pub delete: Vec<ObjectRef>,
}

/// A namespace/name pair.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// A selected source that is not copied.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SkippedObject {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Why.
    pub reason: SkipReason,
}

/// Why a selected source is not copied.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SkipReason {
    /// The target carries another binding's marker.
    OtherBinding,
    /// The target has no related-binding marker.
    Unmarked,
}

/// What the placement policy is asked before a consumer object's first provider write.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PlacementInput {
    /// UID of this consumer cluster.
    pub consumer_cluster_uid: String,
    /// The Connection the object syncs through.
    pub connection: String,
    /// The object's API.
    pub api: PlacementApi,
    /// The consumer object's namespace; `None` for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The consumer object's name.
    pub name: String,
    /// The Connection's isolation in force (strategy and resolved prefix).
    pub isolation: IsolationInForce,
}

impl PlacementInput {
    /// The question for a related Secret or ConfigMap `namespace/name`: placed like any object,
    /// as the core group's namespaced `secrets` or `configmaps`.
    pub fn related(
        kind: RelatedResourceKind,
        consumer_cluster_uid: &str,
        connection: &str,
        namespace: &str,
        name: &str,
        isolation: IsolationInForce,
    ) -> Self {
        let (resource, kind) = match kind {
            RelatedResourceKind::Secrets => ("secrets", "Secret"),
            RelatedResourceKind::Configmaps => ("configmaps", "ConfigMap"),
        };
        Self {
            consumer_cluster_uid: consumer_cluster_uid.to_string(),
            connection: connection.to_string(),
            api: PlacementApi {
                group: String::new(),
                resource: resource.into(),
                kind: kind.into(),
                scope: ResourceScope::Namespaced,
            },
            namespace: Some(namespace.to_string()),
            name: name.to_string(),
            isolation,
        }
    }

    /// The question whose answer's namespace is where a consumer namespace's related objects
    /// go (under `Namespaced` it follows from placing any name in it).
    pub fn namespace_of(
        namespace: &str,
        consumer_cluster_uid: &str,
        connection: &str,
        isolation: IsolationInForce,
    ) -> Self {
        let probe = "placement-probe";
        let kind = RelatedResourceKind::Secrets;
        Self::related(
            kind,
            consumer_cluster_uid,
            connection,
            namespace,
            probe,
            isolation,
        )
    }
}

/// The API of an object being placed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PlacementApi {
    /// API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    /// Plural resource name.
    pub resource: String,
    /// Kind.
    pub kind: String,
    /// Namespaced or Cluster.
    pub scope: ResourceScope,
}

/// Where a provider copy lives: the placement policy's answer, once the host accepted it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// Provider namespace; `None` exactly for cluster-scoped APIs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Provider name.
    pub name: String,
}
