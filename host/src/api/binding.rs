//! `Binding` (namespaced) and `ClusterBinding` (cluster-scoped): which exported APIs a consumer
//! uses through which Connection, and which Secrets/ConfigMaps travel alongside.

use std::ops::Deref;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Gives a binding kind's spec what Binding and ClusterBinding share: the group, version,
/// status type, category and printer columns, so that `kubectl get` shows both alike.
macro_rules! binding_kind {
    ($(#[$attr:meta])* pub struct $name:ident $body:tt) => {
        $(#[$attr])*
        #[kube(
            group = "core.kbind.io",
            version = "v1alpha1",
            status = "BindingStatus",
            category = "kbind",
            printcolumn = r#"{"name":"Connection","type":"string","jsonPath":".spec.connectionRef.name","description":"The Connection whose provider serves the APIs"}"#,
            printcolumn = r#"{"name":"APIs","type":"string","jsonPath":".status.boundAPIs[*].name","description":"The first bound API (kubectl kbind status lists all)"}"#,
            printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status","description":"Whether the binding's APIs are installed and syncing"}"#,
            printcolumn = r#"{"name":"Synced","type":"string","jsonPath":".status.conditions[?(@.type==\"Synced\")].status","description":"Whether every bound instance is in sync"}"#,
            printcolumn = r#"{"name":"Conflicts","type":"integer","jsonPath":".status.conflictCount","description":"Instances whose provider target is owned by someone else"}"#,
            printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
        )]
        pub struct $name $body
    };
}

binding_kind! {
/// Which exported APIs of which Connection to bind, what to do with provider objects that
/// are not this consumer's, and which Secrets and ConfigMaps travel alongside.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(kind = "Binding", namespaced, shortname = "kb", shortname = "kbinding")]
#[kube(
    doc = "Binds exported APIs of a Connection for the instances in this namespace: their specs are copied to the provider and their status back. Deleting it drains what it bound (owned provider copies deleted, instances kept)."
)]
#[serde(rename_all = "camelCase")]
pub struct BindingSpec {
    /// The Connection whose provider serves these APIs.
    pub connection_ref: ConnectionReference,
    /// Exported APIs to bind, as `<plural>.<group>`.
    #[schemars(length(min = 1))]
    pub apis: Vec<ApiReference>,
    /// What to do with a provider target that exists without this consumer's markers:
    /// `Fail` (default) leaves it alone and reports the conflict on the instance; `Adopt`
    /// takes it over when it carries no ownership marker at all. A target owned by another
    /// consumer or object is never taken.
    #[serde(default)]
    pub conflict_policy: ConflictPolicy,
    /// Secrets and ConfigMaps copied alongside the bound instances.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub related_resources: Vec<RelatedResource>,
}
}

binding_kind! {
/// The same fields as a Binding's spec, for every namespace.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(kind = "ClusterBinding", shortname = "kcb", shortname = "kclusterbinding")]
#[kube(
    doc = "Binds exported APIs of a Connection for instances in every namespace, and cluster-scoped ones. Where it and a Binding cover the same API on the same Connection, it wins. The last ClusterBinding of an API deletes the consumer CRD kbind installed, with every instance."
)]
pub struct ClusterBindingSpec {
    /// The same fields as a Binding's spec.
    #[serde(flatten)]
    pub spec: BindingSpec,
}
}

impl Deref for ClusterBindingSpec {
    type Target = BindingSpec;
    fn deref(&self) -> &BindingSpec {
        &self.spec
    }
}

/// Either kind's spec, as the fields they share.
impl AsRef<BindingSpec> for BindingSpec {
    fn as_ref(&self) -> &BindingSpec {
        self
    }
}

impl AsRef<BindingSpec> for ClusterBindingSpec {
    fn as_ref(&self) -> &BindingSpec {
        &self.spec
    }
}

impl From<BindingSpec> for ClusterBindingSpec {
    fn from(spec: BindingSpec) -> Self {
        Self { spec }
    }
}

/// A reference to a Connection by name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub struct ConnectionReference {
    /// Name of the Connection.
    pub name: String,
}

/// A reference to an exported API.
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub struct ApiReference {
    /// `<plural>.<group>`.
    pub name: String,
}

/// The policy for a provider target that already exists.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConflictPolicy {
    /// Leave the target untouched and report a conflict.
    #[default]
    Fail,
    /// Take ownership when both consumer ownership annotations are absent.
    Adopt,
}

/// One kind of related object to copy, in one direction.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RelatedResource {
    /// API group; only the core group ("") is supported.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self == ''").message("only the core group \"\" is supported"))]
    pub group: String,
    /// `secrets` or `configmaps`.
    pub resource: RelatedResourceKind,
    /// Which way the copies go: `FromProvider` (provider objects copied into the binding's
    /// scope on the consumer) or `FromConsumer` (consumer objects copied to the provider).
    pub direction: RelatedDirection,
    /// Which sources to copy; empty matches everything in scope.
    #[serde(default)]
    pub selector: RelatedSelector,
}

/// The kinds of related objects that can be copied.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum RelatedResourceKind {
    /// core/v1 Secrets.
    Secrets,
    /// core/v1 ConfigMaps.
    Configmaps,
}

/// Direction of a related-resource copy.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum RelatedDirection {
    /// Provider → consumer.
    FromProvider,
    /// Consumer → provider.
    FromConsumer,
}

/// Which related objects are selected. Both parts must match when both are given.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RelatedSelector {
    /// Labels the source must carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Exact names the source must have.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
}

/// What the konnector observed about a binding.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingStatus {
    /// One entry per bound API. A map keyed by name, so that with sharded replicas the
    /// replica running an API's syncer applies that entry's counts under its own field
    /// manager, beside the entries of other replicas.
    #[serde(default, rename = "boundAPIs", skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub bound_apis: Vec<BoundApi>,
    /// Ready, Synced, Conflicts, PermissionDenied, RelatedResourcesSynced, Drained,
    /// TeardownFailed, Released.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The generation this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The Connection `boundAPIs` were bound through. When `connectionRef` is edited, what
    /// was bound through this one is drained through it before the new one selects anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_connection: Option<String>,
    /// Instances in this binding's scope whose provider target belongs to someone else, over
    /// all bound APIs (the per-API counts are in `boundAPIs`).
    #[serde(default)]
    pub conflict_count: i64,
}

/// The state of one bound API.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BoundApi {
    /// `<plural>.<group>`.
    pub name: String,
    /// Hash of the installed consumer CRD spec, to tell when it changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crd_hash: Option<String>,
    /// Consumer instances carrying the conflict annotation.
    #[serde(default)]
    pub conflict_count: i64,
    /// The provider stopped exporting this API: its sync stopped and nothing of it is deleted
    /// (consumer CRD, instances, provider copies); it resumes when exported again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub released: bool,
    /// This API's instances in the binding's scope, as the konnector's syncer knows them
    /// (status schemas without conditions included); absent until its syncer has run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<InstanceCounts>,
    /// Whether this API syncs in the binding's scope, judged API by API: a failing API
    /// leaves the binding's other APIs syncing. Absent until a konnector judged it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ApiState>,
    /// Why the API is not `Syncing` (a condition reason such as `APINotExported`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What to do about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Sharded konnectors: the replica whose syncer runs this API and wrote this entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syncer: Option<String>,
    /// Sharded konnectors: what that syncer knows beyond the counts, from which the replica
    /// holding the Connection writes the binding's overall conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<ApiReport>,
}

/// How one listed API of a binding stands. Only `Failed` stops the binding pinning the API to
/// its Connection and counting as coverage of it when another binding is deleted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ApiState {
    /// Its instances in scope sync.
    Syncing,
    /// It waits for something that comes by itself (the Connection Ready again, the consumer
    /// CRD Established).
    Waiting,
    /// The provider stopped exporting it: nothing syncs, nothing is deleted.
    Released,
    /// It cannot sync as written (not exported, CRD not kbind's or bound elsewhere, schema
    /// refused, namespace not allowed, Connection absent) until someone changes something.
    Failed,
}

/// One API's sync state in a binding's scope, as the replica running its syncer reports it.
/// Atomic for server-side apply, like the counts: one replica's report, never a mix of two.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct ApiReport {
    /// The syncer has not yet reconciled every listed instance once: counts are incomplete.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub settling: bool,
    /// Instances not in sync, per reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failing: Vec<FailingInstances>,
    /// What the provider said when it refused this API's watch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_denied: Option<String>,
    /// What the consumer said when it refused the konnector's watch of this API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_denied: Option<String>,
}

/// The instances failing for one reason.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct FailingInstances {
    /// The instance condition reason (`ForeignObjectExists`, `Forbidden`, ...).
    pub reason: String,
    /// How many instances fail for it.
    pub count: u64,
    /// A few of them, as `namespace/name` or `name`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
}

/// How a bound API's instances stand. Atomic for server-side apply: with sharded replicas
/// several field managers write `boundAPIs` entries, and one giving up its fields must take
/// the whole counts with it or leave them whole, never leave some of the four required fields.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct InstanceCounts {
    /// Provider copy matches the spec.
    pub synced: u64,
    /// Blocked by a provider object that is not theirs.
    pub conflicting: u64,
    /// Their last sync failed for another reason.
    pub failing: u64,
    /// Listed but not reconciled yet.
    pub pending: u64,
}
