//! File helpers that carry the path into the error, so a failed set-up says which file.

use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::{Error, Result};

/// Creates `path` and its parents.
pub(crate) fn create_dir(path: &Path) -> Result<()> {
    fs::create_dir_all(path).map_err(|source| Error::CreateDir {
        path: path.to_path_buf(),
        source,
    })
}

/// Creates `path` empty: what an earlier run left there is removed first.
pub fn fresh_dir(path: &Path) -> Result<()> {
    if path.exists() {
        fs::remove_dir_all(path).map_err(|source| Error::RemoveDir {
            path: path.to_path_buf(),
            source,
        })?;
    }
    create_dir(path)
}

/// Reads a UTF-8 file.
pub(crate) fn read(path: &Path) -> Result<String> {
    fs::read_to_string(path).map_err(|source| Error::ReadFile {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes a file readable by anyone (certificates, kubeconfig-free data).
pub(crate) fn write(path: &Path, contents: &str) -> Result<()> {
    write_mode(path, contents, 0o644)
}

/// Writes a file readable only by the owner (keys, tokens, kubeconfigs).
pub(crate) fn write_private(path: &Path, contents: &str) -> Result<()> {
    write_mode(path, contents, 0o600)
}

fn write_mode(path: &Path, contents: &str, mode: u32) -> Result<()> {
    let error = |source| Error::WriteFile {
        path: path.to_path_buf(),
        source,
    };
    // Write a sibling and rename, so a reader (another process reading a kubeconfig) never
    // sees a half-written file.
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .map_err(error)?;
    file.write_all(contents.as_bytes()).map_err(error)?;
    fs::rename(&tmp, path).map_err(error)
}

/// The last `lines` lines of a (log) file, reading at most its last 256 KiB; a file that cannot
/// be read yields a one-line note instead, since this only ever feeds a failure report.
pub fn tail(path: &Path, lines: usize) -> String {
    const WINDOW: u64 = 256 * 1024;
    let read = || -> std::io::Result<String> {
        let mut file = fs::File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(WINDOW)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("({} unreadable: {e})", path.display()),
    }
}
