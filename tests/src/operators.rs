//! A real operator on the provider: trust-manager (cert-manager's trust bundle operator), built
//! from its Go module by `scripts/trust-manager.sh`, its CRDs generated there by controller-gen
//! from its own API types. It runs as a process against the provider apiserver, out of cluster
//! with the admin kubeconfig, as a platform team runs it on a cluster without kbind:
//!
//! ```text
//! consumer Bundle ──konnector──▶ provider copy ──trust-manager──▶ Synced condition
//!                                              └─────────────────▶ Secret in each selected
//!                                                 namespace (labelled
//!                                                 trust.cert-manager.io/bundle=<name>)
//! ```
//!
//! Its webhook server listens on loopback with a self-signed certificate, but no webhook
//! configuration points the apiserver at it (there are no Pods or Services): webhooks are off.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context as _, anyhow};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use konnector::api::names::EXPORTED_LABEL;
use konnector::api::{ExportedApi, ResourceScope};
use kube::core::{ApiResource, GroupVersionKind};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

use crate::daemon::Daemon;
use crate::fixtures::{free_port, install_crd};
use crate::syncenv::ensure_namespace;
use crate::testenv::Cluster;

/// The API trust-manager reconciles, which the tests bind: cluster-scoped, `v1alpha1`.
pub const BUNDLES: &str = "bundles.trust.cert-manager.io";
/// The label trust-manager puts on every target it writes, valued with the bundle's name.
pub const BUNDLE_LABEL: &str = "trust.cert-manager.io/bundle";

/// The directory `scripts/trust-manager.sh` filled (the `trust-manager` and `controller-gen`
/// binaries, `crds/`), built when missing, once per process.
pub fn trust_manager_dir() -> anyhow::Result<PathBuf> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = DIR.get_or_init(|| {
        crate::daemon::built_by_script(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scripts/trust-manager.sh"
        ))
    });
    found.clone().map_err(|e| anyhow!(e))
}

/// The export record the Connection controller discovers for [`BUNDLES`].
pub fn bundles_export() -> ExportedApi {
    ExportedApi {
        name: BUNDLES.into(),
        group: "trust.cert-manager.io".into(),
        resource: "bundles".into(),
        scope: ResourceScope::Cluster,
        versions: vec!["v1alpha1".into()],
    }
}

/// The dynamic resource of a `Bundle`.
pub fn bundle_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("trust.cert-manager.io", "v1alpha1", "Bundle"),
        "bundles",
    )
}

/// Installs trust-manager's CRDs on the provider (as generated from its API types), the one the
/// tests bind labelled exported, and waits until they are Established.
pub async fn install_trust_manager_crds(provider: &kube::Client) -> anyhow::Result<()> {
    let dir = trust_manager_dir()?.join("crds");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .collect::<Result<_, _>>()?;
    files.sort_by_key(|f| f.file_name());
    anyhow::ensure!(!files.is_empty(), "no CRD in {}", dir.display());
    for file in files {
        let text = std::fs::read_to_string(file.path())?;
        let mut crd: CustomResourceDefinition = serde_yaml::from_str(&text)
            .with_context(|| format!("parsing {}", file.path().display()))?;
        if crd.metadata.name.as_deref() == Some(BUNDLES) {
            crd.metadata
                .labels
                .get_or_insert_default()
                .insert(EXPORTED_LABEL.into(), "true".into());
        }
        install_crd(provider, &crd).await?;
    }
    Ok(())
}

/// trust-manager running against one cluster.
pub struct TrustManager {
    daemon: Daemon,
}

impl TrustManager {
    /// Starts trust-manager against `cluster` (its CRDs installed first), reading bundle
    /// sources from `trust_namespace` (created) and allowed to write Secret targets; its
    /// files and log go under `dir`.
    pub async fn start(
        cluster: &Cluster,
        trust_namespace: &str,
        dir: &Path,
    ) -> anyhow::Result<Self> {
        let binary = trust_manager_dir()?.join("trust-manager");
        let client = cluster.client().await?;
        install_trust_manager_crds(&client).await?;
        ensure_namespace(&client, trust_namespace).await?;
        let tls = dir.join("webhook-tls");
        write_serving_certificate(&tls)?;
        let kubeconfig = cluster.admin().kubeconfig_path().display().to_string();
        let args = [
            format!("--kubeconfig={kubeconfig}"),
            "--leader-elect=false".into(),
            format!("--trust-namespace={trust_namespace}"),
            "--secret-targets-enabled=true".into(),
            // Port 0: any free port for what nothing here reads.
            "--metrics-port=0".into(),
            "--readiness-probe-port=0".into(),
            "--webhook-host=127.0.0.1".into(),
            format!("--webhook-port={}", free_port()?),
            format!("--webhook-certificate-dir={}", tls.display()),
            "--log-level=2".into(),
        ];
        let log = dir.join("trust-manager.log");
        let daemon = Daemon::spawn("trust-manager", &binary, &args, &[], &log)?;
        Ok(Self { daemon })
    }

    /// The end of its log, for a failure message.
    pub fn log_tail(&self) -> String {
        self.daemon.log_tail(40)
    }
}

/// A self-signed serving certificate for 127.0.0.1 as `tls.crt`/`tls.key` in `dir`: the
/// webhook server will not start without one.
fn write_serving_certificate(dir: &Path) -> anyhow::Result<()> {
    let key = KeyPair::generate()?;
    let params = CertificateParams::new(vec!["127.0.0.1".to_string()])?;
    let cert = params.self_signed(&key)?;
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("tls.crt"), cert.pem())?;
    std::fs::write(dir.join("tls.key"), key.serialize_pem())?;
    Ok(())
}

/// A self-signed CA certificate named `common_name`, as PEM: what a trust bundle distributes.
pub fn ca_certificate(common_name: &str) -> anyhow::Result<String> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    Ok(params.self_signed(&key)?.pem())
}

/// The base64 body of a PEM text, whitespace removed: two encodings of one certificate compare
/// equal, whatever their line breaks.
pub fn pem_body(pem: &str) -> String {
    pem.lines()
        .filter(|l| !l.starts_with("-----"))
        .flat_map(|l| l.chars())
        .filter(|c| !c.is_whitespace())
        .collect()
}
