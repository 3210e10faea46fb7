//! The test environment: real etcd, kube-apiserver and kube-controller-manager processes for a
//! named cluster, started on loopback ports from one directory, and a provider/consumer pair
//! of them for the konnector's e2e tests and the `testenv` CLI.
//!
//! Kubernetes has no Rust API server and these machines have no container engine, so the
//! clusters are the real Go components (`tests/kube`), with RBAC, admission, CEL validation,
//! namespace finalization and garbage collection as in a user's cluster.
//!
//! ```text
//! ClusterPair ─┬─ provider: Cluster ─┬─ Pki (rcgen): CA, serving cert, SA key, client certs
//!              └─ consumer: Cluster  ├─ Identity per user: a self-contained kubeconfig
//!                                    └─ Process per component (etcd, apiserver, controllers),
//!                                       killed with the test binary by a watchdog pipe
//! ```
//!
//! Typical use in a test:
//!
//! ```no_run
//! # async fn t() -> anyhow::Result<()> {
//! let pair = kbind_tests::testenv::shared_pair()?;
//! pair.diagnose(async {
//!     let consumer = pair.consumer.client().await?;
//!     let alice = pair.provider.mint_user("alice", &[])?;
//!     let provider_as_alice = alice.client().await?;
//!     # let _ = (consumer, provider_as_alice);
//!     anyhow::Ok(())
//! })
//! .await
//! # }
//! ```

mod binary;
mod cluster;
mod flags;
mod fsutil;
mod identity;
mod pair;
mod pki;
mod ports;
mod probe;
mod process;
mod state;

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

pub use binary::{KUBE_BIN_ENV, kube_binary};
pub use cluster::{ADMIN_TOKEN_USER, Cluster, Options};
pub use flags::CONTROLLERS;
pub use fsutil::{fresh_dir, tail};
pub use identity::{Credential, Identity};
pub use pair::{
    CONSUMER, ClusterPair, KEEP_ENV, PROVIDER, SECOND_CONSUMER, second_consumer, second_pair,
    shared_pair,
};
pub use pki::MAX_CERT_GROUPS;
pub(crate) use process::WATCHDOG;
pub use process::{Component, Supervision};

/// Errors of the test environment, named after the step that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kube binary could not be found or built.
    #[error("kube binary: {0}")]
    KubeBinary(String),
    /// A directory could not be created.
    #[error("creating directory {path}: {source}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A directory left by an earlier run could not be removed.
    #[error("removing directory {path}: {source}")]
    RemoveDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file could not be written.
    #[error("writing {path}: {source}")]
    WriteFile {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A cluster's `state.json` could not be parsed or rendered.
    #[error("cluster state {path}: {source}")]
    ParseState {
        /// The state file.
        path: PathBuf,
        /// The cause.
        source: serde_json::Error,
    },
    /// rcgen failed to generate or load key material.
    #[error("generating {what}: {source}")]
    Pki {
        /// What was being generated.
        what: String,
        /// The cause.
        source: rcgen::Error,
    },
    /// A client certificate was asked for more groups than it can carry.
    #[error(
        "user {user}: a client certificate carries at most {MAX_CERT_GROUPS} groups, {groups} asked"
    )]
    TooManyGroups {
        /// The user.
        user: String,
        /// How many groups were asked for.
        groups: usize,
    },
    /// The OS random source failed.
    #[error("reading random bytes: {0}")]
    Random(getrandom::Error),
    /// No free loopback port was found.
    #[error("finding a free loopback port: {0}")]
    FreePort(std::io::Error),
    /// A process could not be started.
    #[error("starting {component} of cluster {cluster}: {source}")]
    Spawn {
        /// The cluster.
        cluster: String,
        /// The process.
        component: Component,
        /// The cause.
        source: std::io::Error,
    },
    /// A process exited while its cluster was starting.
    #[error(
        "{component} of cluster {cluster} exited during start-up ({status}); last log lines:\n{log_tail}"
    )]
    ExitedDuringStartup {
        /// The cluster.
        cluster: String,
        /// The process that exited.
        component: Component,
        /// Its exit status.
        status: ExitStatus,
        /// The end of its log.
        log_tail: String,
    },
    /// A process did not become ready in time.
    #[error(
        "{component} of cluster {cluster} not ready after {waited:?} ({last_error}); last log lines:\n{log_tail}"
    )]
    NotReady {
        /// The cluster.
        cluster: String,
        /// The process.
        component: Component,
        /// How long it was given.
        waited: Duration,
        /// The last probe failure.
        last_error: String,
        /// The end of its log.
        log_tail: String,
    },
    /// The start-up thread of a cluster panicked.
    #[error("starting cluster {0} panicked")]
    StartPanicked(String),
    /// `start` was called on a running cluster.
    #[error("cluster {cluster} is already running")]
    AlreadyRunning {
        /// The cluster.
        cluster: String,
    },
    /// A recorded process could not be signalled.
    #[error("signalling process {pid}: {source}")]
    Signal {
        /// The process.
        pid: i32,
        /// The cause.
        source: nix::Error,
    },
    /// A tokio runtime for the readiness probe could not be built.
    #[error("building a runtime for the readiness probe: {0}")]
    Runtime(std::io::Error),
    /// A kubeconfig could not be rendered.
    #[error("rendering a kubeconfig: {0}")]
    RenderKubeconfig(serde_saphyr::SerializeError),
    /// A kubeconfig could not be loaded.
    #[error("loading kubeconfig {path}: {source}")]
    LoadKubeconfig {
        /// The kubeconfig.
        path: PathBuf,
        /// The cause.
        source: kube::config::KubeconfigError,
    },
    /// A client could not be built from a kubeconfig.
    #[error("building a client from {path}: {source}")]
    Client {
        /// The kubeconfig.
        path: PathBuf,
        /// The cause.
        source: kube::Error,
    },
    /// A service account or its token could not be created.
    #[error("minting a token for service account {namespace}/{name}: {source}")]
    ServiceAccountToken {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The cause.
        source: kube::Error,
    },
    /// A TokenRequest was answered without a token.
    #[error("the token request for service account {namespace}/{name} returned no token")]
    EmptyTokenRequest {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The shared pair failed to start (every test using it sees this).
    #[error("the shared cluster pair failed to start: {0}")]
    SharedPair(String),
}

/// Result of the test environment.
pub type Result<T, E = Error> = std::result::Result<T, E>;
