//! A real OCI registry for tests: distribution's `registry` (the reference implementation of
//! the OCI distribution API), built from its Go module by `scripts/registry.sh` once per
//! machine and started on a free loopback port over plain HTTP, with its storage in a
//! directory of the caller's. Anything that pushes or pulls OCI artifacts can use it: `helm
//! push`/`helm install oci://` (with `--plain-http`), the image pushes below, or any other
//! artifact a feature supplies through a registry.
//!
//! ```text
//! Registry::start(dir) ──▶ registry serve <dir>/config.yml   (127.0.0.1:<port>, storage <dir>/storage)
//!    push_layout(layout, repo, tag)  OCI image layout ──▶ blobs + manifest (distribution API)
//!    manifest(repo, ref) / blob(repo, digest)               ◀── what a runtime would pull
//! Registry::start_with_user(dir, user) ── the same, answering only `user` (htpasswd, basic auth)
//! ```
//!
//! A registry with a user keeps only the password's bcrypt hash on disk (`<dir>/htpasswd`, the
//! format distribution's htpasswd access controller reads); the password itself is never written
//! to a file or shown by `Debug`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use base64::Engine as _;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::daemon::Daemon;
use crate::fixtures::free_port;

/// The media type of an OCI image index.
pub const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
/// The media type of an OCI image manifest.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

/// How long the registry may take to answer its first request.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The registry binary, built (when missing) by `scripts/registry.sh` once per process.
pub fn registry_binary() -> Result<PathBuf> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = BINARY.get_or_init(|| {
        crate::daemon::built_by_script(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scripts/registry.sh"
        ))
    });
    found.clone().map_err(|e| anyhow!(e))
}

/// The bcrypt cost of the htpasswd line: the lowest bcrypt allows, since the registry checks
/// the password on every request and a test user guards nothing worth the CPU.
const HTPASSWD_COST: u32 = 4;

/// A user an authenticating registry accepts: a name and a password, given to a client as a
/// docker config (the content of a pull Secret). `Debug` shows the name only.
#[derive(Clone)]
pub struct RegistryUser {
    name: String,
    password: String,
}

impl std::fmt::Debug for RegistryUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryUser")
            .field("name", &self.name)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl RegistryUser {
    /// `name` with a fresh random password.
    pub fn random(name: &str) -> Result<Self> {
        let mut bytes = [0u8; 18];
        getrandom::fill(&mut bytes).map_err(|e| anyhow!("a random password: {e}"))?;
        let password = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        Ok(Self::new(name, &password))
    }

    /// `name` with `password`.
    pub fn new(name: &str, password: &str) -> Self {
        Self {
            name: name.to_owned(),
            password: password.to_owned(),
        }
    }

    /// The user's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The password (for a test that checks it appears nowhere it must not).
    pub fn password(&self) -> &str {
        &self.password
    }

    /// A `.dockerconfigjson` document giving this user for `registry` (`host:port`), as `kubectl
    /// create secret docker-registry` writes it.
    pub fn docker_config_json(&self, registry: &str) -> String {
        let auth = base64::engine::general_purpose::STANDARD
            .encode(format!("{}:{}", self.name, self.password));
        serde_json::json!({"auths": {registry: {"auth": auth}}}).to_string()
    }

    /// The `Authorization` header value of HTTP basic authentication.
    fn basic_authorization(&self) -> String {
        let credentials = format!("{}:{}", self.name, self.password);
        let encoded = base64::engine::general_purpose::STANDARD.encode(credentials);
        format!("Basic {encoded}")
    }

    /// The htpasswd line distribution accepts: `name:<bcrypt hash>`.
    fn htpasswd_line(&self) -> Result<String> {
        let hash = bcrypt::hash(&self.password, HTPASSWD_COST)
            .map_err(|e| anyhow!("hashing the registry password: {e}"))?;
        Ok(format!("{}:{hash}\n", self.name))
    }
}

/// A running registry.
pub struct Registry {
    daemon: Daemon,
    host: String,
    storage: PathBuf,
    client: Client<HttpConnector, Full<Bytes>>,
    /// The one user it accepts, when it authenticates.
    user: Option<RegistryUser>,
}

/// One HTTP answer of the registry.
struct Answer {
    status: u16,
    location: Option<String>,
    content_type: Option<String>,
    body: Bytes,
}

impl Registry {
    /// Starts a registry storing into `dir` (created), on a free loopback port; returns once it
    /// answers `GET /v2/`.
    pub async fn start(dir: &Path) -> Result<Self> {
        Self::start_as(dir, None).await
    }

    /// Starts a registry as [`Registry::start`] does, answering only `user` (HTTP basic
    /// authentication against an htpasswd file): anonymous requests and other credentials get
    /// 401. This harness's own requests authenticate as `user`.
    pub async fn start_with_user(dir: &Path, user: RegistryUser) -> Result<Self> {
        Self::start_as(dir, Some(user)).await
    }

    async fn start_as(dir: &Path, user: Option<RegistryUser>) -> Result<Self> {
        let binary = registry_binary()?;
        std::fs::create_dir_all(dir)?;
        let htpasswd = match &user {
            Some(user) => {
                let file = dir.join("htpasswd");
                std::fs::write(&file, user.htpasswd_line()?)?;
                Some(file)
            }
            None => None,
        };
        // A port found free can be taken before the registry binds it: try a few.
        let mut last = anyhow!("not started");
        for _ in 0..3 {
            let port = free_port()?;
            let config = dir.join("config.yml");
            let yaml = config_yaml(&dir.join("storage"), port, htpasswd.as_deref());
            std::fs::write(&config, yaml)?;
            let log = dir.join("registry.log");
            let args = [Path::new("serve"), &config];
            let daemon = Daemon::spawn("registry", &binary, &args, &[], &log)?;
            let mut registry = Self {
                daemon,
                host: format!("127.0.0.1:{port}"),
                storage: dir.join("storage"),
                client: Client::builder(TokioExecutor::new()).build_http(),
                user: user.clone(),
            };
            match registry.wait_answering().await {
                Ok(()) => return Ok(registry),
                Err(e) => last = e.context(registry.daemon.log_tail(20)),
            }
        }
        Err(last)
    }

    /// `127.0.0.1:<port>`, the registry part of a reference (`<host>/<repository>:<tag>`).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Alters the stored blob `digest` in place (its first byte flipped, its length kept), as
    /// a compromised registry or storage would: the registry then serves bytes that no longer
    /// match the digest that names them.
    pub fn tamper_blob(&self, digest: &str) -> Result<()> {
        let hex = digest
            .strip_prefix("sha256:")
            .context("not a sha256 digest")?;
        let file = self
            .storage
            .join("docker/registry/v2/blobs/sha256")
            .join(hex.get(..2).context("a short digest")?)
            .join(hex)
            .join("data");
        let mut bytes = read_blob_file(&file)?;
        let first = bytes.first_mut().context("an empty blob")?;
        *first ^= 0xff;
        std::fs::write(&file, bytes).with_context(|| format!("writing {}", file.display()))
    }

    /// The registry's log file.
    pub fn log(&self) -> &Path {
        self.daemon.log()
    }

    async fn wait_answering(&mut self) -> Result<()> {
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            ensure!(self.daemon.is_running(), "the registry exited");
            match self.request("GET", "/v2/", None, Bytes::new()).await {
                Ok(answer) if answer.status == 200 => return Ok(()),
                Ok(answer) => bail!("GET /v2/ answered {}", answer.status),
                Err(_) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e.context("the registry does not answer")),
            }
        }
    }

    async fn request(
        &self,
        method: &str,
        path_or_url: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> Result<Answer> {
        let uri = if path_or_url.starts_with("http://") {
            path_or_url.to_string()
        } else {
            format!("http://{}{path_or_url}", self.host)
        };
        let mut request = http::Request::builder()
            .method(method)
            .uri(&uri)
            .header("content-length", body.len());
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        if let Some(user) = &self.user {
            request = request.header("authorization", user.basic_authorization());
        }
        if method == "GET" || method == "HEAD" {
            let accept = format!("{MANIFEST_MEDIA_TYPE}, {INDEX_MEDIA_TYPE}");
            request = request.header("accept", accept);
        }
        let response = self
            .client
            .request(request.body(Full::new(body))?)
            .await
            .with_context(|| format!("{method} {uri}"))?;
        let header = |name: &str| {
            let value = response.headers().get(name)?;
            value.to_str().ok().map(str::to_string)
        };
        let (location, content_type) = (header("location"), header("content-type"));
        let status = response.status().as_u16();
        let body = response.into_body().collect().await?.to_bytes();
        Ok(Answer {
            status,
            location,
            content_type,
            body,
        })
    }

    /// Uploads one blob (monolithically) unless the registry has it already.
    async fn push_blob(&self, repository: &str, digest: &str, data: Bytes) -> Result<()> {
        let exists = format!("/v2/{repository}/blobs/{digest}");
        if self
            .request("HEAD", &exists, None, Bytes::new())
            .await?
            .status
            == 200
        {
            return Ok(());
        }
        let start = format!("/v2/{repository}/blobs/uploads/");
        let started = self.request("POST", &start, None, Bytes::new()).await?;
        ensure!(started.status == 202, "POST {start}: {}", started.status);
        let location = started.location.context("no upload location")?;
        let separator = if location.contains('?') { '&' } else { '?' };
        let put = format!("{location}{separator}digest={digest}");
        let octets = Some("application/octet-stream");
        let done = self.request("PUT", &put, octets, data).await?;
        let text = String::from_utf8_lossy(&done.body);
        ensure!(
            done.status == 201,
            "PUT blob {digest}: {} {text}",
            done.status
        );
        Ok(())
    }

    /// Pushes the image (or index of images) of the OCI image layout `layout` (a directory
    /// with `oci-layout`, `index.json` and `blobs/sha256/`) as `repository:tag`: every blob,
    /// every manifest by digest, and the top one under the tag. Returns the tag's digest.
    pub async fn push_layout(&self, layout: &Path, repository: &str, tag: &str) -> Result<String> {
        let index: Value = serde_json::from_slice(&read_blob_file(&layout.join("index.json"))?)?;
        let manifests = index["manifests"]
            .as_array()
            .context("index.json has no manifests")?;
        let blob = |digest: &str| -> Result<Bytes> {
            let hex = digest
                .strip_prefix("sha256:")
                .context("not a sha256 digest")?;
            let data = read_blob_file(&layout.join("blobs/sha256").join(hex))?;
            ensure!(
                sha256_digest(&data) == digest,
                "blob {digest} does not match its digest"
            );
            Ok(Bytes::from(data))
        };
        let mut pushed = Vec::new();
        for descriptor in manifests {
            let digest = descriptor["digest"]
                .as_str()
                .context("a manifest without digest")?;
            let media_type = descriptor["mediaType"]
                .as_str()
                .unwrap_or(MANIFEST_MEDIA_TYPE);
            let manifest_bytes = blob(digest)?;
            let manifest: Value = serde_json::from_slice(&manifest_bytes)?;
            // An index in the layout: push the images it lists first.
            let images = match media_type {
                INDEX_MEDIA_TYPE => manifest["manifests"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default(),
                _ => vec![descriptor.clone()],
            };
            for image in &images {
                let image_digest = image["digest"].as_str().context("no digest")?;
                let image_manifest: Value = serde_json::from_slice(&blob(image_digest)?)?;
                let layers = image_manifest["layers"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                for part in layers.iter().chain([&image_manifest["config"]]) {
                    let part = part["digest"]
                        .as_str()
                        .context("a descriptor without digest")?;
                    self.push_blob(repository, part, blob(part)?).await?;
                }
                if image_digest != digest {
                    self.put_manifest(
                        repository,
                        image_digest,
                        MANIFEST_MEDIA_TYPE,
                        blob(image_digest)?,
                    )
                    .await?;
                }
            }
            pushed.push((digest.to_string(), media_type.to_string(), manifest_bytes));
        }
        let [(digest, media_type, bytes)] = <[_; 1]>::try_from(pushed).map_err(|p| {
            anyhow!(
                "index.json lists {} manifests; push one image or one index",
                p.len()
            )
        })?;
        self.put_manifest(repository, tag, &media_type, bytes)
            .await?;
        Ok(digest)
    }

    async fn put_manifest(
        &self,
        repository: &str,
        reference: &str,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<()> {
        let path = format!("/v2/{repository}/manifests/{reference}");
        let done = self.request("PUT", &path, Some(media_type), bytes).await?;
        let text = String::from_utf8_lossy(&done.body);
        ensure!(done.status == 201, "PUT {path}: {} {text}", done.status);
        Ok(())
    }

    /// The manifest `repository:reference` and its media type, as a runtime pulls it.
    pub async fn manifest(&self, repository: &str, reference: &str) -> Result<(Value, String)> {
        let path = format!("/v2/{repository}/manifests/{reference}");
        let answer = self.request("GET", &path, None, Bytes::new()).await?;
        ensure!(answer.status == 200, "GET {path}: {}", answer.status);
        let media_type = answer.content_type.unwrap_or_default();
        Ok((serde_json::from_slice(&answer.body)?, media_type))
    }

    /// The blob `digest` of `repository`, checked against its digest.
    pub async fn blob(&self, repository: &str, digest: &str) -> Result<Bytes> {
        let path = format!("/v2/{repository}/blobs/{digest}");
        let answer = self.request("GET", &path, None, Bytes::new()).await?;
        ensure!(answer.status == 200, "GET {path}: {}", answer.status);
        ensure!(
            sha256_digest(&answer.body) == digest,
            "blob {digest} came back different"
        );
        Ok(answer.body)
    }
}

/// `sha256:<hex>` of `data`.
pub fn sha256_digest(data: &[u8]) -> String {
    let hash = Sha256::digest(data);
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

fn read_blob_file(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// distribution's configuration: filesystem storage, plain HTTP on loopback, deletes allowed
/// (so a test can also exercise removal); with `htpasswd`, only its users are let in.
fn config_yaml(storage: &Path, port: u16, htpasswd: Option<&Path>) -> String {
    let auth = htpasswd
        .map(|file| {
            format!(
                "auth:\n  htpasswd:\n    realm: kbind-tests\n    path: {}\n",
                file.display()
            )
        })
        .unwrap_or_default();
    format!(
        "version: 0.1\n\
         log:\n  level: info\n  accesslog:\n    disabled: false\n\
         storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
         http:\n  addr: 127.0.0.1:{port}\n{auth}",
        storage.display()
    )
}
