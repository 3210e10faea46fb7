//! What the konnector accepts in a kubeconfig, checked before any client is built.
//!
//! Credentials must be inline: a kubeconfig in a Secret cannot meaningfully point at files on
//! the konnector's disk, and reading them would let a Connection author read the konnector's
//! files. Exec and auth-provider plugins are refused for the same reason. The transport must
//! be verified TLS: `insecure-skip-tls-verify: true` and plain `http://` servers are refused
//! unless the operator started the konnector with `--allow-insecure-provider`
//! ([`Transport::AllowInsecure`]).

use kube::config::Kubeconfig;

use super::{KubeconfigError, Transport, current_context};
use crate::api::SecretReference;

/// Checks that the current context names a cluster and user the konnector can use as given.
pub(super) fn check(
    reference: &SecretReference,
    kubeconfig: &Kubeconfig,
    transport: Transport,
) -> Result<(), KubeconfigError> {
    let incomplete = |problem: &str| KubeconfigError::Incomplete {
        namespace: reference.namespace.clone(),
        name: reference.name.clone(),
        problem: problem.to_string(),
    };
    let unusable = |problem: &str| KubeconfigError::Unusable {
        namespace: reference.namespace.clone(),
        name: reference.name.clone(),
        problem: problem.to_string(),
    };
    kubeconfig
        .current_context
        .as_deref()
        .filter(|name| !name.is_empty())
        .ok_or_else(|| {
            incomplete("no current-context is set; set current-context to the provider context")
        })?;
    let context = current_context(kubeconfig)
        .ok_or_else(|| incomplete("current-context names a context that is not among contexts"))?;
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| incomplete("the cluster of the current context is not among clusters"))?;
    let server = match cluster.server.as_deref() {
        Some(server) if !server.trim().is_empty() => server.trim(),
        _ => return Err(incomplete("the current context's cluster has no server")),
    };
    if cluster.certificate_authority.is_some() {
        return Err(unusable(
            "the current context's cluster reads certificate-authority from a file; inline it as certificate-authority-data",
        ));
    }
    check_transport(server, cluster.insecure_skip_tls_verify, transport).map_err(unusable)?;
    let Some(user_name) = context.user.as_deref() else {
        return Ok(());
    };
    let user = kubeconfig
        .auth_infos
        .iter()
        .find(|u| u.name == user_name)
        .ok_or_else(|| incomplete("the user of the current context is not among users"))?;
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
        return Err(unusable(&format!(
            "the current context's user reads {field} from a file; inline the credential (…-data or token)"
        )));
    }
    if auth.exec.is_some() || auth.auth_provider.is_some() {
        return Err(unusable(
            "the current context's user uses an exec or auth-provider plugin, which the konnector does not run; use a client certificate or token",
        ));
    }
    Ok(())
}

/// Refuses a transport that does not verify the provider unless the operator opted in.
/// Only the scheme of `server` is looked at, and never repeated.
fn check_transport(
    server: &str,
    insecure_skip_tls_verify: Option<bool>,
    transport: Transport,
) -> Result<(), &'static str> {
    let scheme = server
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    let insecure = match scheme.as_deref() {
        Some("https") => false,
        Some("http") => true,
        _ => {
            return Err(
                "the server of the current context's cluster is not an https:// URL; write it as https://HOST:PORT",
            );
        }
    };
    if transport == Transport::AllowInsecure {
        return Ok(());
    }
    if insecure {
        return Err(
            "the server of the current context's cluster is a plain http:// URL, which sends the credentials unencrypted; use https:// with certificate-authority-data (or start the konnector with --allow-insecure-provider, for test providers only)",
        );
    }
    if insecure_skip_tls_verify == Some(true) {
        return Err(
            "the current context's cluster sets insecure-skip-tls-verify: true, so the provider is not authenticated; remove it and add certificate-authority-data (or start the konnector with --allow-insecure-provider, for test providers only)",
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::parse;
    use super::*;
    use crate::api::Reason;

    const INCOMPLETE: Reason = Reason::KubeconfigIncomplete;
    const UNUSABLE: Reason = Reason::KubeconfigUnusable;
    const FILE_CREDENTIALS: &str = "{client-certificate: /etc/passwd, client-key: /etc/shadow}";
    const SKIP_TLS_VERIFY: (&str, &str) = (
        "certificate-authority-data: \"\"",
        "insecure-skip-tls-verify: true",
    );
    const EXEC_PLUGIN: &str = "{exec: {command: aws, apiVersion: client.authentication.k8s.io/v1}}";

    #[test]
    fn missing_current_context_is_incomplete() {
        let change = ("current-context: ctx-secret-name", "");
        refused(change, INCOMPLETE, &["current-context"], &[]);
    }

    #[test]
    fn names_that_point_nowhere_are_incomplete_without_quoting_them() {
        for (reference, list) in [
            ("current-context: ctx-secret-name", "contexts"),
            ("{cluster: cluster-secret-name,", "clusters"),
            ("user: user-secret-name,", "users"),
        ] {
            let dangling = reference.replace("secret-name", "nowhere");
            let mention = format!("not among {list}");
            refused(
                (reference, &dangling),
                INCOMPLETE,
                &[&mention],
                &["nowhere"],
            );
        }
    }

    #[test]
    fn file_credentials_are_unusable() {
        let change = ("{token: token-secret-value}", FILE_CREDENTIALS);
        refused(change, UNUSABLE, &["client-certificate"], &["/etc/passwd"]);
    }

    #[test]
    fn exec_plugins_are_unusable() {
        let change = ("{token: token-secret-value}", EXEC_PLUGIN);
        refused(change, UNUSABLE, &[], &[]);
    }

    #[test]
    fn insecure_skip_tls_verify_is_unusable_by_default() {
        let mentions = ["insecure-skip-tls-verify", "--allow-insecure-provider"];
        refused(SKIP_TLS_VERIFY, UNUSABLE, &mentions, &[]);
    }

    #[test]
    fn plain_http_server_is_unusable_by_default() {
        let change = (
            "https://provider-secret-host",
            "http://provider-secret-host",
        );
        refused(change, UNUSABLE, &["plain http://", "server"], &[]);
    }

    #[test]
    fn server_without_https_scheme_is_unusable() {
        let change = ("https://provider-secret-host", "provider-secret-host");
        refused_with(
            Transport::AllowInsecure,
            change,
            UNUSABLE,
            &["not an https:// URL"],
            &[],
        );
    }

    #[test]
    fn insecure_transports_are_accepted_when_the_operator_opts_in() {
        let skip = VALID.replace(SKIP_TLS_VERIFY.0, SKIP_TLS_VERIFY.1);
        let http = VALID.replace("https://", "http://");
        for text in [skip, http] {
            let parsed = parse(&reference(), text.as_bytes(), Transport::AllowInsecure);
            assert!(parsed.is_ok(), "{parsed:?}");
        }
    }

    #[test]
    fn verified_https_is_accepted_either_way() {
        let text = VALID.replace("https://", "HTTPS://");
        for transport in [Transport::VerifiedTls, Transport::AllowInsecure] {
            let parsed = parse(&reference(), text.as_bytes(), transport);
            assert!(parsed.is_ok(), "{parsed:?}");
        }
    }
}
