//! Helper processes a test starts beside its clusters (an OCI registry, an HTTP proxy): spawned
//! under the same watchdog wrapper as the clusters' own processes, so they die with the test
//! binary however it ends, and killed when dropped. Their output goes to a log file that a
//! failing test can show.

use std::ffi::OsStr;
use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::testenv::{WATCHDOG, tail};

/// A running helper process.
pub struct Daemon {
    name: String,
    child: Child,
    /// The write end of the watchdog pipe; dropping it kills the process.
    watchdog: Option<ChildStdin>,
    log: PathBuf,
}

impl Daemon {
    /// Starts `program args...` with its output appended to `log`; `name` is for messages.
    pub fn spawn<S: AsRef<OsStr>>(
        name: &str,
        program: &Path,
        args: &[S],
        envs: &[(&str, &str)],
        log: &Path,
    ) -> Result<Self> {
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        let err = out.try_clone()?;
        let mut command = Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(WATCHDOG)
            .arg(format!("kbind-{name}"))
            .arg(program)
            .args(args)
            .envs(envs.iter().copied())
            .stdin(Stdio::piped())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {name} ({})", program.display()))?;
        let watchdog = child.stdin.take();
        Ok(Self {
            name: name.to_string(),
            child,
            watchdog,
            log: log.to_path_buf(),
        })
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Stops (`SIGSTOP`) or continues (`SIGCONT`) the process and its wrapper, as an
    /// operator that hangs or is descheduled, then comes back.
    pub fn signal(&self, signal: Signal) -> Result<()> {
        let group = Pid::from_raw(i32::try_from(self.child.id())?);
        killpg(group, signal).with_context(|| format!("sending {signal} to {}", self.name))
    }

    /// The log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the log, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        format!("--- {} log (tail)\n{}", self.name, tail(&self.log, lines))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // Closing the pipe makes the wrapper kill its child; the group kill is the backstop.
        drop(self.watchdog.take());
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            sleep(Duration::from_millis(10));
        }
        let group = Pid::from_raw(i32::try_from(self.child.id()).unwrap_or(i32::MAX));
        let _ = killpg(group, Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// The path a tool-building script (`scripts/<name>.sh`, which builds the tool once per
/// machine and prints its path) prints; the script's progress goes to the test's stderr.
pub fn built_by_script(script: &str) -> std::result::Result<PathBuf, String> {
    let output = Command::new("bash")
        .arg(script)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("running {script}: {e}"))?;
    if !output.status.success() {
        return Err(format!("{script} failed ({})", output.status));
    }
    Ok(PathBuf::from(
        String::from_utf8_lossy(&output.stdout).trim(),
    ))
}
