//! The real `konnector run` binary as a child process, for the tests and benchmarks that need
//! a process (SIGKILL, RSS and CPU time, a Deployment's exact command line, several sharded
//! replicas side by side): started against a consumer kubeconfig with loopback probe and
//! metrics ports of its own, or with a container's arguments and environment, killed on drop.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context as _;

use crate::fixtures::{free_port, http_get};
use crate::syncenv::wait_for;

/// A running `konnector run`.
pub struct KonnectorProcess {
    child: Child,
    /// Port of `/metrics`.
    pub metrics: u16,
    /// Port of `/healthz` and `/readyz`.
    pub health: u16,
}

impl KonnectorProcess {
    /// Starts `binary run --kubeconfig <kubeconfig>` with `extra` arguments, logging to `log`,
    /// with the chart's glibc allocator setting.
    pub fn start(
        binary: &Path,
        kubeconfig: &Path,
        log: &Path,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        let (metrics, health) = (free_port()?, free_port()?);
        let mut command = Command::new(binary);
        command
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--metrics-bind-address", &format!("127.0.0.1:{metrics}")])
            .args([
                "--health-probe-bind-address",
                &format!("127.0.0.1:{health}"),
            ])
            .args(extra)
            // As the chart's Deployment runs it (the bench measures the deployed allocator).
            .env("MALLOC_ARENA_MAX", "2");
        Self::spawn(command, log, metrics, health)
    }

    /// Starts one sharded replica: `--sharding` under `identity` (`--pod-name`), JSON logs to
    /// `log` (each replica its own file, so that its log lines can be told apart), its own
    /// metrics and probe ports, and `sharding` (the `--shard-*` timing flags) and `extra`
    /// after. Several run side by side against one consumer.
    pub fn replica(
        binary: &Path,
        kubeconfig: &Path,
        log: &Path,
        identity: &str,
        sharding: &[String],
    ) -> anyhow::Result<Self> {
        Self::replica_in("--sharding", binary, kubeconfig, log, identity, sharding)
    }

    /// Starts one replica in HA mode `mode` (`--sharding` or `--leader-elect`) with its
    /// timing flags `timings`, under `identity`, JSON logs to `log`.
    pub fn replica_in(
        mode: &str,
        binary: &Path,
        kubeconfig: &Path,
        log: &Path,
        identity: &str,
        timings: &[String],
    ) -> anyhow::Result<Self> {
        let mut args = vec![mode, "--pod-name", identity, "--log-format", "json"];
        args.extend(timings.iter().map(String::as_str));
        Self::start(binary, kubeconfig, log, &args)
    }

    /// Stops the process where it is (SIGSTOP), as a stalled VM or a throttled container.
    pub fn pause(&self) -> anyhow::Result<()> {
        self.signal(nix::sys::signal::Signal::SIGSTOP)
    }

    /// Lets a paused process run again (SIGCONT).
    pub fn resume(&self) -> anyhow::Result<()> {
        self.signal(nix::sys::signal::Signal::SIGCONT)
    }

    fn signal(&self, signal: nix::sys::signal::Signal) -> anyhow::Result<()> {
        let pid = i32::try_from(self.child.id()).context("a pid out of range")?;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal)
            .with_context(|| format!("sending {signal}"))
    }

    /// Starts `binary` as a container would run it: exactly `args`, with `env` added to the
    /// environment (`KUBECONFIG` among them standing in for the in-cluster credentials), logging
    /// to `log`. `metrics` and `health` are the ports those arguments listen on.
    pub fn exec(
        binary: &Path,
        args: &[String],
        env: &[(String, String)],
        log: &Path,
        (metrics, health): (u16, u16),
    ) -> anyhow::Result<Self> {
        let mut command = Command::new(binary);
        command.args(args).envs(env.iter().map(|(k, v)| (k, v)));
        Self::spawn(command, log, metrics, health)
    }

    fn spawn(mut command: Command, log: &Path, metrics: u16, health: u16) -> anyhow::Result<Self> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        let child = command
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .context("starting konnector run")?;
        Ok(Self {
            child,
            metrics,
            health,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until `/readyz` answers 200.
    pub async fn wait_ready(&self, timeout: Duration) -> anyhow::Result<()> {
        wait_for("konnector /readyz", timeout, || async {
            Ok(matches!(http_get(self.health, "/readyz").await, Ok((200, _))).then_some(()))
        })
        .await
    }

    /// Whether the process has exited, and how.
    pub fn exited(&mut self) -> anyhow::Result<Option<std::process::ExitStatus>> {
        Ok(self.child.try_wait()?)
    }

    /// The konnector's `/metrics` exposition.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        let (status, body) = http_get(self.metrics, "/metrics").await?;
        anyhow::ensure!(status == 200, "/metrics answered {status}");
        Ok(body)
    }

    /// Waits up to 30 s until the process's metrics contain `sample` (a whole exposition line
    /// or part of one); the error shows the last metrics read.
    pub async fn wait_for_metric(&self, sample: &str) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let metrics = self.metrics().await?;
            if metrics.contains(sample) {
                return Ok(());
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "no {sample} within 30s in:\n{metrics}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Kills the process with SIGKILL (no graceful shutdown) and reaps it.
    pub fn kill_hard(&mut self) -> anyhow::Result<()> {
        // `Child::kill` sends SIGKILL on Unix.
        self.child.kill().context("sending SIGKILL")?;
        let status = self.child.wait()?;
        anyhow::ensure!(!status.success(), "the konnector exited cleanly: {status}");
        Ok(())
    }

    /// Stops the process as Kubernetes stops a Pod: SIGTERM, then SIGKILL if it has not exited
    /// within `grace`. Returns whether it exited on its own.
    pub async fn terminate(&mut self, grace: Duration) -> anyhow::Result<bool> {
        if self.child.try_wait()?.is_some() {
            return Ok(true);
        }
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.pid())?);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)
            .context("sending SIGTERM")?;
        let began = std::time::Instant::now();
        while began.elapsed() < grace {
            if self.child.try_wait()?.is_some() {
                return Ok(true);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.child.kill().context("sending SIGKILL")?;
        self.child.wait()?;
        Ok(false)
    }

    /// Resident set size in bytes (`VmRSS` of `/proc/<pid>/status`).
    pub fn rss_bytes(&self) -> anyhow::Result<u64> {
        rss_bytes_of(self.pid())
    }

    /// CPU seconds used so far, user + system (`/proc/<pid>/stat` fields 14 and 15).
    pub fn cpu_seconds(&self) -> anyhow::Result<f64> {
        cpu_seconds_of(self.pid())
    }
}

/// CPU seconds process `pid` used so far, user + system (`/proc/<pid>/stat` fields 14 and
/// 15): one reading for the konnector and for the bench's floor client, so that their CPU per
/// object compares.
pub fn cpu_seconds_of(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may contain spaces; fields after it are plain.
    let after = stat.rsplit_once(')').context("malformed stat")?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `after` starts at field 3 (state), so utime (14) and stime (15) are at 11 and 12.
    let utime: f64 = fields.get(11).context("no utime")?.parse()?;
    let stime: f64 = fields.get(12).context("no stime")?.parse()?;
    Ok((utime + stime) / clock_ticks())
}

/// Clock ticks per second for `/proc` CPU times (`getconf CLK_TCK`, 100 on Linux).
fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

impl Drop for KonnectorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `binary policy <args>` (the policy author's commands); its stdout, or an error with
/// its stderr.
pub fn konnector_policy(binary: &Path, args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new(binary).arg("policy").args(args).output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(output.status.success(), "policy {args:?} failed: {stderr}");
    Ok(String::from_utf8(output.stdout)?)
}

/// Resident set size in bytes of process `pid` (`VmRSS` of `/proc/<pid>/status`).
pub fn rss_bytes_of(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .context("no VmRSS")?
        .parse()?;
    Ok(kib * 1024)
}

/// Fails unless the log file `log` contains `expected`, showing the log.
pub fn log_says(log: &Path, expected: &str) -> anyhow::Result<()> {
    let said = std::fs::read_to_string(log)?;
    anyhow::ensure!(
        said.contains(expected),
        "the log does not say {expected:?}:\n{said}"
    );
    Ok(())
}

/// The `kbind_policy_module_info` sample saying that the process-wide `role` module runs
/// `reference` at `digest`: what a test waits for to know which module is running.
pub fn process_module_info(role: &str, reference: &str, digest: &str) -> String {
    format!(
        "kbind_policy_module_info{{role=\"{role}\",reference=\"{reference}\",digest=\"{digest}\",connection=\"\"}} 1"
    )
}

/// The references file (`work/refs.yaml`) through which a test moves a konnector's
/// process-wide conflict module from one tag of a registry repository to another.
pub struct ConflictRefs {
    path: std::path::PathBuf,
    repository: String,
}

impl ConflictRefs {
    /// The file in `work` for tags of `repository` (`host:port/path`).
    pub fn new(work: &Path, repository: &str) -> Self {
        Self {
            path: work.join("refs.yaml"),
            repository: repository.to_string(),
        }
    }

    /// Points the conflict module at `oci://<repository>:<tag>`.
    pub fn point_at(&self, tag: &str) -> std::io::Result<()> {
        std::fs::write(
            &self.path,
            format!("conflict: oci://{}:{tag}\n", self.repository),
        )
    }

    /// The file, for `--policy-refs-file`.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A ready `binary run` whose process-wide modules come from the references file `refs`,
/// pulled over plain HTTP from `registry` (`host:port`) and cached in `work/cache`, with
/// `extra` flags (verification, for one); it logs to `work/konnector.log`, returned beside it.
pub async fn start_with_policy_refs(
    binary: &Path,
    kubeconfig: &Path,
    work: &Path,
    refs: &Path,
    registry: &str,
    extra: &[String],
) -> anyhow::Result<(KonnectorProcess, std::path::PathBuf)> {
    let mut flags = vec![
        format!("--policy-refs-file={}", refs.display()),
        format!("--policy-plain-http-registry={registry}"),
        format!("--policy-cache-dir={}", work.join("cache").display()),
    ];
    flags.extend_from_slice(extra);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let log = work.join("konnector.log");
    let process = KonnectorProcess::start(binary, kubeconfig, &log, &flags)?;
    process.wait_ready(Duration::from_secs(60)).await?;
    Ok((process, log))
}
