//! Every way a policy call or a policy load can fail, as one typed error the controllers
//! turn into a condition (reason `PolicyFailed`), an Event and a log line. None of them is
//! fatal to the process: the next call gets a fresh instance.

use std::path::PathBuf;
use std::time::Duration;

use super::role::PolicyRole;
use super::sandbox::SandboxResource;

/// A policy failure.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The Wasm engine could not be created (a host configuration problem).
    #[error("creating the policy engine: {message}")]
    CreateEngine {
        /// The engine's explanation.
        message: String,
    },
    /// A module file could not be read.
    #[error("reading the {role} module {}: {source}", path.display())]
    ReadModule {
        /// The role the file was given for.
        role: PolicyRole,
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// A registry module could not be resolved, pulled and checked, nor found in the cache.
    #[error("fetching the {role} module: {source}")]
    FetchModule {
        /// The role.
        role: PolicyRole,
        /// Why.
        source: crate::artifact::FetchError,
    },
    /// A registry reference reached the loader without having been fetched (a caller's
    /// mistake): refused rather than run the built-in module in its place.
    #[error(
        "the {role} module {reference} is in a registry and was not fetched; nothing runs in its place"
    )]
    NotFetched {
        /// The role.
        role: PolicyRole,
        /// The reference.
        reference: String,
    },
    /// The bytes are not a WebAssembly component (or do not compile).
    #[error("the {role} module {origin} is not a valid WebAssembly component: {message}")]
    CompileModule {
        /// The role.
        role: PolicyRole,
        /// `built-in` or the file path.
        origin: String,
        /// The compiler's explanation.
        message: String,
    },
    /// The module's `configure` refused the settings it was given: it is not used, and the
    /// module running before keeps running.
    #[error("the {role} module {origin} refused its settings: {message}")]
    SettingsRejected {
        /// The role.
        role: PolicyRole,
        /// `built-in`, the file path or the registry reference.
        origin: String,
        /// The module's explanation.
        message: String,
    },
    /// A Connection's module for the role is not available (never pulled, not cached):
    /// nothing runs in its place for that Connection.
    #[error("the {role} module {reference} of Connection {connection} is not available: {message}")]
    Unavailable {
        /// The role.
        role: PolicyRole,
        /// The Connection.
        connection: String,
        /// The reference the Connection names.
        reference: String,
        /// Why it is not available.
        message: String,
    },
    /// The component does not implement the role's world (wrong exports, or imports the
    /// sandbox does not provide).
    #[error("the {role} module {origin} does not implement the world {}: {message}", role.world())]
    WrongWorld {
        /// The role.
        role: PolicyRole,
        /// `built-in` or the file path.
        origin: String,
        /// What does not match.
        message: String,
    },
    /// The module trapped (a panic, `unreachable`, an out-of-bounds access...).
    #[error(
        "the {role} policy {origin} trapped: {message}{}",
        stderr_suffix(stderr)
    )]
    PolicyTrap {
        /// The role.
        role: PolicyRole,
        /// `built-in` or the file path.
        origin: String,
        /// The trap and its Wasm backtrace.
        message: String,
        /// What the module wrote to stderr (a Rust panic message lands here).
        stderr: String,
    },
    /// The module ran past its deadline.
    #[error("the {role} policy {origin} did not finish within {limit:?}")]
    PolicyTimeout {
        /// The role.
        role: PolicyRole,
        /// `built-in` or the file path.
        origin: String,
        /// The deadline.
        limit: Duration,
    },
    /// The module's linear memories, together, tried to grow past the cap.
    #[error("the {role} policy {origin} exceeded its memory limit of {limit_bytes} bytes")]
    PolicyMemoryLimit {
        /// The role.
        role: PolicyRole,
        /// `built-in` or the file path.
        origin: String,
        /// The cap.
        limit_bytes: usize,
    },
    /// The module needs more of a store resource than the sandbox grants (too many linear
    /// memories, tables or instances, or too large a table).
    #[error(
        "the {role} policy {origin} exceeded the sandbox's limit of {} {}",
        resource.limit(),
        resource.what()
    )]
    PolicyResourceLimit {
        /// The role.
        role: PolicyRole,
        /// `built-in` or the file path.
        origin: String,
        /// Which bound.
        resource: SandboxResource,
    },
    /// The input is larger than a module may be given; the call was not made.
    #[error(
        "the input for the {role} policy is larger than the limit of {limit_bytes} bytes of JSON; nothing was asked (raise --policy-max-input-mib if such inputs are expected)"
    )]
    InputTooLarge {
        /// The role.
        role: PolicyRole,
        /// The bound.
        limit_bytes: usize,
    },
    /// The module handed the host more data at once than the bound (its answer, or the
    /// arguments of a WASI call).
    #[error(
        "the {role} policy {origin} handed the host more than {limit_bytes} bytes at once (its answer, or a WASI call's arguments)"
    )]
    OutputTooLarge {
        /// The role.
        role: PolicyRole,
        /// `built-in` or the file path.
        origin: String,
        /// The bound.
        limit_bytes: usize,
    },
    /// The module answered with an error of its own (a WIT `result` error).
    #[error("the {role} policy {origin} refused the input: {message}")]
    PolicyRejected {
        /// The role.
        role: PolicyRole,
        /// `built-in` or the file path.
        origin: String,
        /// The module's explanation.
        message: String,
    },
    /// The module's answer failed validation (not a CRD, a plan naming unknown objects...).
    #[error("the {role} policy {origin} returned invalid output: {message}")]
    InvalidOutput {
        /// The role.
        role: PolicyRole,
        /// `built-in` or the file path.
        origin: String,
        /// What is wrong with it.
        message: String,
    },
    /// The input could not be handed to the module.
    #[error("encoding the input for the {role} policy: {message}")]
    EncodeInput {
        /// The role.
        role: PolicyRole,
        /// What went wrong.
        message: String,
    },
    /// The blocking task running the call was lost (the runtime is shutting down).
    #[error("the {role} policy call did not complete: {message}")]
    CallAborted {
        /// The role.
        role: PolicyRole,
        /// What happened to the task.
        message: String,
    },
}

fn stderr_suffix(stderr: &str) -> String {
    let trimmed = stderr.trim();
    if trimmed.is_empty() {
        String::new()
    } else {
        format!(" (module stderr: {trimmed})")
    }
}

/// A module's `configure` refused its settings (carried through wasmtime's error so the
/// host can tell it from a trap).
#[derive(Debug, thiserror::Error)]
#[error("the module refused its settings: {0}")]
pub(crate) struct SettingsRefused(pub(crate) String);

/// The role's export does not have the role's types (carried through wasmtime's error so
/// the host reports the module as implementing another world).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct WorldMismatch(pub(crate) String);

impl PolicyError {
    /// A short stable label for metrics and logs (the `kind` label of
    /// `kbind_policy_failures_total`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::CreateEngine { .. } => "engine",
            Self::ReadModule { .. } => "read",
            Self::FetchModule { .. } => "fetch",
            Self::NotFetched { .. } => "not-fetched",
            Self::CompileModule { .. } => "compile",
            Self::WrongWorld { .. } => "wrong-world",
            Self::SettingsRejected { .. } => "settings-rejected",
            Self::Unavailable { .. } => "unavailable",
            Self::PolicyTrap { .. } => "trap",
            Self::PolicyTimeout { .. } => "timeout",
            Self::PolicyMemoryLimit { .. } => "memory",
            Self::PolicyResourceLimit { .. } => "resource-limit",
            Self::InputTooLarge { .. } => "input-too-large",
            Self::OutputTooLarge { .. } => "output-too-large",
            Self::PolicyRejected { .. } => "rejected",
            Self::InvalidOutput { .. } => "invalid-output",
            Self::EncodeInput { .. } => "encode-input",
            Self::CallAborted { .. } => "aborted",
        }
    }

    /// Whether the failure may come from what an instance kept from earlier calls (a trap,
    /// exhausted memory or tables), so that a fresh instance could answer.
    pub(crate) fn is_instance_fault(&self) -> bool {
        matches!(
            self,
            Self::PolicyTrap { .. }
                | Self::PolicyMemoryLimit { .. }
                | Self::PolicyResourceLimit { .. }
        )
    }
}
