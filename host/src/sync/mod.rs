//! The instance sync engine: one syncer per bound (Connection, API), copying `spec` from
//! consumer instances to their provider copies and `status` back, behind an ownership check.
//!
//! ```text
//!  engagement registry ─┐
//!  binding index ───────┴▶ supervisor: one syncer per (Connection, API), rebuilt on a new epoch
//!                              │  consumer watch ─┐
//!                              │  provider watch ─┴▶ queue keyed by consumer object
//!                              │  resync sweep ───┘  (dedup, bounded concurrency)
//!                    reconcile one object ──▶ conflict policy (Wasm) ──▶ provider SSA
//!                              └─────────────── status copy back ◀───────────┘
//! ```
//!
//! - `supervisor` owns syncer lifetimes; a syncer never outlives its Connection's engagement
//!   (spec: "When a Connection becomes not Ready ... its per-API instance syncers stop").
//! - `syncer` wires the two watches into one work queue keyed by the consumer object
//!   (`queue`: deduplication, oldest first, handed over only as fast as reconciles start) and
//!   kube-runtime's `applier` (bounded concurrency, retries, no per-object tasks); `context`
//!   is what its reconciles share.
//! - `reconcile` and `delete` are the per-object logic (`write` creates or applies the
//!   provider copy); `desired` and `conflict` are the pure parts they are built from;
//!   `placement` says where on the provider each copy lives; `cache/` holds what the two
//!   caches keep of each copy and instance, keyed by a shared type.
//! - `resync` is the periodic backstop: one sweep per syncer over its consumer cache, spread
//!   over the interval, queueing only the instances no longer in sync.
//! - every reconcile leaves what it came to (in sync, conflict, failure reason) in the
//!   registry's outcomes, for the binding controllers to summarise without listing instances.
//!
//! Losing a provider deletes nothing: syncers stop, finalizers stay, objects stay.

#![warn(unreachable_pub)]

mod cache;
mod conflict;
mod context;
mod delete;
mod desired;
mod fields;
mod instance_status;
mod placement;
mod queue;
mod reconcile;
mod recovery;
mod report;
mod resync;
mod selection_changes;
mod supervisor;
mod syncer;
mod write;

use std::time::Duration;

pub use cache::watched::Watched;
pub use instance_status::PLACED_PREFIX;
pub use supervisor::Supervisor;

use crate::api::names::SYNCER_FINALIZER;

/// Why reconciling one instance failed. Each variant names the operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The instance has no name or UID (should never come from an API server).
    #[error("instance has no name or uid")]
    MissingIdentity,
    /// Patching the syncer finalizer onto the consumer instance.
    #[error("adding finalizer {SYNCER_FINALIZER} to the consumer instance: {0}")]
    AddFinalizer(#[source] kube::Error),
    /// Patching the syncer finalizer off the consumer instance.
    #[error("removing finalizer {SYNCER_FINALIZER} from the consumer instance: {0}")]
    RemoveFinalizer(#[source] kube::Error),
    /// Creating the instance's namespace on the provider.
    #[error("creating namespace {namespace} on the provider: {source}")]
    CreateNamespace {
        /// The namespace.
        namespace: String,
        /// What the provider said.
        #[source]
        source: kube::Error,
    },
    /// The placement policy module failed or gave no usable answer; nothing was written.
    #[error("placing the provider copy: {0}")]
    Place(#[source] crate::policy::PolicyError),
    /// The host refused the placement policy's answer; nothing was written.
    #[error("{0}")]
    PlacementRefused(#[source] placement::Refused),
    /// Reading the provider target.
    #[error("reading the provider target: {0}")]
    ReadTarget(#[source] kube::Error),
    /// The conflict policy module failed (trap, timeout, malformed answer); nothing was
    /// written.
    #[error("deciding the conflict policy: {0}")]
    DecideConflict(#[source] crate::policy::PolicyError),
    /// The conflict policy allowed a write the target contradicts (e.g. an update of an
    /// absent target); nothing was written.
    #[error("the conflict policy answered {decision} for {target}")]
    UnexpectedDecision {
        /// The decision.
        decision: String,
        /// What the target looked like.
        target: &'static str,
    },
    /// Creating the provider copy where none was cached.
    #[error("creating the provider copy: {0}")]
    CreateOnProvider(#[source] kube::Error),
    /// Server-side apply of the provider copy.
    #[error("applying the provider copy: {0}")]
    ApplyToProvider(#[source] kube::Error),
    /// Deleting the owned provider copy.
    #[error("deleting the provider copy: {0}")]
    DeleteFromProvider(#[source] kube::Error),
    /// Writing provider status to the consumer status subresource.
    #[error("copying status to the consumer: {0}")]
    CopyStatus(#[source] kube::Error),
    /// Setting the conflict annotation on the consumer instance.
    #[error("annotating the consumer instance with its conflict: {0}")]
    MarkConflict(#[source] kube::Error),
    /// Removing the conflict annotation from the consumer instance.
    #[error("clearing the conflict annotation from the consumer instance: {0}")]
    ClearConflict(#[source] kube::Error),
}

impl Error {
    /// Whether the provider failed in a way that passes on its own (no answer, 429, 5xx): the
    /// instance waits on the provider rather than on anything of its own.
    pub fn provider_unavailable(&self) -> bool {
        use crate::k8s::ApiErrorExt as _;
        match self {
            Self::CreateNamespace { source, .. }
            | Self::ReadTarget(source)
            | Self::CreateOnProvider(source)
            | Self::ApplyToProvider(source)
            | Self::DeleteFromProvider(source) => source.is_transient(),
            _ => false,
        }
    }
}

/// Result of instance operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Timing and concurrency of the sync engine.
#[derive(Clone, Debug)]
pub struct SyncConfig {
    /// Every instance is reconciled again after this long, as a backstop for missed events
    /// (spec: "There are periodic resyncs as a backstop").
    pub resync_interval: Duration,
    /// Reconciles running at once per syncer.
    pub concurrency: u16,
    /// First retry delay after a failed reconcile; doubles per consecutive failure.
    pub error_backoff_base: Duration,
    /// Longest retry delay after failures.
    pub error_backoff_max: Duration,
    /// How often a deleting instance re-checks a provider copy that is still there (the
    /// provider watch normally reports the deletion first).
    pub deletion_poll: Duration,
    /// How often the supervisor re-checks syncers even without a change signal.
    pub supervisor_tick: Duration,
    /// How long a stopping syncer may finish its in-flight reconciles before it is aborted
    /// (sharded replicas: well within the margin before their shard Lease expires).
    pub stop_grace: Duration,
    /// While instances wait on a provider that did not answer, one of them retries at least
    /// this often; the first to get through wakes the rest (see `recovery`).
    pub recovery_probe: Duration,
}

impl Default for SyncConfig {
    fn default() -> Self {
        Self {
            resync_interval: Duration::from_secs(300),
            concurrency: 16,
            error_backoff_base: Duration::from_millis(500),
            error_backoff_max: Duration::from_secs(300),
            deletion_poll: Duration::from_secs(10),
            supervisor_tick: Duration::from_secs(10),
            stop_grace: Duration::from_secs(30),
            recovery_probe: Duration::from_secs(10),
        }
    }
}

/// The widget every unit test of the engine syncs.
#[cfg(test)]
pub(crate) mod testing {
    use kube::api::{DynamicObject, ObjectMeta};
    use kube::core::ApiResource;
    use serde_json::Value;

    /// `widgets.example.org/v1`, kind Widget.
    pub(crate) fn widgets() -> ApiResource {
        ApiResource {
            group: "example.org".into(),
            version: "v1".into(),
            api_version: "example.org/v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
        }
    }

    /// Consumer widget `team-a/w` (uid `obj-uid`) with `data` as its body.
    pub(crate) fn consumer_widget(data: Value) -> DynamicObject {
        DynamicObject {
            types: None,
            metadata: ObjectMeta {
                name: Some("w".into()),
                namespace: Some("team-a".into()),
                uid: Some("obj-uid".into()),
                ..ObjectMeta::default()
            },
            data,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_texts_name_their_operation() {
        let e = Error::CreateNamespace {
            namespace: "team-a".into(),
            source: kube::Error::LinesCodecMaxLineLengthExceeded,
        };
        assert!(
            e.to_string()
                .starts_with("creating namespace team-a on the provider")
        );
        assert!(
            Error::RemoveFinalizer(kube::Error::LinesCodecMaxLineLengthExceeded)
                .to_string()
                .starts_with("removing finalizer core.kbind.io/syncer")
        );
        assert!(
            Error::AddFinalizer(kube::Error::LinesCodecMaxLineLengthExceeded)
                .to_string()
                .starts_with("adding finalizer core.kbind.io/syncer")
        );
    }
}
