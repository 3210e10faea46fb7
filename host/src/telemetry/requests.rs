//! Every API request a konnector client sends, counted and timed per cluster, verb and answer
//! (`kbind_client_requests_total{cluster,verb,code}`,
//! `kbind_client_request_duration_seconds{cluster,verb}`): which side is slow or refusing,
//! and how much each costs. A layer on every client the process builds (`fencing::client`),
//! outermost, so what it sees is what the controllers waited for.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use http::{Method, Request, Response};
use tower::{Layer, Service};

use super::labels::{ClientLatencyLabels, ClientRequestLabels};
use super::metrics::metrics;

/// The layer that counts and times requests to one cluster.
#[derive(Clone, Copy, Debug)]
pub struct RequestMetrics {
    /// `consumer` or `provider`.
    pub cluster: &'static str,
}

impl<S> Layer<S> for RequestMetrics {
    type Service = Measured<S>;
    fn layer(&self, inner: S) -> Measured<S> {
        Measured {
            inner,
            cluster: self.cluster,
        }
    }
}

/// A service whose requests are counted and timed.
#[derive(Clone, Debug)]
pub struct Measured<S> {
    inner: S,
    cluster: &'static str,
}

/// The Kubernetes verb of a request, as far as its method and query tell.
fn verb<B>(request: &Request<B>) -> &'static str {
    let watch = request
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    match *request.method() {
        Method::GET if watch => "watch",
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "other",
    }
}

impl<S, B, R> Service<Request<B>> for Measured<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (cluster, verb) = (self.cluster, verb(&request));
        let started = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let answered = response.await;
            let code = match &answered {
                Ok(response) => response.status().as_u16().to_string(),
                Err(_) => "error".to_string(),
            };
            let metrics = metrics();
            metrics
                .client_requests
                .get_or_create(&ClientRequestLabels {
                    cluster,
                    verb,
                    code,
                })
                .inc();
            metrics
                .client_request_duration
                .get_or_create(&ClientLatencyLabels { cluster, verb })
                .observe(started.elapsed().as_secs_f64());
            answered
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(line_start: &str) -> Option<u64> {
        metrics()
            .encode()
            .lines()
            .find_map(|l| l.strip_prefix(line_start))
            .and_then(|v| v.trim().parse().ok())
    }

    #[tokio::test]
    async fn every_request_is_counted_by_cluster_verb_and_code() -> anyhow::Result<()> {
        let answer = tower::service_fn(|request: Request<()>| async move {
            let status = if request.method() == Method::DELETE {
                403
            } else {
                200
            };
            Response::builder().status(status).body(())
        });
        let mut service = RequestMetrics {
            cluster: "test-side",
        }
        .layer(answer);
        let watch = Request::get("/apis/x/v1/ws?watch=true").body(())?;
        service.call(watch).await?;
        service
            .call(Request::delete("/apis/x/v1/ws/a").body(())?)
            .await?;
        service
            .call(Request::delete("/apis/x/v1/ws/b").body(())?)
            .await?;
        let prefix = |verb: &str, code: &str| {
            format!(
                "kbind_client_requests_total{{cluster=\"test-side\",verb=\"{verb}\",code=\"{code}\"}}"
            )
        };
        assert_eq!(count(&prefix("watch", "200")), Some(1));
        assert_eq!(count(&prefix("delete", "403")), Some(2));
        let seen =
            "kbind_client_request_duration_seconds_count{cluster=\"test-side\",verb=\"delete\"}";
        assert_eq!(count(seen), Some(2));
        Ok(())
    }
}
