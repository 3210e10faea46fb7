//! `kubectl kbind` end to end: the CLI binary against the real cluster pair, with the real
//! `konnector run` process (one per test binary, since controllers watch cluster-wide), plus
//! the printer columns and short names the core CRDs give `kubectl get`.

mod columns;
mod confirm;
mod exit_codes;
mod least_privilege;
mod lifecycle;

use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context as _, Result};
use kbind_tests::fixtures::{SECRET_NAMESPACE, ensure_namespace, free_port, http_get};
use kbind_tests::syncenv::{TestApi, appears};
use kbind_tests::testenv::{Cluster, ClusterPair, Identity, kube_binary, shared_pair};
use kube::api::DynamicObject;
use kube::{Api, Client};
use serde_json::Value;

/// How long the CLI may wait for the konnector in these tests.
pub const TIMEOUT: &str = "90s";
/// How long tests wait for effects they check themselves.
pub const WAIT: Duration = Duration::from_secs(90);

/// What one CLI run gave: its exit code and both streams.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Fails unless the exit code is `code` and the output (stdout on success, stderr
    /// otherwise, where the reason and what to do go) holds every fragment of `says`.
    pub fn expect(self, code: i32, says: &[&str]) -> Result<Self> {
        let output = if code == 0 {
            &self.stdout
        } else {
            &self.stderr
        };
        let missing: Vec<_> = says.iter().filter(|s| !output.contains(*s)).collect();
        anyhow::ensure!(
            self.code == code && missing.is_empty(),
            "expected exit code {code} saying {missing:?}, got {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code,
            self.stdout,
            self.stderr
        );
        Ok(self)
    }
}

/// The `konnector run` process shared by this binary's tests and its metrics port: started
/// once, killed when the test binary exits however it exits (a `sh` watchdog reads a pipe from
/// this process and kills the konnector at end-of-file, since a `static` is never dropped).
static KONNECTOR: OnceLock<Result<(Child, u16), String>> = OnceLock::new();

/// Starts (once) the shared konnector against the pair's consumer and returns its metrics
/// port once it answers.
async fn shared_konnector(pair: &'static ClusterPair, consumer: &Client) -> Result<u16> {
    kbind_tests::fixtures::install_core_crds(consumer).await?;
    ensure_namespace(consumer, SECRET_NAMESPACE).await?;
    let metrics = match KONNECTOR.get_or_init(|| start(pair).map_err(|e| format!("{e:#}"))) {
        Ok((_, metrics)) => *metrics,
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

fn start(pair: &ClusterPair) -> Result<(Child, u16)> {
    let (metrics, health) = (free_port()?, free_port()?);
    let address = |port| format!("127.0.0.1:{port}");
    let log = std::fs::File::create(pair.root().join("cli-konnector.log"))?;
    let script = r#""$@" </dev/null & child=$!; cat >/dev/null; kill -9 "$child" 2>/dev/null"#;
    let watchdog = Command::new("/bin/sh")
        .args(["-c", script, "sh"])
        .arg(kbind_tests::konnector_binary!())
        .args(["run", "--kubeconfig"])
        .arg(pair.consumer.admin().kubeconfig_path())
        .args(["--connection-resync", "1s", "--binding-resync", "1s"])
        .args(["--metrics-bind-address", &address(metrics)])
        .args(["--health-probe-bind-address", &address(health)])
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .spawn()
        .context("starting konnector run")?;
    Ok((watchdog, metrics))
}

/// One CLI test's frame, so that a test body holds only the commands and effects it checks:
/// the shared pair with the shared konnector running, both admin clients, and the test's API
/// `widgets.<name>.e2e.kbind.io` exported on the provider, its instances on the consumer and
/// their copies on the provider in namespace `name`. `name` also names the test's Connection;
/// `metrics` is the konnector's metrics port.
pub struct Cli {
    pub pair: &'static ClusterPair,
    pub metrics: u16,
    pub provider: Client,
    pub consumer: Client,
    pub api: TestApi,
    pub instances: Api<DynamicObject>,
    pub copies: Api<DynamicObject>,
    pub name: String,
}

impl Cli {
    /// Runs a test body in the frame for `name`, on a runtime of its own; a failure carries
    /// both clusters' report and the konnector's log tail.
    pub fn run(name: &str, body: impl AsyncFnOnce(&Cli) -> Result<()>) -> Result<()> {
        kbind_tests::runtime()?.block_on(async {
            let pair = shared_pair()?;
            let (provider, consumer) =
                (pair.provider.client().await?, pair.consumer.client().await?);
            let api = TestApi::namespaced(&format!("{name}.e2e.kbind.io"));
            let cli = Cli {
                pair,
                metrics: shared_konnector(pair, &consumer).await?,
                instances: api.api(&consumer, Some(name)),
                copies: api.api(&provider, Some(name)),
                provider,
                consumer,
                api,
                name: name.to_string(),
            };
            cli.api.install_on_provider(&cli.provider).await?;
            pair.diagnose(body(&cli)).await.map_err(|e| {
                let tail = kbind_tests::testenv::tail(&pair.root().join("cli-konnector.log"), 60);
                anyhow::anyhow!("{e:?}\n--- konnector log (tail)\n{tail}")
            })
        })
    }

    /// Runs `kubectl-kbind --kubeconfig <consumer admin> <args>` to completion.
    pub async fn kbind(&self, args: &[&str]) -> Result<Run> {
        let kbind = Command::new(kbind_tests::kubectl_kbind_binary!());
        run(kbind, &self.pair.consumer, args).await
    }

    /// Runs `kubectl-kbind <args> --timeout` (a command that waits for the konnector) and
    /// fails unless it exits 0 saying `says`.
    pub async fn ok(&self, args: &[&str], says: &[&str]) -> Result<Run> {
        let args = [args, &["--timeout", TIMEOUT]].concat();
        self.kbind(&args).await?.expect(0, says)
    }

    /// Connects the test's Connection to the provider as `identity`, waiting for Ready.
    pub async fn connect(&self, identity: &Identity, extra: &[&str]) -> Result<Run> {
        let kubeconfig = identity.kubeconfig_path().to_str().context("not UTF-8")?;
        let args = ["connect", &self.name, "--provider-kubeconfig", kubeconfig];
        self.ok(&[&args, extra].concat(), &[]).await
    }

    /// Binds the test's API through its Connection (`extra`: where and how), waiting for Ready.
    pub async fn bind(&self, extra: &[&str]) -> Result<Run> {
        let api = self.api.name();
        let args = ["bind", &api, "--connection", &self.name];
        self.ok(&[&args, extra].concat(), &[]).await
    }

    /// Creates instance `name` of the test's API in its namespace and waits for the provider
    /// copy.
    pub async fn create_synced(&self, name: &str, spec: Value) -> Result<DynamicObject> {
        let instance = self
            .api
            .create(&self.consumer, Some(&self.name), name, spec);
        instance.await?;
        appears(&self.copies, name).await
    }

    /// The provider side of a least-privilege connection: the ServiceAccount `konnector` in
    /// `<name>-system` and the documents `provider-rbac` prints for it (`extra`: more flags),
    /// not yet applied.
    pub async fn konnector_identity(&self, extra: &[&str]) -> Result<(Identity, Vec<Value>)> {
        let namespace = format!("{}-system", self.name);
        ensure_namespace(&self.provider, &namespace).await?;
        let provider = &self.pair.provider;
        let minted = provider.mint_service_account(&namespace, "konnector");
        let identity = minted.await?;
        let (api, name) = (self.api.name(), self.name.as_str());
        let rbac = format!(
            "provider-rbac --subject-kind ServiceAccount --subject konnector -n {namespace} \
             --api {api} --schema-source CRD --name kbind-{name}"
        );
        let mut args: Vec<_> = rbac.split_whitespace().collect();
        args.extend(extra);
        let rbac = self.kbind(&args).await?.expect(0, &[])?;
        let documents: Vec<Value> = serde_saphyr::from_multiple(&rbac.stdout)?;
        let documents = documents.into_iter().filter(|doc| !doc.is_null());
        Ok((identity, documents.collect()))
    }

    /// Applies RBAC documents on the provider as `kubectl apply -f` does.
    pub async fn apply_on_provider(&self, documents: &[Value]) -> Result<()> {
        let path = self.pair.root().join(format!("{}-rbac.yaml", self.name));
        let stream: String = documents.iter().map(|d| format!("---\n{d}\n")).collect();
        std::fs::write(&path, stream)?;
        let path = path.to_str().context("not UTF-8")?;
        let apply = ["apply", "--server-side", "--force-conflicts", "-f", path];
        kubectl(&self.pair.provider, &apply).await?;
        Ok(())
    }
}

/// Runs the test environment's `kubectl` as `cluster`'s admin; fails unless it exits 0, and
/// returns its standard output.
pub async fn kubectl(cluster: &Cluster, args: &[&str]) -> Result<String> {
    let mut kubectl = Command::new(kube_binary()?);
    kubectl.arg("kubectl");
    Ok(run(kubectl, cluster, args).await?.expect(0, &[])?.stdout)
}

/// Runs `command --kubeconfig <cluster's admin> <args>` to completion.
async fn run(mut command: Command, cluster: &Cluster, args: &[&str]) -> Result<Run> {
    let kubeconfig = cluster.admin().kubeconfig_path();
    command.arg("--kubeconfig").arg(kubeconfig).args(args);
    command.env_remove("KUBECONFIG");
    let output = tokio::task::spawn_blocking(move || command.output())
        .await?
        .context("running a command")?;
    Ok(Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}
