//! Waiting for a cluster to converge. Controllers, RBAC caches and restarted servers are
//! eventually consistent, so e2e tests retry an assertion until it holds or a deadline passes,
//! and then fail with the last error rather than a generic timeout.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often [`eventually`] retries.
const INTERVAL: Duration = Duration::from_millis(100);

/// Runs `attempt` until it returns `Ok` or `timeout` has passed; then returns its last result.
pub async fn eventually<T, E, F, Fut>(timeout: Duration, mut attempt: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let began = Instant::now();
    loop {
        match attempt().await {
            Ok(value) => return Ok(value),
            Err(e) if began.elapsed() >= timeout => return Err(e),
            Err(_) => tokio::time::sleep(INTERVAL).await,
        }
    }
}
