//! Every way getting a module from a registry (or the cache) can fail, each naming the
//! reference and what to do. [`FetchError::is_transient`] is the one rule for when the
//! cache may stand in for the registry: only when the registry could not be reached, never
//! when it answered (a missing tag, a refused credential, a blob that is not what its digest
//! says).

use oci_client::errors::{DigestError, OciDistributionError};

use super::cache::CacheError;

/// A failed pull, push or cache read.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// No answer: the registry is down, unreachable, timed out or answered 5xx.
    #[error("{operation} {reference}: the registry did not answer: {message}")]
    Unreachable {
        /// The reference.
        reference: String,
        /// What was being done.
        operation: String,
        /// The transport's explanation.
        message: String,
    },
    /// The registry answered no (not found, unauthorized, malformed request).
    #[error(
        "{operation} {reference}: the registry refused: {message} (check the reference, and the pull Secret for private repositories)"
    )]
    Refused {
        /// The reference.
        reference: String,
        /// What was being done.
        operation: String,
        /// The registry's answer.
        message: String,
    },
    /// The registry refused to let the konnector in (401, 403, or an authentication failure):
    /// `credentials` says whose credentials were sent, or why none were.
    #[error(
        "{operation} {reference}: the registry refused authentication ({message}); {credentials}"
    )]
    Unauthorized {
        /// The reference.
        reference: String,
        /// What was being done.
        operation: String,
        /// The registry's answer.
        message: String,
        /// Whose credentials were sent ([`super::Credentials::describe`]).
        credentials: String,
    },
    /// A manifest or blob whose bytes do not hash to the digest that named it: refused.
    #[error(
        "pulling {reference}: the {what} does not match its digest (expected {expected}, got {actual}); it was altered in the registry or on the way, and is not run"
    )]
    DigestMismatch {
        /// The reference.
        reference: String,
        /// `manifest`, `module` or `config`.
        what: String,
        /// The digest that named it.
        expected: String,
        /// What its bytes hash to.
        actual: String,
    },
    /// The artifact is not a Wasm policy module by the OCI conventions.
    #[error(
        "pulling {reference}: not a Wasm module artifact: {message} (push it with `konnector policy push`)"
    )]
    NotAModule {
        /// The reference.
        reference: String,
        /// What is wrong.
        message: String,
    },
    /// A blob larger than the konnector reads.
    #[error("pulling {reference}: the {what} is larger than {limit} bytes and is not read")]
    TooLarge {
        /// The reference.
        reference: String,
        /// Which blob.
        what: String,
        /// The bound.
        limit: u64,
    },
    /// The cache could not be used.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// Neither the registry nor the cache has the module: nothing runs in its place.
    #[error(
        "{cause}; and no cached copy of {reference} (the policy cache keeps what was pulled before; pin a digest that was pulled once, or restore the registry)"
    )]
    Unavailable {
        /// The reference.
        reference: String,
        /// Why the pull failed.
        cause: Box<FetchError>,
    },
    /// Verification is configured and the module carries no signature: it is not run.
    #[error(
        "{reference} is not signed, and policy modules must be signed by {trusted}; it is not run (sign it with `konnector policy sign` or `cosign sign`)"
    )]
    Unsigned {
        /// The reference, pinned.
        reference: String,
        /// Who may sign.
        trusted: String,
    },
    /// Verification is configured and no signature of the module verifies: it is not run.
    #[error(
        "{reference}: no signature verifies ({reasons}); it is not run (check who signed it with `konnector policy verify`)"
    )]
    Unverified {
        /// The reference, pinned.
        reference: String,
        /// Why each signature failed.
        reasons: String,
    },
    /// A signature could not be made.
    #[error("{0}")]
    Sign(String),
    /// The HTTP client could not be built.
    #[error("building the registry client: {0}")]
    Client(String),
}

/// What an authentication refusal says before the fetcher names the credentials it sent.
const UNKNOWN_CREDENTIALS: &str = "check the pull Secret's credentials for this registry";

impl FetchError {
    /// An authentication refusal that names whose credentials were sent (`describe`); any other
    /// error unchanged.
    pub fn with_credentials(self, describe: impl FnOnce() -> String) -> Self {
        match self {
            Self::Unauthorized {
                reference,
                operation,
                message,
                ..
            } => Self::Unauthorized {
                reference,
                operation,
                message,
                credentials: describe(),
            },
            Self::Unavailable { reference, cause } => Self::Unavailable {
                reference,
                cause: Box::new(cause.with_credentials(describe)),
            },
            other => other,
        }
    }

    /// Whether the registry was not reached at all, so a cached copy may stand in.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unreachable { .. })
    }

    /// A transport failure.
    pub fn unreachable(
        reference: &impl std::fmt::Display,
        operation: &str,
        message: &dyn std::fmt::Display,
    ) -> Self {
        Self::Unreachable {
            reference: reference.to_string(),
            operation: operation.to_owned(),
            message: message.to_string(),
        }
    }

    /// Sorts an `oci-client` error into ours.
    pub fn from_client(
        reference: &impl std::fmt::Display,
        operation: &str,
        error: OciDistributionError,
    ) -> Self {
        let reference = reference.to_string();
        let operation = operation.to_owned();
        match error {
            OciDistributionError::RequestError(e) if !e.is_status() => Self::Unreachable {
                reference,
                operation,
                message: with_causes(&e),
            },
            OciDistributionError::IoError(e) => Self::Unreachable {
                reference,
                operation,
                message: with_causes(&e),
            },
            OciDistributionError::ServerError {
                code, ref message, ..
            } if code >= 500 => Self::Unreachable {
                reference,
                operation,
                message: format!("{code} {message}"),
            },
            OciDistributionError::UnauthorizedError { url } => Self::Unauthorized {
                reference,
                operation,
                message: format!("401 Unauthorized from {url}"),
                credentials: UNKNOWN_CREDENTIALS.to_owned(),
            },
            OciDistributionError::AuthenticationFailure(reason) => Self::Unauthorized {
                reference,
                operation,
                message: reason,
                credentials: UNKNOWN_CREDENTIALS.to_owned(),
            },
            OciDistributionError::ServerError {
                code: code @ (401 | 403),
                ref url,
                ..
            } => Self::Unauthorized {
                reference,
                operation,
                message: format!("{code} from {url}"),
                credentials: UNKNOWN_CREDENTIALS.to_owned(),
            },
            OciDistributionError::RegistryError { ref envelope, .. }
                if envelope.errors.iter().any(|e| {
                    matches!(
                        e.code,
                        oci_client::errors::OciErrorCode::Unauthorized
                            | oci_client::errors::OciErrorCode::Denied
                    )
                }) =>
            {
                Self::Unauthorized {
                    reference,
                    operation,
                    message: error.to_string(),
                    credentials: UNKNOWN_CREDENTIALS.to_owned(),
                }
            }
            OciDistributionError::DigestError(DigestError::VerificationError {
                expected,
                actual,
            }) => Self::DigestMismatch {
                reference,
                what: "manifest".to_owned(),
                expected,
                actual,
            },
            other => Self::Refused {
                reference,
                operation,
                message: other.to_string(),
            },
        }
    }

    /// A short, fixed name of the failure, for a metric label.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Unreachable { .. } => "unreachable",
            Self::Refused { .. } => "refused",
            Self::Unauthorized { .. } => "unauthorized",
            Self::DigestMismatch { .. } => "digest_mismatch",
            Self::NotAModule { .. } => "not_a_module",
            Self::TooLarge { .. } => "too_large",
            Self::Cache(_) => "cache",
            Self::Unavailable { .. } => "unavailable",
            Self::Unsigned { .. } => "unsigned",
            Self::Unverified { .. } => "unverified",
            Self::Sign(_) => "sign",
            Self::Client(_) => "client",
        }
    }
}

/// `error` and what caused it, outermost first, `: `-separated: an HTTP client's own message
/// ("error sending request") or sigstore-rs's ("certificate SCT verification failed") names
/// what failed; the refused connection, the certificate or the check further down the chain
/// says why, which is what an operator can act on.
pub(super) fn with_causes(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let said = inner.to_string();
        if !message.contains(&said) {
            message.push_str(": ");
            message.push_str(&said);
        }
        cause = inner.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transport_failure_names_its_causes_not_only_the_client_s_words() {
        #[derive(Debug, thiserror::Error)]
        #[error("error sending request for url (https://registry.example/v2/)")]
        struct Request(#[source] Connect);
        #[derive(Debug, thiserror::Error)]
        #[error("client error (Connect)")]
        struct Connect(#[source] std::io::Error);
        let certificate =
            std::io::Error::other("certificate verify failed: self-signed certificate");
        let said = with_causes(&Request(Connect(certificate)));
        assert_eq!(
            said,
            "error sending request for url (https://registry.example/v2/): client error (Connect): certificate verify failed: self-signed certificate"
        );
    }

    #[test]
    fn a_refused_authentication_is_told_apart_and_names_the_credentials_sent() {
        let refusals = [
            OciDistributionError::UnauthorizedError {
                url: "http://r.example/v2/p/manifests/v1".into(),
            },
            OciDistributionError::AuthenticationFailure("bad token".into()),
            OciDistributionError::ServerError {
                code: 403,
                url: "http://r.example/v2/".into(),
                message: "denied".into(),
            },
        ];
        for refusal in refusals {
            let error = FetchError::from_client(&"oci://r.example/p:v1", "pulling", refusal)
                .with_credentials(|| "the credentials in pull Secret kbind/pull".into());
            assert!(
                matches!(&error, FetchError::Unauthorized { .. }),
                "{error:?}"
            );
            let said = error.to_string();
            assert!(
                said.contains("refused authentication")
                    && said.contains("pull Secret kbind/pull")
                    && !error.is_transient(),
                "{said}"
            );
        }
        let down = FetchError::from_client(
            &"oci://r.example/p:v1",
            "pulling",
            OciDistributionError::ServerError {
                code: 503,
                url: "http://r.example/v2/".into(),
                message: "busy".into(),
            },
        )
        .with_credentials(|| "never shown".into());
        assert!(
            down.is_transient() && !down.to_string().contains("never shown"),
            "{down}"
        );
    }
}
