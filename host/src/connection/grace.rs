//! Riding out a blip on either side. A transient failure (no answer, 429, 5xx) of an engaged
//! Connection's identity reads (provider or consumer) or discovery does not disengage it at once: the Connection
//! stays Ready and its syncers keep their watches while failures last less than the grace
//! period; only failures that persist past it turn it not Ready, as the spec has it for any
//! failure. Groups that fail OpenAPI discovery are timed the same way, each on its own, so
//! their exports are kept (not released) through a blip.
//!
//! ```text
//! transient failure ─▶ first of a run? start the clock
//!                    ─▶ clock < grace: Hold   (Ready, engaged, ProviderDegraded=True, retry)
//!                    ─▶ clock ≥ grace: Expired (Ready=False, disengaged, as the spec says)
//! success ───────────▶ the run ends (the next failure starts a new clock)
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A run of transient failures: when it began and how many failures it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failing {
    /// The first failure of the run.
    pub since: Instant,
    /// Failures so far, this one included.
    pub failures: u32,
}

impl Failing {
    /// How long the run has lasted at `now`.
    pub fn lasted(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.since)
    }
}

/// What a transient failure means for the engagement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Within the grace period: keep the engagement (and a group's last known exports).
    Hold(Failing),
    /// Failing for longer than the grace period: act as on any failure.
    Expired(Failing),
}

/// Per Connection: the run of provider failures, the run of consumer failures (each side on
/// its own clock, so one side answering does not reset the other's) and each failing group's
/// run.
#[derive(Debug, Default)]
struct Runs {
    provider: Option<Failing>,
    consumer: Option<Failing>,
    groups: BTreeMap<String, Failing>,
}

/// The transient-failure clocks of every Connection.
#[derive(Debug)]
pub struct Grace {
    period: Duration,
    runs: Mutex<HashMap<String, Runs>>,
}

impl Grace {
    /// Clocks that hold failures for up to `period`.
    pub fn new(period: Duration) -> Self {
        Self {
            period,
            runs: Mutex::default(),
        }
    }

    /// The grace period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Records a transient failure of the provider as a whole (identity, list of groups).
    pub fn provider_failed(&self, connection: &str, now: Instant) -> Verdict {
        let mut runs = self.lock();
        let run = runs.entry(connection.to_string()).or_default();
        let failing = bump(run.provider, now);
        run.provider = Some(failing);
        self.verdict(failing, now)
    }

    /// The provider answered: its run of failures, if any, ends (and is returned).
    pub fn provider_answered(&self, connection: &str) -> Option<Failing> {
        self.lock()
            .get_mut(connection)
            .and_then(|run| run.provider.take())
    }

    /// Records a transient failure of the consumer cluster's identity read.
    pub fn consumer_failed(&self, connection: &str, now: Instant) -> Verdict {
        let mut runs = self.lock();
        let run = runs.entry(connection.to_string()).or_default();
        let failing = bump(run.consumer, now);
        run.consumer = Some(failing);
        self.verdict(failing, now)
    }

    /// The consumer answered: its run of failures, if any, ends (and is returned).
    pub fn consumer_answered(&self, connection: &str) -> Option<Failing> {
        self.lock()
            .get_mut(connection)
            .and_then(|run| run.consumer.take())
    }

    /// Records this discovery's failing groups: each one's run goes on (or starts), groups no
    /// longer failing are forgotten. Returns each failing group's verdict.
    pub fn groups_failed(
        &self,
        connection: &str,
        failing: &BTreeSet<String>,
        now: Instant,
    ) -> BTreeMap<String, Verdict> {
        let mut runs = self.lock();
        let run = runs.entry(connection.to_string()).or_default();
        run.groups.retain(|group, _| failing.contains(group));
        failing
            .iter()
            .map(|group| {
                let next = bump(run.groups.get(group).copied(), now);
                run.groups.insert(group.clone(), next);
                (group.clone(), self.verdict(next, now))
            })
            .collect()
    }

    /// Forgets a Connection (deleted, or no longer engaged).
    pub fn forget(&self, connection: &str) {
        self.lock().remove(connection);
    }

    fn verdict(&self, failing: Failing, now: Instant) -> Verdict {
        if failing.lasted(now) < self.period {
            Verdict::Hold(failing)
        } else {
            Verdict::Expired(failing)
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Runs>> {
        // The map holds plain values: a panic elsewhere cannot leave it half-written.
        self.runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn bump(run: Option<Failing>, now: Instant) -> Failing {
    match run {
        Some(run) => Failing {
            failures: run.failures.saturating_add(1),
            ..run
        },
        None => Failing {
            since: now,
            failures: 1,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD: Duration = Duration::from_secs(60);

    #[test]
    fn failures_shorter_than_the_grace_period_hold_the_engagement() {
        let grace = Grace::new(PERIOD);
        let start = Instant::now();
        let Verdict::Hold(first) = grace.provider_failed("c", start) else {
            panic!("the first failure holds");
        };
        assert_eq!(first.failures, 1);
        let later = start + Duration::from_secs(59);
        assert_eq!(
            grace.provider_failed("c", later),
            Verdict::Hold(Failing {
                since: start,
                failures: 2
            })
        );
    }

    #[test]
    fn failures_that_persist_past_the_grace_period_expire() {
        let grace = Grace::new(PERIOD);
        let start = Instant::now();
        grace.provider_failed("c", start);
        let expired = grace.provider_failed("c", start + PERIOD);
        assert!(
            matches!(expired, Verdict::Expired(f) if f.failures == 2),
            "{expired:?}"
        );
    }

    #[test]
    fn an_answer_ends_the_run_and_the_next_failure_starts_a_new_clock() {
        let grace = Grace::new(PERIOD);
        let start = Instant::now();
        grace.provider_failed("c", start);
        assert_eq!(grace.provider_answered("c").map(|f| f.failures), Some(1));
        assert_eq!(grace.provider_answered("c"), None);
        let again = start + PERIOD * 2;
        assert_eq!(
            grace.provider_failed("c", again),
            Verdict::Hold(Failing {
                since: again,
                failures: 1
            })
        );
    }

    #[test]
    fn the_consumer_side_has_its_own_clock() {
        let grace = Grace::new(PERIOD);
        let start = Instant::now();
        grace.consumer_failed("c", start);
        assert_eq!(
            grace.provider_answered("c"),
            None,
            "a consumer failure is not the provider's"
        );
        let later = grace.consumer_failed("c", start + PERIOD / 2);
        assert!(
            matches!(later, Verdict::Hold(f) if f.failures == 2),
            "{later:?}"
        );
        let expired = grace.consumer_failed("c", start + PERIOD);
        assert!(matches!(expired, Verdict::Expired(_)), "{expired:?}");
        assert_eq!(grace.consumer_answered("c").map(|f| f.failures), Some(3));
        let again = grace.consumer_failed("c", start + PERIOD * 2);
        assert!(
            matches!(again, Verdict::Hold(f) if f.failures == 1),
            "{again:?}"
        );
    }

    #[test]
    fn connections_are_timed_apart() {
        let grace = Grace::new(PERIOD);
        let start = Instant::now();
        grace.provider_failed("a", start);
        let b = grace.provider_failed("b", start + PERIOD);
        assert!(matches!(b, Verdict::Hold(_)), "{b:?}");
    }

    #[test]
    fn each_failing_group_has_its_own_clock_and_recovered_groups_are_forgotten() {
        let grace = Grace::new(PERIOD);
        let start = Instant::now();
        let both: BTreeSet<String> = ["a.example".into(), "b.example".into()].into();
        grace.groups_failed("c", &both, start);
        let only_b: BTreeSet<String> = ["b.example".into()].into();
        let verdicts = grace.groups_failed("c", &only_b, start + PERIOD);
        assert!(matches!(verdicts["b.example"], Verdict::Expired(_)));
        assert_eq!(verdicts.len(), 1);
        let verdicts = grace.groups_failed("c", &both, start + PERIOD);
        assert!(
            matches!(verdicts["a.example"], Verdict::Hold(f) if f.failures == 1),
            "a group that answered in between starts a new clock: {verdicts:?}"
        );
        assert_eq!(
            grace.provider_answered("c"),
            None,
            "group failures are not the provider's"
        );
    }
}
