//! A switchable fault on one kind of request, inside the client a test konnector uses: while
//! switched on, requests whose method and path match are answered `503 Service Unavailable`
//! (a `Status` body, as an overloaded apiserver sends) without reaching the apiserver, and
//! counted. Everything else passes through, so a test can break exactly one read (the
//! consumer's cluster identity, say) and leave the rest of the konnector's traffic alone.
//!
//! ```text
//! konnector ──▶ Refusals layer ──(matching, switched on)──▶ 503, counted
//!                     └──────────(anything else)─────────▶ apiserver
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use kube::client::Body;
use tower::{Layer, Service};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Answer = Response<UnsyncBoxBody<Bytes, BoxError>>;

/// The switch and count shared by the test and the client it breaks.
#[derive(Clone, Debug)]
pub struct Refusals {
    method: Method,
    path: Arc<str>,
    on: Arc<AtomicBool>,
    refused: Arc<AtomicUsize>,
}

impl Refusals {
    /// Refuses `method path` (the path without a query) while switched on; off at first.
    pub fn of(method: Method, path: &str) -> Self {
        Self {
            method,
            path: path.into(),
            on: Arc::default(),
            refused: Arc::default(),
        }
    }

    /// Starts (or stops) refusing.
    pub fn switch(&self, on: bool) {
        self.on.store(on, Ordering::SeqCst);
    }

    /// How many requests were refused so far.
    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }

    fn refuses<B>(&self, request: &Request<B>) -> bool {
        self.on.load(Ordering::SeqCst)
            && request.method() == self.method
            && request.uri().path() == &*self.path
    }
}

impl<S> Layer<S> for Refusals {
    type Service = Refusing<S>;
    fn layer(&self, inner: S) -> Refusing<S> {
        Refusing {
            inner,
            refusals: self.clone(),
        }
    }
}

/// A service that answers 503 to the requests its [`Refusals`] matches while switched on.
#[derive(Clone, Debug)]
pub struct Refusing<S> {
    inner: S,
    refusals: Refusals,
}

impl<S, B> Service<Request<Body>> for Refusing<S>
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Answer;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        if self.refusals.refuses(&request) {
            self.refusals.refused.fetch_add(1, Ordering::SeqCst);
            let status = serde_json::json!({
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": "the server is currently unable to handle the request (injected by the test)",
                "reason": "ServiceUnavailable",
                "code": 503,
            });
            let answer = Response::builder()
                .status(StatusCode::SERVICE_UNAVAILABLE)
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(
                    Full::new(Bytes::from(status.to_string()))
                        .map_err(|never| match never {})
                        .boxed_unsync(),
                );
            return Box::pin(async move { answer.map_err(Into::into) });
        }
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await.map_err(Into::into)?;
            Ok(response.map(|body| body.map_err(Into::into).boxed_unsync()))
        })
    }
}
