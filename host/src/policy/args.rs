//! Command-line flags that swap a role's module and bound every call; the `run` command
//! flattens [`PolicyArgs`], and `konnector policy` uses it too. A role's module is a
//! reference ([`PolicyRef`]): `built-in`, a component file, or an OCI artifact.

use std::path::PathBuf;
use std::time::Duration;

use crate::artifact::{Credentials, FetcherConfig, PolicyRef};

use super::limits::PolicyLimits;
use super::role::PolicyRole;
use super::settings::PolicySettings;

/// Which module serves each role, and the limits of each call.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct PolicyArgs {
    /// A schema-synthesis module instead of the built-in one: a component file (.wasm),
    /// `oci://REGISTRY/REPOSITORY:TAG`, `oci://...@sha256:DIGEST`, or `built-in`.
    #[arg(long, value_name = "REF", env = "KBIND_SCHEMA_POLICY")]
    pub schema_policy: Option<PolicyRef>,
    /// The settings document (JSON, at most 16 KiB) handed to the schema module when it is
    /// loaded; the module may refuse it. Default: `{}`.
    #[arg(long, value_name = "JSON", env = "KBIND_SCHEMA_POLICY_SETTINGS")]
    pub schema_policy_settings: Option<PolicySettings>,
    /// A conflict-policy module instead of the built-in one: a component file (.wasm),
    /// `oci://REGISTRY/REPOSITORY:TAG`, `oci://...@sha256:DIGEST`, or `built-in`.
    #[arg(long, value_name = "REF", env = "KBIND_CONFLICT_POLICY")]
    pub conflict_policy: Option<PolicyRef>,
    /// The settings document (JSON, at most 16 KiB) handed to the conflict module when it is
    /// loaded; the module may refuse it. Default: `{}`.
    #[arg(long, value_name = "JSON", env = "KBIND_CONFLICT_POLICY_SETTINGS")]
    pub conflict_policy_settings: Option<PolicySettings>,
    /// A related-selection module instead of the built-in one: a component file (.wasm),
    /// `oci://REGISTRY/REPOSITORY:TAG`, `oci://...@sha256:DIGEST`, or `built-in`.
    #[arg(long, value_name = "REF", env = "KBIND_RELATED_POLICY")]
    pub related_policy: Option<PolicyRef>,
    /// The settings document (JSON, at most 16 KiB) handed to the related module when it is
    /// loaded; the module may refuse it. Default: `{}`.
    #[arg(long, value_name = "JSON", env = "KBIND_RELATED_POLICY_SETTINGS")]
    pub related_policy_settings: Option<PolicySettings>,
    /// A placement module instead of the built-in one: a component file (.wasm),
    /// `oci://REGISTRY/REPOSITORY:TAG`, `oci://...@sha256:DIGEST`, or `built-in`.
    #[arg(long, value_name = "REF", env = "KBIND_PLACEMENT_POLICY")]
    pub placement_policy: Option<PolicyRef>,
    /// The settings document (JSON, at most 16 KiB) handed to the placement module when it is
    /// loaded; the module may refuse it. Default: `{}`.
    #[arg(long, value_name = "JSON", env = "KBIND_PLACEMENT_POLICY_SETTINGS")]
    pub placement_policy_settings: Option<PolicySettings>,
    /// Wall-clock budget of one policy call, in milliseconds (waits inside WASI included).
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 2000,
        env = "KBIND_POLICY_TIMEOUT_MS"
    )]
    pub policy_timeout_ms: u64,
    /// Memory cap of one policy call (all its linear memories together), in MiB.
    #[arg(
        long,
        value_name = "MIB",
        default_value_t = 128,
        env = "KBIND_POLICY_MEMORY_MIB"
    )]
    pub policy_memory_mib: usize,
    /// Largest input (as JSON) handed to a policy module, in MiB; larger ones are refused.
    #[arg(
        long,
        value_name = "MIB",
        default_value_t = 16,
        env = "KBIND_POLICY_MAX_INPUT_MIB"
    )]
    pub policy_max_input_mib: usize,
    /// Most data a policy module may hand the host at once (its answer), in MiB.
    #[arg(
        long,
        value_name = "MIB",
        default_value_t = 4,
        env = "KBIND_POLICY_MAX_OUTPUT_MIB"
    )]
    pub policy_max_output_mib: usize,
    /// Calls one instance of a module serves before it is replaced by a fresh one (1: a
    /// fresh instance per call). An instance that fails in any way is always replaced.
    #[arg(
        long,
        value_name = "CALLS",
        default_value_t = super::warm::DEFAULT_REUSE,
        env = "KBIND_POLICY_INSTANCE_CALLS"
    )]
    pub policy_instance_calls: u32,
    /// Policy calls in flight at once, across every role and syncer; more wait for a free
    /// slot. With `--policy-memory-mib` it bounds the Wasm memory of running calls.
    #[arg(
        long,
        value_name = "CALLS",
        default_value_t = DEFAULT_MAX_CONCURRENT_CALLS,
        env = "KBIND_POLICY_MAX_CONCURRENT_CALLS"
    )]
    pub policy_max_concurrent_calls: usize,
    /// Directory where modules pulled from registries are kept by digest: a restart with
    /// the registry down starts from it. Without it, pulled modules are kept in memory only.
    #[arg(long, value_name = "DIR", env = "KBIND_POLICY_CACHE_DIR")]
    pub policy_cache_dir: Option<PathBuf>,
    /// A registry (`host:port`) reached over plain HTTP instead of TLS; repeat for more.
    /// For test and lab registries only.
    #[arg(
        long = "policy-plain-http-registry",
        value_name = "HOST:PORT",
        env = "KBIND_POLICY_PLAIN_HTTP_REGISTRIES",
        value_delimiter = ','
    )]
    pub policy_plain_http: Vec<String>,
    /// A YAML file with a reference per role (`conflict: oci://...`), overriding the role
    /// flags it names; read again every few seconds, and a changed reference is swapped in
    /// without a restart (the chart mounts it from a ConfigMap).
    #[arg(long, value_name = "FILE", env = "KBIND_POLICY_REFS_FILE")]
    pub policy_refs_file: Option<PathBuf>,
}

/// Policy calls in flight at once unless configured otherwise.
pub const DEFAULT_MAX_CONCURRENT_CALLS: usize = 32;

const MIB: usize = 1024 * 1024;

impl Default for PolicyArgs {
    fn default() -> Self {
        let limits = PolicyLimits::default();
        Self {
            schema_policy: None,
            conflict_policy: None,
            related_policy: None,
            placement_policy: None,
            schema_policy_settings: None,
            conflict_policy_settings: None,
            related_policy_settings: None,
            placement_policy_settings: None,
            policy_timeout_ms: u64::try_from(limits.timeout.as_millis()).unwrap_or(u64::MAX),
            policy_memory_mib: limits.memory_bytes / MIB,
            policy_max_input_mib: limits.max_input_bytes / MIB,
            policy_max_output_mib: limits.max_output_bytes / MIB,
            policy_instance_calls: super::warm::DEFAULT_REUSE,
            policy_max_concurrent_calls: DEFAULT_MAX_CONCURRENT_CALLS,
            policy_cache_dir: None,
            policy_plain_http: Vec::new(),
            policy_refs_file: None,
        }
    }
}

impl PolicyArgs {
    /// The module reference given for a role, if any.
    pub fn module(&self, role: PolicyRole) -> Option<&PolicyRef> {
        match role {
            PolicyRole::SchemaSynthesis => self.schema_policy.as_ref(),
            PolicyRole::ConflictPolicy => self.conflict_policy.as_ref(),
            PolicyRole::RelatedSelection => self.related_policy.as_ref(),
            PolicyRole::Placement => self.placement_policy.as_ref(),
        }
    }

    /// Sets the module reference for a role.
    pub fn set_module(&mut self, role: PolicyRole, reference: Option<PolicyRef>) {
        match role {
            PolicyRole::SchemaSynthesis => self.schema_policy = reference,
            PolicyRole::ConflictPolicy => self.conflict_policy = reference,
            PolicyRole::RelatedSelection => self.related_policy = reference,
            PolicyRole::Placement => self.placement_policy = reference,
        }
    }

    /// The settings given for a role (`{}` when none).
    pub fn settings(&self, role: PolicyRole) -> PolicySettings {
        let given = match role {
            PolicyRole::SchemaSynthesis => &self.schema_policy_settings,
            PolicyRole::ConflictPolicy => &self.conflict_policy_settings,
            PolicyRole::RelatedSelection => &self.related_policy_settings,
            PolicyRole::Placement => &self.placement_policy_settings,
        };
        given.clone().unwrap_or_default()
    }

    /// Sets the settings for a role.
    pub fn set_settings(&mut self, role: PolicyRole, settings: Option<PolicySettings>) {
        match role {
            PolicyRole::SchemaSynthesis => self.schema_policy_settings = settings,
            PolicyRole::ConflictPolicy => self.conflict_policy_settings = settings,
            PolicyRole::RelatedSelection => self.related_policy_settings = settings,
            PolicyRole::Placement => self.placement_policy_settings = settings,
        }
    }

    /// Whether any role names a module in a registry.
    pub fn pulls(&self) -> bool {
        PolicyRole::ALL
            .into_iter()
            .any(|role| matches!(self.module(role), Some(PolicyRef::Oci(_))))
    }

    /// How to reach registries, with `credentials` for them.
    pub fn fetcher_config(&self, credentials: Credentials) -> FetcherConfig {
        FetcherConfig {
            cache_dir: self.policy_cache_dir.clone(),
            plain_http: self.policy_plain_http.clone(),
            credentials,
            verification: Default::default(),
        }
    }

    /// The limits the flags describe.
    pub fn limits(&self) -> PolicyLimits {
        PolicyLimits {
            timeout: Duration::from_millis(self.policy_timeout_ms),
            memory_bytes: self.policy_memory_mib.saturating_mul(MIB),
            max_input_bytes: self.policy_max_input_mib.saturating_mul(MIB),
            max_output_bytes: self.policy_max_output_mib.saturating_mul(MIB),
        }
    }
}
