//! A log's key: a CT log signs SCTs with it, a Rekor log signs entry timestamps and
//! checkpoints. A log is known by its key ID, the SHA-256 of its public key (SPKI DER), which
//! is what an SCT and a bundle's log entry name and what sigstore-rs looks keys up by.

use rcgen::{KeyPair, PKCS_ECDSA_P256_SHA256, PublicKeyData as _, SigningKey as _};

use crate::{Error, sha256};

/// A log (CT or Rekor) with an ECDSA P-256 key, the only kind sigstore-rs's keyring takes.
pub struct Log {
    key: KeyPair,
    url: String,
}

impl Log {
    /// A log at `url` (only named, never contacted) with a new key.
    pub fn new(url: &str) -> Result<Self, Error> {
        Ok(Self {
            key: KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?,
            url: url.to_owned(),
        })
    }

    /// Its URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Its public key, SPKI DER.
    pub fn public_key_der(&self) -> Vec<u8> {
        self.key.subject_public_key_info()
    }

    /// Its key ID: SHA-256 of the public key.
    pub fn id(&self) -> [u8; 32] {
        sha256(&self.public_key_der())
    }

    /// An ECDSA P-256 / SHA-256 signature (ASN.1 DER) over `message`.
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>, Error> {
        Ok(self.key.sign(message)?)
    }

    /// Its origin line in a checkpoint: the URL without its scheme.
    pub(crate) fn origin(&self) -> &str {
        self.url
            .split_once("://")
            .map(|(_, rest)| rest)
            .unwrap_or(&self.url)
    }
}
