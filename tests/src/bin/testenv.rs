//! `testenv`: the e2e tests' provider and consumer clusters, for a developer's shell.
//!
//! `testenv up DIR` starts both clusters detached and returns when they are ready, leaving
//! `DIR/provider.kubeconfig` and `DIR/consumer.kubeconfig` (admin) behind; `testenv down DIR`
//! stops them. Data and credentials stay in DIR, so `up` again resumes the same clusters.
//! `testenv run DIR` starts them in the foreground instead, tied to the command's lifetime.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use kbind_tests::testenv::{ClusterPair, Supervision};

#[derive(Parser)]
#[command(about = "Real provider and consumer clusters on loopback ports")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start the provider and consumer clusters in DIR (detached) and wait until ready.
    Up {
        /// Directory for data, logs and kubeconfigs.
        #[arg(default_value = ".testenv")]
        dir: PathBuf,
    },
    /// Start both clusters in the foreground; they stop when this command ends (Ctrl-C).
    Run {
        /// Directory for data, logs and kubeconfigs.
        #[arg(default_value = ".testenv")]
        dir: PathBuf,
    },
    /// Stop the clusters started in DIR.
    Down {
        /// The directory given to `up`.
        #[arg(default_value = ".testenv")]
        dir: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        // Detached clusters outlive the pair value and this process.
        Command::Up { dir } => up(dir, Supervision::Detached).map(drop),
        Command::Run { dir } => {
            let _pair = up(dir, Supervision::Watchdog)?;
            // The clusters die with this process (watchdog), however it ends.
            loop {
                std::thread::park();
            }
        }
        Command::Down { dir } => {
            let stopped = ClusterPair::stop_recorded(&dir)?;
            println!("stopped {stopped} processes in {}", dir.display());
            Ok(())
        }
    }
}

fn up(dir: PathBuf, supervision: Supervision) -> anyhow::Result<ClusterPair> {
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = dir
        .canonicalize()
        .with_context(|| format!("resolving {}", dir.display()))?;
    let running = ClusterPair::recorded_running(&dir);
    if running > 0 {
        bail!(
            "{running} processes of an earlier `testenv up` still run in {}; run `testenv down` first",
            dir.display()
        );
    }
    let began = Instant::now();
    let pair = ClusterPair::start_with(&dir, supervision)?;
    println!("provider and consumer ready in {:.1?}", began.elapsed());
    for cluster in [&pair.provider, &pair.consumer] {
        println!(
            "  {:<8} {}  kubeconfig {}  logs {}",
            cluster.name(),
            cluster.server(),
            cluster.admin().kubeconfig_path().display(),
            cluster.dir().join("logs").display()
        );
    }
    println!(
        "try: kubectl --kubeconfig {} get namespaces",
        pair.consumer.admin().kubeconfig_path().display()
    );
    Ok(pair)
}
