//! A provider and a consumer cluster, started in parallel: what every konnector e2e test needs.
//!
//! A pair costs seconds to start, so a test binary shares one ([`shared_pair`]) and its tests
//! isolate themselves by namespace and API group name. A test that stops, restarts or
//! re-credentials a cluster starts a private pair ([`ClusterPair::start_private`]) instead.
//!
//! Directories: the shared pair and private pairs live under `$TMPDIR/kbind-testenv/<pid>-<n>`.
//! A private pair removes its directory when dropped (kept when the test panicked, or when
//! `KBIND_KEEP_TESTENV` is set, to read its logs). The shared pair is never dropped; the next
//! run sweeps directories whose process is gone.

use std::fmt::Write as _;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::cluster::{Cluster, Options};
use super::process::{self, Supervision};
use super::{Error, Result, fsutil};

/// Name of the provider cluster.
pub const PROVIDER: &str = "provider";
/// Name of the consumer cluster.
pub const CONSUMER: &str = "consumer";
/// Set to keep private pairs' directories after the test.
pub const KEEP_ENV: &str = "KBIND_KEEP_TESTENV";
/// Log lines per apiserver in a failure report.
const REPORT_LINES: usize = 40;

/// The provider and consumer clusters.
#[derive(Debug)]
pub struct ClusterPair {
    /// The cluster that exports APIs (the konnector connects out to it).
    pub provider: Cluster,
    /// The cluster the konnector runs against and binds APIs into.
    pub consumer: Cluster,
    root: PathBuf,
    remove_on_drop: bool,
}

impl ClusterPair {
    /// Starts (or restarts, reusing data and credentials) both clusters under `root`, in
    /// parallel, supervised by this process. `root` is kept when the pair is dropped.
    pub fn start(root: &Path) -> Result<Self> {
        Self::start_with(root, Supervision::Watchdog)
    }

    /// Like [`ClusterPair::start`], choosing how the processes are tied to this process.
    pub fn start_with(root: &Path, supervision: Supervision) -> Result<Self> {
        Self::start_with_options(root, supervision, Options::default())
    }

    /// Like [`ClusterPair::start_with`], the provider with the apiserver features `provider`
    /// turns on.
    fn start_with_options(
        root: &Path,
        supervision: Supervision,
        provider: Options,
    ) -> Result<Self> {
        let start = |name: &str| -> Result<Cluster> {
            let options = if name == PROVIDER {
                provider
            } else {
                Options::default()
            };
            let cluster = Cluster::with_options(root, name, supervision, options)?;
            cluster.start()?;
            Ok(cluster)
        };
        let (provider, consumer) = std::thread::scope(|scope| {
            let provider = scope.spawn(|| start(PROVIDER));
            let consumer = start(CONSUMER);
            let provider = provider
                .join()
                .unwrap_or_else(|_| Err(Error::StartPanicked(PROVIDER.to_string())));
            (provider, consumer)
        });
        match (provider, consumer) {
            (Ok(provider), Ok(consumer)) => Ok(Self {
                provider,
                consumer,
                root: root.to_path_buf(),
                remove_on_drop: false,
            }),
            (Err(e), other) | (other, Err(e)) => {
                // Detached processes are not killed on drop: stop the one that started.
                if let Ok(cluster) = other {
                    cluster.stop();
                }
                Err(e)
            }
        }
    }

    /// Starts a pair of its own in a fresh temporary directory, removed when dropped.
    pub fn start_private() -> Result<Self> {
        Self::start_private_with(Options::default())
    }

    /// Like [`ClusterPair::start_private`], the provider with the features `provider` turns on.
    pub fn start_private_with(provider: Options) -> Result<Self> {
        let root = fresh_root()?;
        let mut pair = Self::start_with_options(&root, Supervision::Watchdog, provider)?;
        pair.remove_on_drop = true;
        Ok(pair)
    }

    /// Stops the processes a detached pair under `root` recorded (`testenv down`). Returns how
    /// many were running.
    pub fn stop_recorded(root: &Path) -> Result<usize> {
        let mut stopped = 0;
        for name in [PROVIDER, CONSUMER] {
            stopped += process::stop_recorded(&root.join(name).join("pids"), STOP_GRACE)?;
        }
        Ok(stopped)
    }

    /// How many processes recorded under `root` by a detached pair still run.
    pub fn recorded_running(root: &Path) -> usize {
        [PROVIDER, CONSUMER]
            .iter()
            .map(|name| process::recorded_running(&root.join(name).join("pids")))
            .sum()
    }

    /// The directory holding both clusters and their admin kubeconfigs.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A failure report for both clusters: process states and apiserver log tails.
    pub fn report(&self) -> String {
        let mut out = String::new();
        for cluster in [&self.provider, &self.consumer] {
            let _ = writeln!(out, "{}", cluster.report(REPORT_LINES));
        }
        out
    }

    /// Runs an e2e test body. When it fails, the error carries [`ClusterPair::report`]; when it
    /// panics (a failed `assert!`), the report is printed to the test's stderr.
    pub async fn diagnose<T, E>(
        &self,
        body: impl Future<Output = Result<T, E>>,
    ) -> anyhow::Result<T>
    where
        E: Into<anyhow::Error>,
    {
        let guard = ReportOnPanic(self);
        let result = body.await;
        drop(guard);
        result.map_err(|e| {
            let e: anyhow::Error = e.into();
            anyhow::anyhow!("{e:#}\n\n{}", self.report())
        })
    }
}

impl Drop for ClusterPair {
    fn drop(&mut self) {
        if !self.remove_on_drop {
            return;
        }
        self.provider.kill();
        self.consumer.kill();
        if std::thread::panicking() || std::env::var_os(KEEP_ENV).is_some() {
            eprintln!("kbind testenv: kept {}", self.root.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// How long `testenv down` waits for a graceful stop.
const STOP_GRACE: Duration = Duration::from_secs(15);

struct ReportOnPanic<'a>(&'a ClusterPair);

impl Drop for ReportOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.0.report());
        }
    }
}

/// The pair shared by every test of this test binary, started on first use. Never stop or
/// restart its clusters; isolate by namespace and API group name instead.
pub fn shared_pair() -> Result<&'static ClusterPair> {
    static PAIR: OnceLock<Result<ClusterPair, String>> = OnceLock::new();
    started_once(&PAIR)
}

/// A second pair for the same binary, started on first use: what lets two slow, mostly
/// waiting tests that each need a pair to themselves run side by side. Shared and never
/// stopped, like [`shared_pair`].
pub fn second_pair() -> Result<&'static ClusterPair> {
    static PAIR: OnceLock<Result<ClusterPair, String>> = OnceLock::new();
    started_once(&PAIR)
}

/// The pair `cell` holds, started in a fresh directory on first use.
fn started_once(
    cell: &'static OnceLock<Result<ClusterPair, String>>,
) -> Result<&'static ClusterPair> {
    cell.get_or_init(|| {
        fresh_root()
            .and_then(|root| ClusterPair::start(&root))
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| Error::SharedPair(e.clone()))
}

/// Name of the second consumer cluster.
pub const SECOND_CONSUMER: &str = "consumer-b";

/// A second consumer of the shared pair's provider, started on first use beside the pair: what
/// tests of many consumers on one provider need. Shared like the pair; never stop it.
pub fn second_consumer() -> Result<&'static Cluster> {
    static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
    CLUSTER
        .get_or_init(|| {
            let root = shared_pair()
                .map_err(|e| e.to_string())?
                .root()
                .to_path_buf();
            let cluster = Cluster::with_options(
                &root,
                SECOND_CONSUMER,
                Supervision::Watchdog,
                Options::default(),
            )
            .map_err(|e| e.to_string())?;
            cluster.start().map_err(|e| e.to_string())?;
            Ok(cluster)
        })
        .as_ref()
        .map_err(|e| Error::SharedPair(e.clone()))
}

/// A new directory `$TMPDIR/kbind-testenv/<pid>-<n>`; the first call of a process removes
/// directories left by processes that are gone.
fn fresh_root() -> Result<PathBuf> {
    static SWEPT: OnceLock<()> = OnceLock::new();
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let base = std::env::temp_dir().join("kbind-testenv");
    SWEPT.get_or_init(|| sweep(&base));
    let pid = std::process::id();
    let root = base.join(format!("{pid}-{}", NEXT.fetch_add(1, Ordering::Relaxed)));
    if root.exists() {
        let _ = std::fs::remove_dir_all(&root);
    }
    fsutil::create_dir(&root)?;
    Ok(root)
}

fn sweep(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let owner = name.to_string_lossy().split('-').next().map(str::to_string);
        let gone = owner.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists());
        if gone {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
