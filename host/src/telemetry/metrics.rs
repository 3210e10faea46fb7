//! The konnector's metrics, in Prometheus text exposition via `prometheus-client` (the
//! Prometheus project's own Rust client: typed label sets, no global macros).

use std::sync::LazyLock;
use std::time::Instant;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::labels::{
    ApiLabels, BuildLabels, ClientLatencyLabels, ClientRequestLabels, ClientRetryLabels,
    ControllerLabels, HandoverLabels, InstanceStateLabels, PolicyFailureLabels, PolicyLabels,
    PolicyModuleLabels, PolicySwapLabels, RelatedLabels, RelatedReadLabels, ShardKindLabels,
    WatchLabels, WorkQueueLabels,
};

/// Every metric the konnector exports.
pub struct Metrics {
    registry: Registry,
    /// Reconciles started, per controller.
    pub reconciles: Family<ControllerLabels, Counter>,
    /// Reconciles that ended in an error, per controller.
    pub reconcile_errors: Family<ControllerLabels, Counter>,
    /// Reconcile durations, per controller.
    pub reconcile_duration: Family<ControllerLabels, Histogram>,
    /// Instances written to the provider (spec) or consumer (status), per API.
    pub instances_synced: Family<ApiLabels, Counter>,
    /// Time from noticing an instance change to the provider copy reflecting it, per API.
    pub sync_lag: Family<ApiLabels, Histogram>,
    /// Instance conflicts detected, per API.
    pub conflicts: Family<ApiLabels, Counter>,
    /// Consumer CRDs applied from a provider schema, per API (an unchanged schema is not
    /// applied again).
    pub schema_applies: Family<ApiLabels, Counter>,
    /// Related copies skipped: a foreign target, or a Secret type the host does not copy.
    pub related_skipped: Family<RelatedLabels, Counter>,
    /// Related-resource reads, by how much of the objects they carried.
    pub related_reads: Family<RelatedReadLabels, Counter>,
    /// Related copies that failed (each counted, the others went on).
    pub related_copy_failures: Family<RelatedLabels, Counter>,
    /// Policy call durations, per role.
    pub policy_duration: Family<PolicyLabels, Histogram>,
    /// Policy call failures, per role and kind.
    pub policy_failures: Family<PolicyFailureLabels, Counter>,
    /// The module serving each role: its reference and digest (value 1).
    pub policy_module: Family<PolicyModuleLabels, Gauge>,
    /// Live swaps of a role's module, per role and result.
    pub policy_swaps: Family<PolicySwapLabels, Counter>,
    /// Connections currently engaged (Ready, provider client live).
    pub engaged_connections: Gauge,
    /// Syncers started, per API: each start lists both clusters again, so a rise without a
    /// binding or Connection change means work was restarted.
    pub syncer_starts: Family<ApiLabels, Counter>,
    /// Instance reconciles (periodic resyncs, mostly) that found the provider copy in sync
    /// and sent nothing, per API: the idle work.
    pub in_sync_checks: Family<ApiLabels, Counter>,
    /// Full lists a syncer's watch made, per API and cluster: one at start, then one per
    /// watch that could not resume (`410 Gone`, an expired resourceVersion), the costliest
    /// thing a watch does.
    pub watch_lists: Family<WatchLabels, Counter>,
    /// Shards this replica holds, per kind (sharded replicas only).
    pub shards_owned: Family<ShardKindLabels, Gauge>,
    /// Shards acquired, released and lost by this replica.
    pub shard_handovers: Family<HandoverLabels, Counter>,
    /// How long renewing this replica's membership Lease took.
    pub shard_lease_renew: Histogram,
    /// 1 while this replica leads (leader election), 0 while it stands by.
    pub leader: Gauge,
    /// Bound instances by state, per API, as the running syncers know them: what alerts on
    /// failing or conflicting instances read.
    pub instances: Family<InstanceStateLabels, Gauge>,
    /// Always 1, labelled with the version and commit of the running build.
    pub build_info: Family<BuildLabels, Gauge>,
    /// API requests sent, per cluster, verb and answer.
    pub client_requests: Family<ClientRequestLabels, Counter>,
    /// API request latency until the answer's head (a watch: until it started), per cluster
    /// and verb.
    pub client_request_duration: Family<ClientLatencyLabels, Histogram>,
    /// Requests the client layer sent again after a transient answer, per cluster and what
    /// the failed attempt got.
    pub client_retries: Family<ClientRetryLabels, Counter>,
    /// Keys waiting in a controller's queue for their reconcile, per controller and API
    /// (the syncer's work queue).
    pub workqueue_depth: Family<WorkQueueLabels, Gauge>,
    /// Events that queued a key (a key already waiting included).
    pub workqueue_adds: Family<WorkQueueLabels, Counter>,
    /// Failed reconciles scheduled again.
    pub workqueue_retries: Family<WorkQueueLabels, Counter>,
    /// How long a key waited, from its first trigger to its reconcile's start.
    pub workqueue_duration: Family<WorkQueueLabels, Histogram>,
}

fn latency_histogram() -> Histogram {
    // 100 µs .. ~100 s
    Histogram::new(exponential_buckets(0.0001, 4.0, 11))
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("kbind");
        let metrics = Self {
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Family::new_with_constructor(latency_histogram),
            instances_synced: Family::default(),
            sync_lag: Family::new_with_constructor(latency_histogram),
            conflicts: Family::default(),
            schema_applies: Family::default(),
            related_skipped: Family::default(),
            related_reads: Family::default(),
            related_copy_failures: Family::default(),
            policy_duration: Family::new_with_constructor(latency_histogram),
            policy_failures: Family::default(),
            policy_module: Family::default(),
            policy_swaps: Family::default(),
            engaged_connections: Gauge::default(),
            syncer_starts: Family::default(),
            in_sync_checks: Family::default(),
            watch_lists: Family::default(),
            shards_owned: Family::default(),
            shard_handovers: Family::default(),
            shard_lease_renew: latency_histogram(),
            leader: Gauge::default(),
            instances: Family::default(),
            build_info: Family::default(),
            client_requests: Family::default(),
            client_retries: Family::default(),
            client_request_duration: Family::new_with_constructor(latency_histogram),
            workqueue_depth: Family::default(),
            workqueue_adds: Family::default(),
            workqueue_retries: Family::default(),
            workqueue_duration: Family::new_with_constructor(latency_histogram),
            registry: Registry::default(),
        };
        registry.register(
            "reconciles",
            "Reconciles started",
            metrics.reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciles that failed",
            metrics.reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile durations",
            metrics.reconcile_duration.clone(),
        );
        registry.register(
            "instances_synced",
            "Instance writes to provider or consumer",
            metrics.instances_synced.clone(),
        );
        registry.register(
            "sync_lag_seconds",
            "Time from an instance change to its provider copy",
            metrics.sync_lag.clone(),
        );
        registry.register(
            "conflicts",
            "Instance conflicts detected",
            metrics.conflicts.clone(),
        );
        registry.register(
            "schema_applies",
            "Consumer CRDs applied from a changed provider schema",
            metrics.schema_applies.clone(),
        );
        registry.register(
            "related_skipped",
            "Related copies skipped (foreign target, refused Secret type)",
            metrics.related_skipped.clone(),
        );
        registry.register(
            "related_reads",
            "Related-resource reads (metadata-only list pages, full reads of objects to copy)",
            metrics.related_reads.clone(),
        );
        registry.register(
            "related_copy_failures",
            "Related copies that failed while the others went on",
            metrics.related_copy_failures.clone(),
        );
        registry.register(
            "policy_call_duration_seconds",
            "Policy module call durations",
            metrics.policy_duration.clone(),
        );
        registry.register(
            "policy_failures",
            "Policy module call failures",
            metrics.policy_failures.clone(),
        );
        registry.register(
            "policy_module_info",
            "The policy module serving each role: its reference and digest (always 1)",
            metrics.policy_module.clone(),
        );
        registry.register(
            "policy_swaps",
            "Live swaps of a policy role's module (failed: the running module stayed)",
            metrics.policy_swaps.clone(),
        );
        registry.register(
            "engaged_connections",
            "Connections with a live provider client",
            metrics.engaged_connections.clone(),
        );
        registry.register(
            "syncer_starts",
            "Syncers started (each lists both clusters)",
            metrics.syncer_starts.clone(),
        );
        registry.register(
            "in_sync_checks",
            "Instance reconciles that found the provider copy in sync and sent nothing",
            metrics.in_sync_checks.clone(),
        );
        registry.register(
            "watch_lists",
            "Full lists completed by syncer watches (start, and each watch that could not resume)",
            metrics.watch_lists.clone(),
        );
        registry.register(
            "shards_owned",
            "Shards this replica holds through their Leases",
            metrics.shards_owned.clone(),
        );
        registry.register(
            "shard_handovers",
            "Shards acquired, released or lost by this replica",
            metrics.shard_handovers.clone(),
        );
        registry.register(
            "shard_lease_renew_seconds",
            "Time to renew this replica's membership Lease",
            metrics.shard_lease_renew.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica leads (leader election)",
            metrics.leader.clone(),
        );
        registry.register(
            "instances",
            "Bound instances by state (synced, conflicting, failing, pending), per API",
            metrics.instances.clone(),
        );
        registry.register(
            "build_info",
            "The running build: version and commit labels, value 1",
            metrics.build_info.clone(),
        );
        registry.register(
            "client_requests",
            "API requests sent, per cluster, verb and status code",
            metrics.client_requests.clone(),
        );
        registry.register(
            "client_retries",
            "Requests sent again after a transient answer (429, 5xx, no answer), per cluster and the failed attempt's code",
            metrics.client_retries.clone(),
        );
        registry.register(
            "client_request_duration_seconds",
            "API request latency until the answer's head, per cluster and verb",
            metrics.client_request_duration.clone(),
        );
        registry.register(
            "workqueue_depth",
            "Keys waiting in a controller's queue for their reconcile, per controller and API",
            metrics.workqueue_depth.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Events that queued a key, per controller and API (a key already waiting included)",
            metrics.workqueue_adds.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Failed reconciles scheduled again, per controller and API",
            metrics.workqueue_retries.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long a key waited in a controller's queue, from its first trigger to its reconcile's start",
            metrics.workqueue_duration.clone(),
        );
        metrics
            .build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
                commit: option_env!("KBIND_GIT_COMMIT").unwrap_or("unknown"),
            })
            .set(1);
        Self {
            registry,
            ..metrics
        }
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Gives every labelled family one child (at zero), so the exposition declares every
    /// metric: a labelled family without a child renders nothing. For the generated metrics
    /// reference and the checks that alert rules name only exported metrics; a new family
    /// gets its child here, beside its registration.
    pub fn declare_every_family(&self) {
        let m = self;
        let controller = ControllerLabels { controller: "sync" };
        let api = ApiLabels {
            api: "widgets.example.org".into(),
        };
        let related = RelatedLabels {
            resource: "secrets",
            direction: "FromProvider",
            reason: "foreign-target",
        };
        let _ = m.reconciles.get_or_create(&controller);
        let _ = m.reconcile_errors.get_or_create(&controller);
        let _ = m.reconcile_duration.get_or_create(&controller);
        let _ = m.instances_synced.get_or_create(&api);
        let _ = m.sync_lag.get_or_create(&api);
        let _ = m.conflicts.get_or_create(&api);
        let _ = m.schema_applies.get_or_create(&api);
        let _ = m.related_skipped.get_or_create(&related);
        let _ = m.related_reads.get_or_create(&RelatedReadLabels {
            resource: "secrets",
            read: "list-metadata",
        });
        let _ = m.related_copy_failures.get_or_create(&related);
        let _ = m
            .policy_duration
            .get_or_create(&PolicyLabels { role: "conflict" });
        let _ = m.policy_failures.get_or_create(&PolicyFailureLabels {
            role: "conflict",
            kind: "trap",
        });
        let _ = m.policy_module.get_or_create(&PolicyModuleLabels {
            role: "conflict",
            reference: "built-in".into(),
            digest: "sha256:0".into(),
            connection: String::new(),
        });
        let _ = m.policy_swaps.get_or_create(&PolicySwapLabels {
            role: "conflict",
            result: "failed",
        });
        let _ = m.syncer_starts.get_or_create(&api);
        let _ = m.in_sync_checks.get_or_create(&api);
        let _ = m.watch_lists.get_or_create(&WatchLabels {
            api: "widgets.example.org".into(),
            cluster: "consumer",
        });
        let _ = m
            .shards_owned
            .get_or_create(&ShardKindLabels { kind: "api" });
        let _ = m.shard_handovers.get_or_create(&HandoverLabels {
            kind: "api",
            change: "acquired",
        });
        let _ = m.client_requests.get_or_create(&ClientRequestLabels {
            cluster: "provider",
            verb: "get",
            code: "200".to_string(),
        });
        let _ = m.client_retries.get_or_create(&ClientRetryLabels {
            cluster: "provider",
            code: "503".to_string(),
        });
        let _ = m
            .client_request_duration
            .get_or_create(&ClientLatencyLabels {
                cluster: "provider",
                verb: "get",
            });
        let queue = WorkQueueLabels {
            controller: "sync",
            api: "widgets.example.org".into(),
        };
        let _ = m.workqueue_depth.get_or_create(&queue);
        let _ = m.workqueue_adds.get_or_create(&queue);
        let _ = m.workqueue_retries.get_or_create(&queue);
        let _ = m.workqueue_duration.get_or_create(&queue);
        let _ = m.instances.get_or_create(&InstanceStateLabels {
            api: "widgets.example.org".into(),
            state: "synced",
        });
    }

    /// Counts a reconcile and times it until the returned timer is dropped.
    pub fn reconcile(&self, controller: &'static str) -> ReconcileTimer<'_> {
        let labels = ControllerLabels { controller };
        self.reconciles.get_or_create(&labels).inc();
        ReconcileTimer {
            metrics: self,
            labels,
            start: Instant::now(),
            failed: false,
        }
    }
}

/// Records a reconcile's duration (and failure) when dropped.
pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    labels: ControllerLabels,
    start: Instant,
    failed: bool,
}

impl ReconcileTimer<'_> {
    /// Marks the reconcile as failed.
    pub fn fail(&mut self) {
        self.failed = true;
    }
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        self.metrics
            .reconcile_duration
            .get_or_create(&self.labels)
            .observe(self.start.elapsed().as_secs_f64());
        if self.failed {
            self.metrics
                .reconcile_errors
                .get_or_create(&self.labels)
                .inc();
        }
    }
}

/// The process-wide metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);
    &METRICS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_names_carry_the_kbind_prefix_and_labels() {
        let metrics = Metrics::new();
        {
            let mut timer = metrics.reconcile("connection");
            timer.fail();
        }
        metrics
            .instances_synced
            .get_or_create(&ApiLabels {
                api: "widgets.example.org".into(),
            })
            .inc();
        let text = metrics.encode();
        assert!(
            text.contains("kbind_reconciles_total{controller=\"connection\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("kbind_reconcile_errors_total{controller=\"connection\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("kbind_instances_synced_total{api=\"widgets.example.org\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("kbind_reconcile_duration_seconds_count{controller=\"connection\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn the_build_is_announced_with_its_version() {
        let text = Metrics::new().encode();
        let version = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
        let line = text
            .lines()
            .find(|l| l.starts_with("kbind_build_info{"))
            .unwrap_or_else(|| panic!("no build info in {text}"));
        assert!(
            line.contains(&version) && line.contains("commit=\"") && line.ends_with(" 1"),
            "{line}"
        );
    }
}
