//! The `konnector` command line: [`main`] parses and dispatches, the submodules implement.
//! The binary and the e2e tests' copy of it both call [`main`], so they cannot drift.
//!
//! * `run`: the controller process.
//! * `policy eval`: run one module (built-in or a file) on one JSON input.
//! * `policy test`: run a folder of fixture cases and report like a test runner.
//! * `policy push|pull|inspect`: a module into, out of and as seen in an OCI registry.

pub mod artifact;
pub mod policy;
pub mod run;
pub mod template;

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

/// What `--version` prints: the workspace version and the commit the build was made from
/// (`unknown` outside `make release`, which stamps it).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("KBIND_GIT_COMMIT"),
    ")"
);

/// kbind konnector: binds provider cluster APIs into this consumer cluster.
#[derive(Parser, Debug)]
#[command(name = "konnector", version = VERSION)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

const RUN_EXAMPLES: &str = "Examples:
  # Run outside the cluster against a consumer kubeconfig
  konnector run --kubeconfig ~/.kube/consumer.kubeconfig

  # In a Deployment with more than one replica: elect one active konnector
  konnector run --leader-elect --leader-election-namespace kbind

  # Replace the built-in conflict policy with your own component
  konnector run --conflict-policy /policies/conflict/policy.wasm

  # Verbose sync logs as JSON
  konnector run --log-level konnector=debug,kube=info --log-format json";

/// The konnector's subcommands.
#[derive(Subcommand, Debug)]
enum Command {
    /// Run the konnector's controllers against the consumer cluster.
    #[command(after_help = RUN_EXAMPLES)]
    Run(Box<crate::cli::run::RunArgs>),
    /// Write the three core.kbind.io CRD manifests into a directory (or print them).
    Crds {
        /// Directory to write into; prints a multi-document YAML stream when omitted.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Evaluate and test policy modules (built-in or .wasm files) without a cluster.
    #[command(subcommand)]
    Policy(Box<crate::cli::policy::PolicyCommand>),
}

/// Parses the command line and runs the chosen subcommand to completion.
pub fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Command::Run(args) = cli.command {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        return runtime.block_on(crate::cli::run::run(*args));
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match cli.command {
        Command::Crds { out } => write_crds(out),
        Command::Policy(command) => crate::cli::policy::run(*command),
        Command::Run(_) => Ok(()),
    }
}

fn write_crds(out: Option<PathBuf>) -> anyhow::Result<()> {
    for (file, crd) in crate::api::core_crds() {
        let yaml = crate::api::crd_yaml(&crd)?;
        match &out {
            Some(dir) => {
                let path = dir.join(file);
                std::fs::write(&path, yaml)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            None => print!("---\n{yaml}"),
        }
    }
    Ok(())
}
