//! Building blocks for e2e tests: an in-process konnector per test binary, unique names,
//! and small builders for the objects every test creates (credential Secrets, Connections,
//! exported CRDs).
//!
//! One konnector serves all tests of a binary because controllers watch cluster-wide: two
//! konnectors on one consumer would both reconcile every Connection. Tests isolate by object
//! names, namespaces and API groups instead.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::eventually;
pub use crate::syncenv::ensure_namespace;
use crate::testenv::{Cluster, ClusterPair};
use konnector::api::names::EXPORTED_LABEL;
use konnector::api::{Connection, ConnectionSpec, SchemaPolicy, SchemaSource, SecretReference};
use konnector::policy::Policies;
use konnector::registry::Engagements;
use konnector::shared::Shared;

/// The credential namespace the test konnector uses (the product default).
pub const SECRET_NAMESPACE: &str = "kbind";
/// How long e2e tests wait for the konnector to converge.
pub const CONVERGE: Duration = Duration::from_secs(60);

/// A konnector running in-process against a consumer, on its own runtime thread.
#[derive(Debug)]
pub struct Konnector {
    /// The engagement registry the controllers share.
    pub engagements: Engagements,
    /// Cancels every controller (never used by shared konnectors).
    pub shutdown: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Konnector {
    /// Stops every controller and waits until the konnector's thread has ended, so that a
    /// test can start a new konnector as a restarted process would.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        if let Some(thread) = self.thread.take() {
            tokio::task::spawn_blocking(move || thread.join())
                .await?
                .map_err(|_| anyhow::anyhow!("the konnector thread panicked"))?;
        }
        Ok(())
    }
}

/// Timings used by test konnectors: short, so tests need no 30 s waits.
pub fn test_connection_config() -> konnector::connection::Config {
    konnector::connection::Config {
        resync: Duration::from_secs(1),
        drain_requeue: Duration::from_secs(2),
        secret_namespace: SECRET_NAMESPACE.to_string(),
        schema_wait: Duration::from_secs(30),
        max_backoff: Duration::from_secs(2),
        provider_transport: konnector::provider::kubeconfig::Transport::VerifiedTls,
        // Longer than the provider outages fault tests inject, short enough to watch expire.
        provider_grace_period: Duration::from_secs(30),
        // Short enough that a module pushed after a failed pull is found within a test's wait.
        policy_retry: konnector::policy::retry::RetrySchedule {
            first: Duration::from_secs(1),
            cap: Duration::from_secs(8),
        },
    }
}

/// Binding and sync timings used by test konnectors.
pub fn test_binding_settings() -> konnector::binding::Config {
    konnector::binding::Config {
        status_interval: Duration::from_secs(1),
        pending_requeue: Duration::from_secs(1),
        sync: konnector::sync::SyncConfig {
            resync_interval: Duration::from_secs(10),
            ..konnector::sync::SyncConfig::default()
        },
        ..konnector::binding::Config::default()
    }
}

/// The konnector shared by every test of this binary, running against `pair.consumer`.
pub fn shared_konnector(pair: &'static ClusterPair) -> anyhow::Result<&'static Konnector> {
    static KONNECTOR: OnceLock<Result<Konnector, String>> = OnceLock::new();
    KONNECTOR
        .get_or_init(|| start_konnector(&pair.consumer).map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(|e| anyhow::anyhow!("starting the test konnector: {e}"))
}

/// Starts the konnector's controllers for `consumer` on a dedicated runtime thread.
pub fn start_konnector(consumer: &Cluster) -> anyhow::Result<Konnector> {
    start_konnector_with(consumer, test_connection_config())
}

/// [`start_konnector`] with other Connection controller timings (a longer grace period, say).
pub fn start_konnector_with(
    consumer: &Cluster,
    connection: konnector::connection::Config,
) -> anyhow::Result<Konnector> {
    start_konnector_through(consumer, connection, None)
}

/// [`start_konnector_with`] whose consumer client answers what `refusals` matches with 503
/// while it is switched on (the test's own clients are not affected).
pub fn start_konnector_through(
    consumer: &Cluster,
    connection: konnector::connection::Config,
    refusals: Option<crate::faults::refusals::Refusals>,
) -> anyhow::Result<Konnector> {
    start_konnector_full(consumer, connection, refusals, None)
}

/// [`start_konnector`] that pulls the modules Connections name (`spec.policies`) as `fetch`
/// says (a test registry over plain HTTP, a cache directory).
pub fn start_konnector_pulling(
    consumer: &Cluster,
    fetch: konnector::artifact::FetcherConfig,
) -> anyhow::Result<Konnector> {
    start_konnector_full(consumer, test_connection_config(), None, Some(fetch))
}

fn start_konnector_full(
    consumer: &Cluster,
    connection: konnector::connection::Config,
    refusals: Option<crate::faults::refusals::Refusals>,
    fetch: Option<konnector::artifact::FetcherConfig>,
) -> anyhow::Result<Konnector> {
    let admin = consumer.admin().clone();
    let shutdown = CancellationToken::new();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<anyhow::Result<Engagements>>();
    let thread_shutdown = shutdown.clone();
    let thread = std::thread::Builder::new()
        .name("konnector".into())
        .spawn(move || {
            let runtime = match crate::runtime() {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.into()));
                    return;
                }
            };
            runtime.block_on(async move {
                let started = async {
                    let client = admin.client().await?;
                    install_core_crds(&client).await?;
                    ensure_namespace(&client, SECRET_NAMESPACE).await?;
                    let policies = Policies::builtin()?;
                    anyhow::Ok((client, policies))
                }
                .await;
                let started = match (started, refusals) {
                    (Ok((_, policies)), Some(refusals)) => {
                        async {
                            let config = admin.config().await?;
                            let client = kube::client::ClientBuilder::try_from(config)?
                                .with_layer(&refusals)
                                .build();
                            anyhow::Ok((client, policies))
                        }
                        .await
                    }
                    (started, _) => started,
                };
                match started {
                    Ok((client, policies)) => {
                        let mut shared = Shared::new(client, policies, None);
                        if let Some(config) = fetch {
                            match konnector::shared::PolicyFetch::new(config) {
                                Ok(fetch) => {
                                    shared.policy_fetcher = Some(std::sync::Arc::new(fetch));
                                }
                                Err(e) => {
                                    let _ = ready_tx.send(Err(e.into()));
                                    return;
                                }
                            }
                        }
                        let _ = ready_tx.send(Ok(shared.engagements.clone()));
                        let settings = konnector::manager::Config {
                            connection,
                            binding: test_binding_settings(),
                        };
                        konnector::manager::run(shared, settings, thread_shutdown).await;
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            });
        })
        .context("spawning the konnector thread")?;
    let engagements = ready_rx
        .recv()
        .context("the konnector thread ended before starting")??;
    Ok(Konnector {
        engagements,
        shutdown,
        thread: Some(thread),
    })
}

/// A name unique within this test process: `<prefix>-<n>`.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Writes (creates or replaces) a kubeconfig Secret in the credential namespace.
pub async fn put_kubeconfig_secret(
    consumer: &kube::Client,
    name: &str,
    kubeconfig: &str,
) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(consumer.clone(), SECRET_NAMESPACE);
    let secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "data": {"kubeconfig": ByteString(kubeconfig.as_bytes().to_vec())},
    });
    secrets
        .patch(
            name,
            &PatchParams::apply("kbind-tests").force(),
            &Patch::Apply(&secret),
        )
        .await
        .with_context(|| format!("writing Secret {SECRET_NAMESPACE}/{name}"))?;
    Ok(())
}

/// A Connection referencing Secret `secret` in the credential namespace.
pub fn connection(name: &str, secret: &str, schema: SchemaPolicy, auto_bind: bool) -> Connection {
    Connection::new(
        name,
        ConnectionSpec {
            kubeconfig_secret_ref: SecretReference {
                namespace: SECRET_NAMESPACE.into(),
                name: secret.into(),
                key: "kubeconfig".into(),
            },
            schema,
            auto_bind,
            binding_namespace_selector: None,
            isolation: Default::default(),
            policies: None,
        },
    )
}

/// Creates a Secret with `provider`'s admin kubeconfig and a Connection using it.
pub async fn connect(
    consumer: &kube::Client,
    provider: &Cluster,
    name: &str,
    schema: SchemaPolicy,
    auto_bind: bool,
) -> anyhow::Result<Connection> {
    put_kubeconfig_secret(consumer, name, &provider.admin().kubeconfig_yaml()?).await?;
    let connections: Api<Connection> = Api::all(consumer.clone());
    Ok(connections
        .create(
            &PostParams::default(),
            &connection(name, name, schema, auto_bind),
        )
        .await?)
}

/// The named condition of a Connection, if set.
pub fn condition<'a>(connection: &'a Connection, type_: &str) -> Option<&'a Condition> {
    connection
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// Waits until `check` accepts the Connection, returning it; fails with the last state seen.
pub async fn wait_connection(
    consumer: &kube::Client,
    name: &str,
    what: &str,
    check: impl Fn(&Connection) -> bool,
) -> anyhow::Result<Connection> {
    let connections: Api<Connection> = Api::all(consumer.clone());
    eventually(CONVERGE, || async {
        let current = connections.get(name).await?;
        if check(&current) {
            Ok(current)
        } else {
            Err(anyhow::anyhow!(
                "Connection {name}: waiting for {what}; status is {:?}",
                current.status
            ))
        }
    })
    .await
}

/// Waits until the Connection is Ready.
pub async fn wait_ready(consumer: &kube::Client, name: &str) -> anyhow::Result<Connection> {
    wait_connection(consumer, name, "Ready", |c| {
        has_condition(c, "Ready", "True", "AsExpected")
    })
    .await
}

/// Discovery from CRDs labelled for export, the source most tests use.
pub fn crd_source() -> SchemaPolicy {
    SchemaPolicy {
        source: SchemaSource::Crd,
        ..SchemaPolicy::default()
    }
}

/// Connects `name` to `provider`'s admin kubeconfig with [`crd_source`] discovery and waits
/// until it is Ready.
pub async fn connect_ready(
    consumer: &kube::Client,
    provider: &Cluster,
    name: &str,
) -> anyhow::Result<Connection> {
    connect(consumer, provider, name, crd_source(), false).await?;
    wait_ready(consumer, name).await
}

/// Whether a condition has the given status and reason.
pub fn has_condition(connection: &Connection, type_: &str, status: &str, reason: &str) -> bool {
    condition(connection, type_).is_some_and(|c| c.status == status && c.reason == reason)
}

/// A CRD for a namespaced `Widget`-like kind with spec and status, optionally exported.
pub fn widget_crd(
    group: &str,
    kind: &str,
    exported: bool,
) -> anyhow::Result<CustomResourceDefinition> {
    let plural = format!("{}s", kind.to_lowercase());
    let mut labels = BTreeMap::new();
    if exported {
        labels.insert(EXPORTED_LABEL.to_string(), "true".to_string());
    }
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}"), "labels": labels},
        "spec": {
            "group": group,
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind, "listKind": format!("{kind}List")},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "properties": {
                            "size": {"type": "integer"},
                            "color": {"type": "string"}
                        }},
                        "status": {"type": "object", "properties": {
                            "phase": {"type": "string"}
                        }}
                    }
                }}
            }]
        }
    });
    Ok(serde_json::from_value(crd)?)
}

/// Starts a cluster of its own for a test that changes cluster-wide state (exports, identity).
/// It is killed when the returned value is dropped.
pub fn private_cluster(name: &str) -> anyhow::Result<Cluster> {
    let root = std::env::temp_dir().join("kbind-testenv").join(format!(
        "{}-{}",
        std::process::id(),
        unique("private")
    ));
    std::fs::create_dir_all(&root)?;
    let cluster = Cluster::new(&root, name)?;
    cluster.start()?;
    Ok(cluster)
}

/// Installs the three core.kbind.io CRDs, as the Helm chart does.
pub async fn install_core_crds(client: &kube::Client) -> anyhow::Result<()> {
    for (_, crd) in konnector::api::core_crds() {
        install_crd(client, &crd).await?;
    }
    Ok(())
}

/// Applies a CRD and waits until it is Established.
pub async fn install_crd(
    client: &kube::Client,
    crd: &CustomResourceDefinition,
) -> anyhow::Result<()> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch(
        &name,
        &PatchParams::apply("kbind-tests").force(),
        &Patch::Apply(crd),
    )
    .await
    .with_context(|| format!("applying CRD {name}"))?;
    konnector::schema::established(client, &name, CONVERGE).await?;
    Ok(())
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// GETs a path from a local HTTP endpoint, returning the status code and body.
pub async fn http_get(port: u16, path: &str) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .context("no HTTP status line")?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// The value of one sample line (`name{labels} value`) in a Prometheus exposition.
pub fn metric_value(exposition: &str, sample: &str) -> Option<f64> {
    exposition
        .lines()
        .find_map(|line| line.strip_prefix(sample)?.trim().parse().ok())
}

/// How many `verb` requests (`GET`, `LIST`, ...) for `group`'s `resource` the cluster behind
/// `client` has served, from its own `apiserver_request_total`: a watch that restarts lists
/// again, one that rides out a fault does not; a schema read again shows as a GET.
pub async fn served_requests(
    client: &kube::Client,
    verb: &str,
    group: &str,
    resource: &str,
) -> anyhow::Result<f64> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(request).await?;
    let wanted = [
        format!("verb=\"{verb}\""),
        format!("group=\"{group}\""),
        format!("resource=\"{resource}\""),
    ];
    Ok(text
        .lines()
        .filter_map(|line| line.strip_prefix("apiserver_request_total{"))
        .filter_map(|rest| rest.rsplit_once('}'))
        .filter(|(labels, _)| {
            let labels: Vec<&str> = labels.split(',').collect();
            wanted.iter().all(|w| labels.contains(&w.as_str()))
        })
        .filter_map(|(_, value)| value.trim().parse::<f64>().ok())
        .sum())
}
