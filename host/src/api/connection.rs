//! `Connection`: how the konnector reaches one provider cluster, and what it found there.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::isolation::{Isolation, IsolationInForce};
use super::names::DEFAULT_KUBECONFIG_KEY;
use super::policies::{ConnectionPolicies, PolicyModuleStatus};

/// Which provider to reach (the kubeconfig Secret) and how its exported APIs are found,
/// installed and bound on this consumer.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "core.kbind.io",
    version = "v1alpha1",
    kind = "Connection",
    doc = "A provider cluster the konnector connects out to, with a kubeconfig from a Secret in the konnector's credential namespace (default kbind). Ready when both cluster identities are pinned and the provider's exported APIs are discovered; Bindings and ClusterBindings then bind those APIs.",
    status = "ConnectionStatus",
    category = "kbind",
    shortname = "kconn",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status","description":"Whether the provider is connected and its exports discovered"}"#,
    printcolumn = r#"{"name":"Source","type":"string","jsonPath":".status.activeSchemaSource","description":"The schema source in effect (CRD or OpenAPI)"}"#,
    printcolumn = r#"{"name":"APIs","type":"string","jsonPath":".status.exportedAPIs[*].name","description":"The first exported API (kubectl kbind status lists all)"}"#,
    printcolumn = r#"{"name":"Secret","type":"string","jsonPath":".spec.kubeconfigSecretRef.name","priority":1,"description":"The credential Secret in the konnector's designated namespace"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionSpec {
    /// The Secret holding the provider kubeconfig. It must live in the konnector's designated
    /// namespace. Immutable: create a new Connection to point at other credentials.
    #[x_kube(validation = Rule::new("self == oldSelf").message("kubeconfigSecretRef is immutable"))]
    pub kubeconfig_secret_ref: SecretReference,
    /// How exported API schemas are found and installed on the consumer.
    #[serde(default)]
    pub schema: SchemaPolicy,
    /// Maintain one ClusterBinding, named after this Connection and labelled
    /// `core.kbind.io/managed: "true"`, listing every bindable exported API. An API the
    /// provider stops exporting stays listed (released), never deleted.
    #[serde(default)]
    pub auto_bind: bool,
    /// The namespaces whose Bindings may use this Connection; absent: every namespace.
    /// ClusterBindings are not limited. Creating Bindings with related resources in a
    /// namespace gives access to that namespace's Secrets and ConfigMaps, as creating Pods does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding_namespace_selector: Option<LabelSelector>,
    /// Where this consumer's copies go on the provider, for providers shared by many
    /// consumers. Changing it is refused (condition `IsolationInSync=False`) while bindings
    /// use the Connection: copies never move.
    #[serde(default, skip_serializing_if = "is_default")]
    pub isolation: Isolation,
    /// Policy modules (placement, conflict, related selection, schema synthesis) this
    /// Connection chooses for itself, each with settings, overriding the konnector's. A
    /// changed module is swapped in live; one that cannot be had leaves the Connection
    /// `Ready=False PolicyUnavailable` (never a silent fallback to the built-in one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policies: Option<ConnectionPolicies>,
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// A reference to one data key of a Secret.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub name: String,
    /// Data key holding the kubeconfig.
    #[serde(default = "default_kubeconfig_key")]
    pub key: String,
}

fn default_kubeconfig_key() -> String {
    DEFAULT_KUBECONFIG_KEY.to_string()
}

/// Where exported schemas come from and when they are installed on the consumer.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchemaPolicy {
    /// Where the provider's exported APIs and their schemas are read from: `CRD` (CRDs
    /// labelled `core.kbind.io/exported: "true"`), `OpenAPI` (every discovered resource outside
    /// the built-in groups, schema from `/openapi/v3`), or `Auto` (default: CRDs, and OpenAPI
    /// only after a successful list found no labelled CRD).
    #[serde(default)]
    pub source: SchemaSource,
    /// Which exported schemas are installed on the consumer: `Bound` (default: those a
    /// binding lists), `All` (every export, as soon as discovered) or `None` (you install
    /// them, annotated `core.kbind.io/connection: <this Connection>`).
    #[serde(default)]
    pub pull_policy: PullPolicy,
    /// Whether installed schemas follow provider changes: `Always` (default) or `Once`
    /// (pinned at the first pull).
    #[serde(default)]
    pub update_policy: UpdatePolicy,
}

/// Schema source on the provider.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum SchemaSource {
    /// CRDs labelled as exported first; OpenAPI only after a successful list found none.
    #[default]
    Auto,
    /// CRDs labelled `core.kbind.io/exported: "true"`.
    #[serde(rename = "CRD")]
    Crd,
    /// Every discovered resource outside the built-in groups, schema from `/openapi/v3`.
    #[serde(rename = "OpenAPI")]
    OpenApi,
}

impl SchemaSource {
    /// The string stored in `status.activeSchemaSource`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "Auto",
            Self::Crd => "CRD",
            Self::OpenApi => "OpenAPI",
        }
    }
}

/// When exported schemas are installed on the consumer.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum PullPolicy {
    /// When a binding lists the API.
    #[default]
    Bound,
    /// Every exported API, as soon as it is discovered.
    All,
    /// Never: an external manager creates the consumer CRDs.
    None,
}

/// Whether installed consumer CRDs follow provider schema changes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum UpdatePolicy {
    /// Installed CRDs follow provider changes.
    #[default]
    Always,
    /// Installed CRDs are pinned at first pull.
    Once,
}

/// What the konnector observed about this Connection.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(oldSelf.localClusterUID) || (has(self.localClusterUID) && self.localClusterUID == oldSelf.localClusterUID)").message("localClusterUID is immutable once set"))]
#[x_kube(validation = Rule::new("!has(oldSelf.remoteClusterUID) || (has(self.remoteClusterUID) && self.remoteClusterUID == oldSelf.remoteClusterUID)").message("remoteClusterUID is immutable once set"))]
pub struct ConnectionStatus {
    /// UID of the provider cluster, pinned on first success.
    #[serde(
        default,
        rename = "remoteClusterUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub remote_cluster_uid: Option<String>,
    /// UID of the consumer cluster, pinned on first success.
    #[serde(
        default,
        rename = "localClusterUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub local_cluster_uid: Option<String>,
    /// The schema source in effect (CRD or OpenAPI; Auto resolves to one of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_schema_source: Option<String>,
    /// APIs the provider exports.
    #[serde(
        default,
        rename = "exportedAPIs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub exported_apis: Vec<ExportedApi>,
    /// The isolation strategy and prefix this Connection's copies are placed by: the spec's,
    /// unless a change is pending while bindings still use the Connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<IsolationInForce>,
    /// The policy modules running for the roles `spec.policies` names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<PolicyModuleStatus>,
    /// SecretValid, Connected, SchemaInSync, PermissionDenied, Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The generation this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// One API the provider exports.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExportedApi {
    /// `<plural>.<group>`, the name bindings list.
    pub name: String,
    /// API group.
    pub group: String,
    /// Plural resource name.
    pub resource: String,
    /// Namespaced or Cluster.
    pub scope: ResourceScope,
    /// Served versions.
    #[serde(default)]
    pub versions: Vec<String>,
}

/// Whether an API's objects live in namespaces.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum ResourceScope {
    /// Objects live in namespaces.
    Namespaced,
    /// Objects are cluster-scoped.
    Cluster,
}
