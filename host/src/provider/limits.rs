//! How much a provider can make the konnector read and hold: caps on the answers it reads
//! whole (discovery, the `/openapi/v3` index) and on what it keeps of each provider copy (its
//! status), set once per process from `konnector run`'s flags.
//!
//! ```text
//! provider answer ─▶ read as a stream ─▶ more than the cap arrived? ── yes ──▶ TooLarge:
//!                                          (never buffered whole first)        the reason
//!                                                                               ResponseTooLarge and
//!                                                                               the flag that raises it
//! ```
//!
//! Why process-wide: every Connection's discovery and every syncer's cache read the same caps,
//! and the caps come from the command line only; passing them through each call would thread
//! one constant through every layer between `run` and the reads.

use std::sync::OnceLock;

use serde::de::DeserializeOwned;

/// Flag that sets [`Limits::openapi_index`].
pub const OPENAPI_INDEX_FLAG: &str = "max-openapi-index-bytes";
/// Flag that sets [`Limits::discovery_response`].
pub const DISCOVERY_RESPONSE_FLAG: &str = "max-discovery-response-bytes";
/// Flag that sets [`Limits::copy_status`].
pub const COPY_STATUS_FLAG: &str = "max-copy-status-bytes";

/// The caps on provider answers and on what is kept of each provider copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest `/openapi/v3` index read, in bytes.
    pub openapi_index: usize,
    /// Largest discovery answer (`/apis`, one group-version's resources) read, in bytes.
    pub discovery_response: usize,
    /// Largest status of one provider copy kept and copied back, in bytes of JSON.
    pub copy_status: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            openapi_index: 4 * 1024 * 1024,
            discovery_response: 8 * 1024 * 1024,
            copy_status: 256 * 1024,
        }
    }
}

static LIMITS: OnceLock<Limits> = OnceLock::new();

/// Sets the process's caps; the first call wins (tests running in one process keep theirs).
pub fn set(limits: Limits) {
    let _ = LIMITS.set(limits);
}

/// The process's caps: as set by [`set`], else the defaults.
pub fn limits() -> Limits {
    LIMITS.get().copied().unwrap_or_default()
}

/// Why a bounded read of a provider answer failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The request failed or the provider answered with an error.
    #[error("reading {path} from the provider: {source}")]
    Request {
        /// The path read.
        path: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// The answer grew past its cap; the rest was not read.
    #[error(
        "reading {path} from the provider: the answer is larger than {cap} bytes, the konnector's cap (--{flag}); it was not read. Shrink it on the provider, or raise --{flag}"
    )]
    TooLarge {
        /// The path read.
        path: String,
        /// The cap in bytes.
        cap: usize,
        /// The flag that sets the cap.
        flag: &'static str,
    },
    /// The answer broke off or is not the JSON expected.
    #[error("reading {path} from the provider: {detail}")]
    Body {
        /// The path read.
        path: String,
        /// What went wrong.
        detail: String,
    },
}

impl ReadError {
    /// The client error, when the request itself failed (for transient/forbidden checks).
    pub fn kube_error(&self) -> Option<&kube::Error> {
        match self {
            Self::Request { source, .. } => Some(source),
            Self::TooLarge { .. } | Self::Body { .. } => None,
        }
    }
}

/// Reads the JSON at `path` from `client`, refusing it as soon as more than `cap` bytes have
/// arrived (`flag` names the cap in the error).
pub async fn get_json<T: DeserializeOwned>(
    client: &kube::Client,
    path: &str,
    cap: usize,
    flag: &'static str,
) -> Result<T, ReadError> {
    let bytes = read_capped(client, path, cap).await?;
    over(path, bytes.len(), cap, flag)?;
    serde_json::from_slice(&bytes).map_err(|e| ReadError::Body {
        path: path.to_string(),
        detail: format!("not the JSON expected: {e}"),
    })
}

/// The body at `path`, read as a stream and cut off one byte past `cap`: a longer answer
/// comes back `cap + 1` bytes long, and is never buffered whole. The caller refuses it.
pub async fn read_capped(
    client: &kube::Client,
    path: &str,
    cap: usize,
) -> Result<Vec<u8>, ReadError> {
    use futures::AsyncReadExt as _;
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| ReadError::Body {
            path: path.to_string(),
            detail: format!("cannot build the request: {e}"),
        })?;
    let body = client
        .request_stream(request)
        .await
        .map_err(|source| ReadError::Request {
            path: path.to_string(),
            source,
        })?;
    let mut bytes = Vec::new();
    let limit = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
    body.take(limit)
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| ReadError::Body {
            path: path.to_string(),
            detail: e.to_string(),
        })?;
    Ok(bytes)
}

/// `TooLarge` when `len` bytes exceed `cap`.
fn over(path: &str, len: usize, cap: usize, flag: &'static str) -> Result<(), ReadError> {
    if len > cap {
        return Err(ReadError::TooLarge {
            path: path.to_string(),
            cap,
            flag,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_caps() {
        let d = Limits::default();
        assert_eq!(d.openapi_index, 4 << 20);
        assert_eq!(d.discovery_response, 8 << 20);
        assert_eq!(d.copy_status, 256 << 10);
    }

    #[test]
    fn an_answer_over_its_cap_is_refused_naming_the_flag_that_raises_it() {
        assert!(over("/openapi/v3", 10, 10, OPENAPI_INDEX_FLAG).is_ok());
        let refused = over("/openapi/v3", 11, 10, OPENAPI_INDEX_FLAG);
        let text = refused.err().map(|e| e.to_string()).unwrap_or_default();
        for part in [
            "reading /openapi/v3",
            "larger than 10 bytes",
            "--max-openapi-index-bytes",
        ] {
            assert!(text.contains(part), "{text} lacks {part:?}");
        }
    }
}
