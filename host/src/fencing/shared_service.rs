//! A cloneable handle on a service that is not: the retry layer calls its inner service again
//! from the response future, so it needs a clone, and kube's boxed stack is not `Clone`.
//! Unlike tower's `Buffer` it spawns no worker, so every call still runs in the caller's task,
//! where the hold check reads the task's scope. kube's stack (auth, trace, hyper's pooled
//! client) is always ready, so sharing readiness between clones is harmless.

use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use tower::{Layer, Service};

/// Wraps a service in a [`SharedService`].
#[derive(Clone, Copy, Debug)]
pub struct SharedLayer;

impl<S> Layer<S> for SharedLayer {
    type Service = SharedService<S>;
    fn layer(&self, inner: S) -> SharedService<S> {
        SharedService(Arc::new(Mutex::new(inner)))
    }
}

/// One service behind a lock, shared by its clones; held only while a call is made, never
/// while its future runs.
#[derive(Debug)]
pub struct SharedService<S>(Arc<Mutex<S>>);

impl<S> Clone for SharedService<S> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<S, R> Service<R> for SharedService<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .poll_ready(cx)
    }

    fn call(&mut self, request: R) -> S::Future {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .call(request)
    }
}
