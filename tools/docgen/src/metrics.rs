//! The metrics reference, from the konnector's own registry: its text exposition names every
//! registered metric with its type and help, whether or not it has samples yet.

use std::fmt::Write as _;

use crate::{GENERATED, cell};

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
    let exposition = konnector::telemetry::metrics().encode();
    let families = families(&exposition);
    anyhow::ensure!(!families.is_empty(), "the metrics registry declared no metric");
    let mut out = format!(
        "{GENERATED}\n\n# Metrics\n\nThe konnector serves these on `/metrics` (port 8085 by default, \
         `--metrics-bind-address`; the chart's Service `<release>-konnector-metrics`) in the \
         Prometheus text format. Counters get the `_total` suffix on the wire. The Grafana \
         dashboard in `charts/konnector/dashboards` queries them.\n\n\
         | metric | type | what it counts |\n|---|---|---|\n"
    );
    for family in families {
        let name = match family.kind.as_str() {
            "counter" => format!("{}_total", family.name),
            _ => family.name.clone(),
        };
        let _ = writeln!(out, "| `{name}` | {} | {} |", family.kind, cell(&family.help));
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
                Family { name: "kbind_reconciles".into(), kind: "counter".into(), help: "Reconciles started.".into() },
                Family { name: "kbind_lag".into(), kind: "histogram".into(), help: "Lag.".into() },
            ]
        );
    }

    #[test]
    fn the_registry_page_names_the_shard_metrics() -> anyhow::Result<()> {
        let page = page()?;
        assert!(page.contains("`kbind_shards_owned`"), "{page}");
        assert!(page.contains("`kbind_reconciles_total`"), "{page}");
        Ok(())
    }
}
