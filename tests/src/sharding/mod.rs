//! Helpers for the sharding e2e tests (`tests/tests/sharding.rs`): several real `konnector run
//! --sharding` replicas against one consumer, and the three ways the tests see what they did.
//!
//! ```text
//!               ┌─ replica a ─┐  ┌─ replica b ─┐  ┌─ replica c ─┐
//!               │ JSON log    │  │ JSON log    │  │ JSON log    │ ─▶ logs: who held / ran what,
//!               │ /metrics    │  │ /metrics    │  │ /metrics    │         and when
//!               └──────┬──────┘  └──────┬──────┘  └──────┬──────┘
//!                      ▼ membership and shard Leases (consumer, namespace kbind)
//!                                      ▲
//!                     leases: holders now, polled every 200 ms (gaps, hand-overs)
//! ```
//!
//! [`world`] is the shared set-up (30 APIs over two Connections), [`replicas`] the processes,
//! [`leases`] and [`logs`] the two records compared.

pub mod lab;
pub mod leases;
pub mod logs;
pub mod replicas;
pub mod status;
pub mod world;
