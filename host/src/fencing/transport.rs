//! The transport under every consumer and provider client: requests spread over a few HTTP/2
//! connections when the API server offers HTTP/2, each watch on an HTTP/1.1 connection of its
//! own.
//!
//! ```text
//! kube's stock transport (HTTP/1.1)        this one
//!   a connection per request in flight       requests ─▶ one of 4 HTTP/2 connections (ALPN h2,
//!   and one per open watch                              else HTTP/1.1), a stream each
//!                                            watches  ─▶ a connection each, HTTP/1.1
//! ```
//!
//! kube's stock client speaks HTTP/1.1 only. A konnector syncing 50 APIs keeps up to
//! `--sync-concurrency` requests in flight per API, so it held up to 800 TLS connections per
//! cluster during a first sync, each with its read and write buffers, its TLS state and its
//! dispatcher's task: most of its heap at that peak. The layers above the transport are kube's
//! own (base URI, authentication, extra headers), so a request is the same request on either.
//!
//! Watches stay on HTTP/1.1 because a watch holds its stream for as long as it runs, and the
//! API server allows 100 streams per HTTP/2 connection: watches sharing connections with
//! requests would leave requests fewer streams with every API bound, and none past a hundred.
//! Four request connections give 400 streams; requests beyond that wait in the client for a
//! stream, as the API server's own priority and fairness would have them wait.
//!
//! A kubeconfig naming a proxy, or an exec plugin (whose certificate expiry kube tracks inside
//! its own builder), keeps kube's stock transport; so does every `http://` server, which
//! offers no ALPN. The Lease client keeps it always: its renewals stay on connections of their
//! own, never queued behind a sync's traffic.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper_rustls::{FixedServerNameResolver, HttpsConnector};
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Client as HyperClient, ResponseFuture};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ClientBuilder, ConfigExt, DynBody};
use rustls::pki_types::ServerName;
use tower::util::BoxService;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt as _};
use tower_http::ServiceExt as _;

/// The service kube's own builder produces, so either transport takes the same layers.
pub(super) type Transport = BoxService<Request<Body>, Response<Box<DynBody>>, BoxError>;

/// HTTP/2 connections per cluster for requests: the API server allows 100 streams on each.
const REQUEST_CONNECTIONS: usize = 4;

/// How often an idle HTTP/2 connection is pinged, so that a connection a partition cut is
/// found dead and replaced instead of holding a quarter of the client's requests.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(20);

/// How long a ping may go unanswered before the connection counts as dead.
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

type Connector = TimeoutConnector<HttpsConnector<HttpConnector>>;

/// The builder of a client for `config`: requests over HTTP/2 where the server offers it,
/// kube's stock builder where this transport does not apply.
pub(super) fn builder(config: kube::Config) -> Result<ClientBuilder<Transport>, kube::Error> {
    if !shares_connections(&config) {
        return ClientBuilder::try_from(config);
    }
    let tls = config.rustls_client_config()?;
    // A kubeconfig's `tls-server-name` is the name the server's certificate is verified for.
    let server_name = config
        .tls_server_name
        .clone()
        .map(|name| {
            ServerName::try_from(name).map_err(|e| {
                kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e))
            })
        })
        .transpose()?;
    let https = |h2: bool| {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(config.connect_timeout);
        // A request is a HEADERS and a DATA frame, often written apart: with Nagle's
        // algorithm the second waits for the server's delayed ACK of the first, 40 ms.
        http.set_nodelay(true);
        let mut builder = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls.clone())
            .https_or_http();
        if let Some(name) = &server_name {
            builder = builder.with_server_name_resolver(FixedServerNameResolver::new(name.clone()));
        }
        let https = if h2 {
            builder.enable_all_versions().wrap_connector(http)
        } else {
            builder.enable_http1().wrap_connector(http)
        };
        let mut connector = TimeoutConnector::new(https);
        connector.set_read_timeout(config.read_timeout);
        connector.set_write_timeout(config.write_timeout);
        connector.set_reset_reader_on_write(config.reset_reader_on_write);
        connector
    };
    let requests = https(true);
    let routed = Routed {
        watches: HyperClient::builder(TokioExecutor::new()).build(https(false)),
        requests: (0..REQUEST_CONNECTIONS)
            .map(|_| {
                HyperClient::builder(TokioExecutor::new())
                    .timer(TokioTimer::new())
                    .pool_timer(TokioTimer::new())
                    .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
                    .http2_keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
                    .http2_keep_alive_while_idle(true)
                    .build(requests.clone())
            })
            .collect(),
        next: Arc::default(),
    };
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(routed)
        .map_response_body(|body| {
            Box::new(http_body_util::BodyExt::map_err(body, BoxError::from)) as Box<DynBody>
        })
        .boxed();
    Ok(ClientBuilder::new(service, config.default_namespace))
}

/// Whether `config` may use this transport: an `https://` server reached directly, with no
/// exec plugin.
fn shares_connections(config: &kube::Config) -> bool {
    config.cluster_url.scheme_str() == Some("https")
        && config.proxy_url.is_none()
        && config.auth_info.exec.is_none()
}

/// Whether `uri` opens a watch, which holds its connection (or stream) while it runs.
fn is_watch(uri: &Uri) -> bool {
    uri.query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

/// Watches to their own HTTP/1.1 connections, other requests in turn to the HTTP/2 ones.
#[derive(Clone)]
struct Routed {
    watches: HyperClient<Connector, Body>,
    requests: Arc<[HyperClient<Connector, Body>]>,
    next: Arc<AtomicUsize>,
}

impl Service<Request<Body>> for Routed {
    type Response = Response<Incoming>;
    type Error = hyper_util::client::legacy::Error;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // hyper's client takes every request; a connection is found or made per request.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> ResponseFuture {
        if is_watch(request.uri()) {
            return self.watches.request(request);
        }
        let turn = self.next.fetch_add(1, Ordering::Relaxed) % self.requests.len();
        self.requests[turn].request(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(url: &str) -> kube::Config {
        kube::Config::new(url.parse().expect("a valid URL"))
    }

    #[test]
    fn an_https_server_reached_directly_shares_one_connection() {
        assert!(shares_connections(&config("https://10.0.0.1:6443")));
    }

    #[test]
    fn a_proxy_an_exec_plugin_or_plain_http_keep_the_stock_transport() {
        let mut proxied = config("https://10.0.0.1:6443");
        proxied.proxy_url = Some("http://proxy:3128".parse().expect("a valid URL"));
        let mut exec = config("https://10.0.0.1:6443");
        exec.auth_info.exec = Some(
            serde_json::from_value(serde_json::json!({"command": "get-token"}))
                .expect("an exec plugin"),
        );
        for (what, config) in [
            ("proxy", proxied),
            ("exec plugin", exec),
            ("plain http", config("http://127.0.0.1:8080")),
        ] {
            assert!(!shares_connections(&config), "{what}");
        }
    }

    #[test]
    fn watches_are_told_from_other_requests_by_their_query() {
        for (uri, watch) in [
            (
                "/api/v1/namespaces/a/configmaps?watch=true&resourceVersion=5",
                true,
            ),
            ("/apis/x.io/v1/widgets?labelSelector=a&watch=1", true),
            ("/apis/x.io/v1/widgets?limit=500", false),
            (
                "/apis/x.io/v1/widgets?fieldSelector=metadata.name%3Dwatch%3Dtrue",
                false,
            ),
            ("/apis/x.io/v1/namespaces/watch/widgets/watch", false),
        ] {
            let uri: Uri = uri.parse().expect("a valid URI");
            assert_eq!(is_watch(&uri), watch, "{uri}");
        }
    }
}
