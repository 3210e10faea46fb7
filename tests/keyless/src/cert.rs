//! The certificate authority and the leaves it issues, in Fulcio's profile: an empty subject,
//! the identity as the SAN, the OIDC issuer in Sigstore's extensions, code signing, ten
//! minutes of validity, and an embedded SCT.
//!
//! The SCT is made as a CT log makes it for a precertificate (RFC 6962 §3.2): the log signs
//! the leaf's TBSCertificate *without* the SCT extension, with the SHA-256 of the issuer's
//! public key. So the leaf is made twice from the same parameters: once without the extension
//! (its TBS is what the log signs), once with the SCT list appended as the last extension;
//! taking that extension out of the second gives back the first's TBS, which is how
//! sigstore-rs reconstructs what the log signed.

use rcgen::{
    BasicConstraints, CertificateParams, CustomExtension, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
    PublicKeyData as _, SanType, SerialNumber, SigningKey as _,
};
use time::OffsetDateTime;
use x509_cert::der::asn1::{OctetString, Utf8StringRef};
use x509_cert::der::{Decode as _, Encode as _};

use crate::{Error, Identity, Log, sha256};

/// Sigstore's OIDC issuer extension (the raw URL as its value), what sigstore-rs's identity
/// policy reads.
const OIDC_ISSUER: &[u64] = &[1, 3, 6, 1, 4, 1, 57264, 1, 1];
/// Its successor (a DER UTF8String), which Fulcio writes beside it.
const OIDC_ISSUER_V2: &[u64] = &[1, 3, 6, 1, 4, 1, 57264, 1, 8];
/// RFC 6962's embedded SCT list extension.
const SCT_LIST: &[u64] = &[1, 3, 6, 1, 4, 1, 11129, 2, 4, 2];
/// How long a leaf is valid (Fulcio's ten minutes).
const LEAF_VALIDITY: time::Duration = time::Duration::minutes(10);

/// A root certificate authority.
pub struct Ca {
    key: KeyPair,
    params: CertificateParams,
    der: Vec<u8>,
}

impl Ca {
    /// A new self-signed root, `name` its common name.
    pub fn new(name: &str) -> Result<Self, Error> {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "kbind-test");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.not_before = rcgen::date_time_ymd(2025, 1, 1);
        params.not_after = rcgen::date_time_ymd(2100, 1, 1);
        let der = params.self_signed(&key)?.der().to_vec();
        Ok(Self { key, params, der })
    }

    /// Its certificate, DER.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// Its common name.
    pub(crate) fn common_name(&self) -> String {
        match self.params.distinguished_name.get(&DnType::CommonName) {
            Some(rcgen::DnValue::Utf8String(name)) => name.clone(),
            _ => String::new(),
        }
    }

    /// A leaf for `identity`, valid from a minute ago for ten minutes, with an SCT by `ct_log`.
    pub fn issue(&self, identity: &Identity, ct_log: &Log) -> Result<Leaf, Error> {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        let now = OffsetDateTime::now_utc()
            .replace_nanosecond(0)
            .unwrap_or(OffsetDateTime::UNIX_EPOCH);
        let mut params = leaf_params(identity, &key)?;
        params.not_before = now - time::Duration::minutes(1);
        params.not_after = params.not_before + LEAF_VALIDITY;
        let issuer = Issuer::new(self.params.clone(), &self.key);

        // What the CT log signs: the TBS of the leaf without the SCT extension.
        let precert = params.signed_by(&key, &issuer)?;
        let precert_tbs = x509_cert::Certificate::from_der(precert.der())?
            .tbs_certificate()
            .to_der()?;
        let timestamp_ms = u64::try_from(now.unix_timestamp()).unwrap_or_default() * 1000;
        let issuer_key_hash = sha256(&self.key.subject_public_key_info());
        let signed = signed_precert_entry(timestamp_ms, &issuer_key_hash, &precert_tbs)?;
        let sct = sct(&ct_log.id(), timestamp_ms, &ct_log.sign(&signed)?)?;
        params
            .custom_extensions
            .push(CustomExtension::from_oid_content(
                SCT_LIST,
                sct_list_extension(&sct)?,
            ));
        let der = params.signed_by(&key, &issuer)?.der().to_vec();
        Ok(Leaf {
            key,
            der,
            not_before: params.not_before.unix_timestamp(),
            not_after: params.not_after.unix_timestamp(),
        })
    }
}

/// A leaf certificate and its key: what a signer holds for ten minutes after an OIDC login.
pub struct Leaf {
    key: KeyPair,
    der: Vec<u8>,
    not_before: i64,
    not_after: i64,
}

impl Leaf {
    /// Its certificate, DER.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// When it became valid (Unix seconds).
    pub fn not_before(&self) -> i64 {
        self.not_before
    }

    /// When it stops being valid (Unix seconds).
    pub fn not_after(&self) -> i64 {
        self.not_after
    }

    /// An ECDSA P-256 / SHA-256 signature over `message` by its key.
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>, Error> {
        Ok(self.key.sign(message)?)
    }
}

/// Fulcio's leaf profile for `identity`, without validity and SCT. The serial number is
/// derived from the key, so both makings of a leaf carry the same one.
fn leaf_params(identity: &Identity, key: &KeyPair) -> Result<CertificateParams, Error> {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    let name = identity.subject.clone().try_into()?;
    params.subject_alt_names = vec![if identity.subject.contains("://") {
        SanType::URI(name)
    } else {
        SanType::Rfc822Name(name)
    }];
    params.is_ca = IsCa::NoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::CodeSigning];
    params.use_authority_key_identifier_extension = true;
    let mut serial = sha256(&key.subject_public_key_info())[..16].to_vec();
    serial[0] &= 0x7f;
    params.serial_number = Some(SerialNumber::from(serial));
    params.custom_extensions = vec![
        CustomExtension::from_oid_content(OIDC_ISSUER, identity.issuer.as_bytes().to_vec()),
        CustomExtension::from_oid_content(
            OIDC_ISSUER_V2,
            Utf8StringRef::new(&identity.issuer)?.to_der()?,
        ),
    ];
    Ok(params)
}

/// RFC 6962's `digitally-signed` struct of a precertificate entry: what a CT log signs.
fn signed_precert_entry(
    timestamp_ms: u64,
    issuer_key_hash: &[u8; 32],
    tbs: &[u8],
) -> Result<Vec<u8>, Error> {
    let mut out = vec![0, 0]; // version v1, signature_type certificate_timestamp
    out.extend_from_slice(&timestamp_ms.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes()); // entry_type precert_entry
    out.extend_from_slice(issuer_key_hash);
    let len = u32::try_from(tbs.len())
        .ok()
        .filter(|n| *n < 1 << 24)
        .ok_or(Error::TooLong("the precertificate TBS"))?;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.extend_from_slice(tbs);
    out.extend_from_slice(&0u16.to_be_bytes()); // no extensions
    Ok(out)
}

/// One serialized SCT (RFC 6962 §3.2) with an ECDSA/SHA-256 `signature`.
fn sct(log_id: &[u8; 32], timestamp_ms: u64, signature: &[u8]) -> Result<Vec<u8>, Error> {
    let mut out = vec![0]; // v1
    out.extend_from_slice(log_id);
    out.extend_from_slice(&timestamp_ms.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes()); // no extensions
    out.extend_from_slice(&[4, 3]); // sha256, ecdsa
    out.extend_from_slice(&u16_len(signature.len(), "an SCT signature")?);
    out.extend_from_slice(signature);
    Ok(out)
}

/// The SCT list extension's value: a DER OCTET STRING holding the TLS list of one SCT.
fn sct_list_extension(sct: &[u8]) -> Result<Vec<u8>, Error> {
    let mut list = u16_len(sct.len() + 2, "the SCT list")?.to_vec();
    list.extend_from_slice(&u16_len(sct.len(), "an SCT")?);
    list.extend_from_slice(sct);
    Ok(OctetString::new(list)?.to_der()?)
}

fn u16_len(len: usize, what: &'static str) -> Result<[u8; 2], Error> {
    u16::try_from(len)
        .map(u16::to_be_bytes)
        .map_err(|_| Error::TooLong(what))
}
