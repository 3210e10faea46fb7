//! `kubectl kbind` end to end: the CLI binary against the real cluster pair, with the real
//! `konnector run` process (one per test binary, since controllers watch cluster-wide), plus
//! the printer columns and short names the core CRDs give `kubectl get`.
//!
//! * `columns`: server-side Table columns, short names, the `kbind` category.
//! * `lifecycle`: connect → bind → status → unbind → disconnect, nothing left behind.
//! * `exit_codes`: 0 / 1 / 2 as scripts expect, with reasons and remedies on stderr.
//! * `least_privilege`: the konnector on exactly the RBAC `provider-rbac` prints.

mod columns;
mod exit_codes;
mod least_privilege;
mod lifecycle;

use std::io::Write as _;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context as _, Result};
use kbind_tests::fixtures::{
    SECRET_NAMESPACE, ensure_namespace, free_port, http_get, install_core_crds, install_crd,
};
use kbind_tests::testenv::{ClusterPair, shared_pair};

/// How long the CLI may wait for the konnector in these tests.
pub const TIMEOUT: &str = "90s";
/// How long tests wait for effects they check themselves.
pub const WAIT: Duration = Duration::from_secs(90);

/// What one CLI run gave.
#[derive(Debug)]
pub struct Run {
    /// Exit code.
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    /// Fails unless the exit code is `code`; the error shows both streams.
    pub fn expect(self, code: i32) -> Result<Self> {
        anyhow::ensure!(
            self.code == code,
            "expected exit code {code}, got {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code,
            self.stdout,
            self.stderr
        );
        Ok(self)
    }
}

/// Runs `kubectl-kbind --kubeconfig <consumer admin> <args>` to completion.
pub async fn kbind(pair: &ClusterPair, args: &[&str]) -> Result<Run> {
    let binary = kbind_tests::kubectl_kbind_binary!();
    let kubeconfig = pair.consumer.admin().kubeconfig_path().to_path_buf();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(binary)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(&args)
            .env_remove("KUBECONFIG")
            .output()
    })
    .await?
    .context("running kubectl-kbind")?;
    Ok(Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// The `konnector run` process shared by this binary's tests: started once, killed when the
/// test binary exits however it exits (a `sh` watchdog reads a pipe from this process and
/// kills the konnector at end-of-file, since a `static` is never dropped).
struct SharedKonnector {
    _watchdog: Child,
    _pipe: ChildStdin,
    metrics: u16,
}

static KONNECTOR: OnceLock<Result<SharedKonnector, String>> = OnceLock::new();

/// Starts (once) the shared konnector against the pair's consumer and returns its metrics
/// port.
pub async fn shared_konnector(pair: &'static ClusterPair) -> Result<u16> {
    let consumer = pair.consumer.client().await?;
    install_core_crds(&consumer).await?;
    ensure_namespace(&consumer, SECRET_NAMESPACE).await?;
    let metrics = match KONNECTOR.get_or_init(|| start(pair).map_err(|e| format!("{e:#}"))) {
        Ok(k) => k.metrics,
        Err(e) => anyhow::bail!("starting the konnector: {e}"),
    };
    kbind_tests::eventually(WAIT, || async {
        let (code, _) = http_get(metrics, "/metrics").await?;
        anyhow::ensure!(code == 200, "metrics answered {code}");
        Ok(())
    })
    .await?;
    Ok(metrics)
}

fn start(pair: &ClusterPair) -> Result<SharedKonnector> {
    let binary = kbind_tests::konnector_binary!();
    let (metrics, health) = (free_port()?, free_port()?);
    let log_path = pair.root().join("cli-konnector.log");
    let log = std::fs::File::create(&log_path)?;
    let mut watchdog = Command::new("/bin/sh")
        .arg("-c")
        .arg(r#""$@" </dev/null & child=$!; cat >/dev/null; kill -9 "$child" 2>/dev/null"#)
        .arg("sh")
        .arg(&binary)
        .arg("run")
        .arg("--kubeconfig")
        .arg(pair.consumer.admin().kubeconfig_path())
        .args(["--connection-resync", "1s", "--binding-resync", "1s"])
        .args(["--metrics-bind-address", &format!("127.0.0.1:{metrics}")])
        .args([
            "--health-probe-bind-address",
            &format!("127.0.0.1:{health}"),
        ])
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .spawn()
        .context("starting konnector run")?;
    let mut pipe = watchdog.stdin.take().context("no watchdog pipe")?;
    pipe.flush()?;
    Ok(SharedKonnector {
        _watchdog: watchdog,
        _pipe: pipe,
        metrics,
    })
}

/// Runs `connect <name> --provider-kubeconfig <kubeconfig> <extra> --timeout` and fails unless
/// it exits 0.
pub async fn connect(
    pair: &ClusterPair,
    name: &str,
    kubeconfig: &Path,
    extra: &[&str],
) -> Result<Run> {
    let mut args = vec![
        "connect",
        name,
        "--provider-kubeconfig",
        path_str(kubeconfig)?,
    ];
    args.extend_from_slice(extra);
    args.extend(["--timeout", TIMEOUT]);
    kbind(pair, &args).await?.expect(0)
}

/// Runs `bind <api> --connection <connection> <extra> --timeout` and fails unless it exits 0.
pub async fn bind(pair: &ClusterPair, api: &str, connection: &str, extra: &[&str]) -> Result<Run> {
    let mut args = vec!["bind", api, "--connection", connection];
    args.extend_from_slice(extra);
    args.extend(["--timeout", TIMEOUT]);
    kbind(pair, &args).await?.expect(0)
}

/// Runs `disconnect <name> <extra> --timeout` and fails unless it exits 0.
pub async fn disconnect(pair: &ClusterPair, name: &str, extra: &[&str]) -> Result<Run> {
    let mut args = vec!["disconnect", name];
    args.extend_from_slice(extra);
    args.extend(["--timeout", TIMEOUT]);
    kbind(pair, &args).await?.expect(0)
}

/// The provider side of a least-privilege connection: `group`'s Widget CRD (with conditions)
/// installed and the ServiceAccount `konnector` minted in `namespace`. Returns the provider's
/// admin client and the ServiceAccount's identity.
pub async fn konnector_service_account(
    pair: &ClusterPair,
    group: &str,
    namespace: &str,
) -> Result<(kube::Client, kbind_tests::testenv::Identity)> {
    let provider = pair.provider.client().await?;
    install_crd(&provider, &crd_with_conditions(group, "Widget")?).await?;
    ensure_namespace(&provider, namespace).await?;
    let identity = pair
        .provider
        .mint_service_account(namespace, "konnector")
        .await?;
    Ok((provider, identity))
}

/// Runs `provider-rbac` for the ServiceAccount `konnector` in `namespace`, reading `api`'s
/// schema from its CRD, with `extra` flags and the objects named `name`; fails unless it exits
/// 0.
pub async fn service_account_rbac(
    pair: &ClusterPair,
    namespace: &str,
    api: &str,
    extra: &[&str],
    name: &str,
) -> Result<Run> {
    let mut args = vec![
        "provider-rbac",
        "--subject-kind",
        "ServiceAccount",
        "--subject",
        "konnector",
        "-n",
        namespace,
        "--api",
        api,
    ];
    args.extend_from_slice(extra);
    args.extend(["--schema-source", "CRD", "--name", name]);
    kbind(pair, &args).await?.expect(0)
}

/// The tail of the shared konnector's log, for failure messages.
pub fn konnector_log(pair: &ClusterPair) -> String {
    kbind_tests::testenv::tail(&pair.root().join("cli-konnector.log"), 60)
}

/// Runs a test body against the shared pair; a failure carries the konnector's log tail.
pub async fn diagnose<T>(
    pair: &'static ClusterPair,
    body: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    match pair.diagnose(body).await {
        Ok(t) => Ok(t),
        Err(e) => Err(anyhow::anyhow!(
            "{e:?}\n--- konnector log (tail)\n{}",
            konnector_log(pair)
        )),
    }
}

/// The shared pair, with the shared konnector running.
pub async fn setup() -> Result<&'static ClusterPair> {
    let pair = shared_pair()?;
    shared_konnector(pair).await?;
    Ok(pair)
}

/// Writes `text` to a file under the pair's directory and returns its path.
pub fn write_file(pair: &ClusterPair, name: &str, text: &str) -> Result<std::path::PathBuf> {
    let path = pair.root().join(name);
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// A path argument as `&str`.
pub fn path_str(path: &Path) -> Result<&str> {
    path.to_str().context("path is not UTF-8")
}

/// An exported namespaced CRD like the fixtures' `widget_crd`, whose status schema also keeps
/// `conditions`, so instances can carry kbind's `Synced` condition (`status` counts them as
/// synced or failing instead of pending).
pub fn crd_with_conditions(
    group: &str,
    kind: &str,
) -> Result<
    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
> {
    let crd = kbind_tests::fixtures::widget_crd(group, kind, true)?;
    let mut value = serde_json::to_value(&crd)?;
    value["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
        ["conditions"] = serde_json::json!({
        "type": "array",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
    });
    Ok(serde_json::from_value(value)?)
}
