//! The Grafana dashboard (`charts/konnector/dashboards/konnector.json`): it queries only
//! metrics the konnector exports, covers the concerns an operator watches, and ships as a
//! sidecar-labelled ConfigMap only when asked for.

use std::collections::BTreeSet;

use anyhow::{Context as _, Result, ensure};
use serde_json::Value;

use super::{CHART, assert_fields, render};

fn dashboard() -> Result<Value> {
    let path = format!("{CHART}/dashboards/konnector.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    serde_json::from_str(&text).with_context(|| format!("{path} is not JSON"))
}

/// The `kbind_*` metric names every PromQL expression and variable query mentions.
fn queried_metrics() -> Result<BTreeSet<String>> {
    fn walk(value: &Value, names: &mut BTreeSet<String>) {
        match value {
            Value::Object(map) => map.iter().for_each(|(key, v)| match (key.as_str(), v) {
                ("expr" | "definition" | "query", Value::String(query)) => names.extend(
                    query
                        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .filter(|word| word.starts_with("kbind_"))
                        .map(str::to_string),
                ),
                _ => walk(v, names),
            }),
            Value::Array(items) => items.iter().for_each(|v| walk(v, names)),
            _ => {}
        }
    }
    let mut names = BTreeSet::new();
    walk(&dashboard()?, &mut names);
    ensure!(!names.is_empty(), "the dashboard queries no kbind metric");
    Ok(names)
}

/// The sample names the konnector's registry exposes. A family without samples renders
/// nothing, so one sample is recorded in every family first (through the same public fields
/// the konnector records into); the names are then read from the sample lines themselves.
fn exported_samples() -> BTreeSet<String> {
    use konnector::telemetry::{
        ApiLabels, PolicyFailureLabels, PolicyLabels, RelatedLabels, metrics,
    };
    let m = metrics();
    drop(m.reconcile("connection"));
    m.reconcile("binding").fail();
    let api = ApiLabels {
        api: "widgets.example.org".into(),
    };
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
    m.policy_duration
        .get_or_create(&PolicyLabels { role: "conflict" })
        .observe(0.001);
    m.policy_failures
        .get_or_create(&PolicyFailureLabels {
            role: "conflict",
            kind: "trap",
        })
        .inc();
    m.engaged_connections.set(1);
    m.encode()
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

#[test]
fn every_metric_the_dashboard_queries_is_exported_by_the_konnector() -> Result<()> {
    let exported = exported_samples();
    ensure!(
        exported.contains("kbind_engaged_connections"),
        "the registry rendered no kbind metrics: {exported:?}"
    );
    let used = queried_metrics()?;
    let unknown: Vec<&String> = used.difference(&exported).collect();
    ensure!(
        unknown.is_empty(),
        "the dashboard queries metrics the konnector does not export: {unknown:?}; exported: {exported:?}"
    );
    Ok(())
}

#[test]
fn the_dashboard_covers_lag_throughput_conflicts_policies_connections_and_errors() -> Result<()> {
    let used = queried_metrics()?;
    for needed in [
        "kbind_sync_lag_seconds_bucket",
        "kbind_instances_synced_total",
        "kbind_conflicts_total",
        "kbind_policy_call_duration_seconds_bucket",
        "kbind_policy_failures_total",
        "kbind_engaged_connections",
        "kbind_reconcile_errors_total",
    ] {
        ensure!(used.contains(needed), "no panel queries {needed}");
    }
    Ok(())
}

#[test]
fn the_dashboard_configmap_is_off_by_default() -> Result<()> {
    let dashboard = render("")?
        .get("ConfigMap", "kbind-konnector-dashboard")
        .is_ok();
    ensure!(!dashboard, "rendered without grafana.dashboard.enabled");
    Ok(())
}

#[test]
fn the_dashboard_configmap_carries_the_sidecar_label_and_the_dashboard() -> Result<()> {
    let rendered = render("grafana: {dashboard: {enabled: true}}")?;
    let cm = rendered.get("ConfigMap", "kbind-konnector-dashboard")?;
    assert_fields(
        cm,
        "metadata: {namespace: kbind-system, labels: {grafana_dashboard: '1'}}",
    )?;
    let json = cm["data"]["konnector.json"]
        .as_str()
        .context("no konnector.json key")?;
    let shipped: Value = serde_json::from_str(json)?;
    assert_eq!(
        shipped,
        dashboard()?,
        "the ConfigMap holds the dashboard file unchanged"
    );
    Ok(())
}
