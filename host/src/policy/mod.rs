//! The policy runtime: the four decisions the konnector delegates to WebAssembly
//! components (schema synthesis, conflict policy, related-resource selection, placement), run
//! in a wasmtime sandbox.
//!
//! ```text
//! controller ──▶ Policies::decide_conflict(&ConflictInput)
//!                  │  plain Rust types ──▶ WIT records (bindings)
//!                  │  input larger than the bound ──▶ PolicyError, nothing called
//!                  │  warm instance, or a fresh Store (memory total, counts, output
//!                  │  bound, no capabilities) + *Pre.instantiate; the role's export
//!                  │  called under one deadline (call::call, the same for every role)
//!                  │  trap / timeout / memory / resource / too much output / bad lift
//!                  │  ──▶ PolicyError
//!                  ▼  output validated against the input (validate) ──▶ ConflictDecision
//! ```
//!
//! [`Policies`] is cheap to clone and safe to share between tokio tasks: each call has an
//! instance to itself (kept warm between calls, dropped after any failure; see `warm`), runs as an async call that yields to tokio every few
//! milliseconds, and ends with either an answer or a [`PolicyError`]; a failing module
//! never takes the process down and the next call starts clean. The built-in modules are
//! embedded in the binary ([`builtin`]); [`PolicyArgs`] swaps any role for a `.wasm` file,
//! checked against the role's world when loaded.

mod args;
mod bindings;
pub mod builtin;
mod call;
mod error;
mod exports;
mod limits;
pub mod live;
mod load;
pub mod retry;
mod role;
mod role_module;
mod runtime;
mod sandbox;
pub mod scoped;
mod settings;
mod types;
mod validate;
mod warm;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use tracing::info;

use crate::artifact::{Fetched, FetchedFrom, Fetcher, PolicyRef};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::telemetry::{PolicyFailureLabels, PolicyLabels, PolicyModuleLabels, metrics};

pub use args::PolicyArgs;
pub use error::PolicyError;
pub use exports::{CURRENT_VERSION, PREVIOUS_VERSION, WitVersion};
pub use limits::PolicyLimits;
pub use load::{read_file, read_module};
pub use role::PolicyRole;
pub use sandbox::{MAX_INSTANCES, MAX_MEMORIES, MAX_TABLE_ELEMENTS, MAX_TABLES, SandboxResource};
pub use settings::{MAX_SETTINGS_BYTES, PolicySettings, SettingsError};
pub use types::{
    ConflictDecision, ConflictInput, ConflictReason, ObjectRef, OwnershipMarkers, Placement,
    PlacementApi, PlacementInput, RelatedInput, RelatedPlan, RelatedSource, RelatedTarget,
    SchemaInput, SchemaVersion, SkipReason, SkippedObject,
};

pub use validate::placement as check_placement;
pub use warm::DEFAULT_REUSE;

use load::Slot;
use role_module::{ConflictModule, PlacementModule, RelatedModule, RoleModule, SchemaModule};
use scoped::{Chosen, Overrides};

/// The loaded policy modules, one per role. Clones share one current set: a role swapped
/// through any clone ([`Policies::swap`]) serves every later call of all of them, while calls
/// already running finish on the module they started with. A Connection may choose its own
/// modules ([`scoped`]): the copy [`Policies::for_connection`] gives asks those first.
#[derive(Clone)]
pub struct Policies {
    current: Arc<RwLock<Arc<Inner>>>,
    /// Each Connection's own modules, shared by every clone.
    connections: Arc<RwLock<BTreeMap<String, Arc<Overrides>>>>,
    /// The Connection these calls are made for, if any.
    scope: Option<Arc<str>>,
}

struct Inner {
    limits: PolicyLimits,
    /// Calls in flight at once, shared by every role (and every copy of these policies), so
    /// the Wasm memory of running calls stays within calls × memory cap.
    bound: Arc<call::CallBound>,
    /// Calls one warm instance serves before it is recycled (1: a fresh instance per call).
    reuse: u32,
    schema: Slot<SchemaModule>,
    conflict: Slot<ConflictModule>,
    related: Slot<RelatedModule>,
    placement: Slot<PlacementModule>,
}

impl Inner {
    /// The same modules under other limits or another reuse count, with no warm instances.
    fn rebuilt(&self, limits: PolicyLimits, reuse: u32) -> Self {
        Self {
            limits,
            bound: self.bound.clone(),
            reuse,
            schema: self.schema.without_instances(),
            conflict: self.conflict.without_instances(),
            related: self.related.without_instances(),
            placement: self.placement.without_instances(),
        }
    }
}

impl std::fmt::Debug for Policies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let current = self.current();
        f.debug_struct("Policies")
            .field("limits", &current.limits)
            .field("reuse", &current.reuse)
            .field("schema", &current.schema.origin)
            .field("conflict", &current.conflict.origin)
            .field("related", &current.related.origin)
            .field("placement", &current.placement.origin)
            .finish()
    }
}

impl Policies {
    /// Policies whose current set is `inner`.
    fn new(inner: Inner) -> Self {
        Self {
            current: Arc::new(RwLock::new(Arc::new(inner))),
            connections: Arc::default(),
            scope: None,
        }
    }

    /// The current set: a call holds it to its end, so a swap never changes a call midway.
    fn current(&self) -> Arc<Inner> {
        let guard = self.current.read().unwrap_or_else(|e| e.into_inner());
        Arc::clone(&guard)
    }

    /// Serves `role` with the module in `replacement` from the next call on, for every clone of
    /// these policies; calls in flight finish on the module they started with. Only the
    /// swapped role starts without warm instances.
    pub fn swap(&self, role: PolicyRole, replacement: &Policies) {
        let new = replacement.current();
        let mut guard = self.current.write().unwrap_or_else(|e| e.into_inner());
        let old = Arc::clone(&guard);
        let mut next = Inner {
            limits: old.limits,
            bound: old.bound.clone(),
            reuse: old.reuse,
            schema: old.schema.shared(),
            conflict: old.conflict.shared(),
            related: old.related.shared(),
            placement: old.placement.shared(),
        };
        match role {
            PolicyRole::SchemaSynthesis => next.schema = new.schema.without_instances(),
            PolicyRole::ConflictPolicy => next.conflict = new.conflict.without_instances(),
            PolicyRole::RelatedSelection => next.related = new.related.without_instances(),
            PolicyRole::Placement => next.placement = new.placement.without_instances(),
        }
        *guard = Arc::new(next);
    }

    /// The four built-in modules with the default limits.
    pub fn builtin() -> Result<Self, PolicyError> {
        Self::load(&PolicyArgs::default())
    }

    /// The modules the flags name (built-in for the others), with the flags' limits. Each
    /// file is checked against its role's world; a mismatch is an error naming both. A
    /// registry reference is an error here: [`Policies::resolve`] pulls those.
    pub fn load(args: &PolicyArgs) -> Result<Self, PolicyError> {
        Self::assemble(args, &BTreeMap::new())
    }

    /// [`Policies::load`], with each registry reference resolved, pulled and checked through
    /// `fetcher` first. A reference that can be neither pulled nor found in the cache is an
    /// error: nothing (no built-in module) runs in its place.
    pub async fn resolve(args: &PolicyArgs, fetcher: &Fetcher) -> Result<Self, PolicyError> {
        let mut fetched = BTreeMap::new();
        for role in PolicyRole::ALL {
            let Some(PolicyRef::Oci(reference)) = args.module(role) else {
                continue;
            };
            let module = fetcher
                .fetch(reference)
                .await
                .map_err(|source| PolicyError::FetchModule { role, source })?;
            log_fetched(role, &module);
            fetched.insert(role, module);
        }
        let policies = Self::assemble(args, &fetched)?;
        policies.check().await?;
        Ok(policies)
    }

    /// Instantiates each role's module once: its export is type-checked against the role's
    /// records and its settings handed to `configure`. A module that refuses its settings
    /// fails here ([`PolicyError::SettingsRejected`]), before it decides anything.
    pub async fn check(&self) -> Result<(), PolicyError> {
        let current = self.current();
        let (limits, reuse) = (current.limits, current.reuse);
        load::check(&current.schema, limits, reuse).await?;
        load::check(&current.conflict, limits, reuse).await?;
        load::check(&current.related, limits, reuse).await?;
        load::check(&current.placement, limits, reuse).await
    }

    /// Checks only `role`'s module (see [`Policies::check`]).
    pub async fn check_role(&self, role: PolicyRole) -> Result<(), PolicyError> {
        let current = self.current();
        let (limits, reuse) = (current.limits, current.reuse);
        match role {
            PolicyRole::SchemaSynthesis => load::check(&current.schema, limits, reuse).await,
            PolicyRole::ConflictPolicy => load::check(&current.conflict, limits, reuse).await,
            PolicyRole::RelatedSelection => load::check(&current.related, limits, reuse).await,
            PolicyRole::Placement => load::check(&current.placement, limits, reuse).await,
        }
    }

    /// The policies from references and the registry modules already fetched for them.
    fn assemble(
        args: &PolicyArgs,
        fetched: &BTreeMap<PolicyRole, Fetched>,
    ) -> Result<Self, PolicyError> {
        let slot = |role| (args.module(role), fetched.get(&role), args.settings(role));
        let policies = Self::new(Inner {
            limits: args.limits(),
            bound: Arc::new(call::CallBound::new(args.policy_max_concurrent_calls)),
            reuse: args.policy_instance_calls.max(1),
            schema: load_slot(slot(PolicyRole::SchemaSynthesis))?,
            conflict: load_slot(slot(PolicyRole::ConflictPolicy))?,
            related: load_slot(slot(PolicyRole::RelatedSelection))?,
            placement: load_slot(slot(PolicyRole::Placement))?,
        });
        Ok(policies)
    }

    /// Publishes which module serves each role, process-wide (`connection=""`) and for each
    /// Connection that chose its own (`kbind_policy_module_info{connection, role, reference,
    /// digest}`), replacing what was published before.
    pub fn publish_module_info(&self) {
        let family = &metrics().policy_module;
        family.clear();
        for role in PolicyRole::ALL {
            family
                .get_or_create(&PolicyModuleLabels {
                    connection: String::new(),
                    role: role_label(role),
                    reference: self.reference(role),
                    digest: self.digest(role).to_string(),
                })
                .set(1);
        }
        for (connection, role, reference, digest) in self.connection_modules() {
            family
                .get_or_create(&PolicyModuleLabels {
                    connection,
                    role: role_label(role),
                    reference,
                    digest,
                })
                .set(1);
        }
    }

    /// These policies with one role served by the component in `bytes` (`origin` names it
    /// in errors and logs).
    pub fn with_module(
        &self,
        role: PolicyRole,
        bytes: &[u8],
        origin: &str,
    ) -> Result<Self, PolicyError> {
        self.with_configured_module(role, bytes, origin, &PolicySettings::default())
    }

    /// [`Policies::with_module`], the module configured with `settings` on each new instance.
    pub fn with_configured_module(
        &self,
        role: PolicyRole,
        bytes: &[u8],
        origin: &str,
        settings: &PolicySettings,
    ) -> Result<Self, PolicyError> {
        let current = self.current();
        let mut inner = current.rebuilt(current.limits, current.reuse);
        match role {
            PolicyRole::SchemaSynthesis => inner.schema = load::module(bytes, origin, settings)?,
            PolicyRole::ConflictPolicy => inner.conflict = load::module(bytes, origin, settings)?,
            PolicyRole::RelatedSelection => inner.related = load::module(bytes, origin, settings)?,
            PolicyRole::Placement => inner.placement = load::module(bytes, origin, settings)?,
        }
        Ok(Self::new(inner))
    }

    /// The package version a role's module was built against.
    pub fn version(&self, role: PolicyRole) -> WitVersion {
        let current = self.current();
        match role {
            PolicyRole::SchemaSynthesis => current.schema.pre.prepared().version(),
            PolicyRole::ConflictPolicy => current.conflict.pre.prepared().version(),
            PolicyRole::RelatedSelection => current.related.pre.prepared().version(),
            PolicyRole::Placement => current.placement.pre.prepared().version(),
        }
    }

    /// The settings a role's module is configured with.
    pub fn settings(&self, role: PolicyRole) -> PolicySettings {
        let current = self.current();
        match role {
            PolicyRole::SchemaSynthesis => current.schema.pre.prepared().settings().clone(),
            PolicyRole::ConflictPolicy => current.conflict.pre.prepared().settings().clone(),
            PolicyRole::RelatedSelection => current.related.pre.prepared().settings().clone(),
            PolicyRole::Placement => current.placement.pre.prepared().settings().clone(),
        }
    }

    /// These policies with one role served by the module file at `path`.
    pub fn with_module_file(&self, role: PolicyRole, path: &Path) -> Result<Self, PolicyError> {
        let bytes = read_module(role, path)?;
        self.with_module(role, &bytes, &path.display().to_string())
    }

    /// These policies with other limits.
    pub fn with_limits(&self, limits: PolicyLimits) -> Self {
        let current = self.current();
        Self::new(current.rebuilt(limits, current.reuse))
    }

    /// These policies with each instance serving at most `calls` calls (at least one) before
    /// it is recycled; 1 gives every call a fresh instance.
    pub fn with_instance_reuse(&self, calls: u32) -> Self {
        let current = self.current();
        Self::new(current.rebuilt(current.limits, calls.max(1)))
    }

    /// These policies with at most `calls` (at least one) calls in flight at once.
    pub fn with_max_concurrent_calls(&self, calls: usize) -> Self {
        let current = self.current();
        let mut inner = current.rebuilt(current.limits, current.reuse);
        inner.bound = Arc::new(call::CallBound::new(calls));
        Self::new(inner)
    }

    /// How many calls may be in flight at once.
    pub fn max_concurrent_calls(&self) -> usize {
        self.current().bound.max()
    }

    /// The most calls these policies (and their copies) had in flight at once so far.
    pub fn peak_concurrent_calls(&self) -> usize {
        self.current().bound.peak()
    }

    /// The most Wasm memory running calls can hold together: calls in flight × the per-store
    /// cap (idle warm instances, at most half the cap each, come on top).
    pub fn max_call_memory_bytes(&self) -> usize {
        let current = self.current();
        current
            .bound
            .max()
            .saturating_mul(current.limits.memory_bytes)
    }

    /// The limits of each call.
    pub fn limits(&self) -> PolicyLimits {
        self.current().limits
    }

    /// The digest of a role's module: of the component's bytes, or, for a module pulled from
    /// a registry, of its manifest (what `@sha256:` pins).
    pub fn digest(&self, role: PolicyRole) -> Arc<str> {
        let current = self.current();
        match role {
            PolicyRole::SchemaSynthesis => current.schema.digest.clone(),
            PolicyRole::ConflictPolicy => current.conflict.digest.clone(),
            PolicyRole::RelatedSelection => current.related.digest.clone(),
            PolicyRole::Placement => current.placement.digest.clone(),
        }
    }

    /// A role's module reference without its digest: `built-in`, the file path, or the
    /// registry reference as configured.
    pub fn reference(&self, role: PolicyRole) -> String {
        let origin = self.origin(role);
        match origin.split_once('@') {
            Some((reference, digest)) if crate::artifact::valid_digest(digest) => {
                reference.to_owned()
            }
            _ => origin.to_string(),
        }
    }

    /// Where a role's module came from: `built-in`, the file path, or the registry reference
    /// pinned to its digest.
    pub fn origin(&self, role: PolicyRole) -> Arc<str> {
        let current = self.current();
        match role {
            PolicyRole::SchemaSynthesis => current.schema.origin.clone(),
            PolicyRole::ConflictPolicy => current.conflict.origin.clone(),
            PolicyRole::RelatedSelection => current.related.origin.clone(),
            PolicyRole::Placement => current.placement.origin.clone(),
        }
    }

    /// Asks the conflict policy whether the konnector may write the provider target.
    pub async fn decide_conflict(
        &self,
        input: &ConflictInput,
    ) -> Result<ConflictDecision, PolicyError> {
        let current = self.current();
        let chosen = self.overrides();
        let chosen = chosen.as_deref().and_then(|o| o.conflict.as_ref());
        self.call(&current, chosen, &current.conflict, input).await
    }

    /// Asks the schema-synthesis policy for the consumer CRD of a provider resource.
    pub async fn synthesize_schema(
        &self,
        input: &SchemaInput,
    ) -> Result<CustomResourceDefinition, PolicyError> {
        let current = self.current();
        let chosen = self.overrides();
        let chosen = chosen.as_deref().and_then(|o| o.schema.as_ref());
        self.call(&current, chosen, &current.schema, input).await
    }

    /// Asks the related-selection policy what one `relatedResources` entry copies, skips
    /// and deletes.
    pub async fn select_related(&self, input: &RelatedInput) -> Result<RelatedPlan, PolicyError> {
        let current = self.current();
        let chosen = self.overrides();
        let chosen = chosen.as_deref().and_then(|o| o.related.as_ref());
        self.call(&current, chosen, &current.related, input).await
    }

    /// Asks the placement policy where a consumer object's provider copy goes, before its first
    /// provider write. The answer has passed the host's check ([`check_placement`]: valid names,
    /// namespace by scope, no protected namespace); the caller still refuses the heartbeat
    /// namespace and a place another consumer object already has.
    pub async fn place(&self, input: &PlacementInput) -> Result<Placement, PolicyError> {
        let current = self.current();
        let chosen = self.overrides();
        let chosen = chosen.as_deref().and_then(|o| o.placement.as_ref());
        self.call(&current, chosen, &current.placement, input).await
    }

    /// One call under these policies' limits, timed as its role: of the Connection's own
    /// module when it chose one (`chosen`), else of the process-wide `slot`. A Connection whose
    /// module is unavailable gets an error, never the process-wide module in its place.
    async fn call<P: RoleModule>(
        &self,
        current: &Inner,
        chosen: Option<&Chosen<P>>,
        slot: &Slot<P>,
        input: &P::Input,
    ) -> Result<P::Output, PolicyError> {
        let slot = match chosen {
            None => slot,
            Some(Chosen::Module { slot, .. }) => slot,
            Some(Chosen::Unavailable { wanted, message }) => {
                let error = PolicyError::Unavailable {
                    role: P::ROLE,
                    connection: self.scope.as_deref().unwrap_or_default().to_owned(),
                    reference: wanted.reference.to_string(),
                    message: message.clone(),
                };
                return timed(P::ROLE, std::future::ready(Err(error))).await;
            }
        };
        let call = call::call(slot, &current.bound, current.limits, current.reuse, input);
        timed(P::ROLE, call).await
    }
}

/// A role's slot from its reference and settings and, for a registry one, what was fetched.
fn load_slot<P: RoleModule>(
    (reference, fetched, settings): (Option<&PolicyRef>, Option<&Fetched>, PolicySettings),
) -> Result<Slot<P>, PolicyError> {
    load::slot(reference, fetched, &settings)
}

/// Says which module a registry reference resolved to, and when a tag moved since the
/// cache last saw it.
fn log_fetched(role: PolicyRole, module: &Fetched) {
    let from = match module.from {
        FetchedFrom::Registry => "registry",
        FetchedFrom::Cache => "cache",
    };
    match &module.previous_digest {
        Some(previous) if *previous != module.digest => info!(
            %role, reference = %module.reference, from, digest = %module.digest,
            "policy module resolved: digest {previous} → {}", module.digest
        ),
        _ => {
            info!(%role, reference = %module.reference, from, digest = %module.digest, "policy module resolved")
        }
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
                kind: e.kind(),
            })
            .inc();
    }
    result
}

/// The `role` metric label.
pub(crate) fn role_label(role: PolicyRole) -> &'static str {
    match role {
        PolicyRole::SchemaSynthesis => "schema",
        PolicyRole::ConflictPolicy => "conflict",
        PolicyRole::RelatedSelection => "related",
        PolicyRole::Placement => "placement",
    }
}

#[cfg(test)]
mod tests;
