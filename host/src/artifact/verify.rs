//! Whether a module may run: with verification configured, a registry module runs only when a
//! Sigstore bundle attached to its manifest (what cosign v3 attaches, found by
//! [`super::signature`]) verifies against a configured public key, or against a configured
//! keyless identity (OIDC issuer and subject) under a configured trust root.
//!
//! What a bundle signs is the module's OCI manifest: a message signature over the manifest
//! bytes, or a DSSE envelope whose in-toto statement names the manifest digest as a subject
//! (cosign's form). The manifest names the module layer by digest, and every layer byte is
//! checked against it, so a verified manifest pins the module.
//!
//! ```text
//! bundle ─▶ sigstore-rs parses ─▶ key mode:     signature checked with each configured key
//!                               └▶ keyless mode: sigstore-rs Verifier: certificate chain to the
//!                                   trust root's CA, embedded SCT against its CT log keys,
//!                                   identity (issuer + subject), transparency-log entry
//!                                   consistent with the signature, signed while the
//!                                   certificate was valid
//! ```
//!
//! sigstore-rs 0.15 does not verify the log entry's signed entry timestamp nor its inclusion
//! proof (it reads no Rekor key): the entry's integrated time is the bundle's word.
//!
//! sigstore-rs 0.15's bundle verifier takes certificate bundles only (a public-key bundle is
//! "unsupported verification material"), so key mode checks the signature here with its key
//! types; keyless mode is its verifier as it is.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::Deserialize;
use sha2::Digest as _;
use sigstore::bundle::Bundle;
use sigstore::bundle::verify::ArtifactDigest;
use sigstore::bundle::verify::policy::Identity;
use sigstore::crypto::{CosignVerificationKey, Signature};
use sigstore::trust::ManualTrustRoot;
use sigstore_protobuf_specs::dev::sigstore::bundle::v1::bundle::Content;
use sigstore_protobuf_specs::dev::sigstore::trustroot::v1::TrustedRoot;

use super::error::with_causes;

/// The media type of a Sigstore bundle (v0.3), the artifact type of its referrer manifest.
pub const BUNDLE_MEDIA_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// The in-toto statement payload type of a DSSE bundle.
pub const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// Why a verification configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum VerifyConfigError {
    /// A public key that does not parse.
    #[error("the policy verification key {what} is not a PEM public key: {message}")]
    Key {
        /// Which key (its file).
        what: String,
        /// Why.
        message: String,
    },
    /// A trust root that does not parse.
    #[error(
        "the policy trust root {what} is not a Sigstore trusted_root.json: {message} (write it as `cosign trusted-root create` does)"
    )]
    TrustRoot {
        /// Which file.
        what: String,
        /// Why.
        message: String,
    },
    /// A keyless identity without its trust root, issuer or subject.
    #[error(
        "keyless policy verification needs an issuer, a subject and a trust root together (--policy-verify-issuer, --policy-verify-subject, --policy-trust-root)"
    )]
    IncompleteKeyless,
}

/// Who may sign policy modules.
#[derive(Clone, Default)]
pub struct Verification {
    /// Public keys: a bundle signed by any of them verifies.
    keys: Vec<(String, CosignVerificationKey)>,
    /// A keyless identity under a trust root.
    keyless: Option<Keyless>,
}

#[derive(Clone)]
struct Keyless {
    issuer: String,
    subject: String,
    trust_root: TrustedRoot,
}

impl std::fmt::Debug for Verification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verification")
            .field(
                "keys",
                &self.keys.iter().map(|(name, _)| name).collect::<Vec<_>>(),
            )
            .field(
                "keyless",
                &self.keyless.as_ref().map(|k| (&k.issuer, &k.subject)),
            )
            .finish()
    }
}

impl Verification {
    /// Adds a PEM public key (ECDSA P-256/P-384, Ed25519 or RSA), `name` saying where it came
    /// from.
    pub fn with_key(mut self, name: &str, pem: &[u8]) -> Result<Self, VerifyConfigError> {
        let key = CosignVerificationKey::try_from_pem(pem).map_err(|e| VerifyConfigError::Key {
            what: name.to_owned(),
            message: e.to_string(),
        })?;
        self.keys.push((name.to_owned(), key));
        Ok(self)
    }

    /// Adds a keyless identity: certificates issued for `subject` by `issuer`, under the
    /// trust root in `trusted_root_json` (`name` saying where it came from).
    pub fn with_keyless(
        mut self,
        issuer: &str,
        subject: &str,
        name: &str,
        trusted_root_json: &[u8],
    ) -> Result<Self, VerifyConfigError> {
        let trust_root: TrustedRoot = serde_json::from_slice(trusted_root_json).map_err(|e| {
            VerifyConfigError::TrustRoot {
                what: name.to_owned(),
                message: e.to_string(),
            }
        })?;
        if trust_root.certificate_authorities.is_empty() {
            return Err(VerifyConfigError::TrustRoot {
                what: name.to_owned(),
                message: "it lists no certificate authority".to_owned(),
            });
        }
        self.keyless = Some(Keyless {
            issuer: issuer.to_owned(),
            subject: subject.to_owned(),
            trust_root,
        });
        Ok(self)
    }

    /// Whether anything is configured (nothing configured: modules are not verified).
    pub fn is_enabled(&self) -> bool {
        !self.keys.is_empty() || self.keyless.is_some()
    }

    /// What is trusted, for messages.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .keys
            .iter()
            .map(|(name, _)| format!("key {name}"))
            .collect();
        if let Some(k) = &self.keyless {
            parts.push(format!("identity {} issued by {}", k.subject, k.issuer));
        }
        parts.join(", ")
    }

    /// Verifies one bundle (its JSON) over `manifest` (the module's manifest bytes).
    pub async fn verify_bundle(&self, manifest: &[u8], bundle_json: &[u8]) -> Result<(), String> {
        let bundle: Bundle = serde_json::from_slice(bundle_json)
            .map_err(|e| format!("not a Sigstore bundle: {e}"))?;
        let mut failures = Vec::new();
        for (name, key) in &self.keys {
            match verify_with_key(key, manifest, &bundle) {
                Ok(()) => return Ok(()),
                Err(e) => failures.push(format!("key {name}: {e}")),
            }
        }
        if let Some(keyless) = &self.keyless {
            match keyless.verify(manifest, bundle.clone()).await {
                Ok(()) => return Ok(()),
                Err(e) => failures.push(format!(
                    "identity {} issued by {}: {e}",
                    keyless.subject, keyless.issuer
                )),
            }
        }
        Err(failures.join("; "))
    }
}

impl Keyless {
    async fn verify(&self, manifest: &[u8], bundle: Bundle) -> Result<(), String> {
        let trust_root = manual_trust_root(&self.trust_root);
        let verifier = sigstore::bundle::verify::Verifier::new(Default::default(), trust_root)
            .map_err(|e| format!("the trust root is not usable: {e}"))?;
        let policy = Identity::new(&self.subject, &self.issuer);
        let digest: [u8; 32] = sha2::Sha256::digest(manifest).into();
        // Offline: the bundle carries its log entry; nothing is asked of a log at run time.
        verifier
            .verify_digest_with(ArtifactDigest::Sha256(digest), bundle, &policy, true)
            .await
            .map_err(|e| with_causes(&e))
    }
}

/// The trust root's CAs, CT log keys and transparency log keys, as sigstore-rs takes them.
fn manual_trust_root(root: &TrustedRoot) -> ManualTrustRoot<'static> {
    let keys = |logs: &[sigstore_protobuf_specs::dev::sigstore::trustroot::v1::TransparencyLogInstance]| {
        logs.iter()
            .filter_map(|log| {
                let key = log.public_key.as_ref()?.raw_bytes.clone()?;
                let id = log
                    .log_id
                    .as_ref()
                    .map(|id| hex_string(&id.key_id))
                    .unwrap_or_else(|| log.base_url.clone());
                Some((id, key))
            })
            .collect::<BTreeMap<_, _>>()
    };
    ManualTrustRoot {
        fulcio_certs: root
            .certificate_authorities
            .iter()
            .flat_map(|ca| ca.cert_chain.iter())
            .flat_map(|chain| chain.certificates.iter())
            .map(|cert| pki_types_der(cert.raw_bytes.clone()))
            .collect(),
        rekor_keys: keys(&root.tlogs),
        ctfe_keys: keys(&root.ctlogs),
    }
}

fn pki_types_der(bytes: Vec<u8>) -> rustls::pki_types::CertificateDer<'static> {
    rustls::pki_types::CertificateDer::from(bytes)
}

fn hex_string(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A bundle's signature checked with `key`: a message signature over the manifest, or a DSSE
/// envelope whose statement names the manifest digest.
fn verify_with_key(
    key: &CosignVerificationKey,
    manifest: &[u8],
    bundle: &Bundle,
) -> Result<(), String> {
    let manifest_digest = sha2::Sha256::digest(manifest);
    match &bundle.content {
        Some(Content::MessageSignature(message)) => {
            if let Some(digest) = &message.message_digest
                && digest.digest.as_slice() != manifest_digest.as_slice()
            {
                return Err("it signs another manifest (its message digest differs)".to_owned());
            }
            key.verify_signature(Signature::Raw(&message.signature), manifest)
                .map_err(|e| format!("the signature does not verify: {e}"))
        }
        Some(Content::DsseEnvelope(envelope)) => {
            let pae = pae(&envelope.payload_type, &envelope.payload);
            let verified = envelope
                .signatures
                .iter()
                .any(|s| key.verify_signature(Signature::Raw(&s.sig), &pae).is_ok());
            if !verified {
                return Err("no envelope signature verifies".to_owned());
            }
            let hex = hex_string(&manifest_digest);
            if statement_subjects(&envelope.payload).any(|d| d == hex) {
                Ok(())
            } else {
                Err("its statement names another manifest".to_owned())
            }
        }
        None => Err("it carries no signature".to_owned()),
    }
}

/// DSSE's pre-authentication encoding: what an envelope signature covers.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {} {} ",
        payload_type.len(),
        payload_type,
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

#[derive(Deserialize)]
struct Statement {
    #[serde(default)]
    subject: Vec<Subject>,
}

#[derive(Deserialize)]
struct Subject {
    #[serde(default)]
    digest: BTreeMap<String, String>,
}

/// The sha256 digests an in-toto statement names as its subjects.
fn statement_subjects(payload: &[u8]) -> impl Iterator<Item = String> {
    serde_json::from_slice::<Statement>(payload)
        .map(|s| s.subject)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|mut s| s.digest.remove("sha256"))
}

/// Standard base64, as bundles carry bytes in JSON.
pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbind_keyless::{EntryDigest, Identity, Log, Sigstore, trusted_root};

    const MANIFEST: &[u8] = br#"{"schemaVersion":2,"layers":[]}"#;
    const ISSUER: &str = "https://issuer.kbind.test";
    const SUBJECT: &str = "ci@kbind.test";

    fn signer() -> Identity {
        Identity::new(ISSUER, SUBJECT)
    }

    /// Verification of `issuer` + `subject` under `root`; the reason a `bundle` over
    /// `MANIFEST` is refused, if it is.
    async fn keyless(
        issuer: &str,
        subject: &str,
        root: &[u8],
        bundle: &[u8],
    ) -> anyhow::Result<Result<(), String>> {
        let verification =
            Verification::default().with_keyless(issuer, subject, "trusted_root.json", root)?;
        assert!(verification.is_enabled());
        Ok(verification.verify_bundle(MANIFEST, bundle).await)
    }

    #[tokio::test]
    async fn a_keyless_bundle_for_the_configured_identity_under_the_trust_root_verifies()
    -> anyhow::Result<()> {
        let sigstore = Sigstore::new("fulcio")?;
        let bundle = sigstore.sign(&signer(), MANIFEST)?;
        keyless(ISSUER, SUBJECT, &sigstore.trusted_root()?, &bundle)
            .await?
            .map_err(anyhow::Error::msg)?;
        // A subject that is a URI (a CI workflow's identity) verifies alike.
        let workflow =
            "https://ci.kbind.test/acme/policies/.github/workflows/release.yaml@refs/heads/main";
        let bundle = sigstore.sign(&Identity::new(ISSUER, workflow), MANIFEST)?;
        keyless(ISSUER, workflow, &sigstore.trusted_root()?, &bundle)
            .await?
            .map_err(anyhow::Error::msg)?;
        Ok(())
    }

    #[tokio::test]
    async fn a_keyless_bundle_is_refused_for_another_subject() -> anyhow::Result<()> {
        let sigstore = Sigstore::new("fulcio")?;
        let bundle = sigstore.sign(&signer(), MANIFEST)?;
        let refused = keyless(
            ISSUER,
            "release@kbind.test",
            &sigstore.trusted_root()?,
            &bundle,
        )
        .await?;
        assert!(
            matches!(&refused, Err(e) if e.contains("identity release@kbind.test")
                && e.contains("SubjectAltName does not match (got ci@kbind.test")),
            "{refused:?}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_keyless_bundle_is_refused_for_another_issuer() -> anyhow::Result<()> {
        let sigstore = Sigstore::new("fulcio")?;
        let bundle = sigstore.sign(&signer(), MANIFEST)?;
        let other = "https://accounts.other.test";
        let refused = keyless(other, SUBJECT, &sigstore.trusted_root()?, &bundle).await?;
        assert!(
            matches!(&refused, Err(e) if e.contains("OIDCIssuer does not match")
                && e.contains(&format!("got {ISSUER}, expected {other}"))),
            "{refused:?}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_keyless_bundle_is_refused_under_a_trust_root_with_another_ca() -> anyhow::Result<()>
    {
        let sigstore = Sigstore::new("fulcio")?;
        let other = Sigstore::new("other")?;
        let bundle = sigstore.sign(&signer(), MANIFEST)?;
        // The same logs, another CA: the certificate chains to nothing trusted.
        let root = trusted_root(&[&other.ca], &[&sigstore.ct_log], &[&sigstore.rekor])?;
        let refused = keyless(ISSUER, SUBJECT, &root, &bundle).await?;
        assert!(
            matches!(&refused, Err(e) if e.contains("certificate verification failed")),
            "{refused:?}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_keyless_bundle_is_refused_when_its_sct_is_from_a_log_not_in_the_trust_root()
    -> anyhow::Result<()> {
        let sigstore = Sigstore::new("fulcio")?;
        let stranger = Log::new("https://ctfe.stranger.test")?;
        let leaf = sigstore.ca.issue(&signer(), &stranger)?;
        let bundle = leaf.bundle(MANIFEST, &sigstore.rekor, EntryDigest::OfManifest)?;
        let refused = keyless(ISSUER, SUBJECT, &sigstore.trusted_root()?, &bundle).await?;
        assert!(
            matches!(&refused, Err(e) if e.contains("certificate SCT verification failed")
                && e.contains("requested key not in keyring")),
            "{refused:?}"
        );
        // Trusting that log as well makes the same bundle verify.
        let root = trusted_root(
            &[&sigstore.ca],
            &[&sigstore.ct_log, &stranger],
            &[&sigstore.rekor],
        )?;
        keyless(ISSUER, SUBJECT, &root, &bundle)
            .await?
            .map_err(anyhow::Error::msg)?;
        Ok(())
    }

    #[tokio::test]
    async fn a_keyless_bundle_is_refused_when_its_log_entry_records_another_digest()
    -> anyhow::Result<()> {
        let sigstore = Sigstore::new("fulcio")?;
        let leaf = sigstore.leaf(&signer())?;
        let other: [u8; 32] = sha2::Sha256::digest(b"another manifest").into();
        let bundle = leaf.bundle(MANIFEST, &sigstore.rekor, EntryDigest::Other(other))?;
        let refused = keyless(ISSUER, SUBJECT, &sigstore.trusted_root()?, &bundle).await?;
        assert!(
            matches!(&refused, Err(e) if e.contains("transparency materials are inconsistent")),
            "{refused:?}"
        );
        // The same leaf's bundle with its own entry verifies.
        let bundle = leaf.bundle(MANIFEST, &sigstore.rekor, EntryDigest::OfManifest)?;
        keyless(ISSUER, SUBJECT, &sigstore.trusted_root()?, &bundle)
            .await?
            .map_err(anyhow::Error::msg)?;
        Ok(())
    }

    #[test]
    fn keyless_needs_a_trust_root_with_a_certificate_authority() {
        let refused = Verification::default().with_keyless(
            "https://issuer.example",
            "ci@example.com",
            "root.json",
            br#"{"mediaType":"application/vnd.dev.sigstore.trustedroot+json;version=0.1"}"#,
        );
        assert!(
            matches!(&refused, Err(e @ VerifyConfigError::TrustRoot { .. }) if e.to_string().contains("root.json")),
            "{refused:?}"
        );
    }

    #[test]
    fn a_key_that_is_not_pem_is_refused_naming_it() {
        let refused = Verification::default().with_key("cosign.pub", b"not a key");
        assert!(
            matches!(&refused, Err(e @ VerifyConfigError::Key { .. }) if e.to_string().contains("cosign.pub")),
            "{refused:?}"
        );
    }
}
