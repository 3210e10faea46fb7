//! Key material of one cluster, generated with rcgen and kept as PEM files under
//! `<cluster dir>/pki`: a CA, the apiserver's serving certificate (127.0.0.1 and localhost), the
//! service-account token signing key, and client certificates for identities.
//!
//! The files are written once and reused, so a cluster started again (an outage test, or
//! `testenv up` on an existing directory) keeps its CA and every kubeconfig handed out before
//! stays valid. The CA's issuer is rebuilt from its deterministic parameters and stored key, so
//! new users can be minted after a restart without parsing the CA certificate.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use super::{Error, Result, fsutil};

/// Object identifier of the X.509 `organizationName` attribute, which Kubernetes reads as a
/// group. See [`Pki::issue_client`] for why it is spelled out.
const ORGANIZATION_OID: [u64; 4] = [2, 5, 4, 10];

/// The most groups a minted client certificate can carry (see [`Pki::issue_client`]).
pub const MAX_CERT_GROUPS: usize = 2;

/// A client certificate and its key, as files.
#[derive(Clone, Debug)]
pub(crate) struct ClientCert {
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

/// The CA and keys of one cluster.
pub(crate) struct Pki {
    dir: PathBuf,
    cluster: String,
    ca_key: KeyPair,
}

impl Pki {
    /// Loads the key material under `dir`, generating whatever is missing.
    pub(crate) fn load_or_create(dir: &Path, cluster: &str) -> Result<Self> {
        fsutil::create_dir(dir)?;
        let ca_key_path = dir.join("ca.key");
        let ca_key = if ca_key_path.exists() {
            let pem = fsutil::read(&ca_key_path)?;
            KeyPair::from_pem(&pem).map_err(|source| Error::Pki {
                what: format!("CA key from {}", ca_key_path.display()),
                source,
            })?
        } else {
            let key = generate_key("CA key")?;
            let cert = ca_params(cluster)
                .self_signed(&key)
                .map_err(|source| pki_error("CA certificate", source))?;
            fsutil::write(&dir.join("ca.crt"), &cert.pem())?;
            fsutil::write_private(&ca_key_path, &key.serialize_pem())?;
            key
        };
        let pki = Self {
            dir: dir.to_path_buf(),
            cluster: cluster.to_string(),
            ca_key,
        };
        if !pki.serving_cert().exists() {
            pki.issue_serving()?;
        }
        if !pki.service_account_key().exists() {
            let key = generate_key("service-account signing key")?;
            fsutil::write(&pki.service_account_public_key(), &key.public_key_pem())?;
            fsutil::write_private(&pki.service_account_key(), &key.serialize_pem())?;
        }
        Ok(pki)
    }

    /// The CA certificate clients and the apiserver trust.
    pub(crate) fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// The apiserver's serving certificate.
    pub(crate) fn serving_cert(&self) -> PathBuf {
        self.dir.join("apiserver.crt")
    }

    /// The apiserver's serving key.
    pub(crate) fn serving_key(&self) -> PathBuf {
        self.dir.join("apiserver.key")
    }

    /// The private key service-account tokens are signed with.
    pub(crate) fn service_account_key(&self) -> PathBuf {
        self.dir.join("sa.key")
    }

    /// The public key service-account tokens are verified with.
    pub(crate) fn service_account_public_key(&self) -> PathBuf {
        self.dir.join("sa.pub")
    }

    /// Issues a client certificate for user `user` in `groups`, stored as
    /// `<file_stem>.crt` / `.key`.
    ///
    /// rcgen keeps one value per distinguished-name attribute type, so a certificate carries
    /// at most [`MAX_CERT_GROUPS`] groups: the first as `organizationName`, the second as the
    /// same OID spelled as a custom attribute (Kubernetes reads every `O` attribute).
    pub(crate) fn issue_client(
        &self,
        file_stem: &str,
        user: &str,
        groups: &[&str],
    ) -> Result<ClientCert> {
        let paths = ClientCert {
            cert: self.dir.join(format!("{file_stem}.crt")),
            key: self.dir.join(format!("{file_stem}.key")),
        };
        if groups.len() > MAX_CERT_GROUPS {
            return Err(Error::TooManyGroups {
                user: user.to_string(),
                groups: groups.len(),
            });
        }
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, user);
        let group_types = [
            DnType::OrganizationName,
            DnType::CustomDnType(ORGANIZATION_OID.to_vec()),
        ];
        for (ty, group) in group_types.into_iter().zip(groups) {
            params.distinguished_name.push(ty, *group);
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        let key = generate_key("client key")?;
        let cert = params
            .signed_by(&key, &self.issuer())
            .map_err(|source| pki_error(&format!("client certificate for {user}"), source))?;
        fsutil::write(&paths.cert, &cert.pem())?;
        fsutil::write_private(&paths.key, &key.serialize_pem())?;
        Ok(paths)
    }

    fn issue_serving(&self) -> Result<()> {
        let names = [
            "127.0.0.1",
            "localhost",
            "kubernetes",
            "kubernetes.default.svc",
        ];
        let mut params = CertificateParams::new(names.map(String::from).to_vec())
            .map_err(|source| pki_error("serving certificate names", source))?;
        params.distinguished_name.push(
            DnType::CommonName,
            format!("kube-apiserver {}", self.cluster),
        );
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let key = generate_key("serving key")?;
        let cert = params
            .signed_by(&key, &self.issuer())
            .map_err(|source| pki_error("serving certificate", source))?;
        fsutil::write(&self.serving_cert(), &cert.pem())?;
        fsutil::write_private(&self.serving_key(), &key.serialize_pem())
    }

    /// The CA as an rcgen issuer: its parameters are deterministic, so the subject and key
    /// identifier match the stored certificate.
    fn issuer(&self) -> Issuer<'static, &KeyPair> {
        Issuer::new(ca_params(&self.cluster), &self.ca_key)
    }
}

fn ca_params(cluster: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, format!("kbind testenv CA {cluster}"));
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn generate_key(what: &str) -> Result<KeyPair> {
    KeyPair::generate().map_err(|source| pki_error(what, source))
}

fn pki_error(what: &str, source: rcgen::Error) -> Error {
    Error::Pki {
        what: what.to_string(),
        source,
    }
}

/// A random bearer token (32 hex digits) for the static token file.
pub(crate) fn random_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(Error::Random)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
