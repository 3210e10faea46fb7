//! Turning a credential Secret into a provider client, with an error per way it can be wrong,
//! so the Connection can say exactly what the operator has to fix.
//!
//! ```text
//! Secret ─(key)─▶ bytes ─(UTF-8, YAML)─▶ Kubeconfig ─(checks)─▶ kube::Config ─▶ Client
//!   SecretNotFound   SecretKeyMissing   KubeconfigInvalid   KubeconfigIncomplete /
//!                                                            KubeconfigUnusable
//! ```
//!
//! What the konnector accepts in a kubeconfig (inline credentials, no plugins, verified TLS
//! unless the operator opted out) is decided in `checks`, before kube builds a configuration.
//!
//! Messages name the kubeconfig FIELD that is wrong, never its value: the text ends up in
//! Connection conditions and Events that more people can read than the Secret (server
//! addresses, context, cluster and user names stay in the Secret).

mod checks;

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::config::{KubeConfigOptions, Kubeconfig};
use sha2::{Digest, Sha256};

use crate::api::{Reason, SecretReference};
use checks::check;

/// Which provider transports the operator accepts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    /// Only `https://` servers whose certificate is verified (the default).
    #[default]
    VerifiedTls,
    /// Also `insecure-skip-tls-verify: true` and plain `http://` servers: the operator's
    /// explicit opt-in (`--allow-insecure-provider`), for test and lab providers only.
    AllowInsecure,
}

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
    #[error(
        "the data under key {key:?} of Secret {namespace}/{name} is not a kubeconfig: {detail}"
    )]
    Unparsable {
        /// Namespace of the Secret.
        namespace: String,
        /// Name of the Secret.
        name: String,
        /// Data key.
        key: String,
        /// What kind of problem, without quoting the data.
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
pub fn parse(
    reference: &SecretReference,
    bytes: &[u8],
    transport: Transport,
) -> Result<Kubeconfig, KubeconfigError> {
    let unparsable = |detail: &str| KubeconfigError::Unparsable {
        namespace: reference.namespace.clone(),
        name: reference.name.clone(),
        key: reference.key.clone(),
        detail: detail.to_string(),
    };
    let text = std::str::from_utf8(bytes).map_err(|_| unparsable("it is not UTF-8 text"))?;
    // The parser's own message can quote the offending line (a token, a server address), so
    // it only goes to the debug log.
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|e| {
        tracing::debug!(secret = %format!("{}/{}", reference.namespace, reference.name), error = %e, "kubeconfig does not parse");
        unparsable(
            "it is not YAML, or a field has the wrong type; check it with `kubectl --kubeconfig FILE config view`",
        )
    })?;
    check(reference, &kubeconfig, transport)?;
    Ok(kubeconfig)
}

/// Builds the provider client from a Secret, checking everything that can be checked locally.
pub async fn credentials(
    reference: &SecretReference,
    secret: Option<&Secret>,
    transport: Transport,
) -> Result<ProviderCredentials, KubeconfigError> {
    let bytes = kubeconfig_bytes(reference, secret)?;
    let kubeconfig = parse(reference, bytes, transport)?;
    let context_namespace = current_context(&kubeconfig).and_then(|c| c.namespace.clone());
    let unusable = |problem: &str| KubeconfigError::Unusable {
        namespace: reference.namespace.clone(),
        name: reference.name.clone(),
        problem: problem.to_string(),
    };
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| unusable(config_problem(&e)))?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    let client = crate::fencing::client(config, "provider").map_err(|e| {
        tracing::debug!(secret = %format!("{}/{}", reference.namespace, reference.name), error = %e, "no client from the kubeconfig");
        unusable(
            "its TLS material (certificate-authority-data, client-certificate-data, client-key-data, tls-server-name) cannot be used; check that each is base64-encoded PEM",
        )
    })?;
    Ok(ProviderCredentials {
        client,
        context_namespace,
        digest: digest(bytes),
    })
}

/// What is wrong, by kubeconfig field, when kube cannot make a client configuration of a
/// kubeconfig that passed [`check`]. kube's own messages may quote names from the
/// kubeconfig, so they are not passed on.
fn config_problem(error: &kube::config::KubeconfigError) -> &'static str {
    use kube::config::KubeconfigError as K;
    match error {
        K::MissingClusterUrl | K::ParseClusterUrl(_) => {
            "the server of the current context's cluster is not a valid URL"
        }
        K::ParseProxyUrl(_) => "the proxy-url of the current context's cluster is not a valid URL",
        K::LoadCertificateAuthority(_) | K::ParseCertificates(_) => {
            "the certificate-authority-data of the current context's cluster is not base64-encoded PEM"
        }
        K::LoadClientCertificate(_) => {
            "the client-certificate-data of the current context's user is not base64-encoded PEM"
        }
        K::LoadClientKey(_) => {
            "the client-key-data of the current context's user is not base64-encoded PEM"
        }
        _ => "it does not describe a usable cluster and user for the current context",
    }
}

/// Hex SHA-256 of the kubeconfig bytes.
pub fn digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The context `current-context` names, if the kubeconfig has it.
fn current_context(kubeconfig: &Kubeconfig) -> Option<&kube::config::Context> {
    let name = kubeconfig.current_context.as_deref()?;
    kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == name)?
        .context
        .as_ref()
}

#[cfg(test)]
mod fixtures {
    use super::*;

    pub(super) fn reference() -> SecretReference {
        SecretReference {
            namespace: "kbind".into(),
            name: "provider".into(),
            key: "kubeconfig".into(),
        }
    }

    /// Distinctive values, so a test can tell that a message does not quote them.
    pub(super) const VALID: &str = r#"
apiVersion: v1
kind: Config
current-context: ctx-secret-name
contexts:
- name: ctx-secret-name
  context: {cluster: cluster-secret-name, user: user-secret-name, namespace: team-a}
clusters:
- name: cluster-secret-name
  cluster: {server: "https://provider-secret-host.example:6443", certificate-authority-data: ""}
users:
- name: user-secret-name
  user: {token: token-secret-value}
"#;

    const VALUES: [&str; 5] = [
        "ctx-secret-name",
        "cluster-secret-name",
        "user-secret-name",
        "provider-secret-host",
        "token-secret-value",
    ];

    /// Parses `VALID` with `from` replaced by `to` and checks that it is refused for `reason`
    /// with a message that names each of `mentions` and quotes none of `hides`, nor any value
    /// of the kubeconfig.
    pub(super) fn refused(change: (&str, &str), reason: Reason, mentions: &[&str], hides: &[&str]) {
        refused_with(Transport::VerifiedTls, change, reason, mentions, hides);
    }

    /// [`refused`], under `transport`.
    pub(super) fn refused_with(
        transport: Transport,
        (from, to): (&str, &str),
        reason: Reason,
        mentions: &[&str],
        hides: &[&str],
    ) {
        let text = VALID.replace(from, to);
        let err = match parse(&reference(), text.as_bytes(), transport) {
            Ok(_) => panic!("expected the kubeconfig to be refused:\n{text}"),
            Err(e) => e,
        };
        assert_eq!(err.reason(), reason, "{err}");
        let message = err.to_string();
        for mention in mentions {
            assert!(
                message.contains(mention),
                "{message:?} does not name {mention:?}"
            );
        }
        for value in VALUES.iter().chain(hides) {
            assert!(!message.contains(value), "{message:?} quotes {value:?}");
        }
    }

    /// The message names fields, never a value of the kubeconfig.
    pub(super) fn assert_quotes_no_value(err: &KubeconfigError) {
        let message = err.to_string();
        for value in VALUES {
            assert!(!message.contains(value), "{message:?} quotes {value:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn valid_inline_kubeconfig_parses() {
        let parsed = parse(&reference(), VALID.as_bytes(), Transport::VerifiedTls);
        assert!(parsed.is_ok(), "{parsed:?}");
    }

    #[test]
    fn garbage_is_reported_as_invalid() {
        refused((VALID, "{{{ not yaml"), Reason::KubeconfigInvalid, &[], &[]);
    }

    #[test]
    fn parse_errors_do_not_quote_the_data() {
        // A field of the wrong type: the YAML parser's own message would quote the line.
        let change = (
            "current-context: ctx-secret-name",
            "current-context: [token-secret-value]",
        );
        refused(change, Reason::KubeconfigInvalid, &[], &[]);
    }

    #[tokio::test]
    async fn bad_tls_material_is_unusable_without_quoting_it() {
        let text = VALID.replace(
            "certificate-authority-data: \"\"",
            "certificate-authority-data: \"%%%not base64%%%\"",
        );
        let secret = Secret {
            data: Some(
                [("kubeconfig".to_string(), ByteString(text.into_bytes()))]
                    .into_iter()
                    .collect(),
            ),
            ..Secret::default()
        };
        let err = credentials(&reference(), Some(&secret), Transport::VerifiedTls)
            .await
            .map(drop)
            .unwrap_err();
        assert_eq!(err.reason(), Reason::KubeconfigUnusable);
        assert!(
            err.to_string().contains("certificate-authority-data"),
            "{err}"
        );
        assert_quotes_no_value(&err);
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
