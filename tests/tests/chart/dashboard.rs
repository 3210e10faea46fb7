//! The Grafana dashboard (`charts/konnector/dashboards/konnector.json`): it queries only
//! metrics the konnector exports, covers the concerns an operator watches, and ships as a
//! sidecar-labelled ConfigMap only when asked for.

use std::collections::BTreeSet;

use anyhow::{Context as _, Result, ensure};
use konnector::telemetry::{ApiLabels, PolicyFailureLabels, PolicyLabels, RelatedLabels, metrics};

use super::{CHART, assert_fields, render, yaml};

fn dashboard() -> Result<String> {
    let path = format!("{CHART}/dashboards/konnector.json");
    std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))
}

/// The `kbind_*` metric names the dashboard mentions: its PromQL expressions and variable
/// queries are the only places that name metrics.
fn queried_metrics() -> Result<BTreeSet<String>> {
    let text = dashboard()?;
    let words = text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
    let names: BTreeSet<String> = words
        .filter(|w| w.starts_with("kbind_"))
        .map(String::from)
        .collect();
    ensure!(!names.is_empty(), "the dashboard queries no kbind metric");
    Ok(names)
}

#[test]
fn every_metric_the_dashboard_queries_is_exported_by_the_konnector() -> Result<()> {
    // A family without samples renders nothing, so one sample is recorded in every family
    // first (through the same public fields the konnector records into); the exported names
    // are then read from the sample lines themselves.
    let m = metrics();
    drop(m.reconcile("connection"));
    m.reconcile("binding").fail();
    let api = "widgets.example.org".to_string();
    let api = ApiLabels { api };
    m.instances_synced.get_or_create(&api).inc();
    m.sync_lag.get_or_create(&api).observe(0.01);
    m.conflicts.get_or_create(&api).inc();
    m.related_skipped
        .get_or_create(&RelatedLabels {
            resource: "secrets",
            direction: "FromProvider",
            reason: "secret-type",
        })
        .inc();
    let conflict = PolicyLabels { role: "conflict" };
    m.policy_duration.get_or_create(&conflict).observe(0.001);
    m.policy_failures
        .get_or_create(&PolicyFailureLabels {
            role: "conflict",
            kind: "trap",
        })
        .inc();
    m.engaged_connections.set(1);
    m.declare_every_family();
    let mut exported = BTreeSet::new();
    for sample in m.encode().lines().filter(|l| l.starts_with("kbind_")) {
        exported.extend(sample.split(['{', ' ']).next().map(String::from));
    }
    let rendered = exported.contains("kbind_engaged_connections");
    ensure!(rendered, "no kbind sample rendered: {exported:?}");
    let unknown: Vec<_> = queried_metrics()?.difference(&exported).cloned().collect();
    ensure!(unknown.is_empty(), "queried but not exported: {unknown:?}");
    Ok(())
}

#[test]
fn the_dashboard_covers_lag_throughput_conflicts_policies_connections_and_errors() -> Result<()> {
    let used = queried_metrics()?;
    let needed = "kbind_sync_lag_seconds_bucket kbind_instances_synced_total kbind_conflicts_total \
        kbind_policy_call_duration_seconds_bucket kbind_policy_failures_total \
        kbind_engaged_connections kbind_reconcile_errors_total";
    for needed in needed.split_whitespace() {
        ensure!(used.contains(needed), "no panel queries {needed}");
    }
    Ok(())
}

#[test]
fn the_dashboard_covers_instances_requests_retries_relists_and_replicas() -> Result<()> {
    let used = queried_metrics()?;
    let needed = "kbind_instances kbind_client_requests_total kbind_client_retries_total \
        kbind_client_request_duration_seconds_bucket kbind_watch_lists_total \
        kbind_syncer_starts_total kbind_leader kbind_shards_owned kbind_shard_handovers_total \
        kbind_shard_lease_renew_seconds_bucket";
    for needed in needed.split_whitespace() {
        ensure!(used.contains(needed), "no panel queries {needed}");
    }
    Ok(())
}

#[test]
fn the_dashboard_configmap_is_off_by_default() -> Result<()> {
    let rendered = render("")?;
    let shipped = rendered
        .get("ConfigMap", "kbind-konnector-dashboard")
        .is_ok();
    ensure!(!shipped, "rendered without grafana.dashboard.enabled");
    Ok(())
}

#[test]
fn the_dashboard_configmap_carries_the_sidecar_label_and_the_dashboard() -> Result<()> {
    let rendered = render("grafana: {dashboard: {enabled: true}}")?;
    let cm = rendered.get("ConfigMap", "kbind-konnector-dashboard")?;
    let mut expected =
        yaml("metadata: {namespace: kbind-system, labels: {grafana_dashboard: '1'}}")?;
    // The ConfigMap holds the dashboard file unchanged.
    expected["data"]["konnector.json"] = dashboard()?.trim_end().into();
    assert_fields(cm, &expected)
}
