//! The client's own retries, replacing kube's default (up to 15 attempts, delays up to 1000 s,
//! outside any bound): a few quick attempts when the server sheds or fails a request (429,
//! 503, 504) or no answer came, then the error goes to the caller, whose per-key backoff and
//! the Connection's grace period take over. A `Retry-After` within [`LONGEST_WAIT`] is waited
//! exactly; a longer one is left to the caller, which honours it from the answer. A write is
//! sent again only when it cannot have reached the server (the connection was refused) or the
//! server said it did not take it (429, 503, 504); the fence's own refusals are final.

use std::time::Duration;

use http::{Request, Response, StatusCode};
use kube::client::Body;
use tower::retry::Policy;
use tower::util::rng::{HasherRng, Rng as _};

use super::{HoldLapsed, WriteTimedOut, is_write};
use crate::telemetry::{ClientRetryLabels, metrics};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How many times one request is sent again at most.
pub const MAX_RETRIES: u32 = 3;
/// The wait before the first retry; doubled for each next one (with up to 50% jitter).
const FIRST_DELAY: Duration = Duration::from_millis(200);
/// The longest `Retry-After` the layer waits itself.
pub const LONGEST_WAIT: Duration = Duration::from_secs(5);

/// The retry policy of every konnector client; one per request (tower clones it).
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    cluster: &'static str,
    attempt: u32,
}

impl RetryPolicy {
    /// The policy of a client to the `cluster` side.
    pub fn new(cluster: &'static str) -> Self {
        Self {
            cluster,
            attempt: 0,
        }
    }

    /// The wait before retry number `attempt` (0-based), jittered.
    fn backoff(attempt: u32) -> Duration {
        let base = FIRST_DELAY.saturating_mul(1 << attempt.min(8));
        base.mul_f64(1.0 + HasherRng::default().next_f64() / 2.0)
    }
}

/// What the server asked for in `Retry-After` (whole seconds), if it asked.
fn retry_after(headers: &http::HeaderMap) -> Option<Duration> {
    headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

/// Whether an answer says the server did not take the request and may later.
fn shed(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS
            | StatusCode::SERVICE_UNAVAILABLE
            | StatusCode::GATEWAY_TIMEOUT
    )
}

/// Whether `error` (no answer came) is worth sending `method` again for: never for the
/// fence's own refusals; for a read, any transport failure; for a write, only a connection
/// that was never made, since a write cut off later may have been applied.
fn resend_after(error: &BoxError, method: &http::Method) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error.as_ref());
    let mut connect = false;
    while let Some(e) = source {
        if e.is::<HoldLapsed>() || e.is::<WriteTimedOut>() {
            return false;
        }
        if let Some(client) = e.downcast_ref::<hyper_util::client::legacy::Error>() {
            connect |= client.is_connect();
        }
        source = e.source();
    }
    connect || !is_write(method)
}

impl<B> Policy<Request<Body>, Response<B>, BoxError> for RetryPolicy {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        request: &mut Request<Body>,
        result: &mut Result<Response<B>, BoxError>,
    ) -> Option<Self::Future> {
        if self.attempt >= MAX_RETRIES {
            return None;
        }
        let (code, asked) = match result {
            Ok(response) if shed(response.status()) => (
                response.status().as_u16().to_string(),
                retry_after(response.headers()),
            ),
            Ok(_) => return None,
            Err(error) if resend_after(error, request.method()) => ("error".to_string(), None),
            Err(_) => return None,
        };
        let wait = match asked {
            Some(asked) if asked > LONGEST_WAIT => return None,
            Some(asked) => asked,
            None => Self::backoff(self.attempt),
        };
        self.attempt += 1;
        metrics()
            .client_retries
            .get_or_create(&ClientRetryLabels {
                cluster: self.cluster,
                code,
            })
            .inc();
        Some(tokio::time::sleep(wait))
    }

    fn clone_request(&mut self, request: &Request<Body>) -> Option<Request<Body>> {
        let body = request.body().try_clone()?;
        let mut copy = Request::new(body);
        *copy.method_mut() = request.method().clone();
        *copy.uri_mut() = request.uri().clone();
        *copy.version_mut() = request.version();
        *copy.headers_mut() = request.headers().clone();
        *copy.extensions_mut() = request.extensions().clone();
        Some(copy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn answer(status: u16, retry_after: Option<&str>) -> Result<Response<()>, BoxError> {
        let mut response = Response::new(());
        *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
        if let Some(value) = retry_after {
            response.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_str(value).unwrap_or(http::HeaderValue::from_static("1")),
            );
        }
        Ok(response)
    }

    fn request(method: Method) -> Request<Body> {
        let mut request = Request::new(Body::empty());
        *request.method_mut() = method;
        request
    }

    fn waits(
        policy: &mut RetryPolicy,
        method: Method,
        mut result: Result<Response<()>, BoxError>,
    ) -> Option<Duration> {
        let before = tokio::time::Instant::now();
        policy
            .retry(&mut request(method), &mut result)
            .map(|sleep| sleep.deadline() - before)
    }

    #[tokio::test(start_paused = true)]
    async fn shed_answers_are_retried_a_few_times_then_given_to_the_caller() {
        let mut policy = RetryPolicy::new("test-side");
        for _ in 0..MAX_RETRIES {
            assert!(waits(&mut policy, Method::PATCH, answer(503, None)).is_some());
        }
        assert_eq!(waits(&mut policy, Method::PATCH, answer(503, None)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_is_waited_exactly_up_to_the_longest_wait() {
        let mut policy = RetryPolicy::new("test-side");
        assert_eq!(
            waits(&mut policy, Method::GET, answer(429, Some("2"))),
            Some(Duration::from_secs(2))
        );
        // Longer than the layer waits: the caller's backoff honours it.
        assert_eq!(
            waits(&mut policy, Method::GET, answer(429, Some("30"))),
            None
        );
    }

    #[tokio::test(start_paused = true)]
    async fn definitive_answers_are_not_retried() {
        let mut policy = RetryPolicy::new("test-side");
        for status in [200, 403, 404, 409, 422, 500] {
            assert_eq!(
                waits(&mut policy, Method::PUT, answer(status, None)),
                None,
                "{status}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_fences_own_refusals_are_final_and_lost_writes_are_not_resent() {
        let mut policy = RetryPolicy::new("test-side");
        let lapsed: BoxError = Box::new(HoldLapsed::for_test());
        assert_eq!(waits(&mut policy, Method::GET, Err(lapsed)), None);
        let cut: BoxError = "connection reset by peer".into();
        assert_eq!(waits(&mut policy, Method::PATCH, Err(cut)), None);
        let cut: BoxError = "connection reset by peer".into();
        assert!(waits(&mut policy, Method::GET, Err(cut)).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_is_counted_per_cluster_and_code() {
        let labels = ClientRetryLabels {
            cluster: "retry-count-side",
            code: "504".to_string(),
        };
        let counted = || metrics().client_retries.get_or_create(&labels).get();
        let before = counted();
        let mut policy = RetryPolicy::new("retry-count-side");
        assert!(waits(&mut policy, Method::GET, answer(504, None)).is_some());
        assert_eq!(counted() - before, 1);
    }
}
