//! When a Connection's module that could not be had is asked for again: not on every
//! Connection reconcile (a failing registry would be asked every resync for ever), but after a
//! delay that doubles with each consecutive failure of the same attempt, up to a cap.
//!
//! ```text
//! failure 1 ─▶ wait first ─▶ failure 2 ─▶ wait 2×first ─▶ ... ─▶ wait cap, cap, cap ...
//!   the same attempt = the same reference, settings and pull credentials;
//!   a changed one, or a pull that succeeds, starts again at the first delay (at once)
//! ```
//!
//! Pure values: [`Retry::after_failure`] and [`Retry::is_due`] decide, the caller keeps the
//! state beside the Connection's modules and says what counts as the same attempt.

use std::time::{Duration, SystemTime};

/// The delays between attempts: `first` after the first failure, doubling, never above `cap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetrySchedule {
    /// The delay after the first failure.
    pub first: Duration,
    /// The longest delay.
    pub cap: Duration,
}

impl Default for RetrySchedule {
    /// 30 s (the Connection resync), doubling to 10 min.
    fn default() -> Self {
        Self {
            first: Duration::from_secs(30),
            cap: Duration::from_secs(600),
        }
    }
}

impl RetrySchedule {
    /// The delay after `failures` consecutive failures (1: the first).
    pub fn delay(&self, failures: u32) -> Duration {
        crate::backoff::delay(failures, self.first, self.cap)
    }
}

/// The failures of one attempt (`A`: what was asked for, compared to tell the same attempt
/// from a changed one) so far, and when it may be made again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retry<A> {
    /// What failed.
    pub attempt: A,
    /// Consecutive failures of it.
    pub failures: u32,
    /// Not asked again before this.
    pub next_attempt: SystemTime,
    /// Why the last attempt failed.
    pub message: String,
}

impl<A: PartialEq> Retry<A> {
    /// The state after `attempt` failed at `now` with `message`: one more failure when the
    /// previous state was of the same attempt, the first otherwise.
    pub fn after_failure(
        previous: Option<&Retry<A>>,
        attempt: A,
        message: String,
        now: SystemTime,
        schedule: &RetrySchedule,
    ) -> Self {
        let failures = match previous {
            Some(previous) if previous.attempt == attempt => previous.failures.saturating_add(1),
            _ => 1,
        };
        Self {
            attempt,
            failures,
            next_attempt: now + schedule.delay(failures),
            message,
        }
    }

    /// Whether `attempt` may be made at `now`: always for another attempt than the one that
    /// failed, and for the same one once its delay has passed.
    pub fn is_due(&self, attempt: &A, now: SystemTime) -> bool {
        self.attempt != *attempt || now >= self.next_attempt
    }

    /// `next attempt at <RFC 3339 time>`, for a condition message.
    pub fn next_attempt_text(&self) -> String {
        format!(
            "attempt {} failed; next attempt at {}",
            self.failures,
            humantime::format_rfc3339_seconds(self.next_attempt)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An attempt as the Connection's modules tell them apart: reference, settings, credentials.
    type Attempt = (&'static str, &'static str, Option<u64>);

    fn attempt(
        reference: &'static str,
        settings: &'static str,
        credentials: Option<u64>,
    ) -> Attempt {
        (reference, settings, credentials)
    }

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
    }

    #[test]
    fn the_default_schedule_starts_at_the_resync_and_doubles_to_ten_minutes() {
        let schedule = RetrySchedule::default();
        let delays: Vec<u64> = (1..=8).map(|n| schedule.delay(n).as_secs()).collect();
        assert_eq!(delays, [30, 60, 120, 240, 480, 600, 600, 600]);
    }

    #[test]
    fn consecutive_failures_of_one_attempt_wait_longer_each_time() {
        let schedule = RetrySchedule::default();
        let wanted = attempt("oci://r.example/p:v1", "{}", None);
        let mut retry: Option<Retry<Attempt>> = None;
        let mut now = at(1_000);
        let mut waits = Vec::new();
        for _ in 0..7 {
            let next = Retry::after_failure(retry.as_ref(), wanted, "down".into(), now, &schedule);
            assert!(!next.is_due(&wanted, now), "not asked again at once");
            let wait = next.next_attempt.duration_since(now).unwrap_or_default();
            assert!(
                !next.is_due(&wanted, now + wait - Duration::from_secs(1)),
                "not a second early"
            );
            assert!(next.is_due(&wanted, now + wait), "asked when due");
            waits.push(wait.as_secs());
            now += wait;
            retry = Some(next);
        }
        assert_eq!(waits, [30, 60, 120, 240, 480, 600, 600]);
    }

    #[test]
    fn a_changed_reference_settings_or_credentials_is_tried_at_once_and_starts_again() {
        let schedule = RetrySchedule::default();
        let failed = attempt("oci://r.example/p:v1", "{}", Some(1));
        let mut retry = Retry::after_failure(None, failed, "x".into(), at(0), &schedule);
        retry = Retry::after_failure(Some(&retry), failed, "x".into(), at(30), &schedule);
        assert_eq!(retry.failures, 2);
        for changed in [
            attempt("oci://r.example/p:v2", "{}", Some(1)),
            attempt("oci://r.example/p:v1", r#"{"zone": "eu"}"#, Some(1)),
            attempt("oci://r.example/p:v1", "{}", Some(2)),
            attempt("oci://r.example/p:v1", "{}", None),
        ] {
            assert!(retry.is_due(&changed, at(31)), "{changed:?}");
            let again = Retry::after_failure(Some(&retry), changed, "x".into(), at(31), &schedule);
            assert_eq!(again.failures, 1, "a new attempt starts at the first delay");
            assert_eq!(again.next_attempt, at(61));
        }
    }

    #[test]
    fn the_message_says_when_the_next_attempt_is() {
        let schedule = RetrySchedule::default();
        let wanted = attempt("oci://r.example/p:v1", "{}", None);
        let retry = Retry::after_failure(None, wanted, "down".into(), at(0), &schedule);
        assert_eq!(
            retry.next_attempt_text(),
            "attempt 1 failed; next attempt at 1970-01-01T00:00:30Z"
        );
    }
}
