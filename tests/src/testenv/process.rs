//! The child processes of a cluster (etcd, kube-apiserver, kube-controller-manager): spawned
//! with their output appended to a log file, stopped gracefully or killed, and, for tests,
//! tied to the lifetime of this process.
//!
//! Why a watchdog: the shared cluster pair lives in a `static` and is never dropped, and a test
//! binary that is killed runs no destructors at all, so `Drop` alone cannot promise that no
//! apiserver outlives a test run. Each supervised child is therefore started through a tiny
//! `/bin/sh` wrapper whose stdin is a pipe from this process. However this process ends, the
//! kernel closes the pipe, the wrapper reads end-of-file and kills the child. The wrapper also
//! forwards SIGTERM (a graceful stop) and reaps the child, so no zombie is left to a PID 1 that
//! does not reap orphans.
//!
//! ```text
//! test binary ──stdin pipe──▶ sh wrapper ──fork──▶ kube <role> ...
//!     │  (EOF when the test binary exits)  └─ watcher: read until EOF, then SIGKILL the child
//!     └─ SIGTERM to the wrapper: forwarded to the child, wrapper exits when the child has
//! ```
//!
//! Every wrapper (or detached child) leads its own process group, so a SIGKILL to the group is
//! the last resort when a graceful stop takes too long, and a Ctrl-C in a terminal reaches the
//! test binary only.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use super::{Error, Result, fsutil};

/// One role of the kube binary, i.e. one process of a cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Component {
    /// etcd, the cluster's storage.
    Etcd,
    /// kube-apiserver.
    ApiServer,
    /// kube-controller-manager, running only the namespace and garbage-collector controllers.
    ControllerManager,
}

impl Component {
    /// Every component, in start order.
    pub const ALL: [Self; 3] = [Self::Etcd, Self::ApiServer, Self::ControllerManager];

    /// The first argument of the kube binary that selects this component.
    pub const fn role(self) -> &'static str {
        match self {
            Self::Etcd => "etcd",
            Self::ApiServer => "kube-apiserver",
            Self::ControllerManager => "kube-controller-manager",
        }
    }

    fn from_role(role: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.role() == role)
    }
}

impl fmt::Display for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.role())
    }
}

/// How a cluster's processes are tied to the process that started them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Supervision {
    /// They die with this process (watchdog pipe) and when their cluster is dropped: tests.
    Watchdog,
    /// They outlive this process and are stopped through the pid file: the `testenv` CLI.
    Detached,
}

/// `$0` is a label, `$@` the command. fd 3 keeps the watchdog pipe for the watcher only; the
/// TERM trap is a handler (not an ignore), so the child starts with default signal actions.
pub(crate) const WATCHDOG: &str = r#"
trap 'kill -TERM "$child" 2>/dev/null' TERM
exec 3<&0 </dev/null
"$@" 3<&- &
child=$!
( while read -r _ <&3; do :; done; kill -KILL "$child" 2>/dev/null ) &
watcher=$!
exec 3<&-
while :; do
  wait "$child"; status=$?
  kill -0 "$child" 2>/dev/null || break
done
kill "$watcher" 2>/dev/null
exit "$status"
"#;

/// A running (or exited) component.
pub(crate) struct Process {
    component: Component,
    child: Child,
    /// The write end of the watchdog pipe; dropping it kills the child.
    watchdog: Option<ChildStdin>,
    supervision: Supervision,
    exited: Option<ExitStatus>,
}

impl Process {
    /// Starts `binary <role> args...`, appending its output to `log`.
    pub(crate) fn spawn(
        binary: &Path,
        component: Component,
        args: &[String],
        log: &Path,
        supervision: Supervision,
    ) -> io::Result<Self> {
        let mut out = OpenOptions::new().create(true).append(true).open(log)?;
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        writeln!(
            out,
            "==== kbind testenv: starting {component} at unix time {}.{:03} ====",
            since_epoch.as_secs(),
            since_epoch.subsec_millis()
        )?;
        let err = out.try_clone()?;
        let mut command = match supervision {
            Supervision::Watchdog => {
                let mut c = Command::new("/bin/sh");
                c.arg("-c")
                    .arg(WATCHDOG)
                    .arg("kbind-watchdog")
                    .arg(binary)
                    .stdin(Stdio::piped());
                c
            }
            Supervision::Detached => {
                let mut c = Command::new(binary);
                c.stdin(Stdio::null());
                c
            }
        };
        command
            .arg(component.role())
            .args(args)
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let mut child = command.spawn()?;
        let watchdog = child.stdin.take();
        Ok(Self {
            component,
            child,
            watchdog,
            supervision,
            exited: None,
        })
    }

    /// The component this process runs.
    pub(crate) fn component(&self) -> Component {
        self.component
    }

    /// The pid of the wrapper (supervised) or of the component itself (detached); either way
    /// the id of its process group.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status, if the process has exited.
    pub(crate) fn exit_status(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }

    /// Asks the component to shut down (SIGTERM) and waits up to `grace`, then kills it.
    pub(crate) fn stop(&mut self, grace: Duration) {
        if self.exit_status().is_some() {
            return;
        }
        // Supervised: the wrapper forwards SIGTERM and exits once the child has.
        let _ = kill(pid(self.pid()), Signal::SIGTERM);
        if !self.wait_for(grace) {
            self.kill();
        }
    }

    /// Kills the component at once.
    pub(crate) fn kill(&mut self) {
        if self.exit_status().is_some() {
            return;
        }
        if self.watchdog.take().is_some() && self.wait_for(Duration::from_secs(2)) {
            return;
        }
        let _ = killpg(pid(self.pid()), Signal::SIGKILL);
        self.exited = self.child.wait().ok();
    }

    fn wait_for(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.exit_status().is_some() {
                return true;
            }
            sleep(Duration::from_millis(10));
        }
        self.exit_status().is_some()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.supervision == Supervision::Watchdog {
            self.kill();
        }
    }
}

fn pid(id: u32) -> Pid {
    Pid::from_raw(i32::try_from(id).unwrap_or(i32::MAX))
}

/// Records the pids of `processes` in `path` (`<role> <pid>` lines, in start order), so
/// [`stop_recorded`] can stop them from another process.
pub(crate) fn record(path: &Path, processes: &[Process]) -> Result<()> {
    let lines: String = processes
        .iter()
        .map(|p| format!("{} {}\n", p.component().role(), p.pid()))
        .collect();
    fsutil::write(path, &lines)
}

/// Stops the processes recorded in `path` (newest first): SIGTERM, then SIGKILL to the process
/// group after `grace`. A pid that no longer runs that component (exited, or reused by an
/// unrelated process) is skipped. Returns how many processes were signalled; removes the file.
pub(crate) fn stop_recorded(path: &Path, grace: Duration) -> Result<usize> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(source) => {
            return Err(Error::ReadFile {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let mut stopped = 0;
    for (component, target) in parse_records(&text).rev() {
        if !runs(target, component) {
            continue;
        }
        kill(target, Signal::SIGTERM).map_err(|source| Error::Signal {
            pid: target.as_raw(),
            source,
        })?;
        stopped += 1;
        let deadline = Instant::now() + grace;
        while alive(target) && Instant::now() < deadline {
            sleep(Duration::from_millis(20));
        }
        if alive(target) {
            let _ = killpg(target, Signal::SIGKILL);
        }
    }
    let _ = fs::remove_file(path);
    Ok(stopped)
}

/// How many processes recorded in `path` still run their component.
pub(crate) fn recorded_running(path: &Path) -> usize {
    fs::read_to_string(path)
        .map(|text| {
            parse_records(&text)
                .filter(|(c, pid)| runs(*pid, *c))
                .count()
        })
        .unwrap_or(0)
}

fn parse_records(text: &str) -> impl DoubleEndedIterator<Item = (Component, Pid)> + '_ {
    text.lines().filter_map(|line| {
        let (role, id) = line.split_once(' ')?;
        Some((
            Component::from_role(role)?,
            Pid::from_raw(id.trim().parse().ok()?),
        ))
    })
}

/// Whether `pid` is a live process whose command line selects `component`.
fn runs(pid: Pid, component: Component) -> bool {
    alive(pid)
        && fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
            cmdline
                .split(|b| *b == 0)
                .any(|a| a == component.role().as_bytes())
        })
}

/// Whether `pid` exists and is not a zombie (an orphan nobody reaped counts as gone).
fn alive(pid: Pid) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| !matches!(state, 'Z' | 'X'))
    })
}
