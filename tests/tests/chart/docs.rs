//! The chart's README and the docs' values page are generated from `values.yaml` by helm-docs
//! (`scripts/chart-docs.sh`, `make chart-docs`), and every value is documented there.

use std::collections::BTreeSet;

use super::*;

/// The values documented in the chart README's table: key and default (as JSON).
pub(crate) fn documented_values() -> Result<Vec<(String, serde_json::Value)>> {
    let readme = std::fs::read_to_string(format!("{CHART}/README.md"))?;
    let mut rows = Vec::new();
    for line in readme.lines() {
        // | key | type | `default` | description |
        let cells: Vec<&str> = line.split(" | ").collect();
        let [first, _type, default, ..] = cells.as_slice() else {
            continue;
        };
        let Some(key) = first.strip_prefix("| ") else {
            continue;
        };
        if key == "Key" || key.starts_with('-') {
            continue;
        }
        let default = default.trim_matches('`');
        let value = serde_json::from_str(default)
            .with_context(|| format!("the default of {key}: {default}"))?;
        rows.push((key.to_string(), value));
    }
    ensure!(!rows.is_empty(), "no values table in the chart README");
    Ok(rows)
}

#[test]
fn chart_readme_and_values_page_are_what_values_yaml_generates() -> Result<()> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/chart-docs.sh");
    output(Command::new(script).arg("--check"), "")?;
    Ok(())
}

#[test]
fn every_value_in_values_yaml_is_documented() -> Result<()> {
    let values = yaml(&std::fs::read_to_string(format!("{CHART}/values.yaml"))?)?;
    let documented: BTreeSet<String> = documented_values()?.into_iter().map(|(k, _)| k).collect();
    // A value is documented itself, or as part of an object documented as a whole.
    fn undocumented(
        value: &Value,
        path: &str,
        documented: &BTreeSet<String>,
        out: &mut Vec<String>,
    ) {
        if documented.contains(path) {
            return;
        }
        match value {
            Value::Object(fields) if !fields.is_empty() => {
                for (key, field) in fields {
                    let key = key.as_str();
                    let path = if path.is_empty() {
                        key.to_string()
                    } else {
                        format!("{path}.{key}")
                    };
                    undocumented(field, &path, documented, out);
                }
            }
            _ => out.push(path.to_string()),
        }
    }
    let mut missing = Vec::new();
    undocumented(&values, "", &documented, &mut missing);
    ensure!(
        missing.is_empty(),
        "values without a `# --` comment: {missing:?}"
    );
    Ok(())
}
