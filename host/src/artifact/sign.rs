//! Signing a policy module with a key, for `konnector policy sign` and `generate-key`: a
//! Sigstore bundle (v0.3) holding a message signature over the module's OCI manifest, made
//! with sigstore-rs's key types. Keys are PEM PKCS#8 (what `konnector policy generate-key`
//! writes), or cosign's encrypted keys (`cosign generate-key-pair`) with their password.
//!
//! A key-signed bundle carries no transparency-log entry: the public key the konnector is
//! given is the whole trust, as with `cosign sign --key --tlog-upload=false`.

use serde_json::json;
use sha2::Digest as _;
use sigstore::crypto::SigningScheme;
use sigstore::crypto::signing_key::SigStoreKeyPair;
use sigstore::crypto::signing_key::ecdsa::{ECDSAKeys, EllipticCurve};

use super::verify::{BUNDLE_MEDIA_TYPE, b64};

/// Why a key could not be made, read or used.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// The key is neither PEM PKCS#8 nor a cosign key opened by the given password.
    #[error(
        "reading the signing key: {0} (a PEM PKCS#8 private key, or a cosign key with its password in COSIGN_PASSWORD)"
    )]
    Key(String),
    /// The signature could not be made.
    #[error("signing: {0}")]
    Sign(String),
}

/// A signing key pair.
pub struct KeyPair {
    pair: SigStoreKeyPair,
    scheme: SigningScheme,
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPair")
            .field("scheme", &self.scheme.to_string())
            .finish_non_exhaustive()
    }
}

impl KeyPair {
    /// A new ECDSA P-256 key pair (cosign's default kind).
    pub fn generate() -> Result<Self, SignError> {
        let keys =
            ECDSAKeys::new(EllipticCurve::P256).map_err(|e| SignError::Key(e.to_string()))?;
        Ok(Self {
            pair: SigStoreKeyPair::ECDSA(keys),
            scheme: SigningScheme::ECDSA_P256_SHA256_ASN1,
        })
    }

    /// A key pair from a PEM private key; `password` opens a cosign-encrypted one.
    pub fn from_pem(pem: &[u8], password: Option<&[u8]>) -> Result<Self, SignError> {
        let pair = match password {
            Some(password) => SigStoreKeyPair::from_encrypted_pem(pem, password),
            None => SigStoreKeyPair::from_pem(pem),
        }
        .map_err(|e| SignError::Key(e.to_string()))?;
        let scheme = match &pair {
            SigStoreKeyPair::ECDSA(ECDSAKeys::P256(_)) => SigningScheme::ECDSA_P256_SHA256_ASN1,
            SigStoreKeyPair::ECDSA(ECDSAKeys::P384(_)) => SigningScheme::ECDSA_P384_SHA384_ASN1,
            SigStoreKeyPair::ED25519(_) => SigningScheme::ED25519,
            _ => {
                return Err(SignError::Key(
                    "only ECDSA P-256/P-384 and Ed25519 keys sign here".to_owned(),
                ));
            }
        };
        Ok(Self { pair, scheme })
    }

    /// The public key, PEM.
    pub fn public_pem(&self) -> Result<String, SignError> {
        self.pair
            .public_key_to_pem()
            .map_err(|e| SignError::Key(e.to_string()))
    }

    /// The private key, PEM PKCS#8 (unencrypted: keep the file secret).
    pub fn private_pem(&self) -> Result<String, SignError> {
        self.pair
            .private_key_to_pem()
            .map(|pem| pem.to_string())
            .map_err(|e| SignError::Key(e.to_string()))
    }

    /// A signature over `message`.
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>, SignError> {
        self.pair
            .to_sigstore_signer(&self.scheme)
            .and_then(|signer| signer.sign(message))
            .map_err(|e| SignError::Sign(e.to_string()))
    }
}

/// A Sigstore bundle (JSON) with a message signature over `manifest` by `key`.
pub fn message_bundle(key: &KeyPair, manifest: &[u8]) -> Result<Vec<u8>, SignError> {
    let signature = key.sign(manifest)?;
    let bundle = json!({
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {
            "publicKey": { "hint": "" },
            "tlogEntries": [],
        },
        "messageSignature": {
            "messageDigest": {
                "algorithm": "SHA2_256",
                "digest": b64(&sha2::Sha256::digest(manifest)),
            },
            "signature": b64(&signature),
        },
    });
    serde_json::to_vec(&bundle).map_err(|e| SignError::Sign(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::verify::{IN_TOTO_PAYLOAD_TYPE, Verification, pae};

    const MANIFEST: &[u8] = br#"{"schemaVersion":2,"layers":[]}"#;

    fn verification(key: &KeyPair) -> anyhow::Result<Verification> {
        Ok(Verification::default().with_key("test.pub", key.public_pem()?.as_bytes())?)
    }

    #[tokio::test]
    async fn a_bundle_signed_by_the_configured_key_verifies() -> anyhow::Result<()> {
        let key = KeyPair::generate()?;
        let bundle = message_bundle(&key, MANIFEST)?;
        let verification = verification(&key)?;
        assert!(verification.is_enabled());
        verification
            .verify_bundle(MANIFEST, &bundle)
            .await
            .map_err(anyhow::Error::msg)?;
        Ok(())
    }

    #[tokio::test]
    async fn a_bundle_signed_by_another_key_is_refused() -> anyhow::Result<()> {
        let bundle = message_bundle(&KeyPair::generate()?, MANIFEST)?;
        let refused = verification(&KeyPair::generate()?)?
            .verify_bundle(MANIFEST, &bundle)
            .await;
        assert!(
            matches!(&refused, Err(e) if e.contains("key test.pub") && e.contains("does not verify")),
            "{refused:?}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_bundle_over_another_manifest_is_refused() -> anyhow::Result<()> {
        let key = KeyPair::generate()?;
        let bundle = message_bundle(&key, b"{\"other\":true}")?;
        let refused = verification(&key)?.verify_bundle(MANIFEST, &bundle).await;
        assert!(
            matches!(&refused, Err(e) if e.contains("another manifest")),
            "{refused:?}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_dsse_bundle_naming_the_manifest_verifies() -> anyhow::Result<()> {
        let key = KeyPair::generate()?;
        let digest = sha2::Sha256::digest(MANIFEST)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>();
        let statement = serde_json::to_vec(&serde_json::json!({
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": "module", "digest": {"sha256": digest}}],
            "predicateType": "https://sigstore.dev/cosign/sign/v1",
            "predicate": {},
        }))?;
        let signature = key.sign(&pae(IN_TOTO_PAYLOAD_TYPE, &statement))?;
        let bundle = serde_json::to_vec(&serde_json::json!({
            "mediaType": BUNDLE_MEDIA_TYPE,
            "verificationMaterial": {"publicKey": {"hint": ""}, "tlogEntries": []},
            "dsseEnvelope": {
                "payload": b64(&statement),
                "payloadType": IN_TOTO_PAYLOAD_TYPE,
                "signatures": [{"sig": b64(&signature), "keyid": ""}],
            },
        }))?;
        verification(&key)?
            .verify_bundle(MANIFEST, &bundle)
            .await
            .map_err(anyhow::Error::msg)?;
        let other = verification(&key)?
            .verify_bundle(b"{\"other\":true}", &bundle)
            .await;
        assert!(
            matches!(&other, Err(e) if e.contains("another manifest")),
            "{other:?}"
        );
        Ok(())
    }

    #[test]
    fn a_written_key_reads_back_and_signs_alike() -> Result<(), SignError> {
        let key = KeyPair::generate()?;
        let again = KeyPair::from_pem(key.private_pem()?.as_bytes(), None)?;
        assert_eq!(key.public_pem()?, again.public_pem()?);
        assert!(!again.sign(b"m")?.is_empty());
        Ok(())
    }

    #[test]
    fn a_file_that_is_no_key_is_refused_saying_what_a_key_is() {
        let refused = KeyPair::from_pem(b"not a key", None);
        assert!(
            matches!(&refused, Err(e) if e.to_string().contains("PEM PKCS#8")),
            "{refused:?}"
        );
    }
}
