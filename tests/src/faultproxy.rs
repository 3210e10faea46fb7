//! A TCP fault proxy between one process and one apiserver: toxiproxy's server, built from its
//! Go module by `scripts/toxiproxy.sh` once per machine, driven through its HTTP API. TLS
//! passes through untouched (the apiservers' certificates name 127.0.0.1), so a kubeconfig
//! whose server is the proxy's listen address reaches the same apiserver through it.
//!
//! ```text
//! replica ──▶ 127.0.0.1:<listen> ─[toxics]─▶ apiserver
//!   hang()     every byte held back (a `timeout` toxic of 0): connections stay open, silent
//!   slow(ms)   every chunk delayed (`latency`)
//!   reset()    every connection reset (`reset_peer`)
//!   heal()     all toxics removed
//! ```

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use crate::daemon::Daemon;
use crate::fixtures::free_port;

/// How long the proxy may take to answer its API.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The toxiproxy server binary, built (when missing) by `scripts/toxiproxy.sh` once per
/// process.
pub fn toxiproxy_binary() -> Result<PathBuf> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = BINARY.get_or_init(|| {
        crate::daemon::built_by_script(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scripts/toxiproxy.sh"
        ))
    });
    found.clone().map_err(|e| anyhow!(e))
}

/// A running toxiproxy server.
pub struct FaultProxy {
    _daemon: Daemon,
    api: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

/// One proxied link: its name on the server and the address it listens on.
#[derive(Clone, Debug)]
pub struct Link {
    /// The proxy's name.
    pub name: String,
    /// `127.0.0.1:<port>`.
    pub listen: String,
}

impl FaultProxy {
    /// Starts a server logging into `dir` (created) and waits until its API answers.
    pub async fn start(dir: &Path) -> Result<Self> {
        let binary = toxiproxy_binary()?;
        std::fs::create_dir_all(dir)?;
        let port = free_port()?;
        let port_arg = port.to_string();
        let daemon = Daemon::spawn(
            "toxiproxy",
            &binary,
            &["-host", "127.0.0.1", "-port", port_arg.as_str()],
            &[],
            &dir.join("toxiproxy.log"),
        )?;
        let proxy = Self {
            _daemon: daemon,
            api: format!("http://127.0.0.1:{port}"),
            client: Client::builder(TokioExecutor::new()).build_http(),
        };
        let began = std::time::Instant::now();
        loop {
            match proxy.call("GET", "/version", None).await {
                Ok(_) => return Ok(proxy),
                Err(_) if began.elapsed() < START_TIMEOUT => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e.context("toxiproxy does not answer")),
            }
        }
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value> {
        let bytes = body.map(|b| b.to_string()).unwrap_or_default();
        let request = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.api))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(bytes)))?;
        let response = self.client.request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        if !status.is_success() {
            bail!(
                "toxiproxy {method} {path}: {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        Ok(serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    /// A new link named `name` to `upstream` (`host:port`), listening on a free port.
    pub async fn link(&self, name: &str, upstream: &str) -> Result<Link> {
        let listen = format!("127.0.0.1:{}", free_port()?);
        self.call(
            "POST",
            "/proxies",
            Some(json!({"name": name, "listen": listen, "upstream": upstream, "enabled": true})),
        )
        .await
        .with_context(|| format!("creating link {name} to {upstream}"))?;
        Ok(Link {
            name: name.to_string(),
            listen,
        })
    }

    async fn toxic(&self, link: &Link, name: &str, kind: &str, attributes: Value) -> Result<()> {
        for stream in ["downstream", "upstream"] {
            let toxic = json!({
                "name": format!("{name}-{stream}"),
                "type": kind,
                "stream": stream,
                "toxicity": 1.0,
                "attributes": attributes,
            });
            self.call(
                "POST",
                &format!("/proxies/{}/toxics", link.name),
                Some(toxic),
            )
            .await?;
        }
        Ok(())
    }

    /// Holds back every byte both ways: open connections hang, new ones connect and hang.
    pub async fn hang(&self, link: &Link) -> Result<()> {
        self.toxic(link, "hang", "timeout", json!({"timeout": 0}))
            .await
    }

    /// Delays every chunk both ways by `latency` (so a request and its answer by twice that).
    pub async fn slow(&self, link: &Link, latency: Duration) -> Result<()> {
        let ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX) / 2;
        self.toxic(link, "slow", "latency", json!({"latency": ms, "jitter": 0}))
            .await
    }

    /// Resets every connection as soon as it carries data.
    pub async fn reset(&self, link: &Link) -> Result<()> {
        self.toxic(link, "reset", "reset_peer", json!({"timeout": 0}))
            .await
    }

    /// Refuses connections (the link disabled) or accepts them again.
    pub async fn set_enabled(&self, link: &Link, enabled: bool) -> Result<()> {
        self.call(
            "POST",
            &format!("/proxies/{}", link.name),
            Some(json!({"enabled": enabled})),
        )
        .await
        .map(drop)
    }

    /// Removes every toxic of `link`.
    pub async fn heal(&self, link: &Link) -> Result<()> {
        let toxics = self
            .call("GET", &format!("/proxies/{}/toxics", link.name), None)
            .await?;
        for toxic in toxics.as_array().into_iter().flatten() {
            if let Some(name) = toxic["name"].as_str() {
                self.call(
                    "DELETE",
                    &format!("/proxies/{}/toxics/{name}", link.name),
                    None,
                )
                .await?;
            }
        }
        Ok(())
    }
}

/// A copy of kubeconfig `source` at `target` whose server is `link`'s listen address.
pub fn kubeconfig_through(source: &Path, link: &Link, target: &Path) -> Result<PathBuf> {
    let text =
        std::fs::read_to_string(source).with_context(|| format!("reading {}", source.display()))?;
    let mut config: serde_json::Value = serde_saphyr::from_str(&text)?;
    let clusters = config["clusters"]
        .as_array_mut()
        .context("the kubeconfig lists no clusters")?;
    for cluster in clusters {
        cluster["cluster"]["server"] = serde_json::Value::from(format!("https://{}", link.listen));
    }
    std::fs::write(target, serde_saphyr::to_string(&config)?)?;
    Ok(target.to_path_buf())
}
