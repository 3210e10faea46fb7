//! Settings: the JSON document an operator gives with a module's reference (a flag, the
//! references file, or a Connection's `spec.policies`), handed to every new instance of the
//! module before its first decision (each role's `configure`, new in `kbind:policy@0.2.0`).
//!
//! A policy that takes no settings answers `configure` with [`none`]: an empty document
//! (nothing, `{}` or `null`) is accepted, anything else refused with a message the operator
//! sees on the Connection. A policy that takes settings parses them in `configure` and keeps
//! them for its decisions (a `std::sync::OnceLock` is enough: each instance is configured
//! once).
//!
//! ```ignore
//! fn configure(settings: String) -> Result<(), String> {
//!     let parsed: MySettings = serde_json::from_str(&settings).map_err(|e| e.to_string())?;
//!     SETTINGS.set(parsed).map_err(|_| "configured twice".to_owned())
//! }
//! ```

/// Accepts an empty settings document (nothing, `{}` or `null`) and refuses any other with
/// a message naming what was given.
pub fn none(settings: &str) -> Result<(), String> {
    let trimmed = settings.trim();
    if trimmed.is_empty() || trimmed == "null" {
        return Ok(());
    }
    match serde_json::from_str::<serde_json::Value>(trimmed) {
        Ok(serde_json::Value::Object(map)) if map.is_empty() => Ok(()),
        Ok(serde_json::Value::Object(map)) => Err(format!(
            "this module takes no settings, but got {}",
            map.keys()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        Ok(other) => Err(format!("this module takes no settings, but got {other}")),
        Err(e) => Err(format!("settings are not JSON: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::none;

    #[test]
    fn an_empty_document_is_no_settings() {
        for empty in ["", " ", "{}", "null"] {
            assert_eq!(none(empty), Ok(()), "{empty:?}");
        }
    }

    #[test]
    fn any_setting_is_refused_by_name() {
        let refused = none(r#"{"strategy": "Prefixed"}"#);
        assert_eq!(
            refused,
            Err("this module takes no settings, but got `strategy`".into())
        );
        assert!(none("{").is_err_and(|e| e.starts_with("settings are not JSON")));
    }
}
