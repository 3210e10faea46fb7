//! The CRD manifests committed to the chart are exactly what the Rust types generate, so the
//! chart never drifts from the API the konnector compiles against. Regenerate with `make crds`.

use std::path::PathBuf;

use konnector::api::{core_crds, crd_yaml};

#[test]
fn committed_crds_match_the_types() -> anyhow::Result<()> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/konnector/files/crds");
    let mut expected_files = Vec::new();
    for (file, crd) in core_crds() {
        let path = dir.join(file);
        let committed = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("{}: {e} (run `make crds`)", path.display()))?;
        assert!(
            committed == crd_yaml(&crd)?,
            "{} differs from what the types generate: run `make crds`",
            path.display()
        );
        expected_files.push(file.to_string());
    }
    // No stale manifest of a kind that no longer exists.
    let mut committed_files = std::fs::read_dir(&dir)?
        .map(|entry| Ok(entry?.file_name().to_string_lossy().into_owned()))
        .collect::<std::io::Result<Vec<_>>>()?;
    committed_files.sort();
    expected_files.sort();
    assert_eq!(committed_files, expected_files);
    Ok(())
}
