//! Settings documents: the JSON an operator gives with a module's reference (`--*-policy-settings`,
//! the references file, a Connection's `spec.policies.<role>.settings`), handed to the module's
//! `configure` on each new instance. The host checks only that it is JSON and within
//! [`MAX_SETTINGS_BYTES`]; what it means is the module's to say.

use std::fmt;
use std::sync::Arc;

/// The largest settings document, in bytes (as compact JSON): settings configure a module,
/// they are not a data channel.
pub const MAX_SETTINGS_BYTES: usize = 16 * 1024;

/// A module's settings: a JSON document within [`MAX_SETTINGS_BYTES`], `{}` when none given.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicySettings(Arc<str>);

/// Why a settings document is refused before any module sees it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// Not JSON.
    #[error("policy settings are not JSON: {0}")]
    NotJson(String),
    /// Over the size cap.
    #[error("policy settings are {size} bytes; at most {MAX_SETTINGS_BYTES} are allowed")]
    TooLarge {
        /// The document's size as compact JSON.
        size: usize,
    },
}

impl Default for PolicySettings {
    fn default() -> Self {
        Self(Arc::from("{}"))
    }
}

impl PolicySettings {
    /// Settings from a JSON value, compacted and checked against the size cap.
    pub fn from_value(value: &serde_json::Value) -> Result<Self, SettingsError> {
        if value.is_null() {
            return Ok(Self::default());
        }
        let text = value.to_string();
        if text.len() > MAX_SETTINGS_BYTES {
            return Err(SettingsError::TooLarge { size: text.len() });
        }
        Ok(Self(Arc::from(text)))
    }

    /// The document as JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether no settings are given (`{}`).
    pub fn is_empty(&self) -> bool {
        &*self.0 == "{}"
    }
}

impl std::str::FromStr for PolicySettings {
    type Err = SettingsError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| SettingsError::NotJson(e.to_string()))?;
        Self::from_value(&value)
    }
}

impl fmt::Display for PolicySettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for PolicySettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PolicySettings({})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_compact_json_and_default_to_an_empty_object() -> Result<(), SettingsError> {
        let settings: PolicySettings = r#"{ "prefix" : "x" }"#.parse()?;
        assert_eq!(settings.as_str(), r#"{"prefix":"x"}"#);
        assert!("".parse::<PolicySettings>()?.is_empty());
        assert!("null".parse::<PolicySettings>()?.is_empty());
        Ok(())
    }

    #[test]
    fn settings_that_are_not_json_or_too_large_are_refused() {
        assert!(matches!(
            "{".parse::<PolicySettings>(),
            Err(SettingsError::NotJson(_))
        ));
        let large = format!(r#"{{"x":"{}"}}"#, "a".repeat(MAX_SETTINGS_BYTES));
        assert!(matches!(
            large.parse::<PolicySettings>(),
            Err(SettingsError::TooLarge { .. })
        ));
    }
}
