//! The Grafana dashboard (`charts/konnector/dashboards/konnector.json`): it queries only
//! metrics the konnector exports, covers the concerns an operator watches, and ships as a
//! sidecar-labelled ConfigMap only when asked for.

use std::collections::BTreeSet;

use anyhow::{Context as _, Result, ensure};
use serde_json::Value;

use super::{chart_dir, render};

fn dashboard() -> Result<Value> {
    let path = chart_dir().join("dashboards/konnector.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
}

/// Every PromQL expression and variable query in the dashboard.
fn queries(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr" | "definition", Value::String(s)) => out.push(s.clone()),
                    ("query", Value::String(s)) => out.push(s.clone()),
                    _ => queries(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| queries(v, out)),
        _ => {}
    }
}

/// The `kbind_*` metric names an expression mentions.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("kbind_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
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
    let mut exprs = Vec::new();
    queries(&dashboard()?, &mut exprs);
    ensure!(!exprs.is_empty(), "the dashboard has no queries");
    let exported = exported_samples();
    ensure!(
        exported.contains("kbind_engaged_connections"),
        "the registry rendered no kbind metrics: {exported:?}"
    );
    let used: BTreeSet<String> = exprs.iter().flat_map(|e| metric_names(e)).collect();
    let unknown: Vec<&String> = used.difference(&exported).collect();
    ensure!(
        unknown.is_empty(),
        "the dashboard queries metrics the konnector does not export: {unknown:?}; exported: {exported:?}"
    );
    Ok(())
}

#[test]
fn the_dashboard_covers_lag_throughput_conflicts_policies_connections_and_errors() -> Result<()> {
    let mut exprs = Vec::new();
    queries(&dashboard()?, &mut exprs);
    let used: BTreeSet<String> = exprs.iter().flat_map(|e| metric_names(e)).collect();
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
    let rendered = render(&[])?;
    ensure!(
        rendered
            .find("ConfigMap", "kbind-konnector-dashboard")
            .is_none(),
        "rendered without grafana.dashboard.enabled"
    );
    Ok(())
}

#[test]
fn the_dashboard_configmap_carries_the_sidecar_label_and_the_dashboard() -> Result<()> {
    let rendered = render(&["--set", "grafana.dashboard.enabled=true"])?;
    let cm = rendered.get("ConfigMap", "kbind-konnector-dashboard")?;
    assert_eq!(
        cm["metadata"]["labels"]["grafana_dashboard"].as_str(),
        Some("1")
    );
    assert_eq!(cm["metadata"]["namespace"].as_str(), Some(super::NAMESPACE));
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
