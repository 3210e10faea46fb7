//! Identities of a test cluster and the kubeconfig files that carry them.
//!
//! Every identity is a self-contained kubeconfig (CA, server and credentials embedded, no
//! file references), so a test can copy it verbatim into a Secret for the konnector, and a
//! user can point `kubectl` at it. Clients are built from that same file, so the file the
//! konnector reads is the file the test has already proven works.

use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;

use super::{Error, Result, fsutil};

/// How an identity authenticates to the apiserver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credential {
    /// An X.509 client certificate signed by the cluster CA (user = CN, groups = O).
    ClientCertificate,
    /// A bearer token: from the static `--token-auth-file`, or a service-account token.
    Token,
}

/// One user of one cluster, with its kubeconfig on disk.
#[derive(Clone, Debug)]
pub struct Identity {
    cluster: String,
    user: String,
    credential: Credential,
    kubeconfig: PathBuf,
}

impl Identity {
    /// The cluster this identity belongs to.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The Kubernetes user name the apiserver sees.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// How this identity authenticates.
    pub fn credential(&self) -> Credential {
        self.credential
    }

    /// The kubeconfig file of this identity.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The kubeconfig as YAML, e.g. to store in a Secret.
    pub fn kubeconfig_yaml(&self) -> Result<String> {
        fsutil::read(&self.kubeconfig)
    }

    /// A client configuration for this identity.
    pub async fn config(&self) -> Result<kube::Config> {
        let path = &self.kubeconfig;
        let kubeconfig = Kubeconfig::read_from(path).map_err(|source| Error::LoadKubeconfig {
            path: path.clone(),
            source,
        })?;
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|source| Error::LoadKubeconfig {
                path: path.clone(),
                source,
            })
    }

    /// A client acting as this identity. Build one per test (a client belongs to the tokio
    /// runtime it was created on).
    pub async fn client(&self) -> Result<kube::Client> {
        kube::Client::try_from(self.config().await?).map_err(|source| Error::Client {
            path: self.kubeconfig.clone(),
            source,
        })
    }
}

/// The credential material written into a kubeconfig.
pub(crate) enum Auth<'a> {
    /// Client certificate and key, PEM.
    Certificate { cert_pem: &'a str, key_pem: &'a str },
    /// Bearer token.
    Token(&'a str),
}

/// Where an identity's cluster is and how to trust it.
pub(crate) struct Endpoint<'a> {
    /// Cluster name, used as the kubeconfig cluster and context name.
    pub(crate) cluster: &'a str,
    /// `https://127.0.0.1:<port>`.
    pub(crate) server: &'a str,
    /// The cluster CA certificate, PEM.
    pub(crate) ca_pem: &'a str,
}

/// Writes a self-contained kubeconfig for `user` at `path` and returns the identity.
pub(crate) fn write_kubeconfig(
    path: &Path,
    endpoint: &Endpoint<'_>,
    user: &str,
    auth: &Auth<'_>,
) -> Result<Identity> {
    let (credential, user_entry) = match auth {
        Auth::Certificate { cert_pem, key_pem } => (
            Credential::ClientCertificate,
            json!({
                "client-certificate-data": STANDARD.encode(cert_pem),
                "client-key-data": STANDARD.encode(key_pem),
            }),
        ),
        Auth::Token(token) => (Credential::Token, json!({ "token": token })),
    };
    let cluster = endpoint.cluster;
    let document = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": cluster,
            "cluster": {
                "server": endpoint.server,
                "certificate-authority-data": STANDARD.encode(endpoint.ca_pem),
            },
        }],
        "users": [{ "name": user, "user": user_entry }],
        "contexts": [{
            "name": cluster,
            "context": { "cluster": cluster, "user": user },
        }],
        "current-context": cluster,
    });
    let yaml = serde_saphyr::to_string(&document).map_err(Error::RenderKubeconfig)?;
    fsutil::write_private(path, &yaml)?;
    Ok(Identity {
        cluster: cluster.to_string(),
        user: user.to_string(),
        credential,
        kubeconfig: path.to_path_buf(),
    })
}
