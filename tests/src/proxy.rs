//! A real HTTP proxy for tests: tinyproxy (installed from the distribution's package by
//! `scripts/tinyproxy.sh`), on a free loopback port, logging every connection and request line
//! (so a test can show the CONNECTs it tunnelled).
//!
//! Names only the proxy resolves: tinyproxy resolves a CONNECT's host with the system
//! resolver, so it runs in a mount namespace of its own (`unshare --mount`, or with
//! `--user --map-root-user` for a user without CAP_SYS_ADMIN) where `/etc/hosts` is a file of
//! the test's, bind-mounted over the real one. The test process, the konnector and everything
//! else keep the machine's `/etc/hosts` and cannot resolve those names: a client reaches them
//! through the proxy or not at all, as a provider behind a corporate egress proxy.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};

use crate::daemon::Daemon;
use crate::fixtures::free_port;
use crate::testenv::tail;

/// A running tinyproxy.
pub struct Tinyproxy {
    daemon: Daemon,
    port: u16,
    log: PathBuf,
}

/// tinyproxy's binary, installed when missing by `scripts/tinyproxy.sh`.
fn tinyproxy_binary() -> Result<PathBuf> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/tinyproxy.sh");
    let output = Command::new("bash")
        .arg(script)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {script}"))?;
    if !output.status.success() {
        bail!("{script} failed ({})", output.status);
    }
    Ok(PathBuf::from(
        String::from_utf8_lossy(&output.stdout).trim(),
    ))
}

/// `unshare` arguments for a private mount namespace: as root, a plain one; otherwise a user
/// namespace mapping this user to root, where the bind mount is allowed.
fn unshare_args() -> &'static [&'static str] {
    if nix::unistd::geteuid().is_root() {
        &["--mount"]
    } else {
        &["--user", "--map-root-user", "--mount"]
    }
}

impl Tinyproxy {
    /// Starts tinyproxy in `dir` (created), accepting clients from 127.0.0.1 only, where
    /// `hosts` (name, address) resolve for the proxy alone. Returns once it accepts
    /// connections.
    pub fn start(dir: &Path, hosts: &[(&str, IpAddr)]) -> Result<Self> {
        let binary = tinyproxy_binary()?;
        std::fs::create_dir_all(dir)?;
        let hosts_file = dir.join("hosts");
        let mut lines = String::from("127.0.0.1 localhost\n");
        for (name, address) in hosts {
            lines.push_str(&format!("{address} {name}\n"));
        }
        std::fs::write(&hosts_file, lines)?;
        let log = dir.join("tinyproxy.log");
        let mut last = anyhow!("not started");
        for _ in 0..3 {
            let port = free_port()?;
            let config = dir.join("tinyproxy.conf");
            std::fs::write(&config, config_text(port, &log))?;
            let script = format!(
                "mount --bind '{}' /etc/hosts && exec '{}' -d -c '{}'",
                hosts_file.display(),
                binary.display(),
                config.display()
            );
            let mut args: Vec<&str> = unshare_args().to_vec();
            args.extend(["/bin/sh", "-c", &script]);
            let out = dir.join("tinyproxy.out");
            let daemon = Daemon::spawn("tinyproxy", Path::new("unshare"), &args, &[], &out)?;
            let mut proxy = Self {
                daemon,
                port,
                log: log.clone(),
            };
            match proxy.wait_listening() {
                Ok(()) => return Ok(proxy),
                Err(e) => last = e.context(proxy.daemon.log_tail(20)),
            }
        }
        Err(last)
    }

    fn wait_listening(&mut self) -> Result<()> {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if !self.daemon.is_running() {
                bail!("tinyproxy exited");
            }
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                bail!(
                    "tinyproxy does not accept connections on port {}",
                    self.port
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The proxy's URL, for a kubeconfig's `proxy-url`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// tinyproxy's own log: a `Request (file descriptor N): CONNECT host:port HTTP/1.1` line
    /// per tunnel it was asked for.
    pub fn log_text(&self) -> Result<String> {
        std::fs::read_to_string(&self.log)
            .with_context(|| format!("reading {}", self.log.display()))
    }

    /// The last lines of the proxy's log, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        format!("--- tinyproxy log (tail)\n{}", tail(&self.log, lines))
    }
}

/// Loopback clients only; `Connect` log level records each connection and its request line.
fn config_text(port: u16, log: &Path) -> String {
    format!(
        "Port {port}\nListen 127.0.0.1\nTimeout 600\nLogFile \"{}\"\nLogLevel Connect\n\
         MaxClients 100\nAllow 127.0.0.1\nDisableViaHeader Yes\n",
        log.display()
    )
}
