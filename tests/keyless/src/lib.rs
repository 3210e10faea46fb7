//! A Sigstore made in a test: what keyless signing needs, with keys that exist only in the
//! test, so the konnector's keyless verification (sigstore-rs's bundle verifier, offline) can be
//! shown to accept an identity and refuse everything else.
//!
//! ```text
//! Ca (Fulcio-like root) ──issues──▶ Leaf: SAN = subject, OIDC issuer extensions, code signing,
//!        │                            ten minutes valid, embedded SCT ◀── signed by a CT Log
//!        │                              │
//!        │                              └─signs the manifest─▶ bundle (v0.3): message signature,
//!        │                                                       certificate, hashedrekord entry
//!        │                                                       ◀── logged by a Rekor Log
//!        └────────────── trusted_root.json names the CAs, CT logs and Rekor logs ──────────────┘
//! ```
//!
//! Everything is made the way the public-good instance makes it (Fulcio's certificate profile,
//! RFC 6962's precertificate SCT, Rekor's hashedrekord body, signed entry timestamp, inclusion
//! proof and checkpoint), so a verifier that checks more than sigstore-rs 0.15 does reads the
//! same bundle.

mod bundle;
mod cert;
mod log;
mod trust_root;

pub use bundle::EntryDigest;
pub use cert::{Ca, Leaf};
pub use log::Log;
pub use trust_root::trusted_root;

/// Why a piece of the test's Sigstore could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A key or certificate (rcgen).
    #[error("making a key or certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    /// Reading a made certificate back, or encoding DER.
    #[error("encoding DER: {0}")]
    Der(#[from] x509_cert::der::Error),
    /// Writing JSON.
    #[error("writing JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// Something too large for its TLS length prefix.
    #[error("{0} is too long for its length prefix")]
    TooLong(&'static str),
}

/// Who a leaf certificate is issued to: the OIDC issuer that vouched and the subject it named
/// (an e-mail address or a URI, as Fulcio puts it in the SAN).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The OIDC issuer URL.
    pub issuer: String,
    /// The e-mail address or URI.
    pub subject: String,
}

impl Identity {
    /// An identity: `subject` as issued by `issuer`.
    pub fn new(issuer: &str, subject: &str) -> Self {
        Self {
            issuer: issuer.to_owned(),
            subject: subject.to_owned(),
        }
    }
}

/// One whole instance: a CA, a CT log and a Rekor log, for a test that needs one of each.
pub struct Sigstore {
    /// The certificate authority.
    pub ca: Ca,
    /// The CT log whose SCT every leaf carries.
    pub ct_log: Log,
    /// The transparency log every signature is entered in.
    pub rekor: Log,
}

impl Sigstore {
    /// A new instance, `name` telling it apart in its certificates and URLs.
    pub fn new(name: &str) -> Result<Self, Error> {
        Ok(Self {
            ca: Ca::new(name)?,
            ct_log: Log::new(&format!("https://ctfe.{name}.test"))?,
            rekor: Log::new(&format!("https://rekor.{name}.test"))?,
        })
    }

    /// Its `trusted_root.json`.
    pub fn trusted_root(&self) -> Result<Vec<u8>, Error> {
        trusted_root(&[&self.ca], &[&self.ct_log], &[&self.rekor])
    }

    /// A leaf for `identity`, its SCT from this instance's CT log.
    pub fn leaf(&self, identity: &Identity) -> Result<Leaf, Error> {
        self.ca.issue(identity, &self.ct_log)
    }

    /// A bundle over `manifest` by a fresh leaf for `identity`, entered in this instance's
    /// Rekor: what `cosign sign` makes after an OIDC login.
    pub fn sign(&self, identity: &Identity, manifest: &[u8]) -> Result<Vec<u8>, Error> {
        self.leaf(identity)?
            .bundle(manifest, &self.rekor, EntryDigest::OfManifest)
    }
}

/// Standard base64, as the bundle and trust root JSON carry bytes.
fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Lower-case hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of `bytes`.
fn sha256(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes).into()
}
