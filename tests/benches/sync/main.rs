//! `make bench`: the konnector held against the physical limit of the clusters it runs on.
//!
//! One run starts a private provider/consumer pair on loopback and measures, against those
//! same apiservers:
//!
//! 1. baselines, with the parallelism the konnector has (its default `--sync-concurrency` per
//!    syncer, one syncer per API):
//!    plain server-side apply of N objects into the provider (the physical limit), and the
//!    *required writes* of a first sync done by a plain client on the konnector's kube-rs
//!    stack, as a process of its own (per object the consumer finalizer patch, the provider
//!    apply and the instance's `Synced=True` status: what the spec asks for and nothing more;
//!    its rate and its CPU per object are the floor, `floor.rs`); one apply round-trip
//!    (p50/p99), and one apply until a watch shows it (the hop a spec or status change makes
//!    twice on its way through the konnector);
//! 2. initial sync: N consumer instances over 5 APIs created before the real `konnector run`
//!    process starts; time until every provider copy exists and until every instance says
//!    `Synced=True` (seen through watches, not polled), objects/s, ratio to both baselines,
//!    and the API requests both apiservers served per synced object (their own
//!    `apiserver_request_total`, reads and writes; list and watch requests are left out:
//!    a watch costs one request per API, not per object);
//! 3. updates to random instances at a fixed rate, over the first minute after the initial sync
//!    and then as the steady state: consumer write → provider copy latency and provider status
//!    write → consumer status latency (p50/p99, ratio to the baseline round-trip), each phase
//!    with the konnector's work queues meanwhile (deepest queue, wait p99; `queues.rs`);
//! 4. resources: the process's RSS and CPU seconds at N instances, cold start to `/readyz`,
//!    and the CPU spent after `/readyz` per synced object (start-up, which compiles the
//!    policy modules, is reported on its own), and its ratio to the floor's;
//! 5. policy cost: one conflict decision (p50, p99 and the amortized mean, µs) vs the
//!    konnector CPU time per synced object.
//!
//! The table prints each figure's target beside it; targets are never asserted.
//! `KBIND_BENCH_PROFILE=<file>` records a `perf` profile of the konnector over the initial
//! sync (`profile.rs`).
//!
//! Prints a table and writes every figure to `<target>/bench/sync.json`. No figure is
//! asserted. `cargo bench` passes `--bench` (N = 1 000, `--instances 10000` or
//! `KBIND_BENCH_INSTANCES` for more); `cargo test --all-targets` runs it as a smoke test with
//! 25 instances.

mod baselines;
mod floor;
mod initial;
mod profile;
mod queues;
mod replicas;
mod report;
mod steady;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::{StreamExt, TryStreamExt};
use kbind_tests::faults::force_relists;
use kbind_tests::faults::process::KonnectorProcess;
use kbind_tests::faults::{create_binding, instance_name, wait_binding_ready};
use kbind_tests::fixtures::{connect, has_condition, install_core_crds, wait_connection};
use kbind_tests::syncenv::{TestApi, ensure_namespace};
use kbind_tests::testenv::ClusterPair;
use konnector::api::names::DEFAULT_SECRET_NAMESPACE;
use konnector::api::{ConflictPolicy, SchemaPolicy, SchemaSource};
use konnector::policy::{ConflictInput, Policies};
use kube::Client;
use serde_json::json;

use report::{Report, mib, output_path, percentile_ms, print_table};

/// Bound APIs unless `--apis` (or `KBIND_BENCH_APIS`) says otherwise.
const DEFAULT_APIS: usize = 5;
/// The konnector's default `--sync-concurrency`: reconciles at once per syncer.
pub(crate) const CONCURRENCY: usize = 16;
pub(crate) const NS: &str = "bench";
const CONNECTION: &str = "provider";
/// The consumer prefix of a `--isolation Namespaced` run.
const ISOLATION_PREFIX: &str = "bench";
pub(crate) const WAIT: Duration = Duration::from_secs(1800);

/// What one run measures.
pub(crate) struct Config {
    pub(crate) instances: usize,
    pub(crate) round_trips: usize,
    pub(crate) update_rate: f64,
    pub(crate) update_period: Duration,
    /// How long the updates right after the initial sync last (`KBIND_BENCH_AFTER_SYNC`
    /// seconds; a minute under `--bench`, 2 s in the smoke run).
    after_sync: Duration,
    policy_calls: usize,
    konnector: Option<PathBuf>,
    /// How many APIs the instances are spread over (one syncer each).
    apis: usize,
    /// How long the idle phase lasts (`--idle SECONDS` or `KBIND_BENCH_IDLE`; 10 minutes
    /// under `--bench`, 3 s in the smoke run).
    idle: Duration,
    /// Whether to force a re-list after the idle phase: under `--bench` only (the fault test
    /// `a_forced_relist_loses_nothing_and_writes_nothing_again` covers it in `make test`; the
    /// watches' backoff makes it take a minute or two).
    relist: bool,
    /// `--replicas N` (or `KBIND_BENCH_REPLICAS`): after the run, N replicas with `--sharding`
    /// take the instances over, and one is killed; 1 (the default) skips that phase.
    pub(crate) replicas: usize,
    /// `--isolation Namespaced` (or `KBIND_BENCH_ISOLATION`): the Connection places copies in
    /// `<prefix>-bench`, so each instance's first sync also asks the placement policy.
    pub(crate) namespaced: bool,
}

impl Config {
    fn from_args() -> anyhow::Result<Self> {
        let args: Vec<String> = std::env::args().collect();
        let bench = args.iter().any(|a| a == "--bench");
        let flag = |name: &str| {
            args.iter()
                .position(|a| a == name)
                .and_then(|i| args.get(i + 1))
                .cloned()
        };
        let instances =
            match flag("--instances").or_else(|| std::env::var("KBIND_BENCH_INSTANCES").ok()) {
                Some(n) => n.parse().context("--instances")?,
                None if bench => 1000,
                None => 25,
            };
        Ok(Self {
            instances,
            round_trips: if bench { 200 } else { 10 },
            update_rate: 20.0,
            update_period: Duration::from_secs(if bench { 15 } else { 2 }),
            after_sync: match std::env::var("KBIND_BENCH_AFTER_SYNC").ok() {
                Some(s) => Duration::from_secs(s.parse().context("KBIND_BENCH_AFTER_SYNC")?),
                None if bench => Duration::from_secs(60),
                None => Duration::from_secs(2),
            },
            policy_calls: if bench { 1000 } else { 10 },
            konnector: flag("--konnector").map(PathBuf::from),
            apis: match flag("--apis").or_else(|| std::env::var("KBIND_BENCH_APIS").ok()) {
                Some(n) => n.parse().context("--apis")?,
                None => DEFAULT_APIS,
            },
            idle: match flag("--idle").or_else(|| std::env::var("KBIND_BENCH_IDLE").ok()) {
                Some(s) => Duration::from_secs(s.parse().context("--idle")?),
                None if bench => Duration::from_secs(600),
                None => Duration::from_secs(3),
            },
            relist: bench,
            replicas: match flag("--replicas")
                .or_else(|| std::env::var("KBIND_BENCH_REPLICAS").ok())
            {
                Some(n) => n.parse().context("--replicas")?,
                None => 1,
            },
            namespaced: match flag("--isolation")
                .or_else(|| std::env::var("KBIND_BENCH_ISOLATION").ok())
                .as_deref()
            {
                None | Some("" | "None") => false,
                Some("Namespaced") => true,
                Some(other) => anyhow::bail!("--isolation {other}: None or Namespaced"),
            },
        })
    }

    /// The provider namespace the copies of the bench namespace's instances are in.
    pub(crate) fn provider_ns(&self) -> String {
        if self.namespaced {
            format!("{ISOLATION_PREFIX}-{NS}")
        } else {
            NS.to_string()
        }
    }

    /// Requests the baselines keep in flight: what the konnector may, one syncer per API.
    fn in_flight(&self) -> usize {
        CONCURRENCY * self.apis
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == floor::FLOOR_FLAG) {
        return floor::floor_main(&args[at + 1..]);
    }
    let config = Config::from_args()?;
    let binary = match &config.konnector {
        Some(path) => path.clone(),
        None => kbind_tests::konnector_binary!(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let pair = ClusterPair::start_private()?;
    let report = rt.block_on(pair.diagnose(run(&config, &pair, &binary)))?;
    print_table(&report);
    let path = output_path();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!("\nwrote {}", path.display());
    Ok(())
}

async fn run(config: &Config, pair: &ClusterPair, binary: &Path) -> anyhow::Result<Report> {
    let provider = pair.provider.client().await?;
    let consumer = pair.consumer.client().await?;
    let mut report = Report {
        instances: config.instances,
        apis: config.apis,
        concurrency: CONCURRENCY,
        isolation: if config.namespaced {
            "Namespaced"
        } else {
            "None"
        }
        .to_string(),
        ..Report::default()
    };
    eprintln!("bench: baseline ({} objects)", config.instances);
    baselines::baseline(config, &provider, &mut report).await?;
    eprintln!("bench: required writes ({} objects)", config.instances);
    floor::required_writes(
        config,
        pair.consumer.admin().kubeconfig_path(),
        pair.provider.admin().kubeconfig_path(),
        &consumer,
        &provider,
        &mut report,
    )
    .await?;

    let apis = prepare(config, pair, &consumer, &provider).await?;
    // Cold start: the process starts with every instance and the Binding already there.
    eprintln!("bench: starting the konnector");
    let progress = initial::Progress::watch(
        &apis,
        &consumer,
        &provider,
        &config.provider_ns(),
        config.instances,
    );
    let log = pair.root().join("konnector.log");
    let kubeconfig = pair.consumer.admin().kubeconfig_path().to_path_buf();
    let requests_before = initial::request_counts(&consumer, &provider).await?;
    let started = Instant::now();
    let konnector = KonnectorProcess::start(binary, &kubeconfig, &log, &[])?;
    konnector.wait_ready(WAIT).await?;
    report.cold_start_to_ready_seconds = started.elapsed().as_secs_f64();
    report.konnector_cpu_seconds_at_ready = konnector.cpu_seconds()?;
    let profile = profile::Profile::start(konnector.pid());
    wait_connection(&consumer, CONNECTION, "Ready", |c| {
        has_condition(c, "Ready", "True", "AsExpected")
    })
    .await?;
    wait_binding_ready(&consumer, NS, WAIT).await?;
    let reached = progress.finished(started, WAIT).await?;
    report.konnector_cpu_seconds_initial_sync = konnector.cpu_seconds()?;
    drop(profile);
    report.konnector_rss_mib_after_initial_sync = mib(konnector.rss_bytes()?);
    report.initial_sync_reconciles_per_object =
        queues::reconciles_started(&konnector).await? / config.instances as f64;
    drop(progress);
    let requests_after = initial::request_counts(&consumer, &provider).await?;
    initial_figures(&mut report, &reached, &requests_before, &requests_after);

    eprintln!(
        "bench: updates over the first {} s after the sync",
        config.after_sync.as_secs()
    );
    let after_sync = steady::updates(config, &apis, &consumer, &provider, config.after_sync);
    let (after_sync, queues) = queues::during(&konnector, after_sync).await?;
    (report.after_sync, report.after_sync_queues) = (after_sync, queues);
    eprintln!("bench: steady state");
    let steady = steady::updates(config, &apis, &consumer, &provider, config.update_period);
    let (steady, queues) = queues::during(&konnector, steady).await?;
    steady::steady_figures(&mut report, &steady, config.update_rate);
    report.steady_queues = queues;
    report.konnector_rss_mib_after_steady_state = mib(konnector.rss_bytes()?);
    report.konnector_rss_kib_per_instance =
        report.konnector_rss_mib_after_steady_state * 1024.0 / config.instances as f64;

    eprintln!("bench: idle for {} s", config.idle.as_secs());
    idle(config, &konnector, &consumer, &provider, &mut report).await?;
    if config.relist {
        eprintln!("bench: forced re-list");
        relist(config, pair, &konnector, &mut report).await?;
    }
    report.konnector_cpu_seconds_total = konnector.cpu_seconds()?;

    let (p50, p99, mean) = policy_cost(config.policy_calls).await?;
    report.policy_decision_p50_us = p50;
    report.policy_decision_p99_us = p99;
    report.policy_decision_mean_us = mean;
    drop(konnector);
    if config.replicas > 1 {
        eprintln!("bench: {} sharded replicas", config.replicas);
        replicas::replicas(config, binary, pair, &apis, &mut report).await?;
    }
    Ok(report)
}

/// Every instance in sync and nothing changing for `config.idle`: the konnector's CPU and the
/// requests both apiservers served meanwhile, instance objects apart from the rest.
async fn idle(
    config: &Config,
    konnector: &KonnectorProcess,
    consumer: &Client,
    provider: &Client,
    report: &mut Report,
) -> anyhow::Result<()> {
    // The steady phase's last status writes land first.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (cpu, before, started) = (
        konnector.cpu_seconds()?,
        initial::request_counts(consumer, provider).await?,
        Instant::now(),
    );
    tokio::time::sleep(config.idle).await;
    let after = initial::request_counts(consumer, provider).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let per_minute = |instances: bool| {
        after
            .iter()
            .filter(|(key, _)| key.ends_with(" widgets") == instances)
            .map(|(key, n)| n - before.get(key).copied().unwrap_or(0.0))
            .sum::<f64>()
            * 60.0
            / elapsed
    };
    report.idle_requests_per_minute = after
        .iter()
        .map(|(key, n)| {
            (
                key.clone(),
                (n - before.get(key).copied().unwrap_or(0.0)) * 60.0 / elapsed,
            )
        })
        .filter(|(_, per_minute)| *per_minute > 0.0)
        .collect();
    report.idle_seconds = elapsed;
    report.idle_cpu_percent_of_a_core = 100.0 * (konnector.cpu_seconds()? - cpu) / elapsed;
    report.idle_instance_requests_per_minute = per_minute(true);
    report.idle_other_requests_per_minute = per_minute(false);
    Ok(())
}

/// Full lists the konnector's watches made so far (`kbind_watch_lists_total`, every API and
/// both clusters).
async fn watch_lists(konnector: &KonnectorProcess) -> anyhow::Result<f64> {
    Ok(konnector
        .metrics()
        .await?
        .lines()
        .filter(|l| l.starts_with("kbind_watch_lists_total{"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum())
}

/// How long no watch lists before the ones that have not are taken to have resumed.
const RESUMED_AFTER: Duration = Duration::from_secs(120);

/// Forces every watch to list again (both clusters restarted after their revisions moved
/// on) and samples the konnector's RSS until every watch has listed (or resumed) and the
/// reconciles of what they listed are done.
async fn relist(
    config: &Config,
    pair: &ClusterPair,
    konnector: &KonnectorProcess,
    report: &mut Report,
) -> anyhow::Result<()> {
    let lists = watch_lists(konnector).await?;
    report.relist_rss_mib_before = mib(konnector.rss_bytes()?);
    force_relists(pair, Duration::from_secs(2)).await?;
    let (consumer, provider) = (pair.consumer.client().await?, pair.provider.client().await?);
    let restarted = Instant::now();
    let before = initial::request_counts(&consumer, &provider).await?;
    let mut peak = report.relist_rss_mib_before;
    // Each API's watch on each cluster lists once more.
    let expected = lists + 2.0 * config.apis as f64;
    let mut listed = None;
    // A watch whose last bookmark is newer than the restarted watch cache's start resumes
    // without a 410 and lists nothing: once no watch has listed for a while, the rest resumed.
    let (mut seen, mut last_list) = (lists, restarted);
    loop {
        peak = peak.max(mib(konnector.rss_bytes()?));
        let now = Instant::now();
        let so_far = watch_lists(konnector).await.unwrap_or(seen);
        if so_far > seen {
            (seen, last_list) = (so_far, now);
        }
        let rest_resumed = seen > lists && now - last_list > RESUMED_AFTER;
        if listed.is_none() && (seen >= expected || rest_resumed) {
            listed = Some(last_list);
            report.relist_seconds = (last_list - restarted).as_secs_f64();
            if seen < expected {
                eprintln!(
                    "bench: {} of {} watches listed again; the others resumed",
                    seen - lists,
                    expected - lists
                );
            }
        }
        // The re-listed objects' reconciles follow the lists: sample a while longer.
        if listed.is_some_and(|at| now - at > Duration::from_secs(20)) {
            break;
        }
        anyhow::ensure!(now - restarted < WAIT, "the watches did not list again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    report.relist_rss_peak_mib = peak;
    let after = initial::request_counts(&consumer, &provider).await?;
    report.relist_instance_requests = after
        .iter()
        .filter(|(key, _)| key.ends_with(" widgets"))
        .map(|(key, n)| n - before.get(key).copied().unwrap_or(0.0))
        // An empty f64 sum is -0.0, printed "-0".
        .fold(0.0, |sum, n| sum + n);
    Ok(())
}

/// The bench's APIs on both clusters, the Connection, N consumer instances spread over the
/// APIs and the Binding that selects them: everything the konnector finds when it starts.
async fn prepare(
    config: &Config,
    pair: &ClusterPair,
    consumer: &Client,
    provider: &Client,
) -> anyhow::Result<Vec<TestApi>> {
    let apis: Vec<TestApi> = (0..config.apis)
        .map(|k| TestApi::namespaced(&format!("api{k}.bench.kbind.io")))
        .collect();
    install_core_crds(consumer).await?;
    ensure_namespace(consumer, DEFAULT_SECRET_NAMESPACE).await?;
    ensure_namespace(consumer, NS).await?;
    for api in &apis {
        api.install_on_provider(provider).await?;
        api.install_on_consumer(consumer, Some(CONNECTION)).await?;
    }
    let schema = SchemaPolicy {
        source: SchemaSource::Crd,
        ..SchemaPolicy::default()
    };
    connect(consumer, &pair.provider, CONNECTION, schema, false).await?;
    if config.namespaced {
        let isolation = json!({ "spec": { "isolation": {
            "strategy": "Namespaced", "prefix": ISOLATION_PREFIX } } });
        kube::Api::<konnector::api::Connection>::all(consumer.clone())
            .patch(
                CONNECTION,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&isolation),
            )
            .await?;
    }
    eprintln!("bench: creating {} consumer instances", config.instances);
    futures::stream::iter(0..config.instances)
        .map(|i| {
            let api = &apis[i % config.apis];
            async move {
                api.create(
                    consumer,
                    Some(NS),
                    &instance_name("w", i),
                    json!({ "seq": 0 }),
                )
                .await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let api_refs: Vec<&TestApi> = apis.iter().collect();
    create_binding(consumer, NS, CONNECTION, &api_refs).await?;
    Ok(apis)
}

/// The initial sync's figures from its milestones, the konnector's CPU and the requests
/// both apiservers served meanwhile.
fn initial_figures(
    report: &mut Report,
    reached: &initial::Milestones,
    before: &std::collections::BTreeMap<String, f64>,
    after: &std::collections::BTreeMap<String, f64>,
) {
    let n = report.instances as f64;
    report.initial_sync_api_requests = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect();
    report.initial_sync_api_requests_per_object =
        report.initial_sync_api_requests.values().sum::<f64>() / n;
    let (first, all_copies, initial) = (
        reached.first_copy.as_secs_f64(),
        reached.all_copies.as_secs_f64(),
        reached.all_synced.as_secs_f64(),
    );
    report.first_copy_seconds = first;
    report.all_copies_seconds = all_copies;
    report.sync_after_first_copy_objects_per_s = n / (initial - first);
    report.initial_sync_seconds = initial;
    report.initial_sync_objects_per_s = n / initial;
    report.initial_sync_ratio_to_baseline =
        report.initial_sync_objects_per_s / report.baseline_apply_objects_per_s;
    report.initial_sync_ratio_to_required_writes =
        report.initial_sync_objects_per_s / report.required_writes_objects_per_s;
    let sync_cpu =
        report.konnector_cpu_seconds_initial_sync - report.konnector_cpu_seconds_at_ready;
    report.sync_cpu_us_per_object = sync_cpu * 1e6 / n;
    report.sync_cpu_ratio_to_floor =
        report.sync_cpu_us_per_object / report.required_writes_cpu_us_per_object;
    report.sync_cpu_seconds_per_1000_objects = sync_cpu * 1000.0 / n;
    report.sync_wall_us_per_object = initial * 1e6 / n;
}

/// Locks a mutex whose data stays consistent even if a holder panicked.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One conflict decision of the built-in policy, as the syncer makes it for a new instance.
async fn policy_cost(calls: usize) -> anyhow::Result<(f64, f64, f64)> {
    let policies = Policies::builtin()?;
    let input = ConflictInput {
        consumer_cluster_uid: "c0ffee00-0000-4000-8000-000000000001".into(),
        consumer_object_uid: "c0ffee00-0000-4000-8000-000000000002".into(),
        conflict_policy: ConflictPolicy::Fail,
        target: None,
    };
    policies.decide_conflict(&input).await?;
    let mut samples = Vec::with_capacity(calls);
    let all = Instant::now();
    for _ in 0..calls {
        let started = Instant::now();
        policies.decide_conflict(&input).await?;
        samples.push(started.elapsed());
    }
    let mean_us = all.elapsed().as_secs_f64() * 1e6 / calls.max(1) as f64;
    Ok((
        percentile_ms(&mut samples, 0.50) * 1000.0,
        percentile_ms(&mut samples, 0.99) * 1000.0,
        mean_us,
    ))
}
