//! Reaching the consumer cluster the way kubectl does: `--kubeconfig`, else `KUBECONFIG`
//! (a colon-separated list, merged), else `~/.kube/config`, else the in-cluster config;
//! `--context` picks the context, `-n` the namespace (default: the context's, else `default`).

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// kubectl's connection flags.
#[derive(Args, Debug, Clone, Default)]
pub struct ClientArgs {
    /// Path to the kubeconfig file to use (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The namespace for namespaced objects (default: the context's namespace).
    #[arg(short = 'n', long, global = true, value_name = "NS")]
    pub namespace: Option<String>,
}

/// A client for the consumer cluster and the namespace commands default to.
pub struct Target {
    /// Client of the selected context.
    pub client: Client,
    /// `-n`, else the context's namespace, else `default`.
    pub namespace: String,
}

impl ClientArgs {
    /// Builds the client the flags describe.
    pub async fn connect(&self) -> anyhow::Result<Target> {
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..KubeConfigOptions::default()
        };
        let config = match &self.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path)
                    .with_context(|| format!("reading kubeconfig {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .with_context(|| format!("using kubeconfig {}", path.display()))?
            }
            None if self.context.is_some() => kube::Config::from_kubeconfig(&options)
                .await
                .context("loading the kubeconfig ($KUBECONFIG or ~/.kube/config)")?,
            None => kube::Config::infer().await.context(
                "no kubeconfig found ($KUBECONFIG, ~/.kube/config) and not in a cluster",
            )?,
        };
        let namespace = self
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config).context("building the Kubernetes client")?;
        Ok(Target { client, namespace })
    }
}
