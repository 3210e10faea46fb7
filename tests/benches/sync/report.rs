//! Every figure of a run: the JSON file that keeps them, and the table `make bench` prints
//! with the target each figure is held to (printed, never asserted).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Every figure of a run, in the JSON file.
#[derive(Default, serde::Serialize)]
pub struct Report {
    pub instances: usize,
    pub apis: usize,
    /// The Connection's isolation strategy (None or Namespaced).
    pub isolation: String,
    pub concurrency: usize,
    pub baseline_apply_objects_per_s: f64,
    pub required_writes_objects_per_s: f64,
    /// The floor process's CPU over its writes (`floor.rs`), and per object.
    pub required_writes_cpu_seconds: f64,
    pub required_writes_cpu_us_per_object: f64,
    pub required_writes_rss_mib: f64,
    pub baseline_round_trip_p50_ms: f64,
    pub baseline_round_trip_p99_ms: f64,
    /// Apply of one object until a watch on the same apiserver shows it.
    pub baseline_watch_round_trip_p50_ms: f64,
    pub baseline_watch_round_trip_p99_ms: f64,
    /// The floor of the spec and status paths: two watch round trips (p99).
    pub two_watch_round_trips_p99_ms: f64,
    /// Process start until every instance says `Synced=True` for its current generation.
    pub initial_sync_seconds: f64,
    pub initial_sync_objects_per_s: f64,
    pub initial_sync_ratio_to_baseline: f64,
    pub initial_sync_ratio_to_required_writes: f64,
    pub initial_sync_api_requests_per_object: f64,
    /// Reconciles started per synced object over the initial sync (keys the work queues
    /// handed out; one is the floor: the reconcile that writes).
    pub initial_sync_reconciles_per_object: f64,
    /// `<cluster> <verb> <resource>` → requests during the initial sync (list/watch excluded).
    pub initial_sync_api_requests: BTreeMap<String, f64>,
    pub first_copy_seconds: f64,
    /// Process start until every provider copy exists (before the last `Synced=True`).
    pub all_copies_seconds: f64,
    pub sync_after_first_copy_objects_per_s: f64,
    pub cold_start_to_ready_seconds: f64,
    /// The updates over the first minute after the initial sync, and the work queues then.
    pub after_sync: crate::steady::Latencies,
    pub after_sync_queues: Vec<crate::queues::QueueFigures>,
    /// The work queues over the steady phase.
    pub steady_queues: Vec<crate::queues::QueueFigures>,
    pub steady_updates: usize,
    pub steady_update_rate_per_s: f64,
    pub spec_latency_p50_ms: f64,
    pub spec_latency_p99_ms: f64,
    pub spec_latency_p50_ratio_to_round_trip: f64,
    pub spec_latency_p99_ratio_to_round_trip: f64,
    pub status_latency_p50_ms: f64,
    pub status_latency_p99_ms: f64,
    pub status_latency_p50_ratio_to_round_trip: f64,
    pub status_latency_p99_ratio_to_round_trip: f64,
    pub konnector_rss_mib_after_initial_sync: f64,
    /// CPU until `/readyz` answers: start-up, policy modules compiled, nothing synced yet.
    pub konnector_cpu_seconds_at_ready: f64,
    /// CPU from process start to the end of the initial sync.
    pub konnector_cpu_seconds_initial_sync: f64,
    pub konnector_rss_mib_after_steady_state: f64,
    /// RSS after the steady state over the instances it holds (both sides' caches included).
    pub konnector_rss_kib_per_instance: f64,
    pub konnector_cpu_seconds_total: f64,
    /// How long every instance stayed in sync with nothing changing.
    pub idle_seconds: f64,
    /// Konnector CPU over that time, in percent of one core.
    pub idle_cpu_percent_of_a_core: f64,
    /// Requests for the bound APIs' objects both apiservers served over that time, per minute
    /// (watches and lists left out): the periodic resync must send none.
    pub idle_instance_requests_per_minute: f64,
    /// Every other request (Leases, Events, status of kbind's own objects), per minute.
    pub idle_other_requests_per_minute: f64,
    /// RSS before a forced re-list of every watch (both clusters restarted after their
    /// revisions moved on), and its peak until every watch listed again and settled.
    pub relist_rss_mib_before: f64,
    pub relist_rss_peak_mib: f64,
    /// From the restarts until every watch had listed again.
    pub relist_seconds: f64,
    /// Requests for instance objects from the restarts until settled (every instance was
    /// unchanged: the re-listed reconciles must write nothing).
    pub relist_instance_requests: f64,
    /// The idle phase's requests per minute, keyed `<cluster> <verb> <resource>`.
    pub idle_requests_per_minute: BTreeMap<String, f64>,
    pub policy_decision_p50_us: f64,
    pub policy_decision_p99_us: f64,
    /// Wall time of all decisions over their number: the amortized cost of one.
    pub policy_decision_mean_us: f64,
    /// CPU after `/readyz` until the end of the initial sync, per synced object.
    pub sync_cpu_us_per_object: f64,
    /// That over the floor process's CPU per object: 1.0 is a konnector as cheap as the
    /// required writes alone.
    pub sync_cpu_ratio_to_floor: f64,
    pub sync_cpu_seconds_per_1000_objects: f64,
    pub sync_wall_us_per_object: f64,
    /// `--replicas N`: from starting N sharded replicas until every shard was held and their
    /// syncers had listed.
    pub replicas_settle_seconds: f64,
    /// Spec and status p99 through the sharded replicas.
    pub replicas_spec_latency_p99_ms: f64,
    pub replicas_status_latency_p99_ms: f64,
    /// Shards the SIGKILLed replica held.
    pub replicas_killed_shards: usize,
    /// From the SIGKILL until other replicas held every one of its shards.
    pub replicas_takeover_seconds: f64,
    /// From the SIGKILL until an update of each of its APIs reached the provider.
    pub replicas_resumed_seconds: f64,
    /// Per replica: shards held, RSS and CPU.
    pub replicas: Vec<crate::replicas::ReplicaFigures>,
}

/// The `q` quantile of `samples`, in milliseconds.
pub fn percentile_ms(samples: &mut [Duration], q: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * q).round() as usize;
    samples[index.min(samples.len() - 1)].as_secs_f64() * 1000.0
}

/// Bytes in MiB.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// `<target>/bench/sync.json`.
pub fn output_path() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("bench").join("sync.json")
}

/// The table: figure, value, ratio where one applies, and the target it is held to.
pub fn print_table(r: &Report) {
    println!(
        "\nsync benchmark: {} instances over {} APIs, concurrency {} per API ({} in flight), \
         isolation {}, loopback clusters",
        r.instances,
        r.apis,
        r.concurrency,
        r.concurrency * r.apis,
        r.isolation
    );
    let none = String::new;
    let rows: Vec<(&str, String, String, &str)> = vec![
        (
            "baseline SSA throughput",
            format!("{:.0} obj/s", r.baseline_apply_objects_per_s),
            none(),
            "",
        ),
        (
            "required writes (finalizer, SSA, Synced) rate",
            format!("{:.0} obj/s", r.required_writes_objects_per_s),
            format!(
                "CPU {:.0} µs/obj, {:.0} MiB",
                r.required_writes_cpu_us_per_object, r.required_writes_rss_mib
            ),
            "",
        ),
        (
            "baseline SSA round-trip p50 / p99",
            format!(
                "{:.1} / {:.1} ms",
                r.baseline_round_trip_p50_ms, r.baseline_round_trip_p99_ms
            ),
            none(),
            "",
        ),
        (
            "apply → seen by a watch p50 / p99",
            format!(
                "{:.1} / {:.1} ms",
                r.baseline_watch_round_trip_p50_ms, r.baseline_watch_round_trip_p99_ms
            ),
            format!("two: {:.1} ms p99", r.two_watch_round_trips_p99_ms),
            "",
        ),
        (
            "cold start to Ready",
            format!("{:.2} s", r.cold_start_to_ready_seconds),
            none(),
            "",
        ),
        (
            "first copy / all copies",
            format!(
                "{:.1} / {:.1} s",
                r.first_copy_seconds, r.all_copies_seconds
            ),
            none(),
            "",
        ),
        (
            "initial sync (start → all Synced=True)",
            format!(
                "{:.1} s, {:.0} obj/s",
                r.initial_sync_seconds, r.initial_sync_objects_per_s
            ),
            format!(
                "{:.2}x SSA, {:.2}x required",
                r.initial_sync_ratio_to_baseline, r.initial_sync_ratio_to_required_writes
            ),
            ">= 0.9x required",
        ),
        (
            "API requests per synced object",
            format!("{:.2}", r.initial_sync_api_requests_per_object),
            "reads + writes, both".to_string(),
            "3 (the floor)",
        ),
        (
            "reconciles per synced object",
            format!("{:.2}", r.initial_sync_reconciles_per_object),
            "started, initial sync".to_string(),
            "",
        ),
        (
            "first minute after sync: spec / status p99",
            format!(
                "{:.1} / {:.1} ms",
                r.after_sync.spec_p99_ms, r.after_sync.status_p99_ms
            ),
            format!(
                "{:.1}x / {:.1}x two hops",
                r.after_sync.spec_p99_ms / r.two_watch_round_trips_p99_ms,
                r.after_sync.status_p99_ms / r.two_watch_round_trips_p99_ms
            ),
            "reported",
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
            "p99 <= 3x (1.5x two)",
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
            "p99 <= 3x (1.5x two)",
        ),
        (
            "RSS after initial sync / steady",
            format!(
                "{:.1} / {:.1} MiB",
                r.konnector_rss_mib_after_initial_sync, r.konnector_rss_mib_after_steady_state
            ),
            format!("{:.1} KiB / instance", r.konnector_rss_kib_per_instance),
            "<= 3 KiB / inst.",
        ),
        (
            "idle: CPU / instance requests / other requests",
            format!(
                "{:.2}% / {:.1} / {:.1} per min",
                r.idle_cpu_percent_of_a_core,
                r.idle_instance_requests_per_minute,
                r.idle_other_requests_per_minute
            ),
            format!("over {:.0} s in sync", r.idle_seconds),
            "<= 2% / 0 / -",
        ),
        (
            "forced re-list: RSS before / peak",
            format!(
                "{:.1} / {:.1} MiB",
                r.relist_rss_mib_before, r.relist_rss_peak_mib
            ),
            format!(
                "{:.2}x, {:.1} s, {:.0} writes",
                r.relist_rss_peak_mib / r.relist_rss_mib_before.max(1.0),
                r.relist_seconds,
                r.relist_instance_requests
            ),
            "peak <= 1.5x",
        ),
        (
            "CPU at Ready / initial sync / total",
            format!(
                "{:.2} / {:.2} / {:.2} s",
                r.konnector_cpu_seconds_at_ready,
                r.konnector_cpu_seconds_initial_sync,
                r.konnector_cpu_seconds_total
            ),
            none(),
            "",
        ),
        (
            "sync per object: CPU / wall",
            format!(
                "{:.0} / {:.0} µs",
                r.sync_cpu_us_per_object, r.sync_wall_us_per_object
            ),
            format!(
                "{:.2}x floor, policy {:.1}%",
                r.sync_cpu_ratio_to_floor,
                100.0 * r.policy_decision_mean_us / r.sync_cpu_us_per_object
            ),
            "CPU <= 400 µs",
        ),
        (
            "policy decision p50 / p99 / mean",
            format!(
                "{:.1} / {:.1} / {:.1} µs",
                r.policy_decision_p50_us, r.policy_decision_p99_us, r.policy_decision_mean_us
            ),
            none(),
            "mean <= 5 µs",
        ),
    ];
    println!(
        "{:<44} {:>28} {:>26} {:>18}",
        "figure", "value", "ratio", "target"
    );
    for (name, value, ratio, target) in rows {
        println!("{name:<44} {value:>28} {ratio:>26} {target:>18}");
    }
    print_queues("first minute after sync", &r.after_sync_queues);
    print_queues("steady state", &r.steady_queues);
    print_replicas(r);
}

/// The konnector's work queues over one phase, one row per syncer.
fn print_queues(phase: &str, queues: &[crate::queues::QueueFigures]) {
    if queues.is_empty() {
        return;
    }
    println!(
        "
work queues, {phase}"
    );
    println!(
        "{:<36} {:>10} {:>10} {:>10} {:>14} {:>16}",
        "syncer (API)", "max depth", "adds", "waits", "mean wait ms", "p99 wait <= ms"
    );
    for q in queues {
        println!(
            "{:<36} {:>10.0} {:>10.0} {:>10.0} {:>14.2} {:>16.1}",
            q.api, q.max_depth, q.adds, q.waits, q.mean_wait_ms, q.p99_wait_at_most_ms
        );
    }
}

/// The `--replicas` table: each sharded replica, then the takeover after a SIGKILL.
fn print_replicas(r: &Report) {
    if r.replicas.is_empty() {
        return;
    }
    println!(
        "
{} sharded replicas (default Lease timings: 15s duration, 10s renew deadline, 2s retry), settled after {:.1} s",
        r.replicas.len(),
        r.replicas_settle_seconds
    );
    println!(
        "{:<16} {:>8} {:>10} {:>10} {:>16} {:>16}",
        "replica", "shards", "API shards", "RSS MiB", "CPU to settle s", "CPU steady s"
    );
    for f in &r.replicas {
        println!(
            "{:<16} {:>8} {:>10} {:>10.1} {:>16.2} {:>16.2}",
            f.identity,
            f.shards,
            f.api_shards,
            f.rss_mib,
            f.cpu_seconds_to_settle,
            f.cpu_seconds_steady
        );
    }
    println!(
        "spec / status p99 through the replicas: {:.1} / {:.1} ms",
        r.replicas_spec_latency_p99_ms, r.replicas_status_latency_p99_ms
    );
    println!(
        "SIGKILL of the busiest replica ({} shards): held elsewhere after {:.1} s (target <= lease duration + retry period = 17 s), \
         an update of each of its APIs synced after {:.1} s",
        r.replicas_killed_shards, r.replicas_takeover_seconds, r.replicas_resumed_seconds
    );
}
