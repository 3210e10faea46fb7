//! `make demo`: see `kbind_tests::demo`.

use std::path::PathBuf;

use clap::Parser;

/// Runs kbind end to end on two local kube-apiservers and shows the round trip.
#[derive(Parser, Debug)]
struct Args {
    /// Path of the konnector binary to run.
    #[arg(long)]
    konnector: PathBuf,
    /// Directory for the clusters' data and logs.
    #[arg(long, default_value = ".testenv/demo")]
    dir: PathBuf,
    /// Exit after the round trip instead of waiting for Ctrl-C.
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
    let outcome = kbind_tests::demo::run(&args.dir, &args.konnector, !args.non_interactive).await?;
    println!(
        "\nround trip complete: provider spec {}, consumer status {}",
        outcome.provider_spec, outcome.consumer_status
    );
    Ok(())
}
