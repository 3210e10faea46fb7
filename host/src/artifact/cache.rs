//! The disk cache of pulled modules, by digest: what lets a konnector restart while its
//! registry is down. Every blob (manifest, config, module) is stored under its own digest
//! and checked against it whenever it is read, so a corrupted or altered file is refused,
//! never run. A tag remembers the manifest digest it last resolved to.
//!
//! ```text
//! <dir>/blobs/sha256/<hex>        manifest, config and module bytes
//! <dir>/tags/<sha256 of REG/REPO:TAG>   the manifest digest the tag last resolved to
//! ```

use std::io;
use std::path::{Path, PathBuf};

use cap_std::fs::Dir;

use super::digest::sha256_digest;
use super::reference::valid_digest;

/// A cache directory, opened once.
#[derive(Debug)]
pub struct Cache {
    dir: Dir,
    path: PathBuf,
}

/// Why a cache read or write failed.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The cache directory could not be created or opened.
    #[error("opening the policy cache {}: {source}", path.display())]
    Open {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A cached file could not be read or written.
    #[error("{operation} the cached {what} in {}: {source}", path.display())]
    Io {
        /// `reading` or `writing`.
        operation: &'static str,
        /// What was being read or written.
        what: String,
        /// The cache directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A cached blob no longer matches its digest: refused, never run.
    #[error("reading the cached blob {digest} in {}: its content hashes to {actual}; the cache was altered (delete the file to pull it again)", path.display())]
    Corrupt {
        /// The digest it is stored under.
        digest: String,
        /// What it hashes to now.
        actual: String,
        /// The cache directory.
        path: PathBuf,
    },
}

impl Cache {
    /// Opens (creating) the cache directory `path`.
    pub fn open(path: &Path) -> Result<Self, CacheError> {
        let open = |source| CacheError::Open {
            path: path.to_owned(),
            source,
        };
        std::fs::create_dir_all(path).map_err(open)?;
        let dir = Dir::open_ambient_dir(path, cap_std::ambient_authority()).map_err(open)?;
        dir.create_dir_all("blobs/sha256").map_err(open)?;
        dir.create_dir_all("tags").map_err(open)?;
        Ok(Self {
            dir,
            path: path.to_owned(),
        })
    }

    /// The cache directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, operation: &'static str, what: String) -> impl FnOnce(io::Error) -> CacheError {
        let path = self.path.clone();
        move |source| CacheError::Io {
            operation,
            what,
            path,
            source,
        }
    }

    /// Stores `bytes`, which the caller has checked hash to `digest`.
    pub fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<(), CacheError> {
        let Some(file) = blob_file(digest) else {
            return Ok(());
        };
        self.write_atomically(&file, bytes, format!("blob {digest}"))
    }

    /// The blob stored under `digest`, checked against it; `None` when not cached.
    pub fn blob(&self, digest: &str) -> Result<Option<Vec<u8>>, CacheError> {
        let Some(file) = blob_file(digest) else {
            return Ok(None);
        };
        let bytes = match self.dir.read(&file) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.io("reading", format!("blob {digest}"))(e)),
        };
        let actual = sha256_digest(&bytes);
        if actual != digest {
            return Err(CacheError::Corrupt {
                digest: digest.to_owned(),
                actual,
                path: self.path.clone(),
            });
        }
        Ok(Some(bytes))
    }

    /// Remembers that `tagged` (`REG/REPO:TAG`) resolved to the manifest `digest`.
    pub fn record_tag(&self, tagged: &str, digest: &str) -> Result<(), CacheError> {
        self.write_atomically(
            &tag_file(tagged),
            digest.as_bytes(),
            format!("tag {tagged}"),
        )
    }

    /// The manifest digest `tagged` last resolved to, if remembered (and well-formed).
    pub fn tag(&self, tagged: &str) -> Result<Option<String>, CacheError> {
        match self.dir.read_to_string(tag_file(tagged)) {
            Ok(text) => Ok(Some(text.trim().to_owned()).filter(|d| valid_digest(d))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.io("reading", format!("tag {tagged}"))(e)),
        }
    }

    /// Writes through a temporary file and a rename, so a reader never sees half a file.
    fn write_atomically(&self, file: &str, bytes: &[u8], what: String) -> Result<(), CacheError> {
        let temporary = format!("{file}.partial-{}", std::process::id());
        self.dir
            .write(&temporary, bytes)
            .and_then(|()| self.dir.rename(&temporary, &self.dir, file))
            .map_err(self.io("writing", what))
    }
}

/// `blobs/sha256/<hex>` for a well-formed digest.
fn blob_file(digest: &str) -> Option<String> {
    valid_digest(digest)
        .then(|| digest.strip_prefix("sha256:"))
        .flatten()
        .map(|hex| format!("blobs/sha256/{hex}"))
}

/// `tags/<hex>`: the tag's reference hashed, so any reference is one safe file name.
fn tag_file(tagged: &str) -> String {
    let digest = sha256_digest(tagged.as_bytes());
    format!("tags/{}", digest.trim_start_matches("sha256:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kbind-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_blob_comes_back_checked_against_its_digest() -> Result<(), CacheError> {
        let cache = Cache::open(&scratch("roundtrip"))?;
        let digest = sha256_digest(b"module");
        assert_eq!(cache.blob(&digest)?, None);
        cache.put_blob(&digest, b"module")?;
        assert_eq!(cache.blob(&digest)?.as_deref(), Some(&b"module"[..]));
        Ok(())
    }

    #[test]
    fn an_altered_cached_blob_is_refused() -> Result<(), CacheError> {
        let path = scratch("altered");
        let cache = Cache::open(&path)?;
        let digest = sha256_digest(b"module");
        cache.put_blob(&digest, b"module")?;
        let hex = digest.trim_start_matches("sha256:");
        std::fs::write(path.join("blobs/sha256").join(hex), b"evil").map_err(|source| {
            CacheError::Open {
                path: path.clone(),
                source,
            }
        })?;
        let refused = cache.blob(&digest);
        assert!(
            matches!(&refused, Err(e @ CacheError::Corrupt { .. }) if e.to_string().contains("the cache was altered")),
            "{refused:?}"
        );
        Ok(())
    }

    #[test]
    fn a_tag_remembers_its_last_digest() -> Result<(), CacheError> {
        let cache = Cache::open(&scratch("tags"))?;
        let first = sha256_digest(b"one");
        let second = sha256_digest(b"two");
        assert_eq!(cache.tag("r.example/a:v1")?, None);
        cache.record_tag("r.example/a:v1", &first)?;
        cache.record_tag("r.example/a:v1", &second)?;
        assert_eq!(cache.tag("r.example/a:v1")?, Some(second));
        assert_eq!(cache.tag("r.example/a:v2")?, None);
        Ok(())
    }
}
