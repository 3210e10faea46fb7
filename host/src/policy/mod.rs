//! The policy runtime: the three decisions the konnector delegates to WebAssembly
//! components (schema synthesis, conflict policy, related-resource selection), run in a
//! wasmtime sandbox.
//!
//! ```text
//! controller ──▶ Policies::decide_conflict(&ConflictInput)
//!                  │  plain Rust types ──▶ WIT records (bindings)
//!                  │  input larger than the bound ──▶ PolicyError, nothing called
//!                  │  fresh Store (memory total, counts, output bound, no capabilities)
//!                  │  ──▶ *Pre.instantiate, call the role's export, all under one deadline
//!                  │  trap / timeout / memory / resource / too much output / bad lift
//!                  │  ──▶ PolicyError
//!                  ▼  output validated against the input (validate) ──▶ ConflictDecision
//! ```
//!
//! [`Policies`] is cheap to clone and safe to share between tokio tasks: each call gets its
//! own store and instance, runs as an async call that yields to tokio every few
//! milliseconds, and ends with either an answer or a [`PolicyError`]; a failing module
//! never takes the process down and the next call starts clean. The built-in modules are
//! embedded in the binary ([`builtin`]); [`PolicyArgs`] swaps any role for a `.wasm` file,
//! checked against the role's world when loaded.

mod args;
mod bindings;
pub mod builtin;
mod error;
mod limits;
mod load;
mod role;
mod runtime;
mod types;
mod validate;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use tracing::instrument;

use crate::telemetry::{PolicyFailureLabels, PolicyLabels, metrics};

pub use args::PolicyArgs;
pub use error::PolicyError;
pub use limits::{
    MAX_INSTANCES, MAX_MEMORIES, MAX_TABLE_ELEMENTS, MAX_TABLES, PolicyLimits, SandboxResource,
};
pub use load::{read_file, read_module};
pub use role::PolicyRole;
pub use types::{
    ConflictDecision, ConflictInput, ConflictReason, ObjectRef, OwnershipMarkers, RelatedInput,
    RelatedPlan, RelatedSource, RelatedTarget, SchemaInput, SchemaVersion, SkipReason,
    SkippedObject,
};

use bindings::{conflict, related, schema};
use load::Slot;
use runtime::{HostState, runtime, within_deadline};

/// The loaded policy modules, one per role.
#[derive(Clone)]
pub struct Policies {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    limits: PolicyLimits,
    schema: Slot<schema::SchemaSynthesisPre<HostState>>,
    conflict: Slot<conflict::ConflictPolicyPre<HostState>>,
    related: Slot<related::RelatedSelectionPre<HostState>>,
}

impl std::fmt::Debug for Policies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policies")
            .field("limits", &self.inner.limits)
            .field("schema", &self.inner.schema.origin)
            .field("conflict", &self.inner.conflict.origin)
            .field("related", &self.inner.related.origin)
            .finish()
    }
}

impl Policies {
    /// The three built-in modules with the default limits.
    pub fn builtin() -> Result<Self, PolicyError> {
        Self::load(&PolicyArgs::default())
    }

    /// The modules the flags name (built-in for the others), with the flags' limits. Each
    /// file is checked against its role's world; a mismatch is an error naming both.
    pub fn load(args: &PolicyArgs) -> Result<Self, PolicyError> {
        let path = |role| args.module(role).map(|p| p.as_path());
        Ok(Self {
            inner: Arc::new(Inner {
                limits: args.limits(),
                schema: load::slot(path(PolicyRole::SchemaSynthesis))?,
                conflict: load::slot(path(PolicyRole::ConflictPolicy))?,
                related: load::slot(path(PolicyRole::RelatedSelection))?,
            }),
        })
    }

    /// These policies with one role served by the component in `bytes` (`origin` names it
    /// in errors and logs).
    pub fn with_module(
        &self,
        role: PolicyRole,
        bytes: &[u8],
        origin: &str,
    ) -> Result<Self, PolicyError> {
        let mut inner = (*self.inner).clone();
        let origin_arc: Arc<str> = Arc::from(origin);
        match role {
            PolicyRole::SchemaSynthesis => {
                inner.schema = Slot {
                    pre: load::from_bytes(bytes, origin)?,
                    origin: origin_arc,
                }
            }
            PolicyRole::ConflictPolicy => {
                inner.conflict = Slot {
                    pre: load::from_bytes(bytes, origin)?,
                    origin: origin_arc,
                }
            }
            PolicyRole::RelatedSelection => {
                inner.related = Slot {
                    pre: load::from_bytes(bytes, origin)?,
                    origin: origin_arc,
                }
            }
        }
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// These policies with one role served by the module file at `path`.
    pub fn with_module_file(&self, role: PolicyRole, path: &Path) -> Result<Self, PolicyError> {
        let bytes = read_module(role, path)?;
        self.with_module(role, &bytes, &path.display().to_string())
    }

    /// These policies with other limits.
    pub fn with_limits(&self, limits: PolicyLimits) -> Self {
        let mut inner = (*self.inner).clone();
        inner.limits = limits;
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The limits of each call.
    pub fn limits(&self) -> PolicyLimits {
        self.inner.limits
    }

    /// Where a role's module came from: `built-in` or the file path.
    pub fn origin(&self, role: PolicyRole) -> &str {
        match role {
            PolicyRole::SchemaSynthesis => &self.inner.schema.origin,
            PolicyRole::ConflictPolicy => &self.inner.conflict.origin,
            PolicyRole::RelatedSelection => &self.inner.related.origin,
        }
    }

    /// Asks the conflict policy whether the konnector may write the provider target.
    pub async fn decide_conflict(
        &self,
        input: &ConflictInput,
    ) -> Result<ConflictDecision, PolicyError> {
        timed(PolicyRole::ConflictPolicy, self.decide_conflict_call(input)).await
    }

    /// Asks the schema-synthesis policy for the consumer CRD of a provider resource.
    pub async fn synthesize_schema(
        &self,
        input: &SchemaInput,
    ) -> Result<CustomResourceDefinition, PolicyError> {
        timed(
            PolicyRole::SchemaSynthesis,
            self.synthesize_schema_call(input),
        )
        .await
    }

    /// Asks the related-selection policy what one `relatedResources` entry copies, skips
    /// and deletes.
    pub async fn select_related(&self, input: &RelatedInput) -> Result<RelatedPlan, PolicyError> {
        timed(
            PolicyRole::RelatedSelection,
            self.select_related_call(input),
        )
        .await
    }

    #[instrument(skip_all, fields(role = "conflict-policy", origin = %self.inner.conflict.origin))]
    async fn decide_conflict_call(
        &self,
        input: &ConflictInput,
    ) -> Result<ConflictDecision, PolicyError> {
        let role = PolicyRole::ConflictPolicy;
        let slot = &self.inner.conflict;
        let limits = self.inner.limits;
        limits::check_input(role, input, limits)?;
        let mut store = runtime()?.store(limits);
        let wit_input = bindings::conflict_input(input);
        let outcome = within_deadline(limits, async {
            let instance = slot.pre.instantiate_async(&mut store).await?;
            instance
                .kbind_policy_conflict()
                .call_decide(&mut store, &wit_input)
                .await
        })
        .await;
        let answer = store.data().settle(outcome, role, &slot.origin, limits)?;
        store.data().drain_output(role, &slot.origin);
        let decision =
            bindings::conflict_decision(answer.map_err(|message| PolicyError::PolicyRejected {
                role,
                origin: slot.origin.to_string(),
                message,
            })?);
        validate::decision(&decision, input).map_err(|message| PolicyError::InvalidOutput {
            role,
            origin: slot.origin.to_string(),
            message,
        })?;
        Ok(decision)
    }

    #[instrument(skip_all, fields(role = "schema-synthesis", origin = %self.inner.schema.origin, group = %input.group, resource = %input.resource))]
    async fn synthesize_schema_call(
        &self,
        input: &SchemaInput,
    ) -> Result<CustomResourceDefinition, PolicyError> {
        let role = PolicyRole::SchemaSynthesis;
        let slot = &self.inner.schema;
        let limits = self.inner.limits;
        limits::check_input(role, input, limits)?;
        let mut store = runtime()?.store(limits);
        let wit_input = bindings::schema_input(input);
        let outcome = within_deadline(limits, async {
            let instance = slot.pre.instantiate_async(&mut store).await?;
            instance
                .kbind_policy_schema()
                .call_synthesize(&mut store, &wit_input)
                .await
        })
        .await;
        let answer = store.data().settle(outcome, role, &slot.origin, limits)?;
        store.data().drain_output(role, &slot.origin);
        let json = answer.map_err(|e| PolicyError::PolicyRejected {
            role,
            origin: slot.origin.to_string(),
            message: if e.path.is_empty() {
                e.message
            } else {
                format!("at {}: {}", e.path, e.message)
            },
        })?;
        validate::crd(&json, input).map_err(|message| PolicyError::InvalidOutput {
            role,
            origin: slot.origin.to_string(),
            message,
        })
    }

    #[instrument(skip_all, fields(role = "related-selection", origin = %self.inner.related.origin, binding = %input.binding_uid))]
    async fn select_related_call(&self, input: &RelatedInput) -> Result<RelatedPlan, PolicyError> {
        let role = PolicyRole::RelatedSelection;
        let slot = &self.inner.related;
        let limits = self.inner.limits;
        limits::check_input(role, input, limits)?;
        let mut store = runtime()?.store(limits);
        let wit_input = bindings::related_input(input);
        let outcome = within_deadline(limits, async {
            let instance = slot.pre.instantiate_async(&mut store).await?;
            instance
                .kbind_policy_related()
                .call_select(&mut store, &wit_input)
                .await
        })
        .await;
        let answer = store.data().settle(outcome, role, &slot.origin, limits)?;
        store.data().drain_output(role, &slot.origin);
        let plan =
            bindings::related_plan(answer.map_err(|message| PolicyError::PolicyRejected {
                role,
                origin: slot.origin.to_string(),
                message,
            })?);
        validate::plan(&plan, input).map_err(|message| PolicyError::InvalidOutput {
            role,
            origin: slot.origin.to_string(),
            message,
        })?;
        Ok(plan)
    }
}

/// Runs one policy call, recording its duration and, when it fails, the failure kind
/// (`kbind_policy_call_duration_seconds`, `kbind_policy_failures_total`).
async fn timed<T>(
    role: PolicyRole,
    call: impl Future<Output = Result<T, PolicyError>>,
) -> Result<T, PolicyError> {
    let started = Instant::now();
    let result = call.await;
    let role = role_label(role);
    metrics()
        .policy_duration
        .get_or_create(&PolicyLabels { role })
        .observe(started.elapsed().as_secs_f64());
    if let Err(e) = &result {
        metrics()
            .policy_failures
            .get_or_create(&PolicyFailureLabels {
                role,
                kind: failure_kind(e),
            })
            .inc();
    }
    result
}

/// The `role` metric label.
fn role_label(role: PolicyRole) -> &'static str {
    match role {
        PolicyRole::SchemaSynthesis => "schema",
        PolicyRole::ConflictPolicy => "conflict",
        PolicyRole::RelatedSelection => "related",
    }
}

/// The `kind` metric label of a failed call.
fn failure_kind(error: &PolicyError) -> &'static str {
    match error {
        PolicyError::CreateEngine { .. } => "engine",
        PolicyError::ReadModule { .. } => "read",
        PolicyError::CompileModule { .. } => "compile",
        PolicyError::WrongWorld { .. } => "wrong-world",
        PolicyError::PolicyTrap { .. } => "trap",
        PolicyError::PolicyTimeout { .. } => "timeout",
        PolicyError::PolicyMemoryLimit { .. } => "memory",
        PolicyError::PolicyResourceLimit { .. } => "resource-limit",
        PolicyError::InputTooLarge { .. } => "input-too-large",
        PolicyError::OutputTooLarge { .. } => "output-too-large",
        PolicyError::PolicyRejected { .. } => "rejected",
        PolicyError::InvalidOutput { .. } => "invalid-output",
        PolicyError::EncodeInput { .. } => "encode-input",
        PolicyError::CallAborted { .. } => "aborted",
    }
}
