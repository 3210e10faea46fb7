//! Turning a credential Secret into a provider client, with an error per way it can be wrong,
//! so the Connection can say exactly what the operator has to fix.
//!
//! Credentials must be inline: a kubeconfig in a Secret cannot meaningfully point at files on
//! the konnector's disk, and reading them would let a Connection author read the konnector's
//! files. Exec and auth-provider plugins are refused for the same reason.

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::config::{KubeConfigOptions, Kubeconfig};
use sha2::{Digest, Sha256};

use crate::api::{Reason, SecretReference};

/// Why a Secret does not yield a usable provider client.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    /// The referenced Secret is outside the konnector's designated namespace.
    #[error(
        "Secret {namespace}/{name} is outside the konnector's credential namespace {allowed:?}; move the Secret there and create a new Connection referencing it"
    )]
    NamespaceNotAllowed {
        /// Namespace of the reference.
        namespace: String,
        /// Name of the reference.
        name: String,
        /// The designated namespace.
        allowed: String,
    },
    /// The Secret does not exist.
    #[error(
        "Secret {namespace}/{name} not found; create it with the provider kubeconfig under key {key:?}"
    )]
    SecretNotFound {
        /// Namespace of the Secret.
        namespace: String,
        /// Name of the Secret.
        name: String,
        /// Expected data key.
        key: String,
    },
    /// The Secret lacks the referenced key.
    #[error(
        "Secret {namespace}/{name} has no data key {key:?}; add the provider kubeconfig under that key"
    )]
    KeyMissing {
        /// Namespace of the Secret.
        namespace: String,
        /// Name of the Secret.
        name: String,
        /// Missing data key.
        key: String,
    },
    /// The data is not a kubeconfig.
    #[error("the kubeconfig in Secret {namespace}/{name} key {key:?} cannot be parsed: {detail}")]
    Unparsable {
        /// Namespace of the Secret.
        namespace: String,
        /// Name of the Secret.
        name: String,
        /// Data key.
        key: String,
        /// The parser's complaint.
        detail: String,
    },
    /// The kubeconfig parses but does not name a usable context, cluster or user.
    #[error("the kubeconfig in Secret {namespace}/{name} is incomplete: {problem}")]
    Incomplete {
        /// Namespace of the Secret.
        namespace: String,
        /// Name of the Secret.
        name: String,
        /// What is missing.
        problem: String,
    },
    /// The kubeconfig's credentials cannot be used by the konnector.
    #[error("the kubeconfig in Secret {namespace}/{name} has unusable credentials: {problem}")]
    Unusable {
        /// Namespace of the Secret.
        namespace: String,
        /// Name of the Secret.
        name: String,
        /// What is wrong.
        problem: String,
    },
}

impl KubeconfigError {
    /// The condition reason an operator sees for this failure.
    pub fn reason(&self) -> Reason {
        match self {
            Self::NamespaceNotAllowed { .. } => Reason::SecretNamespaceNotAllowed,
            Self::SecretNotFound { .. } => Reason::SecretNotFound,
            Self::KeyMissing { .. } => Reason::SecretKeyMissing,
            Self::Unparsable { .. } => Reason::KubeconfigInvalid,
            Self::Incomplete { .. } => Reason::KubeconfigIncomplete,
            Self::Unusable { .. } => Reason::KubeconfigUnusable,
        }
    }
}

/// A provider client built from a credential Secret.
#[derive(Clone)]
pub struct ProviderCredentials {
    /// The client.
    pub client: kube::Client,
    /// Namespace of the kubeconfig's current context, if it names one (heartbeat Lease home).
    pub context_namespace: Option<String>,
    /// SHA-256 of the kubeconfig bytes, to tell when credentials changed.
    pub digest: String,
}

impl std::fmt::Debug for ProviderCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderCredentials")
            .field("context_namespace", &self.context_namespace)
            .field("digest", &self.digest)
            .finish_non_exhaustive()
    }
}

/// How long a provider connection attempt may take before the provider counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Extracts the kubeconfig bytes a reference points at; `None` Secret means it was not found.
pub fn kubeconfig_bytes<'a>(
    reference: &SecretReference,
    secret: Option<&'a Secret>,
) -> Result<&'a [u8], KubeconfigError> {
    let secret = secret.ok_or_else(|| KubeconfigError::SecretNotFound {
        namespace: reference.namespace.clone(),
        name: reference.name.clone(),
        key: reference.key.clone(),
    })?;
    secret
        .data
        .as_ref()
        .and_then(|data| data.get(&reference.key))
        .map(|ByteString(bytes)| bytes.as_slice())
        .ok_or_else(|| KubeconfigError::KeyMissing {
            namespace: reference.namespace.clone(),
            name: reference.name.clone(),
            key: reference.key.clone(),
        })
}

/// Parses and checks a kubeconfig, without contacting the cluster.
pub fn parse(reference: &SecretReference, bytes: &[u8]) -> Result<Kubeconfig, KubeconfigError> {
    let unparsable = |detail: String| KubeconfigError::Unparsable {
        namespace: reference.namespace.clone(),
        name: reference.name.clone(),
        key: reference.key.clone(),
        detail,
    };
    let text =
        std::str::from_utf8(bytes).map_err(|e| unparsable(format!("not UTF-8 text: {e}")))?;
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|e| unparsable(e.to_string()))?;
    check(reference, &kubeconfig)?;
    Ok(kubeconfig)
}

/// Builds the provider client from a Secret, checking everything that can be checked locally.
pub async fn credentials(
    reference: &SecretReference,
    secret: Option<&Secret>,
) -> Result<ProviderCredentials, KubeconfigError> {
    let bytes = kubeconfig_bytes(reference, secret)?;
    let kubeconfig = parse(reference, bytes)?;
    let context_namespace = current_context(&kubeconfig).and_then(|c| c.namespace.clone());
    let unusable = |problem: String| KubeconfigError::Unusable {
        namespace: reference.namespace.clone(),
        name: reference.name.clone(),
        problem,
    };
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| unusable(e.to_string()))?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    let client = kube::Client::try_from(config).map_err(|e| unusable(e.to_string()))?;
    Ok(ProviderCredentials {
        client,
        context_namespace,
        digest: digest(bytes),
    })
}

/// Hex SHA-256 of the kubeconfig bytes.
pub fn digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn current_context(kubeconfig: &Kubeconfig) -> Option<&kube::config::Context> {
    let name = kubeconfig.current_context.as_deref()?;
    kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == name)?
        .context
        .as_ref()
}

fn check(reference: &SecretReference, kubeconfig: &Kubeconfig) -> Result<(), KubeconfigError> {
    let incomplete = |problem: String| KubeconfigError::Incomplete {
        namespace: reference.namespace.clone(),
        name: reference.name.clone(),
        problem,
    };
    let unusable = |problem: String| KubeconfigError::Unusable {
        namespace: reference.namespace.clone(),
        name: reference.name.clone(),
        problem,
    };
    let context_name = kubeconfig
        .current_context
        .as_deref()
        .filter(|name| !name.is_empty())
        .ok_or_else(|| {
            incomplete(
                "no current-context is set; set current-context to the provider context".into(),
            )
        })?;
    let context = current_context(kubeconfig).ok_or_else(|| {
        incomplete(format!(
            "current-context {context_name:?} is not among the contexts"
        ))
    })?;
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| {
            incomplete(format!(
                "context {context_name:?} names cluster {:?}, which is not defined",
                context.cluster
            ))
        })?;
    match cluster.server.as_deref() {
        Some(server) if !server.is_empty() => {}
        _ => {
            return Err(incomplete(format!(
                "cluster {:?} has no server URL",
                context.cluster
            )));
        }
    }
    if cluster.certificate_authority.is_some() {
        return Err(unusable(format!(
            "cluster {:?} reads certificate-authority from a file; inline it as certificate-authority-data",
            context.cluster
        )));
    }
    let Some(user_name) = context.user.as_deref() else {
        return Ok(());
    };
    let user = kubeconfig
        .auth_infos
        .iter()
        .find(|u| u.name == user_name)
        .ok_or_else(|| {
            incomplete(format!(
                "context {context_name:?} names user {user_name:?}, which is not defined"
            ))
        })?;
    let Some(auth) = user.auth_info.as_ref() else {
        return Ok(());
    };
    let file_field = [
        ("client-certificate", auth.client_certificate.is_some()),
        ("client-key", auth.client_key.is_some()),
        ("tokenFile", auth.token_file.is_some()),
    ]
    .into_iter()
    .find_map(|(field, set)| set.then_some(field));
    if let Some(field) = file_field {
        return Err(unusable(format!(
            "user {user_name:?} reads {field} from a file; inline the credential (…-data or token)"
        )));
    }
    if auth.exec.is_some() || auth.auth_provider.is_some() {
        return Err(unusable(format!(
            "user {user_name:?} uses an exec or auth-provider plugin, which the konnector does not run; use a client certificate or token"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference() -> SecretReference {
        SecretReference {
            namespace: "kbind".into(),
            name: "provider".into(),
            key: "kubeconfig".into(),
        }
    }

    const VALID: &str = r#"
apiVersion: v1
kind: Config
current-context: p
contexts:
- name: p
  context: {cluster: p, user: u, namespace: team-a}
clusters:
- name: p
  cluster: {server: "https://127.0.0.1:6443", certificate-authority-data: ""}
users:
- name: u
  user: {token: abc}
"#;

    #[test]
    fn valid_inline_kubeconfig_parses() {
        let parsed = parse(&reference(), VALID.as_bytes());
        assert!(parsed.is_ok(), "{parsed:?}");
    }

    #[test]
    fn garbage_is_reported_as_invalid() {
        let err = parse(&reference(), b"{{{ not yaml")
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err.reason(), Reason::KubeconfigInvalid);
    }

    #[test]
    fn missing_current_context_is_incomplete() {
        let text = VALID.replace("current-context: p", "");
        let err = parse(&reference(), text.as_bytes())
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err.reason(), Reason::KubeconfigIncomplete);
        assert!(err.to_string().contains("current-context"), "{err}");
    }

    #[test]
    fn undefined_cluster_is_incomplete() {
        let text = VALID.replace("{cluster: p,", "{cluster: q,");
        let err = parse(&reference(), text.as_bytes())
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err.reason(), Reason::KubeconfigIncomplete);
        assert!(err.to_string().contains("\"q\""), "{err}");
    }

    #[test]
    fn file_credentials_are_unusable() {
        let text = VALID.replace(
            "{token: abc}",
            "{client-certificate: /etc/passwd, client-key: /etc/shadow}",
        );
        let err = parse(&reference(), text.as_bytes())
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err.reason(), Reason::KubeconfigUnusable);
    }

    #[test]
    fn exec_plugins_are_unusable() {
        let text = VALID.replace(
            "{token: abc}",
            "{exec: {command: aws, apiVersion: client.authentication.k8s.io/v1}}",
        );
        let err = parse(&reference(), text.as_bytes())
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err.reason(), Reason::KubeconfigUnusable);
    }

    #[test]
    fn missing_secret_and_key_are_told_apart() {
        let err = kubeconfig_bytes(&reference(), None)
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err.reason(), Reason::SecretNotFound);
        let secret = Secret::default();
        let err = kubeconfig_bytes(&reference(), Some(&secret))
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err.reason(), Reason::SecretKeyMissing);
    }
}
