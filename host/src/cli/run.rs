//! `konnector run`: the controller process a Deployment runs.
//!
//! Start-up order: logging, consumer client, policy modules (pulled from their registries
//! when referenced there, with the pull Secret from the credential namespace; a module that
//! can be neither pulled nor found in the cache, or that does not implement its role's world,
//! stops the process here, with the reason), probe and metrics
//! listeners, then the Lease coordinator (leader election or sharding, when enabled) and the
//! controllers. SIGTERM or SIGINT stops the controllers, then the coordinator releases its
//! Leases; losing the leader Lease stops reconciling at once and exits non-zero so the Pod
//! restarts as a clean standby.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use std::sync::Arc;

use anyhow::{Context as _, bail};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::api::names::{DEFAULT_SECRET_NAMESPACE, LEADER_ELECTION_ID};
use crate::artifact::{Credentials, Fetcher};
use crate::fencing::{Fence, Holds, Mode};
use crate::manager::{self, Config};
use crate::policy::{Policies, PolicyArgs};
use crate::provider::kubeconfig::Transport;
use crate::provider::limits::Limits;
use crate::registry::Shards;
use crate::shared::{PolicyFetch, Shared};
use crate::sync::SyncConfig;
use crate::telemetry::{Health, LogFormat, init_logging, serve_health, serve_metrics};
use crate::{binding, connection, sharding};

/// Flags of `konnector run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Kubeconfig of the consumer cluster. In a Pod, leave unset to use the in-cluster config.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Elect one active replica through a consumer Lease; required with more than one replica.
    #[arg(long)]
    pub leader_elect: bool,
    /// Name of the consumer-side leader-election Lease.
    #[arg(long, default_value = LEADER_ELECTION_ID, value_name = "NAME")]
    pub leader_election_id: String,
    /// Namespace of the leader-election Lease (defaults to the Pod's namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = DEFAULT_SECRET_NAMESPACE, value_name = "NS")]
    pub leader_election_namespace: String,
    /// How long the leader Lease stays held after its last renewal: a standby takes over
    /// this long after a leader died without releasing it.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub leader_election_lease_duration: Duration,
    /// How long after its last successful renewal a leader stops working; shorter than the
    /// Lease duration, and every write is bounded by the difference.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub leader_election_renew_deadline: Duration,
    /// How often the leader renews its Lease, and a standby tries to take it.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub leader_election_retry_period: Duration,
    /// Share the work among all replicas instead of electing one: Connection and API shards,
    /// each held by one replica through its own Lease in the leader-election namespace.
    #[arg(long, conflicts_with = "leader_elect")]
    pub sharding: bool,
    /// How long a shard (or membership) Lease stays held after its last renewal.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub shard_lease_duration: Duration,
    /// How long after its last successful renewal a replica stops a shard's work; shorter than
    /// the Lease duration, and every write is bounded by the difference.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub shard_renew_deadline: Duration,
    /// How often a replica renews its Leases and re-evaluates which shards are its own.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub shard_retry_period: Duration,
    /// Address of the Prometheus metrics endpoint (`:8085` listens on every interface).
    #[arg(long, default_value = ":8085", value_name = "ADDR")]
    pub metrics_bind_address: String,
    /// Address of the /healthz and /readyz probes.
    #[arg(long, default_value = ":8081", value_name = "ADDR")]
    pub health_probe_bind_address: String,
    /// The only namespace credential Secrets may live in.
    #[arg(long, default_value = DEFAULT_SECRET_NAMESPACE, value_name = "NS")]
    pub secret_namespace: String,
    /// The konnector's own namespace (the chart passes the Pod's through `POD_NAMESPACE`);
    /// related copies never touch it.
    #[arg(long, env = "POD_NAMESPACE", value_name = "NS")]
    pub namespace: Option<String>,
    /// This replica's name (the chart passes the Pod's through `POD_NAME`): the leader-election
    /// identity and the instance named on Events.
    #[arg(long, env = "POD_NAME", value_name = "NAME")]
    pub pod_name: Option<String>,
    /// Accept provider kubeconfigs with `insecure-skip-tls-verify: true` or a plain `http://`
    /// server (refused by default); for test and lab providers only.
    #[arg(long, env = "KBIND_ALLOW_INSECURE_PROVIDER")]
    pub allow_insecure_provider: bool,
    /// Periodic Connection reconcile (discovery of new exports, heartbeat renewal).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub connection_resync: Duration,
    /// How long an engaged Connection stays Ready through transient provider failures (no
    /// answer, 429, 5xx) before it turns not Ready and stops its syncers.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub provider_grace_period: Duration,
    /// Periodic binding reconcile (conflict counts, related resources).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub binding_resync: Duration,
    /// Periodic resync of every bound instance, the backstop for missed watch events.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub instance_resync: Duration,
    /// Instances reconciled at once per bound API.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub sync_concurrency: u16,
    /// Largest `/openapi/v3` index read from a provider (bytes, or with KiB/MiB); a larger one
    /// makes the Connection not Ready (ResponseTooLarge).
    #[arg(long, default_value = "4MiB", value_parser = parse_bytes, value_name = "SIZE")]
    pub max_openapi_index_bytes: usize,
    /// Largest discovery answer read from a provider (`/apis`, one group-version's resources);
    /// a larger one is refused (ResponseTooLarge, or the group named in DiscoveryIncomplete).
    #[arg(long, default_value = "8MiB", value_parser = parse_bytes, value_name = "SIZE")]
    pub max_discovery_response_bytes: usize,
    /// Largest status of a provider copy the konnector keeps and copies back; a larger one is
    /// not copied and the instance says so (Synced=False, ResponseTooLarge).
    #[arg(long, default_value = "256KiB", value_parser = parse_bytes, value_name = "SIZE")]
    pub max_copy_status_bytes: usize,
    /// Policy modules and their limits.
    #[command(flatten)]
    pub policies: PolicyArgs,
    /// A `kubernetes.io/dockerconfigjson` Secret in the credential namespace
    /// (`--secret-namespace`) holding the credentials of the registries policy modules are
    /// pulled from; registries it does not name are pulled anonymously.
    #[arg(long, value_name = "NAME", env = "KBIND_POLICY_PULL_SECRET")]
    pub policy_pull_secret: Option<String>,
    /// Who may sign registry policy modules (verified before a module runs, at start-up and
    /// on every live swap).
    #[command(flatten)]
    pub policy_verify: super::artifact::VerifyArgs,
    /// Log level or env-filter directives (`info`, `konnector=debug,kube=info`); RUST_LOG wins.
    /// A bare level up to info leaves kube-runtime's controller at warn (its per-reconcile span).
    #[arg(long, default_value = "info", value_name = "LEVEL")]
    pub log_level: String,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

impl RunArgs {
    /// The Lease settings of the HA mode chosen, if any: `--sharding`, or `--leader-elect`.
    fn ha(&self) -> Option<sharding::Config> {
        let identity = identity(self.pod_name.as_deref());
        let namespace = self.leader_election_namespace.clone();
        if self.sharding {
            Some(sharding::Config {
                plan: sharding::Plan::Shards,
                namespace,
                identity,
                lease_duration: self.shard_lease_duration,
                renew_deadline: self.shard_renew_deadline,
                retry_period: self.shard_retry_period,
            })
        } else if self.leader_elect {
            Some(sharding::Config {
                plan: sharding::Plan::Leader {
                    lease: self.leader_election_id.clone(),
                },
                namespace,
                identity,
                lease_duration: self.leader_election_lease_duration,
                renew_deadline: self.leader_election_renew_deadline,
                retry_period: self.leader_election_retry_period,
            })
        } else {
            None
        }
    }

    /// The caps on what a provider can make the konnector read and hold.
    fn limits(&self) -> Limits {
        Limits {
            openapi_index: self.max_openapi_index_bytes,
            discovery_response: self.max_discovery_response_bytes,
            copy_status: self.max_copy_status_bytes,
        }
    }

    fn settings(&self) -> Config {
        let provider_transport = if self.allow_insecure_provider {
            Transport::AllowInsecure
        } else {
            Transport::VerifiedTls
        };
        Config {
            connection: connection::Config {
                resync: self.connection_resync,
                secret_namespace: self.secret_namespace.clone(),
                provider_transport,
                provider_grace_period: self.provider_grace_period,
                ..connection::Config::default()
            },
            binding: binding::Config {
                status_interval: self.binding_resync,
                secret_namespace: self.secret_namespace.clone(),
                konnector_namespace: self.namespace.clone().filter(|ns| !ns.is_empty()),
                provider_transport,
                sync: SyncConfig {
                    resync_interval: self.instance_resync,
                    concurrency: self.sync_concurrency.max(1),
                    stop_grace: self
                        .ha()
                        .map_or(SyncConfig::default().stop_grace, |s| s.stop_grace()),
                    ..SyncConfig::default()
                },
                ..binding::Config::default()
            },
        }
    }
}

/// The policy modules the flags name; registry references are pulled (with the pull Secret's
/// credentials) before anything else starts, and one that cannot be had stops the start, as
/// does a module that refuses its settings. Also returns a fetcher for the references file
/// (when there is one) and the way Connections' own modules are pulled.
async fn load_policies(
    args: &RunArgs,
    consumer: &kube::Config,
) -> anyhow::Result<(Policies, Option<Fetcher>, PolicyFetch)> {
    let policies_args = match &args.policies.policy_refs_file {
        Some(path) => crate::policy::live::with_refs_file(&args.policies, path)?,
        None => args.policies.clone(),
    };
    let credentials = match &args.policy_pull_secret {
        None => Credentials::default(),
        Some(name) => {
            // A client of its own, unfenced: nothing is written, and no Lease is held yet.
            let client = kube::Client::try_from(consumer.clone())
                .context("building the client that reads the policy pull Secret")?;
            pull_credentials(client, &args.secret_namespace, name).await?
        }
    };
    // Verification applies to every module pulled: process-wide and each Connection's own.
    let mut config = policies_args.fetcher_config(credentials);
    config.verification = args.policy_verify.verification()?;
    let for_connections = PolicyFetch::new(config.clone())?;
    if !policies_args.pulls() && policies_args.policy_refs_file.is_none() {
        let policies = Policies::load(&policies_args)?;
        policies.check().await?;
        return Ok((policies, None, for_connections));
    }
    let fetcher = Fetcher::new(config)?;
    let policies = Policies::resolve(&policies_args, &fetcher).await?;
    Ok((policies, Some(fetcher), for_connections))
}

/// The registry credentials in the pull Secret `namespace/name`.
pub async fn pull_credentials(
    client: kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Credentials> {
    crate::artifact::from_pull_secret(client, namespace, name)
        .await
        .context("loading the policy registry credentials")
}

/// Parses a size in bytes: a plain number, or one with a `KiB`, `MiB` or `GiB` suffix.
pub fn parse_bytes(value: &str) -> Result<usize, String> {
    let value = value.trim();
    let (number, unit) = [("GiB", 1usize << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)]
        .into_iter()
        .find_map(|(suffix, unit)| value.strip_suffix(suffix).map(|n| (n, unit)))
        .unwrap_or((value, 1));
    let number: usize = number
        .trim()
        .parse()
        .map_err(|_| format!("{value:?} is not a size like 4194304, 256KiB or 4MiB"))?;
    match number.checked_mul(unit) {
        Some(0) | None => Err(format!(
            "{value:?} must be a positive size that fits in memory"
        )),
        Some(bytes) => Ok(bytes),
    }
}

/// Parses `:8085` (every interface) or `host:port`.
pub fn bind_address(flag: &str, value: &str) -> anyhow::Result<SocketAddr> {
    let full = if value.starts_with(':') {
        format!("0.0.0.0{value}")
    } else {
        value.to_string()
    };
    full.parse().with_context(|| {
        format!("--{flag} {value:?} is not an address like :8085 or 127.0.0.1:8085")
    })
}

/// Runs the konnector until SIGTERM/SIGINT.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    init_logging(&args.log_level, args.log_format).map_err(anyhow::Error::msg)?;
    let consumer_config = consumer_config(args.kubeconfig.as_deref()).await?;
    let (policies, fetcher, for_connections) = load_policies(&args, &consumer_config)
        .await
        .context("loading policy modules")?;
    policies.publish_module_info();
    info!(?policies, "policy modules loaded");
    info!(
        max_concurrent_calls = policies.max_concurrent_calls(),
        memory_mib_per_call = policies.limits().memory_bytes / (1024 * 1024),
        total_wasm_memory_mib = policies.max_call_memory_bytes() / (1024 * 1024),
        "policy calls bounded: total Wasm memory of running calls = calls × per-store cap"
    );
    // Before any provider is read: every cap holds from the first discovery on.
    crate::provider::limits::set(args.limits());
    let ha = args.ha();
    if let Some(config) = &ha {
        config.validate()?;
        // Before any client is built: every write of this process is fenced from now on.
        let mode = match config.plan {
            sharding::Plan::Leader { .. } => Mode::Leader,
            sharding::Plan::Shards => Mode::Sharded,
        };
        crate::fencing::configure(Fence {
            holds: Arc::new(Holds::new(mode)),
            write_timeout: config.write_timeout(),
        });
    }
    let client = crate::fencing::client(consumer_config.clone(), "consumer")
        .context("building the consumer client")?;

    let shutdown = CancellationToken::new();
    let health = Health::default();
    let metrics_listener = listen("metrics-bind-address", &args.metrics_bind_address).await?;
    let health_listener =
        listen("health-probe-bind-address", &args.health_probe_bind_address).await?;
    info!(metrics = %local(&metrics_listener), probes = %local(&health_listener), "serving metrics and probes");
    tokio::spawn(serve_metrics(metrics_listener, shutdown.clone()));
    tokio::spawn(serve_health(
        health_listener,
        health.clone(),
        shutdown.clone(),
    ));
    tokio::spawn(stop_on_signal(shutdown.clone()));
    if let (Some(path), Some(fetcher)) = (&args.policies.policy_refs_file, fetcher) {
        info!(file = %path.display(), "watching the policy references file for live swaps");
        tokio::spawn(crate::policy::live::watch(
            policies.clone(),
            args.policies.clone(),
            fetcher,
            path.clone(),
            crate::policy::live::DEFAULT_INTERVAL,
            shutdown.clone(),
        ));
    }

    let mut shared = Shared::new(client, policies, args.pod_name.clone());
    shared.policy_fetcher = Some(Arc::new(for_connections));
    let (leading_tx, mut leading) = watch::channel(false);
    let elected = matches!(&ha, Some(c) if matches!(c.plan, sharding::Plan::Leader { .. }));
    let coordinator = match ha {
        Some(config) => {
            let lease_client = crate::fencing::lease_client(consumer_config)
                .context("building the Lease client")?;
            match &config.plan {
                sharding::Plan::Leader { lease } => {
                    info!(lease = %format!("{}/{lease}", config.namespace), identity = %config.identity, "campaigning for leadership");
                }
                sharding::Plan::Shards => {
                    info!(identity = %config.identity, namespace = %config.namespace, "sharding the work over replicas");
                    shared.shards = Shards::new(true, &config.identity, &config.namespace);
                }
            }
            // Its own token: it releases the Leases only after the controllers have stopped.
            let token = CancellationToken::new();
            let task = tokio::spawn(sharding::run(
                shared.clone(),
                config,
                lease_client,
                leading_tx,
                token.clone(),
            ));
            Some((token, task))
        }
        None => None,
    };

    if elected {
        // A standby is a healthy process: ready while it waits.
        health.set_ready(true);
        tokio::select! {
            acquired = leading.wait_for(|leads| *leads) => {
                acquired.map_err(|_| anyhow::anyhow!("the Lease coordinator ended"))?;
            }
            _ = shutdown.cancelled() => {
                stop_coordinator(coordinator).await;
                return Ok(());
            }
        }
        info!("became leader");
        crate::telemetry::metrics().leader.set(1);
    }

    let controllers = shutdown.child_token();
    let task = tokio::spawn(manager::run(shared, args.settings(), controllers.clone()));
    health.set_ready(true);
    info!("controllers started");

    let lost = async {
        if elected {
            let _ = leading.wait_for(|leads| !*leads).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    let lost_leadership = tokio::select! {
        _ = shutdown.cancelled() => false,
        () = lost => true,
    };
    crate::telemetry::metrics().leader.set(0);
    controllers.cancel();
    if lost_leadership {
        error!("lost the leader lease; stopped reconciling");
    }
    if tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .is_err()
    {
        error!("controllers did not stop within 20s");
    }
    stop_coordinator(coordinator).await;
    if lost_leadership {
        bail!("lost the leader lease");
    }
    info!("stopped");
    Ok(())
}

/// Stops the Lease coordinator, which releases the Leases it holds.
async fn stop_coordinator(coordinator: Option<(CancellationToken, tokio::task::JoinHandle<()>)>) {
    if let Some((token, task)) = coordinator {
        token.cancel();
        if let Err(error) = task.await {
            error!(%error, "the Lease coordinator ended abnormally");
        }
    }
}

async fn consumer_config(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Config> {
    match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading --kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("using --kubeconfig {}", path.display()))
        }
        None => kube::Config::infer()
            .await
            .context("no --kubeconfig and no in-cluster configuration"),
    }
}

async fn listen(flag: &str, value: &str) -> anyhow::Result<TcpListener> {
    let address = bind_address(flag, value)?;
    TcpListener::bind(address)
        .await
        .with_context(|| format!("--{flag}: cannot listen on {address}"))
}

fn local(listener: &TcpListener) -> String {
    listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|e| e.to_string())
}

/// The leader-election and shard identity: the Pod's name, or else one unique to this host
/// and process. The process id alone is not enough: in containers every replica is PID 1, and
/// replicas sharing an identity would all believe they hold every shard.
fn identity(pod_name: Option<&str>) -> String {
    pod_name.filter(|n| !n.is_empty()).map_or_else(
        || {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "konnector".to_string());
            format!("{host}-{}", std::process::id())
        },
        str::to_string,
    )
}

async fn stop_on_signal(shutdown: CancellationToken) {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = terminate => info!("SIGTERM received, shutting down"),
        _ = tokio::signal::ctrl_c() => info!("interrupt received, shutting down"),
    }
    shutdown.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn transport(args: &[&str]) -> Transport {
        let cli = Cli::try_parse_from(std::iter::once("konnector").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{e}"));
        cli.run.settings().connection.provider_transport
    }

    #[test]
    fn insecure_providers_are_refused_unless_the_flag_is_given() {
        assert_eq!(transport(&[]), Transport::VerifiedTls);
        assert_eq!(
            transport(&["--allow-insecure-provider"]),
            Transport::AllowInsecure
        );
    }

    #[test]
    fn credential_and_own_namespaces_reach_the_related_guard() {
        let parsed = Cli::try_parse_from([
            "run",
            "--secret-namespace=creds",
            "--namespace=kbind-system",
        ])
        .map_err(|e| e.to_string());
        let Ok(parsed) = parsed else {
            panic!("{parsed:?}", parsed = parsed.err());
        };
        let settings = parsed.run.settings().binding;
        assert_eq!(settings.secret_namespace, "creds");
        assert_eq!(
            settings.konnector_namespace.as_deref(),
            Some("kbind-system")
        );
    }

    #[test]
    fn caps_default_to_the_documented_sizes_and_take_units() {
        let parsed = Cli::try_parse_from(["run"]).map_err(|e| e.to_string());
        assert_eq!(parsed.map(|c| c.run.limits()), Ok(Limits::default()));
        let parsed = Cli::try_parse_from(["run", "--max-openapi-index-bytes=1KiB"])
            .map_err(|e| e.to_string());
        assert_eq!(parsed.map(|c| c.run.limits().openapi_index), Ok(1024));
        assert_eq!(parse_bytes("4MiB"), Ok(4 << 20));
        assert_eq!(parse_bytes("300"), Ok(300));
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("lots").is_err_and(|e| e.contains("256KiB")));
    }

    #[test]
    fn without_a_pod_name_the_identity_names_the_host_and_process() {
        assert_eq!(identity(Some("konnector-7d9f")), "konnector-7d9f");
        let own = identity(None);
        assert!(own.ends_with(&format!("-{}", std::process::id())), "{own}");
        assert!(
            own.len() > format!("-{}", std::process::id()).len(),
            "{own}"
        );
    }

    #[test]
    fn bind_addresses_accept_the_port_only_form() {
        assert_eq!(bind_address("x", ":8085").ok(), "0.0.0.0:8085".parse().ok());
        assert_eq!(
            bind_address("x", "127.0.0.1:0").ok(),
            "127.0.0.1:0".parse().ok()
        );
        let error = bind_address("metrics-bind-address", "eighty")
            .map(drop)
            .unwrap_err()
            .to_string();
        assert!(error.contains("--metrics-bind-address"), "{error}");
    }
}
