//! `spec.policies` of a Connection: the policy modules it chooses for itself, each with a
//! settings document, overriding the konnector's process-wide modules for the objects synced
//! through it; and `status.policies`, what runs.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The policy modules a Connection chooses; a role left out uses the konnector's module.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionPolicies {
    /// The schema-synthesis module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<PolicyChoice>,
    /// The conflict-policy module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict: Option<PolicyChoice>,
    /// The related-selection module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub related: Option<PolicyChoice>,
    /// The placement module. A new placement module moves no existing copy: it places only
    /// objects that have none yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PolicyChoice>,
    /// A `kubernetes.io/dockerconfigjson` Secret in the konnector's credential namespace
    /// holding the registry credentials for these references (default: the konnector's
    /// `--policy-pull-secret`, or anonymous).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secret_name: Option<String>,
}

/// One module a Connection names, with its settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyChoice {
    /// `built-in`, `oci://REGISTRY/REPOSITORY:TAG` or `oci://REGISTRY/REPOSITORY@sha256:DIGEST`.
    /// File paths are refused: a Connection author must not choose files on the konnector's
    /// filesystem.
    #[x_kube(validation = Rule::new("self == 'built-in' || self.startsWith('oci://')").message("module must be `built-in` or an oci:// reference; file paths are not allowed on a Connection"))]
    pub module: String,
    /// The settings document (JSON, at most 16 KiB) handed to the module when it is loaded;
    /// the module may refuse it (condition `PoliciesInSync=False` with its message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub settings: Option<serde_json::Value>,
}

fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

impl ConnectionPolicies {
    /// The choice for each role, by the role's short name (`schema`, `conflict`, `related`,
    /// `placement`).
    pub fn by_role(&self) -> [(&'static str, Option<&PolicyChoice>); 4] {
        [
            ("schema", self.schema.as_ref()),
            ("conflict", self.conflict.as_ref()),
            ("related", self.related.as_ref()),
            ("placement", self.placement.as_ref()),
        ]
    }
}

/// What runs for one role a Connection names.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyModuleStatus {
    /// `schema`, `conflict`, `related` or `placement`.
    pub role: String,
    /// The module reference the Connection names.
    pub module: String,
    /// The digest of the module running for it; absent while none runs (unavailable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}
