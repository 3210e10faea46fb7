//! The CRD reference, from the committed core CRDs (`charts/konnector/files/crds`, generated
//! from the Rust types by `make crds`): per kind its names, scope, printer columns and every
//! field of spec and status with its type, constraints and description.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use serde_json::Value;

use crate::{GENERATED, cell};

/// The page for every CRD file in `dir`, Connection first.
pub fn page(dir: &Path) -> anyhow::Result<String> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    // Connections first: bindings refer to them.
    files.sort_by_key(|p| {
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        (!name.contains("connections"), name)
    });
    let mut out = format!(
        "{GENERATED}\n\n# CRD reference\n\nThe three core kinds of group `core.kbind.io`, version \
         `v1alpha1`, as the chart installs them (`charts/konnector/files/crds`). The same \
         descriptions are what `kubectl explain` prints, e.g. `kubectl explain connection.spec`.\n"
    );
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        let crd: Value =
            serde_saphyr::from_str(&text).with_context(|| format!("parsing {}", file.display()))?;
        kind(&mut out, &crd)?;
    }
    Ok(out)
}

fn kind(out: &mut String, crd: &Value) -> anyhow::Result<()> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let kind = names["kind"]
        .as_str()
        .context("a CRD without spec.names.kind")?;
    let _ = write!(out, "\n## {kind}\n\n");
    let list = |v: &Value| -> String {
        v.as_array()
            .map(|s| {
                s.iter()
                    .filter_map(Value::as_str)
                    .map(|s| format!("`{s}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    };
    let _ = writeln!(out, "| | |\n|---|---|");
    let _ = writeln!(
        out,
        "| resource | `{}.{}` |",
        str_of(&names["plural"]),
        str_of(&spec["group"])
    );
    let _ = writeln!(out, "| scope | {} |", str_of(&spec["scope"]));
    let _ = writeln!(out, "| short names | {} |", list(&names["shortNames"]));
    let _ = writeln!(out, "| categories | {} |", list(&names["categories"]));
    for version in spec["versions"].as_array().into_iter().flatten() {
        let name = str_of(&version["name"]);
        let columns: Vec<String> = version["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let wide = c["priority"].as_i64().is_some_and(|p| p > 0);
                format!(
                    "{}{}",
                    str_of(&c["name"]),
                    if wide { " (wide)" } else { "" }
                )
            })
            .collect();
        let _ = writeln!(out, "| version | `{name}` |");
        let _ = writeln!(
            out,
            "| `kubectl get` columns | {} |",
            cell(&columns.join(", "))
        );
        let schema = &version["schema"]["openAPIV3Schema"];
        if let Some(description) = schema["description"].as_str() {
            let _ = write!(out, "\n{}\n", crate::escape(description));
        }
        out.push_str("\n| field | type | description |\n|---|---|---|\n");
        for part in ["spec", "status"] {
            let node = &schema["properties"][part];
            if !node.is_null() {
                let required = is_required(schema, part);
                fields(out, part, node, required);
            }
        }
    }
    Ok(())
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

fn is_required(parent: &Value, name: &str) -> bool {
    parent["required"]
        .as_array()
        .is_some_and(|r| r.iter().any(|n| n.as_str() == Some(name)))
}

/// One row for `node` at `path`, then rows for its properties and items.
fn fields(out: &mut String, path: &str, node: &Value, required: bool) {
    let _ = writeln!(
        out,
        "| `{path}` | {} | {} |",
        type_of(node),
        describe(node, required)
    );
    if let Some(properties) = node["properties"].as_object() {
        for (name, child) in properties {
            let name = name.as_str();
            fields(
                out,
                &format!("{path}.{name}"),
                child,
                is_required(node, name),
            );
        }
    }
    let items = &node["items"];
    if let Some(properties) = items["properties"].as_object() {
        for (name, child) in properties {
            let name = name.as_str();
            fields(
                out,
                &format!("{path}[].{name}"),
                child,
                is_required(items, name),
            );
        }
    }
}

fn type_of(node: &Value) -> String {
    let base = node["type"].as_str().unwrap_or("object");
    match base {
        "array" => format!("[]{}", node["items"]["type"].as_str().unwrap_or("object")),
        "object" if node["additionalProperties"].is_object() => format!(
            "map[string]{}",
            node["additionalProperties"]["type"]
                .as_str()
                .unwrap_or("object")
        ),
        other => other.to_string(),
    }
}

fn describe(node: &Value, required: bool) -> String {
    let mut text = cell(node["description"].as_str().unwrap_or_default());
    let mut facts = Vec::new();
    if required {
        facts.push("Required.".to_string());
    }
    if let Some(values) = node["enum"].as_array() {
        let values: Vec<String> = values.iter().map(|v| format!("`{}`", scalar(v))).collect();
        facts.push(format!("One of {}.", values.join(", ")));
    }
    if !node["default"].is_null() {
        facts.push(format!("Default `{}`.", scalar(&node["default"])));
    }
    if let Some(min) = node["minItems"].as_u64() {
        facts.push(format!("At least {min} item(s)."));
    }
    for rule in node["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(message) = rule["message"].as_str() {
            facts.push(format!("{}.", cell(message).trim_end_matches('.')));
        }
    }
    if let Some(keys) = node["x-kubernetes-list-map-keys"].as_array() {
        let keys: Vec<&str> = keys.iter().filter_map(Value::as_str).collect();
        facts.push(format!("A map keyed by `{}`.", keys.join("`, `")));
    }
    for fact in facts {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(&fact);
    }
    text
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => serde_saphyr::to_string(other)
            .map(|s| s.trim().replace('\n', " "))
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_committed_kind_and_its_spec_fields_appear() -> anyhow::Result<()> {
        let dir = crate::repository_root().join("charts/konnector/files/crds");
        let page = page(&dir)?;
        for heading in ["## Connection", "## Binding", "## ClusterBinding"] {
            assert!(page.contains(heading), "no {heading}");
        }
        assert!(page.contains("`spec.kubeconfigSecretRef.name`"));
        assert!(page.contains("`spec.apis[].name`"));
        Ok(())
    }
}
