//! The kbind konnector: runs in a consumer cluster, connects out to provider clusters and
//! keeps bound API objects in sync.
//!
//! ```text
//! Secret ─▶ Connection ──(Ready)──▶ engagement registry ──▶ syncer supervisor
//!              │                                              │
//!              ▼                                              ▼
//!      Binding / ClusterBinding ─────────────────────▶ per-API instance syncers
//! ```

pub mod api;
pub mod backoff;
pub mod binding;
pub mod cli;
pub mod conditions;
pub mod connection;
pub mod fencing;
pub mod heartbeat;
pub mod k8s;
pub mod leader;
pub mod manager;
pub mod policy;
pub mod provider;
pub mod recent;
pub mod registry;
pub mod schema;
pub mod sharding;
pub mod shared;
pub mod sync;
pub mod telemetry;
