//! Kubernetes label selectors with the semantics of `metav1.LabelSelectorAsSelector`.
//!
//! * `matchLabels` entries and `matchExpressions` requirements are ANDed; an empty selector
//!   matches everything.
//! * `In`: the label is present and its value is one of `values`.
//! * `NotIn`: the label is absent, or present with a value not in `values`.
//! * `Exists` / `DoesNotExist`: the key is present / absent, whatever the value.
//! * Invalid selectors are errors, never "match nothing" or "match everything": an unknown
//!   operator, `In`/`NotIn` without values, `Exists`/`DoesNotExist` with values, a key that
//!   is not a qualified name, a value that is not a valid label value.

use std::collections::BTreeSet;
use std::fmt;

/// Why a selector is invalid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectorError {
    /// The operator is not one of `In`, `NotIn`, `Exists`, `DoesNotExist`.
    UnknownOperator {
        /// The requirement's key.
        key: String,
        /// The operator as written.
        operator: String,
    },
    /// `In`/`NotIn` with an empty value list.
    MissingValues {
        /// The requirement's key.
        key: String,
        /// The operator.
        operator: String,
    },
    /// `Exists`/`DoesNotExist` with values.
    UnexpectedValues {
        /// The requirement's key.
        key: String,
        /// The operator.
        operator: String,
    },
    /// A key that is not a valid qualified name (`[prefix/]name`).
    InvalidKey {
        /// The key as written.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A value that is not a valid label value.
    InvalidValue {
        /// The key it belongs to.
        key: String,
        /// The value as written.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownOperator { key, operator } => write!(
                f,
                "invalid label selector: key {key:?}: operator {operator:?} is not one of In, NotIn, Exists, DoesNotExist"
            ),
            Self::MissingValues { key, operator } => write!(
                f,
                "invalid label selector: key {key:?}: operator {operator} needs at least one value"
            ),
            Self::UnexpectedValues { key, operator } => write!(
                f,
                "invalid label selector: key {key:?}: operator {operator} takes no values"
            ),
            Self::InvalidKey { key, reason } => {
                write!(f, "invalid label selector: key {key:?}: {reason}")
            }
            Self::InvalidValue { key, value, reason } => write!(
                f,
                "invalid label selector: key {key:?}: value {value:?}: {reason}"
            ),
        }
    }
}

impl std::error::Error for SelectorError {}

/// The operator of one requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// The label is present with one of the values.
    In,
    /// The label is absent or has none of the values.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

impl Operator {
    /// Parses the operator as spelled in Kubernetes.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "In" => Some(Self::In),
            "NotIn" => Some(Self::NotIn),
            "Exists" => Some(Self::Exists),
            "DoesNotExist" => Some(Self::DoesNotExist),
            _ => None,
        }
    }
}

/// One validated requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// The operator.
    pub operator: Operator,
    /// The values (empty for `Exists`/`DoesNotExist`).
    pub values: BTreeSet<String>,
}

impl Requirement {
    /// Whether labels (looked up through `get`) satisfy this requirement.
    pub fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        match (self.operator, get(&self.key)) {
            (Operator::In, Some(v)) => self.values.contains(v),
            (Operator::In, None) => false,
            (Operator::NotIn, Some(v)) => !self.values.contains(v),
            (Operator::NotIn, None) => true,
            (Operator::Exists, found) => found.is_some(),
            (Operator::DoesNotExist, found) => found.is_none(),
        }
    }
}

/// A validated label selector, ready to match.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

impl Selector {
    /// Validates and compiles `matchLabels` and `matchExpressions` (key, operator, values).
    pub fn new<'a>(
        match_labels: impl IntoIterator<Item = (&'a str, &'a str)>,
        match_expressions: impl IntoIterator<Item = (&'a str, &'a str, &'a [String])>,
    ) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for (key, value) in match_labels {
            validate_key(key)?;
            validate_value(key, value)?;
            requirements.push(Requirement {
                key: key.to_owned(),
                operator: Operator::In,
                values: BTreeSet::from([value.to_owned()]),
            });
        }
        for (key, op, values) in match_expressions {
            let operator = Operator::parse(op).ok_or_else(|| SelectorError::UnknownOperator {
                key: key.to_owned(),
                operator: op.to_owned(),
            })?;
            validate_key(key)?;
            match operator {
                Operator::In | Operator::NotIn if values.is_empty() => {
                    return Err(SelectorError::MissingValues {
                        key: key.to_owned(),
                        operator: op.to_owned(),
                    });
                }
                Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                    return Err(SelectorError::UnexpectedValues {
                        key: key.to_owned(),
                        operator: op.to_owned(),
                    });
                }
                _ => {}
            }
            for v in values {
                validate_value(key, v)?;
            }
            requirements.push(Requirement {
                key: key.to_owned(),
                operator,
                values: values.iter().cloned().collect(),
            });
        }
        Ok(Self { requirements })
    }

    /// Whether this selector has no requirements (and so matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The validated requirements, `matchLabels` first.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether labels, looked up through `get`, satisfy every requirement.
    pub fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str> + Copy) -> bool {
        self.requirements.iter().all(|r| r.matches(get))
    }

    /// Whether a list of `(key, value)` labels satisfies every requirement.
    pub fn matches_pairs<'a, I>(&self, labels: I) -> bool
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let labels: Vec<(&str, &str)> = labels.into_iter().collect();
        self.matches(|k| labels.iter().find(|(lk, _)| *lk == k).map(|(_, v)| *v))
    }
}

/// Validates a label key: an optional DNS-1123 subdomain prefix and `/`, then a name of at
/// most 63 characters of `[A-Za-z0-9_.-]`, starting and ending alphanumeric.
pub fn validate_key(key: &str) -> Result<(), SelectorError> {
    let invalid = |reason: &str| SelectorError::InvalidKey {
        key: key.to_owned(),
        reason: reason.to_owned(),
    };
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Err(invalid("prefix part must be non-empty"));
        }
        if !is_dns1123_subdomain(prefix) {
            return Err(invalid(
                "prefix part must be a lowercase RFC 1123 subdomain of at most 253 characters",
            ));
        }
    }
    if name.is_empty() {
        return Err(invalid("name part must be non-empty"));
    }
    if name.len() > 63 {
        return Err(invalid("name part must be no more than 63 characters"));
    }
    if !is_label_token(name) {
        return Err(invalid(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        ));
    }
    Ok(())
}

/// Validates a label value: empty, or at most 63 characters of `[A-Za-z0-9_.-]`, starting
/// and ending alphanumeric.
pub fn validate_value(key: &str, value: &str) -> Result<(), SelectorError> {
    let invalid = |reason: &str| SelectorError::InvalidValue {
        key: key.to_owned(),
        value: value.to_owned(),
        reason: reason.to_owned(),
    };
    if value.is_empty() {
        return Ok(());
    }
    if value.len() > 63 {
        return Err(invalid("must be no more than 63 characters"));
    }
    if !is_label_token(value) {
        return Err(invalid(
            "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        ));
    }
    Ok(())
}

fn is_label_token(s: &str) -> bool {
    let bytes = s.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            match (b.first(), b.last()) {
                (Some(first), Some(last)) => {
                    label.len() <= 63
                        && (first.is_ascii_lowercase() || first.is_ascii_digit())
                        && (last.is_ascii_lowercase() || last.is_ascii_digit())
                        && b.iter()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                }
                _ => false,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    fn sel(labels: &[(&str, &str)], exprs: &[(&str, &str, Vec<String>)]) -> Selector {
        match Selector::new(
            labels.iter().copied(),
            exprs.iter().map(|(k, o, v)| (*k, *o, v.as_slice())),
        ) {
            Ok(s) => s,
            Err(e) => panic!("selector should be valid: {e}"),
        }
    }

    fn err(labels: &[(&str, &str)], exprs: &[(&str, &str, Vec<String>)]) -> SelectorError {
        match Selector::new(
            labels.iter().copied(),
            exprs.iter().map(|(k, o, v)| (*k, *o, v.as_slice())),
        ) {
            Ok(s) => panic!("selector should be invalid: {s:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn empty_selector_matches_everything() {
        let s = sel(&[], &[]);
        assert!(s.is_empty());
        assert!(s.matches_pairs([]));
        assert!(s.matches_pairs([("a", "b")]));
    }

    #[test]
    fn match_labels_need_key_and_exact_value() {
        let s = sel(&[("app", "web"), ("tier", "front")], &[]);
        assert!(s.matches_pairs([("app", "web"), ("tier", "front"), ("x", "y")]));
        assert!(!s.matches_pairs([("app", "web")]));
        assert!(!s.matches_pairs([("app", "web"), ("tier", "back")]));
    }

    #[test]
    fn in_needs_present_label_with_listed_value() {
        let s = sel(&[], &[("env", "In", vals(&["prod", "stage"]))]);
        assert!(s.matches_pairs([("env", "prod")]));
        assert!(s.matches_pairs([("env", "stage")]));
        assert!(!s.matches_pairs([("env", "dev")]));
        assert!(!s.matches_pairs([]));
    }

    #[test]
    fn not_in_matches_absent_label_and_unlisted_value() {
        let s = sel(&[], &[("env", "NotIn", vals(&["prod"]))]);
        assert!(s.matches_pairs([]));
        assert!(s.matches_pairs([("env", "dev")]));
        assert!(!s.matches_pairs([("env", "prod")]));
    }

    #[test]
    fn exists_and_does_not_exist_ignore_the_value() {
        let exists = sel(&[], &[("k", "Exists", vec![])]);
        assert!(exists.matches_pairs([("k", "")]));
        assert!(!exists.matches_pairs([("other", "x")]));
        let absent = sel(&[], &[("k", "DoesNotExist", vec![])]);
        assert!(absent.matches_pairs([("other", "x")]));
        assert!(!absent.matches_pairs([("k", "anything")]));
    }

    #[test]
    fn labels_and_expressions_are_anded() {
        let s = sel(&[("app", "web")], &[("env", "NotIn", vals(&["prod"]))]);
        assert!(s.matches_pairs([("app", "web"), ("env", "dev")]));
        assert!(!s.matches_pairs([("app", "web"), ("env", "prod")]));
        assert!(!s.matches_pairs([("app", "db"), ("env", "dev")]));
    }

    #[test]
    fn unknown_operator_is_an_error() {
        let e = err(&[], &[("k", "Equals", vals(&["v"]))]);
        assert!(
            matches!(e, SelectorError::UnknownOperator { ref operator, .. } if operator == "Equals")
        );
        assert!(e.to_string().contains("\"Equals\" is not one of In, NotIn"));
    }

    #[test]
    fn operators_are_case_sensitive() {
        assert!(matches!(
            err(&[], &[("k", "in", vals(&["v"]))]),
            SelectorError::UnknownOperator { .. }
        ));
    }

    #[test]
    fn in_and_not_in_without_values_are_errors() {
        assert!(matches!(
            err(&[], &[("k", "In", vec![])]),
            SelectorError::MissingValues { .. }
        ));
        assert!(matches!(
            err(&[], &[("k", "NotIn", vec![])]),
            SelectorError::MissingValues { .. }
        ));
    }

    #[test]
    fn exists_with_values_is_an_error() {
        assert!(matches!(
            err(&[], &[("k", "Exists", vals(&["v"]))]),
            SelectorError::UnexpectedValues { .. }
        ));
        assert!(matches!(
            err(&[], &[("k", "DoesNotExist", vals(&["v"]))]),
            SelectorError::UnexpectedValues { .. }
        ));
    }

    #[test]
    fn invalid_keys_are_errors() {
        for key in [
            "",
            "-a",
            "a-",
            "Example.com/a",
            "/a",
            "a/",
            "a/b/c",
            &"x".repeat(64),
        ] {
            assert!(
                matches!(err(&[(key, "v")], &[]), SelectorError::InvalidKey { .. }),
                "{key:?} should be rejected"
            );
        }
        for key in [
            "a",
            "A_b.c-9",
            "example.com/name",
            "widgets.example.org/related",
        ] {
            assert!(validate_key(key).is_ok(), "{key:?} should be accepted");
        }
    }

    #[test]
    fn invalid_values_are_errors() {
        assert!(matches!(
            err(&[("k", "has space")], &[]),
            SelectorError::InvalidValue { .. }
        ));
        assert!(matches!(
            err(&[], &[("k", "In", vals(&["ok", "-bad"]))]),
            SelectorError::InvalidValue { .. }
        ));
        assert!(sel(&[("k", "")], &[]).matches_pairs([("k", "")]));
    }
}
