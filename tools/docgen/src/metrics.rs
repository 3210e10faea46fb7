//! The metrics reference, from the konnector's own registry: its text exposition gives every
//! metric's name, type, help and label names. The registry leaves out a labelled family
//! until it has a child, so each family gets one here first (in this process only); a test
//! counts the registrations in the registry's source, so a metric added there without a
//! child here fails instead of going missing from the page.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::{GENERATED, cell};

/// The label names of `family`'s samples in `exposition` (`le` of histogram buckets left out).
fn labels(exposition: &str, family: &str) -> Vec<String> {
    let mut names = BTreeSet::new();
    for line in exposition.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(family) else {
            continue;
        };
        let Some((suffix, labels)) = rest.split_once('{') else {
            continue;
        };
        if !matches!(suffix, "" | "_total" | "_bucket" | "_sum" | "_count") {
            continue;
        }
        let labels = labels.split('}').next().unwrap_or_default();
        for pair in labels.split(',') {
            if let Some((name, _)) = pair.split_once('=')
                && name != "le"
            {
                names.insert(name.to_string());
            }
        }
    }
    names.into_iter().collect()
}

/// One metric family as the exposition declares it.
#[derive(Debug, PartialEq, Eq)]
pub struct Family {
    pub name: String,
    pub kind: String,
    pub help: String,
}

/// The families declared by `# HELP` and `# TYPE` lines, in registry order.
pub fn families(exposition: &str) -> Vec<Family> {
    let mut out: Vec<Family> = Vec::new();
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.push(Family {
                name: name.to_string(),
                kind: String::new(),
                help: help.to_string(),
            });
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            if let Some(family) = out.iter_mut().rev().find(|f| f.name == name) {
                family.kind = kind.to_string();
            }
        }
    }
    out
}

/// The page.
pub fn page() -> anyhow::Result<String> {
    let metrics = konnector::telemetry::metrics();
    metrics.declare_every_family();
    let exposition = metrics.encode();
    let families = families(&exposition);
    anyhow::ensure!(
        !families.is_empty(),
        "the metrics registry declared no metric"
    );
    let mut out = format!(
        "{GENERATED}\n\n# Metrics\n\nThe konnector serves these on `/metrics` (port 8085 by default, \
         `--metrics-bind-address`; the chart's Service `<release>-konnector-metrics`) in the \
         Prometheus text format. Counters get the `_total` suffix on the wire. The Grafana \
         dashboard in `charts/konnector/dashboards` queries them.\n\n\
         | metric | type | labels | what it counts |\n|---|---|---|---|\n"
    );
    for family in families {
        let name = match family.kind.as_str() {
            "counter" => format!("{}_total", family.name),
            _ => family.name.clone(),
        };
        let labels: Vec<String> = labels(&exposition, &family.name)
            .into_iter()
            .map(|l| format!("`{l}`"))
            .collect();
        let _ = writeln!(
            out,
            "| `{name}` | {} | {} | {} |",
            family.kind,
            labels.join(", "),
            cell(&family.help)
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_and_type_lines_make_one_family_each() {
        let text = "# HELP kbind_reconciles Reconciles started.\n# TYPE kbind_reconciles counter\n\
                    kbind_reconciles_total{controller=\"sync\"} 3\n# HELP kbind_lag Lag.\n# TYPE kbind_lag histogram\n";
        assert_eq!(
            families(text),
            vec![
                Family {
                    name: "kbind_reconciles".into(),
                    kind: "counter".into(),
                    help: "Reconciles started.".into()
                },
                Family {
                    name: "kbind_lag".into(),
                    kind: "histogram".into(),
                    help: "Lag.".into()
                },
            ]
        );
    }

    #[test]
    fn the_page_has_a_row_for_every_metric_the_registry_registers() -> anyhow::Result<()> {
        let source = std::fs::read_to_string(
            crate::repository_root().join("host/src/telemetry/metrics.rs"),
        )?;
        let registered = source.matches("registry.register(").count();
        let page = page()?;
        let rows = page.lines().filter(|l| l.starts_with("| `kbind_")).count();
        assert_eq!(
            rows, registered,
            "a metric without a row: give its family a child in tools/docgen/src/metrics.rs\n{page}"
        );
        assert!(
            page.contains("| `kbind_reconciles_total` | counter | `controller` |"),
            "{page}"
        );
        Ok(())
    }

    #[test]
    fn label_names_come_from_samples_without_the_bucket_bound() {
        let text = "# TYPE kbind_lag histogram\nkbind_lag_bucket{api=\"w\",le=\"0.1\"} 0\nkbind_lag_sum{api=\"w\"} 0\n";
        assert_eq!(labels(text, "kbind_lag"), vec!["api".to_string()]);
    }
}
