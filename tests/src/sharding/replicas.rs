//! Sharded `konnector run` replicas side by side against one consumer, each a real process
//! with its own identity, ports and JSON log: started, killed with SIGKILL (its kill time kept,
//! where its log intervals end), stopped as a Pod is, and read back (log events, metrics).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::jiff::Timestamp;

use super::logs::{self, Interval, Kind, Logged};
use crate::faults::process::KonnectorProcess;
use crate::fixtures::{http_get, metric_value};
use crate::testenv::tail;

/// The sharding timings the tests run with: short, so a takeover after a kill takes seconds.
#[derive(Clone, Copy, Debug)]
pub struct Timings {
    /// `--shard-lease-duration`.
    pub lease_duration: Duration,
    /// `--shard-renew-deadline`.
    pub renew_deadline: Duration,
    /// `--shard-retry-period`.
    pub retry_period: Duration,
}

/// 6 s Leases, stopped at 4 s without renewal, renewed every second.
pub const TIMINGS: Timings = Timings {
    lease_duration: Duration::from_secs(6),
    renew_deadline: Duration::from_secs(4),
    retry_period: Duration::from_secs(1),
};

/// The konnector's own defaults (`--shard-*` and `--leader-election-*`): 15 s Leases, stopped
/// at 10 s without renewal, renewed every 2 s.
pub const DEFAULT_TIMINGS: Timings = Timings {
    lease_duration: Duration::from_secs(15),
    renew_deadline: Duration::from_secs(10),
    retry_period: Duration::from_secs(2),
};

/// Which HA mode the replicas run in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HaMode {
    /// `--sharding`: every replica works on its share.
    Sharded,
    /// `--leader-elect`: one leader does everything.
    Leader,
}

impl HaMode {
    /// The mode's flag.
    pub fn flag(self) -> &'static str {
        match self {
            Self::Sharded => "--sharding",
            Self::Leader => "--leader-elect",
        }
    }

    /// The prefix of the mode's timing flags.
    fn timing_flags(self) -> &'static str {
        match self {
            Self::Sharded => "--shard",
            Self::Leader => "--leader-election",
        }
    }
}

impl Timings {
    /// The `--shard-*` flags.
    pub fn args(&self) -> Vec<String> {
        self.args_for(HaMode::Sharded)
    }

    /// The timing flags of `mode`.
    pub fn args_for(&self, mode: HaMode) -> Vec<String> {
        let secs = |d: Duration| format!("{}s", d.as_secs());
        let prefix = mode.timing_flags();
        vec![
            format!("{prefix}-lease-duration"),
            secs(self.lease_duration),
            format!("{prefix}-renew-deadline"),
            secs(self.renew_deadline),
            format!("{prefix}-retry-period"),
            secs(self.retry_period),
        ]
    }

    /// The longest a shard may go without a holder: a Lease expires `lease_duration` after
    /// its last renewal, and the new owner takes it on its next tick, one `retry_period`
    /// later.
    pub fn takeover_bound(&self) -> Duration {
        self.lease_duration + self.retry_period
    }
}

/// How long a replica stopped with SIGTERM gets to release its Leases and exit.
const STOP_GRACE: Duration = Duration::from_secs(20);
/// How long a starting replica may take to serve `/readyz`.
const READY_WAIT: Duration = Duration::from_secs(30);
/// How many times a replica that exits at start (a port taken meanwhile) is started again.
const START_ATTEMPTS: usize = 3;

/// One replica: its identity, process (gone once killed), log and kill time.
pub struct Replica {
    /// `--pod-name`.
    pub identity: String,
    /// Its JSON log.
    pub log: PathBuf,
    process: Option<KonnectorProcess>,
    /// When it was killed with SIGKILL, if it was.
    pub killed_at: Option<Timestamp>,
}

impl Replica {
    /// Starts replica `identity` against the consumer kubeconfig `kubeconfig`, logging to
    /// `<dir>/<identity>.log`, and waits until it serves `/readyz`. Its ports were free when
    /// picked but may be taken before it listens (by any process's outgoing connection): a
    /// replica that exits at start is started again on other ports.
    pub async fn start(
        binary: &Path,
        kubeconfig: &Path,
        dir: &Path,
        identity: &str,
        timings: &Timings,
        mode: HaMode,
    ) -> anyhow::Result<Self> {
        let log = dir.join(format!("{identity}.log"));
        for _ in 0..START_ATTEMPTS {
            let args = timings.args_for(mode);
            let mut process = KonnectorProcess::replica_in(
                mode.flag(),
                binary,
                kubeconfig,
                &log,
                identity,
                &args,
            )?;
            let began = std::time::Instant::now();
            while began.elapsed() < READY_WAIT {
                if process.exited()?.is_some() {
                    break;
                }
                if matches!(http_get(process.health, "/readyz").await, Ok((200, _))) {
                    return Ok(Self {
                        identity: identity.to_string(),
                        log,
                        process: Some(process),
                        killed_at: None,
                    });
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        anyhow::bail!(
            "replica {identity} did not start in {START_ATTEMPTS} attempts:\n{}",
            tail(&log, 20)
        )
    }

    /// Kills the replica with SIGKILL (no Lease released, syncers cut off mid-write) and
    /// records when.
    pub fn kill_hard(&mut self) -> anyhow::Result<Timestamp> {
        let process = self
            .process
            .as_mut()
            .context("the replica is not running")?;
        let at = Timestamp::now();
        process.kill_hard()?;
        self.process = None;
        self.killed_at = Some(at);
        Ok(at)
    }

    /// Pauses the replica (SIGSTOP) and returns when.
    pub fn pause(&self) -> anyhow::Result<Timestamp> {
        let process = self
            .process
            .as_ref()
            .context("the replica is not running")?;
        let at = Timestamp::now();
        process.pause()?;
        Ok(at)
    }

    /// Lets a paused replica run again (SIGCONT) and returns when.
    pub fn resume(&self) -> anyhow::Result<Timestamp> {
        let process = self
            .process
            .as_ref()
            .context("the replica is not running")?;
        process.resume()?;
        Ok(Timestamp::now())
    }

    /// Whether the replica's process has exited (it exits when it loses the leader Lease).
    pub fn exited(&mut self) -> anyhow::Result<bool> {
        match self.process.as_mut() {
            Some(process) => Ok(process.exited()?.is_some()),
            None => Ok(true),
        }
    }

    /// The replica's log events so far.
    pub fn events(&self) -> anyhow::Result<Vec<Logged>> {
        logs::read(&self.log)
    }

    /// The replica's intervals of `kind`, ended at its kill time if it was killed.
    pub fn intervals(&self, kind: Kind) -> anyhow::Result<Vec<Interval>> {
        let events = self.events()?;
        Ok(logs::intervals(
            &self.identity,
            &events,
            kind,
            self.killed_at,
        ))
    }

    /// The value of `sample` (`name{labels}`) on the replica's `/metrics`.
    pub async fn metric(&self, sample: &str) -> anyhow::Result<f64> {
        let process = self
            .process
            .as_ref()
            .context("the replica is not running")?;
        let exposition = process.metrics().await?;
        metric_value(&exposition, sample).with_context(|| format!("no {sample} on /metrics"))
    }

    /// Stops the replica as Kubernetes stops a Pod (it releases its Leases on the way out).
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(mut process) = self.process.take() {
            process.terminate(STOP_GRACE).await?;
        }
        Ok(())
    }
}

/// The replicas of one test.
pub struct Replicas {
    binary: PathBuf,
    dir: PathBuf,
    timings: Timings,
    mode: HaMode,
    /// By identity.
    pub replicas: BTreeMap<String, Replica>,
}

impl Replicas {
    /// An empty set whose replicas run `binary` and log into `dir`.
    pub fn new(binary: PathBuf, dir: &Path, timings: Timings) -> anyhow::Result<Self> {
        Self::in_mode(binary, dir, timings, HaMode::Sharded)
    }

    /// An empty set whose replicas run `binary` in HA mode `mode` and log into `dir`.
    pub fn in_mode(
        binary: PathBuf,
        dir: &Path,
        timings: Timings,
        mode: HaMode,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            binary,
            dir: dir.to_path_buf(),
            timings,
            mode,
            replicas: BTreeMap::new(),
        })
    }

    /// Starts replica `identity` authenticated by `kubeconfig`, and waits until it is ready.
    pub async fn start(&mut self, identity: &str, kubeconfig: &Path) -> anyhow::Result<()> {
        let (binary, dir) = (&self.binary, &self.dir);
        let replica =
            Replica::start(binary, kubeconfig, dir, identity, &self.timings, self.mode).await?;
        self.replicas.insert(identity.to_string(), replica);
        Ok(())
    }

    /// The replica `identity`.
    pub fn get(&self, identity: &str) -> anyhow::Result<&Replica> {
        self.replicas
            .get(identity)
            .with_context(|| format!("no replica {identity}"))
    }

    /// The replica `identity`, to kill or stop it.
    pub fn get_mut(&mut self, identity: &str) -> anyhow::Result<&mut Replica> {
        self.replicas
            .get_mut(identity)
            .with_context(|| format!("no replica {identity}"))
    }

    /// The identities of the replicas that run (not killed, not stopped).
    pub fn running(&self) -> std::collections::BTreeSet<String> {
        self.replicas
            .values()
            .filter(|r| r.process.is_some())
            .map(|r| r.identity.clone())
            .collect()
    }

    /// Every replica's intervals of `kind`.
    pub fn intervals(&self, kind: Kind) -> anyhow::Result<Vec<Interval>> {
        let mut all = Vec::new();
        for replica in self.replicas.values() {
            all.extend(replica.intervals(kind)?);
        }
        Ok(all)
    }

    /// Fails, naming them, if two replicas ever held the same shard or ran the same API's
    /// syncer at the same time, or a provider write landed from a replica that did not hold
    /// the API's shard (by their logs; a killed replica's end at its kill time).
    pub fn never_two_at_once(&self) -> anyhow::Result<()> {
        for (kind, what) in [(Kind::Shard, "shard"), (Kind::Syncer, "syncer")] {
            let overlaps = logs::overlapping(&self.intervals(kind)?);
            anyhow::ensure!(
                overlaps.is_empty(),
                "{} {what} interval(s) on two replicas at once:\n{}",
                overlaps.len(),
                overlaps.join("\n")
            );
        }
        let mut writes = Vec::new();
        for replica in self.replicas.values() {
            for logged in replica.events()? {
                if let logs::Event::Wrote(key) = logged.event {
                    writes.push((replica.identity.clone(), logged.at, key));
                }
            }
        }
        let margin = self.timings.lease_duration - self.timings.renew_deadline;
        let stray = logs::writes_outside_holding(&self.intervals(Kind::Shard)?, &writes, margin);
        anyhow::ensure!(
            stray.is_empty(),
            "{} of {} provider writes not from the shard's one holder:\n{}",
            stray.len(),
            writes.len(),
            stray.join("\n")
        );
        Ok(())
    }

    /// The last lines of every replica's log, for a failure report.
    pub fn report(&self) -> String {
        let mut out = String::new();
        for replica in self.replicas.values() {
            out += &format!(
                "--- replica {} log ({})\n{}\n",
                replica.identity,
                replica.log.display(),
                tail(&replica.log, 30)
            );
        }
        out
    }

    /// Stops every replica that still runs, releasing its Leases for the next test.
    pub async fn stop_all(&mut self) -> anyhow::Result<()> {
        for replica in self.replicas.values_mut() {
            replica.stop().await?;
        }
        Ok(())
    }
}
