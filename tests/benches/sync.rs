//! `make bench`: the konnector held against the physical limit of the clusters it runs on.
//!
//! One run starts a private provider/consumer pair on loopback and measures, against those
//! same apiservers:
//!
//! 1. baselines, with the same parallelism as the konnector's default `--sync-concurrency`:
//!    plain server-side apply of N objects into the provider (the physical limit), and the
//!    *required writes* of a first sync done by a plain kube-rs client (per object the
//!    consumer finalizer patch, the provider apply and the instance's `Synced=True` status:
//!    what the spec asks for and nothing more); one apply round-trip (p50/p99);
//! 2. initial sync: N consumer instances over 5 APIs created before the real `konnector run`
//!    process starts; time until every provider copy exists, objects/s, ratio to both
//!    baselines, and the API requests both apiservers served per synced object (their own
//!    `apiserver_request_total`, reads and writes; list and watch requests are left out
//!    because the bench polls with lists and a watch costs one request per API, not per
//!    object);
//! 3. steady state: spec updates to random instances at a fixed rate; consumer write → provider
//!    copy latency and provider status write → consumer status latency (p50/p99, ratio to the
//!    baseline round-trip);
//! 4. resources: the process's RSS and CPU seconds at N instances (and per 1 000 synced
//!    objects), cold start to `/readyz`;
//! 5. policy cost: one conflict decision (µs) vs the konnector CPU time per synced object.
//!
//! Prints a table and writes every figure to `<target>/bench/sync.json`. No figure is
//! asserted. `cargo bench` passes `--bench` (N = 1 000, `--instances 10000` or
//! `KBIND_BENCH_INSTANCES` for more); `cargo test --all-targets` runs it as a smoke test with
//! 25 instances.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::{StreamExt, TryStreamExt};
use kbind_tests::faults::process::KonnectorProcess;
use kbind_tests::faults::{count_copies, create_binding, instance_name, wait_binding_ready};
use kbind_tests::fixtures::{connect, has_condition, install_core_crds, wait_connection};
use kbind_tests::syncenv::{TestApi, ensure_namespace, wait_for};
use kbind_tests::testenv::ClusterPair;
use konnector::api::names::{
    CONSUMER_CLUSTER_UID_ANNOTATION, CONSUMER_OBJECT_UID_ANNOTATION, DEFAULT_SECRET_NAMESPACE,
    FIELD_MANAGER, MANAGED_LABEL, SYNCER_FINALIZER,
};
use konnector::api::{ConflictPolicy, SchemaPolicy, SchemaSource};
use konnector::policy::{ConflictInput, Policies};
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

const APIS: usize = 5;
const CONCURRENCY: usize = 16;
const NS: &str = "bench";
const CONNECTION: &str = "provider";
const WAIT: Duration = Duration::from_secs(1800);

/// What one run measures.
struct Config {
    instances: usize,
    round_trips: usize,
    update_rate: f64,
    update_period: Duration,
    policy_calls: usize,
    konnector: Option<PathBuf>,
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
            policy_calls: if bench { 1000 } else { 10 },
            konnector: flag("--konnector").map(PathBuf::from),
        })
    }
}

/// Every figure of a run, in the JSON file.
#[derive(Default, serde::Serialize)]
struct Report {
    instances: usize,
    apis: usize,
    concurrency: usize,
    baseline_apply_objects_per_s: f64,
    required_writes_objects_per_s: f64,
    baseline_round_trip_p50_ms: f64,
    baseline_round_trip_p99_ms: f64,
    initial_sync_seconds: f64,
    initial_sync_objects_per_s: f64,
    initial_sync_ratio_to_baseline: f64,
    initial_sync_ratio_to_required_writes: f64,
    initial_sync_api_requests_per_object: f64,
    /// `<cluster> <verb> <resource>` → requests during the initial sync (list/watch excluded).
    initial_sync_api_requests: BTreeMap<String, f64>,
    first_copy_seconds: f64,
    sync_after_first_copy_objects_per_s: f64,
    cold_start_to_ready_seconds: f64,
    steady_updates: usize,
    steady_update_rate_per_s: f64,
    spec_latency_p50_ms: f64,
    spec_latency_p99_ms: f64,
    spec_latency_p50_ratio_to_round_trip: f64,
    spec_latency_p99_ratio_to_round_trip: f64,
    status_latency_p50_ms: f64,
    status_latency_p99_ms: f64,
    status_latency_p50_ratio_to_round_trip: f64,
    status_latency_p99_ratio_to_round_trip: f64,
    konnector_rss_mib_after_initial_sync: f64,
    konnector_cpu_seconds_initial_sync: f64,
    konnector_rss_mib_after_steady_state: f64,
    konnector_cpu_seconds_total: f64,
    policy_decision_p50_us: f64,
    policy_decision_p99_us: f64,
    sync_cpu_us_per_object: f64,
    sync_cpu_seconds_per_1000_objects: f64,
    sync_wall_us_per_object: f64,
}

fn main() -> anyhow::Result<()> {
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
    let report = rt.block_on(pair.diagnose(run(&config, &pair, binary)))?;
    print_table(&report);
    let path = output_path();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!("\nwrote {}", path.display());
    Ok(())
}

async fn run(config: &Config, pair: &ClusterPair, binary: PathBuf) -> anyhow::Result<Report> {
    let provider = pair.provider.client().await?;
    let consumer = pair.consumer.client().await?;
    let mut report = Report {
        instances: config.instances,
        apis: APIS,
        concurrency: CONCURRENCY,
        ..Report::default()
    };
    eprintln!("bench: baseline ({} objects)", config.instances);
    baseline(config, &provider, &mut report).await?;
    eprintln!("bench: required writes ({} objects)", config.instances);
    required_writes(config, &consumer, &provider, &mut report).await?;

    let apis: Vec<TestApi> = (0..APIS)
        .map(|k| TestApi::namespaced(&format!("api{k}.bench.kbind.io")))
        .collect();
    let api_refs: Vec<&TestApi> = apis.iter().collect();
    install_core_crds(&consumer).await?;
    ensure_namespace(&consumer, DEFAULT_SECRET_NAMESPACE).await?;
    ensure_namespace(&consumer, NS).await?;
    for api in &apis {
        api.install_on_provider(&provider).await?;
        api.install_on_consumer(&consumer, Some(CONNECTION)).await?;
    }
    let schema = SchemaPolicy {
        source: SchemaSource::Crd,
        ..SchemaPolicy::default()
    };
    connect(&consumer, &pair.provider, CONNECTION, schema, false).await?;
    eprintln!("bench: creating {} consumer instances", config.instances);
    futures::stream::iter(0..config.instances)
        .map(|i| {
            let (api, consumer) = (&apis[i % APIS], &consumer);
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

    create_binding(&consumer, NS, CONNECTION, &api_refs).await?;

    // Cold start: the process starts with every instance and the Binding already there.
    eprintln!("bench: starting the konnector");
    let log = pair.root().join("konnector.log");
    let kubeconfig = pair.consumer.admin().kubeconfig_path().to_path_buf();
    let requests_before = request_counts(&consumer, &provider).await?;
    let started = Instant::now();
    let konnector = KonnectorProcess::start(&binary, &kubeconfig, &log, &[])?;
    konnector.wait_ready(WAIT).await?;
    report.cold_start_to_ready_seconds = started.elapsed().as_secs_f64();
    wait_connection(&consumer, CONNECTION, "Ready", |c| {
        has_condition(c, "Ready", "True", "AsExpected")
    })
    .await?;
    wait_binding_ready(&consumer, NS, WAIT).await?;
    let first_copy = Mutex::new(None);
    wait_for("every provider copy", WAIT, || async {
        let mut n = 0;
        for api in &apis {
            n += count_copies(api, &provider, NS).await?;
        }
        if n > 0 {
            lock(&first_copy).get_or_insert_with(|| started.elapsed());
        }
        Ok((n == config.instances).then_some(()))
    })
    .await?;
    let initial = started.elapsed().as_secs_f64();
    let requests_after = request_counts(&consumer, &provider).await?;
    report.initial_sync_api_requests = requests_after
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v - requests_before.get(k).copied().unwrap_or(0.0),
            )
        })
        .filter(|(_, v)| *v > 0.0)
        .collect();
    report.initial_sync_api_requests_per_object =
        report.initial_sync_api_requests.values().sum::<f64>() / config.instances as f64;
    let first = lock(&first_copy).map_or(0.0, |d| d.as_secs_f64());
    report.first_copy_seconds = first;
    report.sync_after_first_copy_objects_per_s = config.instances as f64 / (initial - first);
    report.initial_sync_seconds = initial;
    report.initial_sync_objects_per_s = config.instances as f64 / initial;
    report.initial_sync_ratio_to_baseline =
        report.initial_sync_objects_per_s / report.baseline_apply_objects_per_s;
    report.initial_sync_ratio_to_required_writes =
        report.initial_sync_objects_per_s / report.required_writes_objects_per_s;
    report.konnector_rss_mib_after_initial_sync = mib(konnector.rss_bytes()?);
    report.konnector_cpu_seconds_initial_sync = konnector.cpu_seconds()?;
    report.sync_cpu_us_per_object =
        report.konnector_cpu_seconds_initial_sync * 1e6 / config.instances as f64;
    report.sync_cpu_seconds_per_1000_objects = report.sync_cpu_us_per_object / 1000.0;
    report.sync_wall_us_per_object = initial * 1e6 / config.instances as f64;

    eprintln!("bench: steady state");
    steady_state(config, &apis, &consumer, &provider, &mut report).await?;
    report.konnector_rss_mib_after_steady_state = mib(konnector.rss_bytes()?);
    report.konnector_cpu_seconds_total = konnector.cpu_seconds()?;

    let (p50, p99) = policy_cost(config.policy_calls).await?;
    report.policy_decision_p50_us = p50;
    report.policy_decision_p99_us = p99;
    drop(konnector);
    Ok(report)
}

/// Plain server-side apply into the provider: throughput at [`CONCURRENCY`], then sequential
/// round-trips of one object.
async fn baseline(config: &Config, provider: &Client, report: &mut Report) -> anyhow::Result<()> {
    let api = TestApi::namespaced("baseline.bench.kbind.io");
    api.install_on_provider(provider).await?;
    ensure_namespace(provider, NS).await?;
    let objects = api.api(provider, Some(NS));
    let params = PatchParams::apply("kbind-bench").force();
    let started = Instant::now();
    futures::stream::iter(0..config.instances)
        .map(|i| {
            let (objects, params, api) = (&objects, &params, &api);
            async move {
                let name = instance_name("b", i);
                let body = api.object(Some(NS), &name, json!({ "seq": 0 }));
                objects.patch(&name, params, &Patch::Apply(&body)).await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    report.baseline_apply_objects_per_s = config.instances as f64 / started.elapsed().as_secs_f64();
    let mut samples = Vec::with_capacity(config.round_trips);
    for seq in 0..config.round_trips {
        let body = api.object(Some(NS), "round-trip", json!({ "seq": seq }));
        let started = Instant::now();
        objects
            .patch("round-trip", &params, &Patch::Apply(&body))
            .await?;
        samples.push(started.elapsed());
    }
    report.baseline_round_trip_p50_ms = percentile_ms(&mut samples, 0.50);
    report.baseline_round_trip_p99_ms = percentile_ms(&mut samples, 0.99);
    Ok(())
}

/// The writes the spec requires of a first sync, done by a plain client: per object the
/// `core.kbind.io/syncer` finalizer patch on the consumer instance, the server-side apply of
/// its copy (managed label and both ownership markers) into the provider, and the instance's
/// `Synced=True` condition. The konnector cannot be faster than this without skipping a write
/// the spec asks for.
async fn required_writes(
    config: &Config,
    consumer: &Client,
    provider: &Client,
    report: &mut Report,
) -> anyhow::Result<()> {
    let api = TestApi::namespaced("required.bench.kbind.io");
    api.install_on_provider(provider).await?;
    api.install_on_consumer(consumer, None).await?;
    ensure_namespace(consumer, NS).await?;
    futures::stream::iter(0..config.instances)
        .map(|i| {
            let api = &api;
            async move {
                api.create(
                    consumer,
                    Some(NS),
                    &instance_name("r", i),
                    json!({ "seq": 0 }),
                )
                .await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let instances = api.api(consumer, Some(NS));
    let copies = api.api(provider, Some(NS));
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let started = Instant::now();
    futures::stream::iter(0..config.instances)
        .map(|i| {
            let (instances, copies, params, api) = (&instances, &copies, &params, &api);
            async move {
                let name = instance_name("r", i);
                let finalizer = json!({ "metadata": { "finalizers": [SYNCER_FINALIZER] } });
                let instance = instances
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&finalizer))
                    .await?;
                let mut copy = api.object(Some(NS), &name, json!({ "seq": 0 }));
                copy.labels_mut()
                    .insert(MANAGED_LABEL.into(), "true".into());
                let annotations = copy.annotations_mut();
                annotations.insert(
                    CONSUMER_CLUSTER_UID_ANNOTATION.into(),
                    "c0ffee00-0000-4000-8000-000000000001".into(),
                );
                annotations.insert(
                    CONSUMER_OBJECT_UID_ANNOTATION.into(),
                    instance.uid().unwrap_or_default(),
                );
                copies.patch(&name, params, &Patch::Apply(&copy)).await?;
                let synced = json!({
                    "apiVersion": api.resource().api_version, "kind": api.resource().kind,
                    "metadata": { "name": name, "namespace": NS },
                    "status": { "conditions": [{
                        "type": "Synced", "status": "True", "reason": "AsExpected",
                        "message": "the provider copy matches the spec",
                        "observedGeneration": instance.metadata.generation,
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }] },
                });
                instances
                    .patch_status(&name, params, &Patch::Apply(&synced))
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    report.required_writes_objects_per_s =
        config.instances as f64 / started.elapsed().as_secs_f64();
    Ok(())
}

/// Requests both apiservers have served so far, from their own `apiserver_request_total`,
/// keyed `<cluster> <verb> <resource>`; list and watch requests are left out (see the module
/// documentation).
async fn request_counts(
    consumer: &Client,
    provider: &Client,
) -> anyhow::Result<BTreeMap<String, f64>> {
    let mut counts = BTreeMap::new();
    for (cluster, client) in [("consumer", consumer), ("provider", provider)] {
        let request = http::Request::get("/metrics").body(Vec::new())?;
        let text = client.request_text(request).await?;
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once('}') else {
                continue;
            };
            let label = |name: &str| {
                labels
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                    .map(|v| v.trim_end_matches('"').to_string())
                    .unwrap_or_default()
            };
            let verb = label("verb");
            if matches!(verb.as_str(), "LIST" | "WATCH" | "WATCHLIST") {
                continue;
            }
            let value: f64 = value.trim().parse().unwrap_or(0.0);
            *counts
                .entry(format!("{cluster} {verb} {}", label("resource")))
                .or_insert(0.0) += value;
        }
    }
    Ok(counts)
}

/// Pending writes: (api index, name) → (sequence number, when it was written).
type Pending = Arc<Mutex<HashMap<(usize, String), (u64, Instant)>>>;

/// Updates random instances at `update_rate`; watches measure when the provider copy shows
/// each spec update, and (after the bench writes the provider status) when the consumer
/// instance shows that status.
async fn steady_state(
    config: &Config,
    apis: &[TestApi],
    consumer: &Client,
    provider: &Client,
    report: &mut Report,
) -> anyhow::Result<()> {
    let spec_pending: Pending = Arc::default();
    let status_pending: Pending = Arc::default();
    let spec_samples = Arc::new(Mutex::new(Vec::new()));
    let status_samples = Arc::new(Mutex::new(Vec::new()));
    let mut watches = Vec::new();
    for (k, api) in apis.iter().enumerate() {
        // Provider side: the copy reflects a spec update → record, then write its status.
        let (pending, samples, next) = (
            spec_pending.clone(),
            spec_samples.clone(),
            status_pending.clone(),
        );
        let copies = api.api(provider, Some(NS));
        let stream = watcher(api.all(provider), watcher::Config::default()).applied_objects();
        watches.push(tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(obj)) = stream.next().await {
                let Some(seq) = obj.data["spec"]["seq"].as_u64() else {
                    continue;
                };
                if let Some(latency) = take_if_reached(&pending, k, &obj.name_any(), seq) {
                    lock(&samples).push(latency);
                    lock(&next).insert((k, obj.name_any()), (seq, Instant::now()));
                    let body = json!({ "status": { "seq": seq } });
                    let _ = copies
                        .patch_status(
                            &obj.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(&body),
                        )
                        .await;
                }
            }
        }));
        // Consumer side: the instance shows the provider status.
        let (pending, samples) = (status_pending.clone(), status_samples.clone());
        let stream = watcher(api.all(consumer), watcher::Config::default()).applied_objects();
        watches.push(tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(obj)) = stream.next().await {
                if let Some(seq) = obj.data["status"]["seq"].as_u64()
                    && let Some(latency) = take_if_reached(&pending, k, &obj.name_any(), seq)
                {
                    lock(&samples).push(latency);
                }
            }
        }));
    }
    // Let the watches list first.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let updates = (config.update_rate * config.update_period.as_secs_f64()) as usize;
    let interval = Duration::from_secs_f64(1.0 / config.update_rate);
    let mut ticker = tokio::time::interval(interval);
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    for seq in 1..=updates as u64 {
        ticker.tick().await;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let i = (rng % config.instances as u64) as usize;
        let (k, name) = (i % APIS, instance_name("w", i));
        lock(&spec_pending).insert((k, name.clone()), (seq, Instant::now()));
        let body = json!({ "spec": { "seq": seq } });
        apis[k]
            .api(consumer, Some(NS))
            .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await?;
    }
    // Bounded drain: at most 30 s for the last updates to arrive.
    let _ = wait_for(
        "steady-state updates delivered",
        Duration::from_secs(30),
        || async {
            Ok((lock(&spec_pending).is_empty() && lock(&status_pending).is_empty()).then_some(()))
        },
    )
    .await;
    watches.iter().for_each(|w| w.abort());
    let mut spec = lock(&spec_samples).clone();
    let mut status = lock(&status_samples).clone();
    report.steady_updates = updates;
    report.steady_update_rate_per_s = config.update_rate;
    report.spec_latency_p50_ms = percentile_ms(&mut spec, 0.50);
    report.spec_latency_p99_ms = percentile_ms(&mut spec, 0.99);
    report.status_latency_p50_ms = percentile_ms(&mut status, 0.50);
    report.status_latency_p99_ms = percentile_ms(&mut status, 0.99);
    report.spec_latency_p50_ratio_to_round_trip =
        report.spec_latency_p50_ms / report.baseline_round_trip_p50_ms;
    report.status_latency_p50_ratio_to_round_trip =
        report.status_latency_p50_ms / report.baseline_round_trip_p50_ms;
    report.spec_latency_p99_ratio_to_round_trip =
        report.spec_latency_p99_ms / report.baseline_round_trip_p99_ms;
    report.status_latency_p99_ratio_to_round_trip =
        report.status_latency_p99_ms / report.baseline_round_trip_p99_ms;
    Ok(())
}

/// Removes and returns the latency of a pending write once `seq` (or a later one) is seen.
fn take_if_reached(pending: &Pending, k: usize, name: &str, seq: u64) -> Option<Duration> {
    let mut pending = lock(pending);
    let key = (k, name.to_string());
    match pending.get(&key) {
        Some((wanted, at)) if seq >= *wanted => {
            let latency = at.elapsed();
            pending.remove(&key);
            Some(latency)
        }
        _ => None,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One conflict decision of the built-in policy, as the syncer makes it for a new instance.
async fn policy_cost(calls: usize) -> anyhow::Result<(f64, f64)> {
    let policies = Policies::builtin()?;
    let input = ConflictInput {
        consumer_cluster_uid: "c0ffee00-0000-4000-8000-000000000001".into(),
        consumer_object_uid: "c0ffee00-0000-4000-8000-000000000002".into(),
        conflict_policy: ConflictPolicy::Fail,
        target: None,
    };
    policies.decide_conflict(&input).await?;
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        policies.decide_conflict(&input).await?;
        samples.push(started.elapsed());
    }
    Ok((
        percentile_ms(&mut samples, 0.50) * 1000.0,
        percentile_ms(&mut samples, 0.99) * 1000.0,
    ))
}

fn percentile_ms(samples: &mut [Duration], q: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * q).round() as usize;
    samples[index.min(samples.len() - 1)].as_secs_f64() * 1000.0
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// `<target>/bench/sync.json`.
fn output_path() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("bench").join("sync.json")
}

fn print_table(r: &Report) {
    println!(
        "\nsync benchmark: {} instances over {} APIs, concurrency {}, loopback clusters",
        r.instances, r.apis, r.concurrency
    );
    let rows: Vec<(&str, String, String)> = vec![
        (
            "baseline SSA throughput",
            format!("{:.0} obj/s", r.baseline_apply_objects_per_s),
            String::new(),
        ),
        (
            "required writes (finalizer, SSA, Synced) rate",
            format!("{:.0} obj/s", r.required_writes_objects_per_s),
            String::new(),
        ),
        (
            "baseline SSA round-trip p50 / p99",
            format!(
                "{:.1} / {:.1} ms",
                r.baseline_round_trip_p50_ms, r.baseline_round_trip_p99_ms
            ),
            String::new(),
        ),
        (
            "cold start to Ready",
            format!("{:.2} s", r.cold_start_to_ready_seconds),
            String::new(),
        ),
        (
            "initial sync (process start → all copies)",
            format!(
                "{:.1} s, {:.0} obj/s",
                r.initial_sync_seconds, r.initial_sync_objects_per_s
            ),
            format!(
                "{:.2}x SSA, {:.2}x required",
                r.initial_sync_ratio_to_baseline, r.initial_sync_ratio_to_required_writes
            ),
        ),
        (
            "API requests per synced object",
            format!("{:.2}", r.initial_sync_api_requests_per_object),
            "reads + writes, both".to_string(),
        ),
        (
            "spec consumer → provider p50 / p99",
            format!(
                "{:.1} / {:.1} ms",
                r.spec_latency_p50_ms, r.spec_latency_p99_ms
            ),
            format!(
                "{:.1}x / {:.1}x round-trip",
                r.spec_latency_p50_ratio_to_round_trip, r.spec_latency_p99_ratio_to_round_trip
            ),
        ),
        (
            "status provider → consumer p50 / p99",
            format!(
                "{:.1} / {:.1} ms",
                r.status_latency_p50_ms, r.status_latency_p99_ms
            ),
            format!(
                "{:.1}x / {:.1}x round-trip",
                r.status_latency_p50_ratio_to_round_trip, r.status_latency_p99_ratio_to_round_trip
            ),
        ),
        (
            "RSS after initial sync / steady",
            format!(
                "{:.1} / {:.1} MiB",
                r.konnector_rss_mib_after_initial_sync, r.konnector_rss_mib_after_steady_state
            ),
            String::new(),
        ),
        (
            "CPU initial sync / total",
            format!(
                "{:.2} / {:.2} s",
                r.konnector_cpu_seconds_initial_sync, r.konnector_cpu_seconds_total
            ),
            String::new(),
        ),
        (
            "policy decision p50 / p99",
            format!(
                "{:.0} / {:.0} µs",
                r.policy_decision_p50_us, r.policy_decision_p99_us
            ),
            String::new(),
        ),
        (
            "sync per object: CPU / wall",
            format!(
                "{:.0} / {:.0} µs",
                r.sync_cpu_us_per_object, r.sync_wall_us_per_object
            ),
            format!(
                "policy = {:.1}% of CPU",
                100.0 * r.policy_decision_p50_us / r.sync_cpu_us_per_object
            ),
        ),
    ];
    println!("{:<44} {:>28} {:>22}", "figure", "value", "ratio");
    for (name, value, ratio) in rows {
        println!("{name:<44} {value:>28} {ratio:>22}");
    }
}
