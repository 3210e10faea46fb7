//! Bounded writes: with sharding, every write a replica sends (POST, PUT, PATCH, DELETE) to
//! either cluster gives up after a timeout shorter than the margin between the shard renew
//! deadline and the Lease duration. Leases do not fence a request already in flight, so this
//! bound is what keeps a write started under one holder from landing after another holder
//! took over (with bounded clock skew, as kube-controller-manager assumes). Reads and watches
//! are not bounded: they change nothing, and a watch is meant to stay open.
//!
//! The bound is a property of the process (set once by `konnector run --sharding`), so every
//! client built through [`client`] carries it, whichever controller builds it.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Method, Request};
use tower::{Layer, Service};

use crate::telemetry::RequestMetrics;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

static WRITE_TIMEOUT: OnceLock<Duration> = OnceLock::new();

/// Bounds every write of the clients built from now on; the first call wins.
pub fn bound_writes(timeout: Duration) {
    let _ = WRITE_TIMEOUT.set(timeout);
}

/// A client for `config` to the `cluster` side (`consumer` or `provider`): with the process's
/// write bound when one is set, and every request counted and timed outermost.
pub fn client(config: kube::Config, cluster: &'static str) -> Result<kube::Client, kube::Error> {
    let builder = kube::client::ClientBuilder::try_from(config)?;
    let measured = RequestMetrics { cluster };
    Ok(match WRITE_TIMEOUT.get() {
        Some(limit) => builder
            .with_layer(&WriteTimeout(*limit))
            .with_layer(&measured)
            .build(),
        None => builder.with_layer(&measured).build(),
    })
}

/// A write that did not get its answer within the bound; retried like any transient failure.
#[derive(Debug, thiserror::Error)]
#[error("the request was abandoned after {0:?} (the shard write bound)")]
pub struct WriteTimedOut(Duration);

/// The layer that bounds writes.
#[derive(Clone, Copy, Debug)]
pub struct WriteTimeout(pub Duration);

impl<S> Layer<S> for WriteTimeout {
    type Service = Bounded<S>;
    fn layer(&self, inner: S) -> Bounded<S> {
        Bounded {
            inner,
            limit: self.0,
        }
    }
}

/// A service whose writes give up after `limit`.
#[derive(Clone, Debug)]
pub struct Bounded<S> {
    inner: S,
    limit: Duration,
}

fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

impl<S, B> Service<Request<B>> for Bounded<S>
where
    S: Service<Request<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let write = is_write(request.method());
        let response = self.inner.call(request);
        let limit = self.limit;
        Box::pin(async move {
            if !write {
                return response.await.map_err(Into::into);
            }
            match tokio::time::timeout(limit, response).await {
                Ok(answered) => answered.map_err(Into::into),
                Err(_) => Err(Box::new(WriteTimedOut(limit)) as BoxError),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    /// A service that answers after `delay`.
    fn slow(
        delay: Duration,
    ) -> impl Service<Request<()>, Response = (), Error = Infallible, Future: Send> + Clone {
        tower::service_fn(move |_request: Request<()>| async move {
            tokio::time::sleep(delay).await;
            Ok::<_, Infallible>(())
        })
    }

    fn request(method: Method) -> Request<()> {
        let mut request = Request::new(());
        *request.method_mut() = method;
        request
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_that_outlasts_the_bound_is_abandoned() {
        let mut service = WriteTimeout(Duration::from_secs(5)).layer(slow(Duration::from_secs(10)));
        let answer = service.call(request(Method::PATCH)).await;
        let error = answer
            .map(drop)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains("abandoned after 5s"), "{error}");
    }

    #[tokio::test(start_paused = true)]
    async fn reads_and_watches_are_not_bounded() {
        let mut service = WriteTimeout(Duration::from_secs(5)).layer(slow(Duration::from_secs(10)));
        assert!(service.call(request(Method::GET)).await.is_ok());
    }
}
