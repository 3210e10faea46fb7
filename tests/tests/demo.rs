//! `make demo`, non-interactively: the README's first command must keep working.

use std::path::PathBuf;
use std::process::Command;

use anyhow::Context as _;

/// Builds the konnector binary (cargo test builds only this package's binaries) and returns
/// its path next to this test executable's target directory.
fn konnector_binary() -> anyhow::Result<PathBuf> {
    let status = Command::new(env!("CARGO"))
        .args(["build", "-q", "-p", "konnector", "--bin", "konnector"])
        .status()
        .context("running cargo build for the konnector")?;
    anyhow::ensure!(status.success(), "cargo build -p konnector failed");
    let exe = std::env::current_exe()?;
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .context("test executable has no target dir")?;
    Ok(profile_dir.join("konnector"))
}

#[tokio::test]
async fn demo_round_trips_a_widget_through_the_real_konnector_binary() -> anyhow::Result<()> {
    let konnector = tokio::task::spawn_blocking(konnector_binary).await??;
    let dir = std::env::temp_dir()
        .join("kbind-testenv")
        .join(format!("{}-demo", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let outcome = kbind_tests::demo::run(&dir, &konnector, false).await?;
    assert_eq!(outcome.provider_spec["size"], 3);
    assert_eq!(outcome.provider_spec["color"], "blue");
    assert_eq!(outcome.consumer_status["phase"], "Ready");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
