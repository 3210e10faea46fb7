//! Waiting for the konnector, kubectl-style: poll until done, a failure that will not fix
//! itself, or `--timeout`; print each new state once on stderr so the operator sees progress.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::output::progress;

/// How often the cluster is polled.
pub const POLL: Duration = Duration::from_millis(700);

/// What one look at the cluster found.
#[derive(Debug, PartialEq, Eq)]
pub enum Check<T> {
    /// The awaited state was reached.
    Done(T),
    /// Not yet; the text describes the current state (printed when it changes).
    Waiting(String),
    /// A state that needs the operator (an edit, a fix); waiting longer will not help.
    Failed(String),
}

/// How a wait ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome<T> {
    /// Reached.
    Done(T),
    /// Gave up: the state needs the operator.
    Failed(String),
    /// `--timeout` passed; the last state seen.
    TimedOut(String),
}

/// Polls `check` until it is done or failed, or `timeout` passes.
pub async fn until<T, F, Fut>(timeout: Duration, mut check: F) -> anyhow::Result<Outcome<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Check<T>>>,
{
    let start = Instant::now();
    let mut last = String::new();
    loop {
        match check().await? {
            Check::Done(t) => return Ok(Outcome::Done(t)),
            Check::Failed(why) => return Ok(Outcome::Failed(why)),
            Check::Waiting(state) => {
                if state != last {
                    progress(format!("  … {state}"));
                    last = state;
                }
            }
        }
        if start.elapsed() >= timeout {
            return Ok(Outcome::TimedOut(last));
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wait_ends_at_the_timeout_with_the_last_state() -> anyhow::Result<()> {
        let outcome: Outcome<()> = until(Duration::from_millis(10), || async {
            Ok(Check::Waiting("Ready=Unknown".into()))
        })
        .await?;
        assert_eq!(outcome, Outcome::TimedOut("Ready=Unknown".into()));
        Ok(())
    }

    #[tokio::test]
    async fn a_failure_ends_the_wait_at_once() -> anyhow::Result<()> {
        let start = Instant::now();
        let outcome: Outcome<()> = until(Duration::from_secs(60), || async {
            Ok(Check::Failed("KubeconfigInvalid".into()))
        })
        .await?;
        assert_eq!(outcome, Outcome::Failed("KubeconfigInvalid".into()));
        assert!(start.elapsed() < Duration::from_secs(5));
        Ok(())
    }
}
