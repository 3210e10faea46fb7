//! Where a copy may go: a placement answer is checked before anything is written there. The
//! namespace must match the API's scope, be a name Kubernetes accepts (a DNS label) and not be
//! one of the provider's own; the name must be a DNS subdomain.

use crate::api::ResourceScope;
use crate::markers::{PROTECTED_NAMESPACES, is_protected_namespace};
use crate::policy::types::{Placement, PlacementInput};

/// Checks a placement before anything is written there: the namespace matches the API's scope,
/// is a DNS label and is not protected; the name is a DNS subdomain. The engine still checks
/// what only it knows (the heartbeat namespace, a place another consumer object already has).
pub fn placement(placement: &Placement, input: &PlacementInput) -> Result<(), String> {
    let api = match input.api.group.as_str() {
        "" => input.api.resource.clone(),
        group => format!("{}.{group}", input.api.resource),
    };
    match (input.api.scope, &placement.namespace) {
        (ResourceScope::Cluster, Some(namespace)) => {
            return Err(format!(
                "placed in namespace {namespace:?}, but {api} is cluster-scoped; a cluster-scoped copy has no namespace"
            ));
        }
        (ResourceScope::Namespaced, None) => {
            return Err(format!(
                "placed without a namespace, but {api} is namespaced; a namespaced copy needs one"
            ));
        }
        (ResourceScope::Namespaced, Some(namespace)) => {
            if let Some(problem) = dns_label_problem(namespace) {
                return Err(format!(
                    "the namespace {namespace:?} is not a valid namespace name: {problem}"
                ));
            }
            if is_protected_namespace(namespace) {
                return Err(format!(
                    "the namespace {namespace:?} is protected; copies are never placed in {}",
                    PROTECTED_NAMESPACES.join(", ")
                ));
            }
        }
        (ResourceScope::Cluster, None) => {}
    }
    if let Some(problem) = dns_subdomain_problem(&placement.name) {
        return Err(format!(
            "the name {:?} is not a valid Kubernetes object name: {problem}",
            placement.name
        ));
    }
    Ok(())
}

/// The longest DNS label (a namespace name).
const MAX_LABEL_LEN: usize = 63;
/// The longest DNS subdomain (an object name).
const MAX_SUBDOMAIN_LEN: usize = 253;

/// What makes `s` not a DNS label (RFC 1123, as Kubernetes checks namespace names), if anything.
fn dns_label_problem(s: &str) -> Option<String> {
    if s.len() > MAX_LABEL_LEN {
        return Some(format!("{} characters, more than {MAX_LABEL_LEN}", s.len()));
    }
    if let Some(c) = s.chars().find(|&c| !is_lower_alnum(c) && c != '-') {
        return Some(format!(
            "contains {c:?}; a namespace name has only lowercase letters, digits and '-'"
        ));
    }
    if s.is_empty() {
        return Some("it is empty".into());
    }
    edge_problem(s, "it")
}

/// What makes `s` not a DNS subdomain (RFC 1123, as Kubernetes checks object names), if
/// anything: at most 253 characters, dot-separated parts of lowercase letters, digits and '-',
/// each starting and ending with a letter or digit.
fn dns_subdomain_problem(s: &str) -> Option<String> {
    if s.len() > MAX_SUBDOMAIN_LEN {
        return Some(format!(
            "{} characters, more than {MAX_SUBDOMAIN_LEN}",
            s.len()
        ));
    }
    if let Some(c) = s
        .chars()
        .find(|&c| !is_lower_alnum(c) && c != '-' && c != '.')
    {
        return Some(format!(
            "contains {c:?}; an object name has only lowercase letters, digits, '-' and '.'"
        ));
    }
    if s.is_empty() {
        return Some("it is empty".into());
    }
    s.split('.')
        .find_map(|part| edge_problem(part, "each part between dots"))
}

fn is_lower_alnum(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// What is wrong with how one dot-free part of a DNS name starts or ends, if anything; `what`
/// names the part in the message.
fn edge_problem(part: &str, what: &str) -> Option<String> {
    match (part.chars().next(), part.chars().last()) {
        (Some(first), Some(last)) if is_lower_alnum(first) && is_lower_alnum(last) => None,
        (None, _) | (_, None) => Some(format!(
            "{what} must not be empty (no leading, trailing or double '.')"
        )),
        _ => Some(format!(
            "{what} must start and end with a lowercase letter or digit"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement_input(scope: ResourceScope) -> PlacementInput {
        serde_json::from_value(serde_json::json!({
            "consumerClusterUid": "cluster-1", "connection": "provider",
            "api": {"group": "example.org", "resource": "widgets", "kind": "Widget",
                "scope": scope},
            "namespace": (scope == ResourceScope::Namespaced).then_some("team-a"),
            "name": "w1",
            "isolation": {"strategy": "Prefixed", "prefix": "east"}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn placed(namespace: Option<&str>, name: &str) -> Placement {
        Placement {
            namespace: namespace.map(Into::into),
            name: name.into(),
        }
    }

    /// The placement check's verdict on `namespace`/`name` for an API of `scope`.
    fn check(scope: ResourceScope, namespace: Option<&str>, name: &str) -> Result<(), String> {
        placement(&placed(namespace, name), &placement_input(scope))
    }

    use ResourceScope::{Cluster, Namespaced};

    #[test]
    fn a_valid_namespaced_placement_is_accepted() {
        assert_eq!(check(Namespaced, Some("east-team-a"), "w1"), Ok(()));
        assert_eq!(
            check(Namespaced, Some(&"n".repeat(63)), &"w".repeat(253)),
            Ok(())
        );
        assert_eq!(check(Namespaced, Some("team-a"), "east.w-1.v2"), Ok(()));
    }

    #[test]
    fn a_valid_cluster_scoped_placement_is_accepted() {
        assert_eq!(check(Cluster, None, "east-w1"), Ok(()));
    }

    #[test]
    fn a_name_that_is_not_a_dns_subdomain_is_refused() {
        for (name, because) in [
            ("Not_A_Name", "contains 'N'"),
            ("w_1", "contains '_'"),
            ("", "it is empty"),
            ("-w1", "must start and end with a lowercase letter or digit"),
            ("w1.", "must not be empty"),
            ("w..1", "must not be empty"),
            ("w1.-x", "must start and end"),
        ] {
            let e = check(Namespaced, Some("team-a"), name);
            assert!(
                e.as_ref().is_err_and(|e| e.starts_with(&format!(
                    "the name {name:?} is not a valid Kubernetes object name: "
                )) && e.contains(because)),
                "{name:?}: {e:?}"
            );
        }
    }

    #[test]
    fn a_name_longer_than_253_characters_is_refused() {
        let e = check(Cluster, None, &"w".repeat(254));
        assert!(e.is_err_and(|e| e.ends_with("254 characters, more than 253")));
    }

    #[test]
    fn a_namespace_that_is_not_a_dns_label_is_refused() {
        for (namespace, because) in [
            ("Team-A", "contains 'T'"),
            ("team.a", "contains '.'"),
            (
                "team-a-",
                "must start and end with a lowercase letter or digit",
            ),
            ("", "it is empty"),
        ] {
            let e = check(Namespaced, Some(namespace), "w1");
            assert!(
                e.as_ref().is_err_and(|e| e.starts_with(&format!(
                    "the namespace {namespace:?} is not a valid namespace name: "
                )) && e.contains(because)),
                "{namespace:?}: {e:?}"
            );
        }
    }

    #[test]
    fn a_namespace_longer_than_63_characters_is_refused() {
        let e = check(Namespaced, Some(&"n".repeat(64)), "w1");
        assert!(e.is_err_and(|e| e.ends_with("64 characters, more than 63")));
    }

    #[test]
    fn an_answer_in_kube_system_is_refused() {
        let e = check(Namespaced, Some("kube-system"), "w1");
        assert_eq!(
            e,
            Err("the namespace \"kube-system\" is protected; copies are never placed in kube-system, kube-public, kube-node-lease".into())
        );
    }

    #[test]
    fn every_protected_namespace_is_refused() {
        for namespace in PROTECTED_NAMESPACES {
            let e = check(Namespaced, Some(namespace), "w1");
            assert!(e.is_err_and(|e| e.contains("is protected")), "{namespace}");
        }
        assert!(!is_protected_namespace("team-a"));
    }

    #[test]
    fn a_namespace_for_a_cluster_scoped_api_is_refused() {
        let e = check(Cluster, Some("team-a"), "w1");
        assert_eq!(
            e,
            Err("placed in namespace \"team-a\", but widgets.example.org is cluster-scoped; a cluster-scoped copy has no namespace".into())
        );
    }

    #[test]
    fn no_namespace_for_a_namespaced_api_is_refused() {
        let e = check(Namespaced, None, "w1");
        assert!(e.is_err_and(|e| {
            e.starts_with("placed without a namespace, but widgets.example.org is namespaced")
        }));
    }

    #[test]
    fn a_core_api_is_named_by_its_resource_alone() {
        let mut input = placement_input(Cluster);
        input.api.group = String::new();
        input.api.resource = "secrets".into();
        let e = placement(&placed(Some("team-a"), "s"), &input);
        assert!(e.is_err_and(|e| e.contains("but secrets is cluster-scoped")));
    }
}
