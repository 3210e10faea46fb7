//! `make demo`: see `kbind_tests::demo`.

use std::path::PathBuf;

use clap::Parser;
use kbind_tests::demo::Binaries;

/// Walks the quick start on two local kube-apiservers: the chart installed, the konnector run
/// as it would run it, every step a `kubectl` / `kubectl kbind` / `helm` command shown as typed.
#[derive(Parser, Debug)]
struct Args {
    /// Path of the konnector binary to run.
    #[arg(long)]
    konnector: PathBuf,
    /// Path of the kubectl-kbind plugin binary.
    #[arg(long)]
    kubectl_kbind: PathBuf,
    /// Directory for the clusters' data, logs and the commands' working directory.
    #[arg(long, default_value = ".testenv/demo")]
    dir: PathBuf,
    /// Exit after the walk instead of waiting for Ctrl-C.
    #[arg(long)]
    non_interactive: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.dir.exists() {
        std::fs::remove_dir_all(&args.dir)?;
    }
    std::fs::create_dir_all(&args.dir)?;
    let dir = std::fs::canonicalize(&args.dir)?;
    let binaries = Binaries {
        konnector: std::fs::canonicalize(&args.konnector)?,
        kubectl_kbind: std::fs::canonicalize(&args.kubectl_kbind)?,
    };
    let outcome = kbind_tests::demo::run(&dir, &binaries, !args.non_interactive).await?;
    println!(
        "\nround trip complete: provider spec {}, consumer status {}",
        outcome.provider_spec, outcome.consumer_status
    );
    Ok(())
}
