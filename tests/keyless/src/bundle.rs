//! A keyless Sigstore bundle (v0.3, the JSON cosign v3 attaches and the konnector reads): a
//! message signature over the manifest by the leaf's key, the leaf certificate, and one
//! hashedrekord entry of a Rekor log.
//!
//! The entry is what Rekor returns for a new entry of a log holding only it: the canonical
//! body, the integrated time (now, inside the leaf's validity), a signed entry timestamp over
//! body, time, log ID and index, and an inclusion proof of a one-leaf tree (the root hash is
//! the leaf hash, no sibling hashes) with a checkpoint signed by the log.

use serde_json::json;

use crate::{Error, Leaf, Log, b64, hex, sha256};

/// The bundle media type, v0.3.
const BUNDLE_MEDIA_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";

/// What digest the log entry records.
#[derive(Clone, Copy, Debug)]
pub enum EntryDigest {
    /// The manifest's, as Rekor records a signature it was handed.
    OfManifest,
    /// Another digest: an entry that does not belong to this signature.
    Other([u8; 32]),
}

impl Leaf {
    /// A bundle over `manifest` signed by this leaf, its entry logged by `rekor`.
    pub fn bundle(
        &self,
        manifest: &[u8],
        rekor: &Log,
        entry: EntryDigest,
    ) -> Result<Vec<u8>, Error> {
        let digest = sha256(manifest);
        let signature = self.sign(manifest)?;
        let logged = match entry {
            EntryDigest::OfManifest => digest,
            EntryDigest::Other(other) => other,
        };
        let body = serde_json::to_vec(&hashedrekord(&signature, self.der(), &logged)?)?;
        let integrated_time = now().clamp(self.not_before(), self.not_after());
        let bundle = json!({
            "mediaType": BUNDLE_MEDIA_TYPE,
            "verificationMaterial": {
                "certificate": { "rawBytes": b64(self.der()) },
                "tlogEntries": [tlog_entry(rekor, &body, integrated_time)?],
            },
            "messageSignature": {
                "messageDigest": { "algorithm": "SHA2_256", "digest": b64(&digest) },
                "signature": b64(&signature),
            },
        });
        Ok(serde_json::to_vec(&bundle)?)
    }
}

/// Rekor's hashedrekord v0.0.1 body: the signature, the certificate (PEM, base64) that
/// verifies it, and the digest signed.
fn hashedrekord(
    signature: &[u8],
    certificate_der: &[u8],
    digest: &[u8; 32],
) -> Result<serde_json::Value, Error> {
    use x509_cert::der::pem::{LineEnding, encode_string};
    let pem = encode_string("CERTIFICATE", LineEnding::LF, certificate_der)
        .map_err(x509_cert::der::Error::from)?;
    Ok(json!({
        "apiVersion": "0.0.1",
        "kind": "hashedrekord",
        "spec": {
            "data": { "hash": { "algorithm": "sha256", "value": hex(digest) } },
            "signature": {
                "content": b64(signature),
                "publicKey": { "content": b64(pem.as_bytes()) },
            },
        },
    }))
}

/// The log entry of `body` at index 0 of `rekor`, integrated at `integrated_time`.
fn tlog_entry(rekor: &Log, body: &[u8], integrated_time: i64) -> Result<serde_json::Value, Error> {
    let log_id = rekor.id();
    // The signed entry timestamp: the log's signature over this canonical JSON (keys sorted,
    // no spaces), as Rekor makes it.
    let promise = format!(
        r#"{{"body":"{}","integratedTime":{integrated_time},"logID":"{}","logIndex":0}}"#,
        b64(body),
        hex(&log_id),
    );
    let set = rekor.sign(promise.as_bytes())?;
    // A one-leaf Merkle tree (RFC 6962 §2.1): the root is the leaf hash.
    let mut leaf = vec![0u8];
    leaf.extend_from_slice(body);
    let root = sha256(&leaf);
    let note = format!("{}\n1\n{}\n", rekor.origin(), b64(&root));
    let mut note_signature = log_id[..4].to_vec();
    note_signature.extend_from_slice(&rekor.sign(note.as_bytes())?);
    let checkpoint = format!(
        "{note}\n\u{2014} {} {}\n",
        rekor.origin(),
        b64(&note_signature)
    );
    Ok(json!({
        "logIndex": "0",
        "logId": { "keyId": b64(&log_id) },
        "kindVersion": { "kind": "hashedrekord", "version": "0.0.1" },
        "integratedTime": integrated_time.to_string(),
        "inclusionPromise": { "signedEntryTimestamp": b64(&set) },
        "inclusionProof": {
            "logIndex": "0",
            "rootHash": b64(&root),
            "treeSize": "1",
            "hashes": [],
            "checkpoint": { "envelope": checkpoint },
        },
        "canonicalizedBody": b64(body),
    }))
}

/// Now, Unix seconds.
fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}
