//! `make demo`, non-interactively: the README's first command must keep working, and it walks
//! the quick start's own commands.

use kbind_tests::demo::Binaries;

#[tokio::test]
async fn demo_walks_the_quick_start_to_a_widget_in_sync_both_ways() -> anyhow::Result<()> {
    let binaries = Binaries {
        konnector: kbind_tests::konnector_binary!(),
        kubectl_kbind: kbind_tests::kubectl_kbind_binary!(),
    };
    let dir = std::env::temp_dir()
        .join("kbind-testenv")
        .join(format!("{}-demo", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let outcome = kbind_tests::demo::run(&dir, &binaries, false).await?;
    assert_eq!(outcome.provider_spec["size"], 3);
    assert_eq!(outcome.provider_spec["color"], "blue");
    assert_eq!(outcome.consumer_status["phase"], "Ready");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
