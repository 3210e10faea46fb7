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

/// What `/metrics` is encoded as: prometheus-client writes the OpenMetrics text format, which
/// Prometheus negotiates by this type (served as the older text format, `# EOF` and the
/// `_total` handling would be read by the wrong parser).
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The probes' plain answers.
const PLAIN: &str = "text/plain; charset=utf-8";

/// Serves `/metrics` until `shutdown`; returns the bound address through `bound`.
pub async fn serve_metrics(listener: TcpListener, shutdown: CancellationToken) {
    serve(listener, shutdown, |path| match path {
        "/metrics" => (StatusCode::OK, OPENMETRICS, metrics().encode()),
        _ => (StatusCode::NOT_FOUND, PLAIN, "not found\n".into()),
    })
    .await;
}

/// Serves `/healthz` and `/readyz` until `shutdown`.
pub async fn serve_health(listener: TcpListener, health: Health, shutdown: CancellationToken) {
    serve(listener, shutdown, move |path| match path {
        "/healthz" => (StatusCode::OK, PLAIN, "ok\n".into()),
        "/readyz" if health.is_ready() => (StatusCode::OK, PLAIN, "ok\n".into()),
        "/readyz" => (StatusCode::SERVICE_UNAVAILABLE, PLAIN, "starting\n".into()),
        _ => (StatusCode::NOT_FOUND, PLAIN, "not found\n".into()),
    })
    .await;
}

async fn serve<F>(listener: TcpListener, shutdown: CancellationToken, route: F)
where
    F: Fn(&str) -> (StatusCode, &'static str, String) + Clone + Send + Sync + 'static,
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
                let (status, content_type, body) = route(request.uri().path());
                async move {
                    let mut response = Response::new(Full::new(Bytes::from(body)));
                    *response.status_mut() = status;
                    if let Ok(value) = content_type.parse() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The head of the answer to `GET path`, lower-cased.
    async fn head_of(addr: SocketAddr, path: &str) -> std::io::Result<String> {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await?;
        Ok(answer
            .split("\r\n\r\n")
            .next()
            .unwrap_or_default()
            .to_lowercase())
    }

    #[tokio::test]
    async fn metrics_are_served_as_the_openmetrics_text_they_are_encoded_in() -> std::io::Result<()>
    {
        let shutdown = CancellationToken::new();
        let metrics = TcpListener::bind("127.0.0.1:0").await?;
        let metrics_addr = metrics.local_addr()?;
        let probes = TcpListener::bind("127.0.0.1:0").await?;
        let probes_addr = probes.local_addr()?;
        tokio::spawn(serve_metrics(metrics, shutdown.clone()));
        tokio::spawn(serve_health(probes, Health::default(), shutdown.clone()));
        let head = head_of(metrics_addr, "/metrics").await?;
        assert!(
            head.contains("content-type: application/openmetrics-text; version=1.0.0"),
            "{head}"
        );
        let head = head_of(probes_addr, "/healthz").await?;
        assert!(head.contains("content-type: text/plain"), "{head}");
        shutdown.cancel();
        Ok(())
    }
}
