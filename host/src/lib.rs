//! The kbind konnector: runs in a consumer cluster, connects out to provider clusters and
//! keeps bound API objects in sync.
//!
//! ```text
//! Secret ─▶ Connection ──(Ready)──▶ engagement registry ──▶ syncer supervisor
//!              │                                              │
//!              ▼                                              ▼
//!      Binding / ClusterBinding ─────────────────────▶ per-API instance syncers
//! ```

// Modules bottom-up, a layer per group: each uses only the groups above it in this list.

// The vocabulary: the API types and names, and what marks a provider copy as a consumer's.
pub mod api;
pub mod markers;

// Kubernetes client idioms and small shared mechanisms; metrics, logs and health.
pub mod backoff;
pub mod conditions;
pub mod fencing;
pub mod k8s;
pub mod recent;
pub mod telemetry;

// Policy modules as artifacts (references, registries, the digest cache), reaching
// providers, their schemas on the consumer, and the Wasm policy modules.
pub mod artifact;
pub mod policy;
pub mod provider;
pub mod schema;

// In-memory state shared by the controllers, each part with one writer.
pub mod registry;
pub mod shared;

// The controllers: instance sync, bindings, related copies, Connections (with heartbeats).
pub mod binding;
pub mod connection;
pub mod heartbeat;
pub mod related;
pub mod sync;

// Who does the work when several replicas run.
pub mod sharding;

// The one wiring place, and the command line at the top.
pub mod cli;
pub mod manager;
