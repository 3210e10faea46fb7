//! Real operators on the provider, built from their Go modules by `scripts/operators.sh` (their
//! CRDs generated there by controller-gen from their own API types) and run as processes
//! against the provider apiserver, out of cluster with the admin kubeconfig, as a platform team
//! runs them on a cluster without kbind:
//!
//! ```text
//! trust-manager  Bundle (cluster-scoped) ──▶ Synced condition (observedGeneration), a Secret
//!                                            in each selected namespace
//! kro            ResourceGraphDefinition ──▶ a CRD it installs (Credential) whose instances it
//!                                            serves: finalizer kro.run/finalizer, conditions,
//!                                            the Secret the graph templates
//! ```
//!
//! Webhooks are off: trust-manager's webhook server listens on loopback with a self-signed
//! certificate, but no webhook configuration points the apiserver at it (there are no Pods or
//! Services); kro has none.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use konnector::api::names::EXPORTED_LABEL;
use konnector::api::{ExportedApi, ResourceScope};
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Client};
use nix::sys::signal::Signal;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use serde_json::{Value, json};

use crate::daemon::Daemon;
use crate::fixtures::{free_port, install_crd};
use crate::syncenv::{TEST_MANAGER, ensure_namespace, wait_for};
use crate::testenv::Cluster;

/// The API trust-manager reconciles: cluster-scoped, `v1alpha1`.
pub const BUNDLES: &str = "bundles.trust.cert-manager.io";
/// The API kro installs and serves for the tests' ResourceGraphDefinition: namespaced.
pub const CREDENTIALS: &str = "credentials.kro.run";
/// The finalizer kro holds on each instance it serves until it has deleted what it created.
pub const KRO_FINALIZER: &str = "kro.run/finalizer";

/// How long an operator may take to install what it serves.
const OPERATOR_WAIT: Duration = Duration::from_secs(60);

/// The directory `scripts/operators.sh` filled (`trust-manager`, `kro`, `controller-gen`,
/// `crds/<operator>/`), built when missing, once per process.
pub fn operators_dir() -> anyhow::Result<PathBuf> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = DIR.get_or_init(|| {
        crate::daemon::built_by_script(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scripts/operators.sh"
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

/// The export record the Connection controller discovers for [`CREDENTIALS`].
pub fn credentials_export() -> ExportedApi {
    ExportedApi {
        name: CREDENTIALS.into(),
        group: "kro.run".into(),
        resource: "credentials".into(),
        scope: ResourceScope::Namespaced,
        versions: vec!["v1alpha1".into()],
    }
}

/// The dynamic resource of a kro `Credential`.
pub fn credential_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kro.run", "v1alpha1", "Credential"),
        "credentials",
    )
}

/// Installs an operator's CRDs (`crds/<operator>/`, as generated from its API types) on a
/// cluster and waits until they are Established.
async fn install_operator_crds(client: &Client, operator: &str) -> anyhow::Result<()> {
    let dir = operators_dir()?.join("crds").join(operator);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .collect::<Result<_, _>>()?;
    files.sort_by_key(|f| f.file_name());
    anyhow::ensure!(!files.is_empty(), "no CRD in {}", dir.display());
    for file in files {
        let text = std::fs::read_to_string(file.path())?;
        let mut crd: CustomResourceDefinition = serde_saphyr::from_str(&text)
            .with_context(|| format!("parsing {}", file.path().display()))?;
        if crd.metadata.name.as_deref() == Some(BUNDLES) {
            crd.metadata
                .labels
                .get_or_insert_default()
                .insert(EXPORTED_LABEL.into(), "true".into());
        }
        install_crd(client, &crd).await?;
    }
    Ok(())
}

/// A real operator running against one cluster.
pub struct Operator {
    daemon: Daemon,
}

impl Operator {
    /// Starts trust-manager against `cluster` (its CRDs installed first), reading bundle
    /// sources from `trust_namespace` (created) and allowed to write Secret targets; its
    /// files and log go under `dir`.
    pub async fn trust_manager(
        cluster: &Cluster,
        trust_namespace: &str,
        dir: &Path,
    ) -> anyhow::Result<Self> {
        let binary = operators_dir()?.join("trust-manager");
        let client = cluster.client().await?;
        install_operator_crds(&client, "trust-manager").await?;
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

    /// Starts kro against `cluster` (its CRDs installed first), with the tests'
    /// ResourceGraphDefinition applied: returns once kro has installed [`CREDENTIALS`], which
    /// is then labelled exported. Its log goes under `dir`.
    pub async fn kro(cluster: &Cluster, dir: &Path) -> anyhow::Result<Self> {
        let binary = operators_dir()?.join("kro");
        let client = cluster.client().await?;
        install_operator_crds(&client, "kro").await?;
        let kubeconfig = cluster.admin().kubeconfig_path().display().to_string();
        let args = [
            // Port 0: any free port for what nothing here reads.
            "--metrics-bind-address=0",
            "--health-probe-bind-address=0",
            "--leader-elect=false",
        ];
        let log = dir.join("kro.log");
        let envs = [("KUBECONFIG", kubeconfig.as_str())];
        let daemon = Daemon::spawn("kro", &binary, &args, &envs, &log)?;
        let operator = Self { daemon };
        apply(&client, &rgd_resource(), &credentials_graph()).await?;
        let crds = Api::<CustomResourceDefinition>::all(client.clone());
        let installed = wait_for(
            "kro installing its Credential CRD",
            OPERATOR_WAIT,
            || async {
                let crd = crds.get_opt(CREDENTIALS).await?;
                Ok(crd.filter(konnector::schema::is_established))
            },
        )
        .await
        .with_context(|| operator.log_tail())?;
        let label = json!({ "metadata": { "labels": { EXPORTED_LABEL: "true" } } });
        let name = installed.metadata.name.unwrap_or_default();
        crds.patch(&name, &PatchParams::default(), &Patch::Merge(&label))
            .await?;
        Ok(operator)
    }

    /// Stops the operator (`SIGSTOP`): it holds whatever it holds and answers nothing, as an
    /// operator that hangs.
    pub fn pause(&self) -> anyhow::Result<()> {
        self.daemon.signal(Signal::SIGSTOP)
    }

    /// Lets a paused operator go on (`SIGCONT`).
    pub fn resume(&self) -> anyhow::Result<()> {
        self.daemon.signal(Signal::SIGCONT)
    }

    /// The end of its log, for a failure message.
    pub fn log_tail(&self) -> String {
        self.daemon.log_tail(40)
    }
}

/// The dynamic resource of kro's `ResourceGraphDefinition`.
fn rgd_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kro.run", "v1alpha1", "ResourceGraphDefinition"),
        "resourcegraphdefinitions",
    )
}

/// A graph as a platform team writes one: a `Credential` API whose instances each get a
/// Secret (`<name>-credential`, labelled `rop.test/minted`) holding the password they ask for.
fn credentials_graph() -> Value {
    json!({
        "apiVersion": "kro.run/v1alpha1",
        "kind": "ResourceGraphDefinition",
        "metadata": { "name": "credentials" },
        "spec": {
            "schema": {
                "apiVersion": "v1alpha1",
                "kind": "Credential",
                "spec": { "password": "string" },
            },
            "resources": [{
                "id": "secret",
                "template": {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {
                        "name": "${schema.metadata.name}-credential",
                        "labels": { "rop.test/minted": "true" },
                    },
                    "stringData": { "password": "${schema.spec.password}" },
                },
            }],
        },
    })
}

/// Server-side applies a cluster-scoped `object` as the tests' field manager.
async fn apply(client: &Client, resource: &ApiResource, object: &Value) -> anyhow::Result<()> {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let obj: DynamicObject = serde_json::from_value(object.clone())?;
    Api::<DynamicObject>::all_with(client.clone(), resource)
        .patch(
            name,
            &PatchParams::apply(TEST_MANAGER).force(),
            &Patch::Apply(&obj),
        )
        .await
        .with_context(|| format!("applying {name}"))?;
    Ok(())
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
