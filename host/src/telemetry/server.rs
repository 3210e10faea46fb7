//! The HTTP endpoints: `/metrics` on the metrics address, `/healthz` and `/readyz` on the
//! probe address. The probes are process checks (spec: "not proof that a Connection or
//! instance is syncing"): healthz answers while the process serves, readyz once the
//! controllers have started (or the process is a standby replica waiting for the lease).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::metrics;

/// Readiness shared between the runtime and the probe endpoint.
#[derive(Clone, Debug, Default)]
pub struct Health {
    ready: Arc<AtomicBool>,
}

impl Health {
    /// Marks the process ready (controllers started, or waiting as a standby).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}

/// Serves `/metrics` until `shutdown`; returns the bound address through `bound`.
pub async fn serve_metrics(listener: TcpListener, shutdown: CancellationToken) {
    serve(listener, shutdown, |path| match path {
        "/metrics" => (StatusCode::OK, metrics().encode()),
        _ => (StatusCode::NOT_FOUND, "not found\n".into()),
    })
    .await;
}

/// Serves `/healthz` and `/readyz` until `shutdown`.
pub async fn serve_health(listener: TcpListener, health: Health, shutdown: CancellationToken) {
    serve(listener, shutdown, move |path| match path {
        "/healthz" => (StatusCode::OK, "ok\n".into()),
        "/readyz" if health.is_ready() => (StatusCode::OK, "ok\n".into()),
        "/readyz" => (StatusCode::SERVICE_UNAVAILABLE, "starting\n".into()),
        _ => (StatusCode::NOT_FOUND, "not found\n".into()),
    })
    .await;
}

async fn serve<F>(listener: TcpListener, shutdown: CancellationToken, route: F)
where
    F: Fn(&str) -> (StatusCode, String) + Clone + Send + Sync + 'static,
{
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer): (_, SocketAddr) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::debug!(%error, "accept failed");
                continue;
            }
        };
        let route = route.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let (status, body) = route(request.uri().path());
                async move {
                    let mut response = Response::new(Full::new(Bytes::from(body)));
                    *response.status_mut() = status;
                    if let Ok(value) = "text/plain; version=0.0.4; charset=utf-8".parse() {
                        response
                            .headers_mut()
                            .insert(hyper::header::CONTENT_TYPE, value);
                    }
                    Ok::<_, Infallible>(response)
                }
            });
            if let Err(error) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%peer, %error, "probe/metrics connection ended with an error");
            }
        });
    }
}
