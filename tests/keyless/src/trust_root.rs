//! A `trusted_root.json` (Sigstore's TrustedRoot, the file `cosign trusted-root create`
//! writes and `--policy-trust-root` reads) naming the test's CAs, CT logs and Rekor logs.

use serde_json::json;

use crate::{Ca, Error, Log, b64};

/// The trust root media type.
const TRUSTED_ROOT_MEDIA_TYPE: &str = "application/vnd.dev.sigstore.trustedroot+json;version=0.1";
/// When the test's CAs and keys became valid (the CA's notBefore).
const VALID_FROM: &str = "2025-01-01T00:00:00Z";

/// A trust root of `cas`, `ctlogs` and `tlogs` (Rekor).
pub fn trusted_root(cas: &[&Ca], ctlogs: &[&Log], tlogs: &[&Log]) -> Result<Vec<u8>, Error> {
    let log = |log: &&Log| {
        json!({
            "baseUrl": log.url(),
            "hashAlgorithm": "SHA2_256",
            "publicKey": {
                "rawBytes": b64(&log.public_key_der()),
                "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                "validFor": { "start": VALID_FROM },
            },
            "logId": { "keyId": b64(&log.id()) },
        })
    };
    let ca = |ca: &&Ca| {
        json!({
            "subject": { "organization": "kbind-test", "commonName": ca.common_name() },
            "uri": format!("https://fulcio.{}.test", ca.common_name()),
            "certChain": { "certificates": [{ "rawBytes": b64(ca.der()) }] },
            "validFor": { "start": VALID_FROM },
        })
    };
    let root = json!({
        "mediaType": TRUSTED_ROOT_MEDIA_TYPE,
        "tlogs": tlogs.iter().map(log).collect::<Vec<_>>(),
        "certificateAuthorities": cas.iter().map(ca).collect::<Vec<_>>(),
        "ctlogs": ctlogs.iter().map(log).collect::<Vec<_>>(),
        "timestampAuthorities": [],
    });
    Ok(serde_json::to_vec_pretty(&root)?)
}
