//! `make demo`, non-interactively: the README's first command must keep working.

#[tokio::test]
async fn demo_round_trips_a_widget_through_the_real_konnector_binary() -> anyhow::Result<()> {
    let konnector = kbind_tests::konnector_binary!();
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
