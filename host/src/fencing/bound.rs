//! The write bound: every write (POST, PUT, PATCH, DELETE) gives up after a timeout shorter
//! than the margin between the renew deadline and the Lease duration. Leases do not fence a
//! request already in flight, so this bound is what keeps a write started under one holder
//! from landing after another holder took over (with bounded clock skew, as
//! kube-controller-manager assumes). The deadline is checked before the request is polled, so
//! a process paused past it (SIGSTOP, a long stall) abandons the write on resuming instead of
//! sending it then.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Request;
use tokio::time::Instant;
use tower::{Layer, Service};

use super::is_write;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A write that did not get its answer within the bound; retried like any transient failure.
#[derive(Debug, thiserror::Error)]
#[error("the request was abandoned after {0:?} (the write bound of a replicated konnector)")]
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
        let limit = self.limit;
        let deadline = Instant::now() + limit;
        let response = self.inner.call(request);
        Box::pin(async move {
            if !write {
                return response.await.map_err(Into::into);
            }
            let mut response = std::pin::pin!(response);
            let mut timer = std::pin::pin!(tokio::time::sleep_until(deadline));
            std::future::poll_fn(|cx| {
                // The clock first: after a pause, the request is not sent late.
                if Instant::now() >= deadline {
                    return Poll::Ready(Err(Box::new(WriteTimedOut(limit)) as BoxError));
                }
                if let Poll::Ready(answered) = response.as_mut().poll(cx) {
                    return Poll::Ready(answered.map_err(Into::into));
                }
                timer
                    .as_mut()
                    .poll(cx)
                    .map(|()| Err(Box::new(WriteTimedOut(limit)) as BoxError))
            })
            .await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;
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
    async fn a_write_first_polled_after_its_deadline_is_not_sent() {
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = sent.clone();
        let mut service =
            WriteTimeout(Duration::from_secs(5)).layer(tower::service_fn(move |_: Request<()>| {
                let flag = flag.clone();
                async move {
                    flag.store(true, std::sync::atomic::Ordering::SeqCst);
                    Ok::<_, Infallible>(())
                }
            }));
        let pending = service.call(request(Method::PUT));
        // The process stalls between building the request and sending it.
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(pending.await.is_err());
        assert!(!sent.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[tokio::test(start_paused = true)]
    async fn reads_and_watches_are_not_bounded() {
        let mut service = WriteTimeout(Duration::from_secs(5)).layer(slow(Duration::from_secs(10)));
        assert!(service.call(request(Method::GET)).await.is_ok());
    }
}
