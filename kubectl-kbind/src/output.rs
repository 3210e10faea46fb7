//! What the commands print: objects as `-o json|yaml|name` on stdout (so scripts can pipe them),
//! human progress on stderr, and condition summaries in one wording everywhere.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use konnector::api::ConditionType;
use serde::Serialize;

/// `-o` formats.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    /// One JSON document (a `List` for several objects).
    Json,
    /// YAML; several objects as a `List`.
    Yaml,
    /// kubectl's `kind.group/name`, one line per object.
    Name,
}

/// Prints `value` on stdout in `format`.
pub fn print<T: Serialize>(format: OutputFormat, value: &T) -> anyhow::Result<()> {
    let text = render(format, value)?;
    print!("{text}");
    Ok(())
}

/// Renders `value` in `format`, ending in a newline.
pub fn render<T: Serialize>(format: OutputFormat, value: &T) -> anyhow::Result<String> {
    Ok(match format {
        OutputFormat::Json => format!("{}\n", serde_json::to_string_pretty(value)?),
        OutputFormat::Yaml => serde_saphyr::to_string(value)?,
        OutputFormat::Name => names(&serde_json::to_value(value)?)?,
    })
}

/// Each object of `value` (one, or the items of a `List`) as `kind.group/name`, a line each, as
/// `kubectl get -o name` prints them; a value that is not an object (a report) is refused.
fn names(value: &serde_json::Value) -> anyhow::Result<String> {
    let items = match value["kind"].as_str() {
        Some("List") => value["items"].as_array().cloned().unwrap_or_default(),
        _ => vec![value.clone()],
    };
    let mut out = String::new();
    for item in &items {
        let (Some(kind), Some(name)) = (item["kind"].as_str(), item["metadata"]["name"].as_str())
        else {
            anyhow::bail!(
                "-o name prints objects, and this command prints a report: use -o json or -o yaml"
            );
        };
        let group = item["apiVersion"]
            .as_str()
            .and_then(|v| v.split_once('/'))
            .map(|(group, _)| format!(".{group}"))
            .unwrap_or_default();
        out.push_str(&format!("{}{group}/{name}\n", kind.to_lowercase()));
    }
    Ok(out)
}

/// Wraps several objects into a `v1/List`, as kubectl prints them.
pub fn list<T: Serialize>(items: &[T]) -> anyhow::Result<serde_json::Value> {
    Ok(serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": serde_json::to_value(items)?,
    }))
}

/// A progress line on stderr, so stdout stays machine-readable.
pub fn progress(line: impl AsRef<str>) {
    eprintln!("{}", line.as_ref());
}

/// The condition of `type_`, if present.
pub fn condition(conditions: &[Condition], type_: ConditionType) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == type_.as_str())
}

/// `Ready=True`, `Ready=False (Reason)` or `Ready=Unknown` when the konnector has not said.
pub fn summary(conditions: &[Condition], type_: ConditionType) -> String {
    match condition(conditions, type_) {
        Some(c) if c.status == "True" => format!("{}=True", type_.as_str()),
        Some(c) => format!("{}={} ({})", type_.as_str(), c.status, c.reason),
        None => format!("{}=Unknown", type_.as_str()),
    }
}

/// Whether the condition is present and True.
pub fn is_true(conditions: &[Condition], type_: ConditionType) -> bool {
    condition(conditions, type_).is_some_and(|c| c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn cond(type_: &str, status: &str, reason: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
        }
    }

    #[test]
    fn summaries_name_the_reason_of_a_false_condition() {
        let conditions = vec![
            cond("Ready", "False", "SecretNotFound"),
            cond("Synced", "True", "AsExpected"),
        ];
        assert_eq!(
            summary(&conditions, ConditionType::Ready),
            "Ready=False (SecretNotFound)"
        );
        assert_eq!(summary(&conditions, ConditionType::Synced), "Synced=True");
        assert_eq!(
            summary(&conditions, ConditionType::Conflicts),
            "Conflicts=Unknown"
        );
    }

    #[test]
    fn name_output_is_kind_dot_group_slash_name_per_object() -> anyhow::Result<()> {
        let connection = serde_json::json!({
            "apiVersion": "core.kbind.io/v1alpha1", "kind": "Connection",
            "metadata": { "name": "provider" },
        });
        assert_eq!(
            render(OutputFormat::Name, &connection)?,
            "connection.core.kbind.io/provider\n"
        );
        let secret = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "s" },
        });
        assert_eq!(
            render(OutputFormat::Name, &list(&[connection, secret])?)?,
            "connection.core.kbind.io/provider\nsecret/s\n"
        );
        let report = serde_json::json!({ "connections": [] });
        assert!(render(OutputFormat::Name, &report).is_err());
        Ok(())
    }

    #[test]
    fn several_objects_print_as_a_kubectl_list() -> anyhow::Result<()> {
        let yaml = render(
            OutputFormat::Yaml,
            &list(&[serde_json::json!({"kind": "X"})])?,
        )?;
        let back: serde_json::Value = serde_saphyr::from_str(&yaml)?;
        assert_eq!(back["kind"], "List");
        assert_eq!(back["items"][0]["kind"], "X");
        Ok(())
    }
}
