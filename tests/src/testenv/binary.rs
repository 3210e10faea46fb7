//! Where the kube binary (etcd + kube-apiserver + kube-controller-manager, built from the Go
//! module under `tests/kube`) is: `KBIND_KUBE_BIN` when set, otherwise whatever
//! `scripts/kube-bin.sh` prints, which builds the binary first on a machine that has none.
//! The answer is looked up once per process.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use super::{Error, Result};

/// Environment variable naming a prebuilt kube binary.
pub const KUBE_BIN_ENV: &str = "KBIND_KUBE_BIN";

/// The kube binary, located (and built, if needed) on first use.
pub fn kube_binary() -> Result<PathBuf> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BINARY
        .get_or_init(|| locate().map_err(|e| e.to_string()))
        .clone()
        .map_err(Error::KubeBinary)
}

fn locate() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(KUBE_BIN_ENV) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("{KUBE_BIN_ENV}={} is not a file", path.display()))
        };
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/kube-bin.sh");
    // The script prints progress on stderr (the first build takes minutes), so let it through.
    let output = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    if !output.status.success() {
        return Err(format!("{} failed: {}", script.display(), output.status));
    }
    let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} printed {:?}, which is not a file",
            script.display(),
            path
        ))
    }
}
