//! kbind's end-to-end test support: a real two-cluster Kubernetes environment (etcd,
//! kube-apiserver and kube-controller-manager built from Go, see `tests/kube`) that the e2e
//! tests under `tests/tests/` and the `testenv` CLI start on loopback ports.
//!
//! Nothing here is a mock of Kubernetes: every test that crosses a cluster talks to a real
//! kube-apiserver with RBAC, admission and CEL validation exactly as a user's cluster has them.

pub mod access;
pub mod daemon;
pub mod demo;
pub mod exports;
pub mod faultproxy;
pub mod faults;
pub mod fixtures;
pub mod gitops;
pub mod operators;
pub mod proxy;
pub mod registry;
pub mod sharding;
pub mod syncenv;
pub mod testenv;
pub mod userpath;
mod wait;

pub use wait::eventually;

/// A runtime shaped like the konnector's (multi-threaded, two workers) for a test or a
/// konnector run on a thread of its own.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

/// The path of the konnector binary built for these tests (`tests/src/bin/konnector-e2e.rs`,
/// the same `konnector::cli::main` as the product binary). A macro because Cargo sets
/// `CARGO_BIN_EXE_*` only while compiling integration tests and benches.
#[macro_export]
macro_rules! konnector_binary {
    () => {
        ::std::path::PathBuf::from(env!("CARGO_BIN_EXE_konnector-e2e"))
    };
}

/// The path of the `kubectl-kbind` binary built for these tests
/// (`tests/src/bin/kubectl-kbind-e2e.rs`, the same `kubectl_kbind::cli::main` as the plugin).
#[macro_export]
macro_rules! kubectl_kbind_binary {
    () => {
        ::std::path::PathBuf::from(env!("CARGO_BIN_EXE_kubectl-kbind-e2e"))
    };
}
