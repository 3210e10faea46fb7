//! Registry credentials from a `kubernetes.io/dockerconfigjson` Secret (the pull Secret a
//! Pod would use), read from the credential namespace: the registry host a reference names
//! picks its entry; a registry without one is pulled anonymously.

use std::collections::BTreeMap;

use base64::Engine as _;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;

/// The key of a `kubernetes.io/dockerconfigjson` Secret.
pub const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";

/// Credentials per registry host.
#[derive(Clone, Default)]
pub struct Credentials {
    by_registry: BTreeMap<String, RegistryAuth>,
    /// Where they were read from (`pull Secret NAMESPACE/NAME`), for messages.
    source: Option<String>,
    /// A keyed hash of the document they were read from (the key random per process): tells a
    /// changed Secret from an unchanged one without keeping anything a password could be
    /// recovered from.
    fingerprint: u64,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Registry names only: never a password in a log line.
        f.debug_list().entries(self.by_registry.keys()).finish()
    }
}

/// Why a docker config is not usable.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// Not JSON of the docker config shape.
    #[error(
        "parsing the registry credentials: {0} (expected a .dockerconfigjson document: {{\"auths\": {{\"REGISTRY\": {{\"auth\": \"base64(user:password)\"}}}}}})"
    )]
    Parse(serde_json::Error),
    /// An `auth` entry that is not base64 of `user:password`.
    #[error("parsing the registry credentials for {0}: its auth is not base64 of user:password")]
    BadAuth(String),
    /// The pull Secret could not be read.
    #[error("reading the policy pull Secret {secret}: {source}")]
    ReadSecret {
        /// `namespace/name`.
        secret: String,
        /// Why.
        source: kube::Error,
    },
    /// The pull Secret has no docker config.
    #[error(
        "the policy pull Secret {0} has no {DOCKER_CONFIG_JSON_KEY} key (create it with kubectl create secret docker-registry)"
    )]
    NoDockerConfig(String),
}

/// The registry credentials in the pull Secret `namespace/name` (a
/// `kubernetes.io/dockerconfigjson` Secret, as a Pod's image pull Secret).
pub async fn from_pull_secret(
    client: kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Credentials, CredentialsError> {
    let secret_name = format!("{namespace}/{name}");
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(client, namespace);
    let secret = secrets
        .get(name)
        .await
        .map_err(|source| CredentialsError::ReadSecret {
            secret: secret_name.clone(),
            source,
        })?;
    let json = secret
        .data
        .as_ref()
        .and_then(|data| data.get(DOCKER_CONFIG_JSON_KEY))
        .ok_or_else(|| CredentialsError::NoDockerConfig(secret_name.clone()))?;
    let mut credentials = Credentials::from_docker_config(&json.0)?;
    credentials.source = Some(format!("pull Secret {secret_name}"));
    Ok(credentials)
}

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
struct Entry {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
    #[serde(rename = "identitytoken")]
    identity_token: Option<String>,
    #[serde(rename = "registrytoken")]
    registry_token: Option<String>,
}

impl Credentials {
    /// Credentials from a `.dockerconfigjson` document.
    pub fn from_docker_config(json: &[u8]) -> Result<Self, CredentialsError> {
        let config: DockerConfig = serde_json::from_slice(json).map_err(CredentialsError::Parse)?;
        let mut by_registry = BTreeMap::new();
        for (server, entry) in config.auths {
            let auth = match entry {
                Entry {
                    registry_token: Some(token),
                    ..
                } => RegistryAuth::Bearer(token),
                Entry {
                    username: Some(user),
                    password: Some(password),
                    ..
                } => RegistryAuth::Basic(user, password),
                Entry {
                    auth: Some(auth), ..
                } => {
                    let decoded = base64::engine::general_purpose::STANDARD
                        .decode(auth.trim())
                        .ok()
                        .and_then(|bytes| String::from_utf8(bytes).ok())
                        .ok_or_else(|| CredentialsError::BadAuth(server.clone()))?;
                    let (user, password) = decoded
                        .split_once(':')
                        .ok_or_else(|| CredentialsError::BadAuth(server.clone()))?;
                    RegistryAuth::Basic(user.to_owned(), password.to_owned())
                }
                Entry {
                    identity_token: Some(token),
                    ..
                } => RegistryAuth::Bearer(token),
                _ => continue,
            };
            by_registry.insert(registry_host(&server).to_owned(), auth);
        }
        Ok(Self {
            by_registry,
            source: None,
            fingerprint: fingerprint_of(json),
        })
    }

    /// A value that changes when the credentials do (the digest of their document; empty
    /// for none), so a failed pull is tried again at once with new credentials.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// What a pull from `registry` sent, for a refusal's message: whose credentials, or why
    /// none. Never the credentials themselves.
    pub fn describe(&self, registry: &str) -> String {
        let has = self.by_registry.contains_key(registry);
        match (&self.source, has) {
            (Some(source), true) => format!(
                "the credentials for {registry} in {source} were refused: check the user and password (or token) it holds"
            ),
            (None, true) => format!(
                "the configured credentials for {registry} were refused: check the user and password (or token)"
            ),
            (Some(source), false) => format!(
                "{source} has no entry for {registry}, so it was asked anonymously: add one to the Secret"
            ),
            (None, false) => format!(
                "no pull Secret has credentials for {registry}, so it was asked anonymously: name a kubernetes.io/dockerconfigjson Secret in spec.policies.pullSecretName (or --policy-pull-secret)"
            ),
        }
    }

    /// The credentials for `registry` (`host[:port]`), anonymous when there are none.
    pub fn for_registry(&self, registry: &str) -> RegistryAuth {
        self.by_registry
            .get(registry)
            .cloned()
            .unwrap_or(RegistryAuth::Anonymous)
    }

    /// How many registries have credentials.
    pub fn len(&self) -> usize {
        self.by_registry.len()
    }

    /// Whether no registry has credentials.
    pub fn is_empty(&self) -> bool {
        self.by_registry.is_empty()
    }
}

/// A hash of `document` under this process's random key.
fn fingerprint_of(document: &[u8]) -> u64 {
    use std::hash::BuildHasher as _;
    static KEY: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
    KEY.get_or_init(std::hash::RandomState::new)
        .hash_one(document)
}

/// A docker config key may be a URL (`https://index.docker.io/v1/`): its host part.
fn registry_host(server: &str) -> &str {
    let without_scheme = server
        .strip_prefix("https://")
        .or_else(|| server.strip_prefix("http://"))
        .unwrap_or(server);
    without_scheme.split('/').next().unwrap_or(without_scheme)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(auth: &RegistryAuth) -> Option<(&str, &str)> {
        match auth {
            RegistryAuth::Basic(user, password) => Some((user, password)),
            _ => None,
        }
    }

    #[test]
    fn a_pull_secret_gives_each_registry_its_credentials() -> Result<(), CredentialsError> {
        let encoded = base64::engine::general_purpose::STANDARD.encode("robot:s3cret");
        let json = format!(
            r#"{{"auths": {{
                "registry.example.com:5000": {{"auth": "{encoded}"}},
                "https://ghcr.io/v2/": {{"username": "me", "password": "token"}}
            }}}}"#
        );
        let credentials = Credentials::from_docker_config(json.as_bytes())?;
        assert_eq!(
            basic(&credentials.for_registry("registry.example.com:5000")),
            Some(("robot", "s3cret"))
        );
        assert_eq!(
            basic(&credentials.for_registry("ghcr.io")),
            Some(("me", "token"))
        );
        assert!(matches!(
            credentials.for_registry("quay.io"),
            RegistryAuth::Anonymous
        ));
        assert!(!format!("{credentials:?}").contains("s3cret"));
        Ok(())
    }

    #[test]
    fn a_refusal_says_whose_credentials_were_sent_never_the_password()
    -> Result<(), CredentialsError> {
        let encoded = base64::engine::general_purpose::STANDARD.encode("robot:s3cret");
        let json = format!(r#"{{"auths": {{"r.example:5000": {{"auth": "{encoded}"}}}}}}"#);
        let mut credentials = Credentials::from_docker_config(json.as_bytes())?;
        credentials.source = Some("pull Secret kbind/pull".into());
        let sent = credentials.describe("r.example:5000");
        assert!(
            sent.contains("pull Secret kbind/pull") && sent.contains("refused"),
            "{sent}"
        );
        let none = credentials.describe("other.example");
        assert!(
            none.contains("pull Secret kbind/pull") && none.contains("anonymously"),
            "{none}"
        );
        let anonymous = Credentials::default().describe("r.example:5000");
        assert!(
            anonymous.contains("spec.policies.pullSecretName"),
            "{anonymous}"
        );
        for said in [sent, none, anonymous] {
            assert!(
                !said.contains("s3cret") && !said.contains(&encoded),
                "{said}"
            );
        }
        Ok(())
    }

    #[test]
    fn changed_credentials_change_the_fingerprint() -> Result<(), CredentialsError> {
        let doc = |password: &str| {
            let encoded = base64::engine::general_purpose::STANDARD.encode(format!("u:{password}"));
            format!(r#"{{"auths": {{"r.example": {{"auth": "{encoded}"}}}}}}"#)
        };
        let a = Credentials::from_docker_config(doc("one").as_bytes())?;
        let again = Credentials::from_docker_config(doc("one").as_bytes())?;
        let b = Credentials::from_docker_config(doc("two").as_bytes())?;
        assert_eq!(a.fingerprint(), again.fingerprint());
        assert_ne!(a.fingerprint(), b.fingerprint());
        Ok(())
    }

    #[test]
    fn a_malformed_auth_is_refused_naming_its_registry() {
        let refused =
            Credentials::from_docker_config(br#"{"auths": {"r.example": {"auth": "!!"}}}"#);
        assert!(
            matches!(&refused, Err(e) if e.to_string().contains("r.example")),
            "{refused:?}"
        );
    }
}
