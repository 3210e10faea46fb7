//! Which namespaces may bind through a Connection: `Connection.spec.bindingNamespaceSelector`.
//!
//! ```text
//! ClusterBinding ───────────────────────────────────────▶ allowed (cluster-admin object)
//! Binding in namespace N ──▶ Connection has no selector ─▶ allowed (every namespace)
//!                        └─▶ N's labels match it? ── no ─▶ NamespaceNotAllowed
//!                                   invalid selector ────▶ NamespaceNotAllowed (fail closed)
//! ```
//!
//! Pure: the controller reads the Connection and the Namespace, this module judges. Matching
//! is kube-rs's label-selector implementation (`kube::core::Selector`), which has
//! `metav1.LabelSelectorAsSelector` semantics for valid selectors; the shapes Kubernetes
//! rejects but kube-rs accepts (`In`/`NotIn` with no values, `Exists`/`DoesNotExist` with
//! values) are refused here, so an invalid selector never admits a namespace.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};

/// Whether a Binding in `namespace` (with `labels`) may use a Connection whose
/// `bindingNamespaceSelector` is `selector`. `Err` is the condition message for a refusal.
pub(super) fn allowed(
    connection: &str,
    selector: Option<&LabelSelector>,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Result<(), String> {
    let Some(selector) = selector else {
        return Ok(());
    };
    let compiled = compile(selector).map_err(|detail| {
        format!(
            "Connection {connection} has an invalid spec.bindingNamespaceSelector ({detail}), so no namespace may bind through it; fix the selector"
        )
    })?;
    if compiled.matches(labels) {
        Ok(())
    } else {
        Err(format!(
            "namespace {namespace} does not match Connection {connection}'s spec.bindingNamespaceSelector; nothing is synced for this Binding. Ask the Connection's owner to label the namespace or widen the selector, or use a Connection meant for this namespace"
        ))
    }
}

/// The labels of `namespace` (none when it does not exist), which [`allowed`] judges.
pub(super) async fn labels_of(
    consumer: &kube::Client,
    namespace: &str,
) -> super::Result<BTreeMap<String, String>> {
    Ok(
        kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(consumer.clone())
            .get_opt(namespace)
            .await
            .map_err(|source| super::Error::ReadNamespace {
                namespace: namespace.to_string(),
                source,
            })?
            .and_then(|ns| ns.metadata.labels)
            .unwrap_or_default(),
    )
}

/// Validates and converts a `LabelSelector` as Kubernetes validates it.
fn compile(selector: &LabelSelector) -> Result<Selector, String> {
    for requirement in selector.match_expressions.iter().flatten() {
        let values = requirement.values.as_ref().map_or(0, Vec::len);
        match requirement.operator.as_str() {
            "In" | "NotIn" if values == 0 => {
                return Err(format!(
                    "key {:?}: operator {} needs at least one value",
                    requirement.key, requirement.operator
                ));
            }
            "Exists" | "DoesNotExist" if values > 0 => {
                return Err(format!(
                    "key {:?}: operator {} takes no values",
                    requirement.key, requirement.operator
                ));
            }
            _ => {}
        }
    }
    Selector::try_from(selector.clone()).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn match_labels(pairs: &[(&str, &str)]) -> LabelSelector {
        LabelSelector {
            match_labels: Some(labels(pairs)),
            match_expressions: None,
        }
    }

    fn expression(key: &str, operator: &str, values: Option<&[&str]>) -> LabelSelector {
        LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: key.into(),
                operator: operator.into(),
                values: values.map(|v| v.iter().map(|s| s.to_string()).collect()),
            }]),
        }
    }

    #[test]
    fn no_selector_allows_every_namespace() {
        assert_eq!(allowed("p", None, "anything", &labels(&[])), Ok(()));
    }

    #[test]
    fn empty_selector_allows_every_namespace() {
        let selector = LabelSelector::default();
        assert_eq!(allowed("p", Some(&selector), "ns", &labels(&[])), Ok(()));
    }

    #[test]
    fn matching_labels_allow_and_the_rest_are_refused_with_what_to_do() {
        let selector = match_labels(&[("team", "a")]);
        assert_eq!(
            allowed("p", Some(&selector), "a", &labels(&[("team", "a")])),
            Ok(())
        );
        let refused = allowed("p", Some(&selector), "b", &labels(&[("team", "b")]));
        let message = refused.err().unwrap_or_default();
        assert!(message.contains("namespace b does not match Connection p"));
        assert!(message.contains("label the namespace"));
        assert!(allowed("p", Some(&selector), "c", &labels(&[])).is_err());
    }

    #[test]
    fn expressions_follow_kubernetes_semantics() {
        let not_in = expression("env", "NotIn", Some(&["prod"]));
        assert!(allowed("p", Some(&not_in), "x", &labels(&[])).is_ok());
        assert!(allowed("p", Some(&not_in), "x", &labels(&[("env", "dev")])).is_ok());
        assert!(allowed("p", Some(&not_in), "x", &labels(&[("env", "prod")])).is_err());
        let exists = expression("kbind", "Exists", None);
        assert!(allowed("p", Some(&exists), "x", &labels(&[("kbind", "")])).is_ok());
        assert!(allowed("p", Some(&exists), "x", &labels(&[])).is_err());
        let absent = expression("kbind", "DoesNotExist", None);
        assert!(allowed("p", Some(&absent), "x", &labels(&[])).is_ok());
    }

    #[test]
    fn invalid_selectors_admit_no_namespace() {
        for selector in [
            expression("env", "NotIn", Some(&[])),
            expression("env", "NotIn", None),
            expression("env", "In", None),
            expression("env", "Exists", Some(&["x"])),
            expression("env", "Like", Some(&["x"])),
        ] {
            let refused = allowed("p", Some(&selector), "x", &labels(&[("env", "x")]));
            assert!(
                refused
                    .as_ref()
                    .is_err_and(|m| m.contains("invalid spec.bindingNamespaceSelector")),
                "{selector:?}: {refused:?}"
            );
        }
    }
}
