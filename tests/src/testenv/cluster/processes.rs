//! A cluster's processes: starting etcd, kube-apiserver and kube-controller-manager in order
//! and waiting until each is ready, stopping them gracefully or killing them, and the failure
//! report built from their logs.

use std::path::PathBuf;
use std::sync::{MutexGuard, PoisonError};
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::Cluster;
use crate::testenv::probe::{etcd_health, readyz};
use crate::testenv::process::{self, Component, Process, Supervision};
use crate::testenv::{Error, Result, flags, fsutil};

/// How long a component may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a graceful stop may take before the process is killed.
const STOP_GRACE: Duration = Duration::from_secs(15);

impl Cluster {
    /// Starts etcd, then kube-apiserver, then kube-controller-manager, and returns when the
    /// apiserver answers `/readyz` (the controller manager is not waited for). On failure every
    /// process started here is killed and the error carries the failing process's log tail.
    pub fn start(&self) -> Result<()> {
        let mut processes = self.lock();
        if processes.iter_mut().any(|p| p.exit_status().is_none()) {
            return Err(Error::AlreadyRunning {
                cluster: self.name.clone(),
            });
        }
        processes.clear();
        let began = Instant::now();
        // A private runtime for the readiness probe must not run on a runtime's thread, and the
        // caller may be one (an async test), hence the scoped thread.
        let list: &mut Vec<Process> = &mut processes;
        let result = std::thread::scope(|scope| {
            scope
                .spawn(move || self.start_components(list))
                .join()
                .unwrap_or_else(|_| Err(Error::StartPanicked(self.name.clone())))
        });
        match result {
            Ok(()) => {
                *self.startup.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some(began.elapsed());
                process::record(&self.pid_file(), &processes)
            }
            Err(e) => {
                while let Some(mut p) = processes.pop() {
                    p.kill();
                }
                Err(e)
            }
        }
    }

    /// Stops the cluster gracefully (controller manager, apiserver, then etcd), keeping its
    /// data, ports and credentials for [`Cluster::start`]. Clients see connection errors until
    /// then. Do not stop the shared pair's clusters.
    pub fn stop(&self) {
        let mut processes = self.lock();
        while let Some(mut p) = processes.pop() {
            p.stop(STOP_GRACE);
        }
        let _ = std::fs::remove_file(self.pid_file());
    }

    /// Whether every process of the cluster is running.
    pub fn is_running(&self) -> bool {
        let mut processes = self.lock();
        processes.len() == Component::ALL.len()
            && processes.iter_mut().all(|p| p.exit_status().is_none())
    }

    /// How long the last successful [`Cluster::start`] took.
    pub fn startup_time(&self) -> Option<Duration> {
        *self.startup.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The log file of one component.
    pub fn log_path(&self, component: Component) -> PathBuf {
        self.dir.join(format!("logs/{}.log", component.role()))
    }

    /// The last `lines` lines of one component's log.
    pub fn log_tail(&self, component: Component, lines: usize) -> String {
        fsutil::tail(&self.log_path(component), lines)
    }

    /// A failure report: each process's state, and the tail of the apiserver log (and of any
    /// process that exited).
    pub fn report(&self, lines: usize) -> String {
        let mut out = format!("--- cluster {} ({}) ---\n", self.name, self.server());
        let mut tails = vec![Component::ApiServer];
        {
            let mut processes = self.lock();
            if processes.is_empty() {
                out.push_str("not running\n");
            }
            for p in processes.iter_mut() {
                match p.exit_status() {
                    None => out.push_str(&format!("{}: running\n", p.component())),
                    Some(status) => {
                        out.push_str(&format!("{}: exited ({status})\n", p.component()));
                        if !tails.contains(&p.component()) {
                            tails.push(p.component());
                        }
                    }
                }
            }
        }
        for component in tails {
            out.push_str(&format!(
                "--- last {lines} lines of {} ---\n{}\n",
                self.log_path(component).display(),
                self.log_tail(component, lines)
            ));
        }
        out
    }

    /// Kills every process at once (no graceful shutdown), newest first.
    pub(crate) fn kill(&self) {
        let mut processes = self.lock();
        while let Some(mut p) = processes.pop() {
            p.kill();
        }
    }

    pub(crate) fn pid_file(&self) -> PathBuf {
        self.dir.join("pids")
    }

    fn start_components(&self, processes: &mut Vec<Process>) -> Result<()> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(Error::Runtime)?;
        processes.push(self.spawn(Component::Etcd)?);
        let etcd_port = self.state.etcd_client_port;
        self.wait_ready(processes, Component::Etcd, || etcd_health(etcd_port))?;
        processes.push(self.spawn(Component::ApiServer)?);
        let client = runtime.block_on(self.admin.client())?;
        self.wait_ready(processes, Component::ApiServer, || {
            runtime.block_on(readyz(&client))
        })?;
        drop(client);
        processes.push(self.spawn(Component::ControllerManager)?);
        Ok(())
    }

    fn spawn(&self, component: Component) -> Result<Process> {
        let args = match component {
            Component::Etcd => flags::etcd(&self.name, &self.dir, &self.state),
            Component::ApiServer => {
                flags::apiserver(&self.dir, &self.pki, &self.state, self.options)
            }
            Component::ControllerManager => {
                flags::controller_manager(self.controller_manager.kubeconfig_path())
            }
        };
        Process::spawn(
            &self.binary,
            component,
            &args,
            &self.log_path(component),
            self.supervision,
        )
        .map_err(|source| Error::Spawn {
            cluster: self.name.clone(),
            component,
            source,
        })
    }

    /// Polls `probe` until it succeeds, failing early when any process has exited.
    fn wait_ready(
        &self,
        processes: &mut [Process],
        component: Component,
        mut probe: impl FnMut() -> Result<(), String>,
    ) -> Result<()> {
        let began = Instant::now();
        loop {
            for p in processes.iter_mut() {
                if let Some(status) = p.exit_status() {
                    return Err(Error::ExitedDuringStartup {
                        cluster: self.name.clone(),
                        component: p.component(),
                        status,
                        log_tail: self.log_tail(p.component(), 40),
                    });
                }
            }
            let last_error = match probe() {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if began.elapsed() > READY_TIMEOUT {
                return Err(Error::NotReady {
                    cluster: self.name.clone(),
                    component,
                    waited: began.elapsed(),
                    last_error,
                    log_tail: self.log_tail(component, 40),
                });
            }
            sleep(Duration::from_millis(50));
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Process>> {
        self.processes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.supervision == Supervision::Watchdog {
            self.kill();
        }
    }
}
