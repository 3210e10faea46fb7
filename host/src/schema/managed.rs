//! Which consumer CRDs kbind may touch for a Connection: the one rule every install, update,
//! teardown and autoBind decision goes through.
//!
//! ```text
//! API <plural>.<group> ──▶ group is kbind's or Kubernetes' own?  ── yes ──▶ ProtectedGroup
//!   consumer CRD absent ─────────────────────────────────────────────────▶ may install
//!   annotated core.kbind.io/connection: <this Connection> ───────────────▶ may update / delete
//!   annotated for another Connection ────────────────────────────────────▶ BoundElsewhere
//!   no annotation (the consumer's own, or managed outside kbind) ────────▶ NotManaged
//! ```
//!
//! The protected groups are the ones OpenAPI discovery never exports
//! ([`is_builtin_group`]): `core.kbind.io`, the core group, dot-less groups, `*.k8s.io` and
//! `*.kcp.io`. Whatever a provider exports or a binding lists, kbind never installs, binds or
//! deletes a CRD of those groups, and never one it did not install for the same Connection.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::api::names::CONNECTION_ANNOTATION;
use crate::provider::discovery::is_builtin_group;

/// Why kbind may not install, update or delete a consumer CRD for a Connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The API's group belongs to kbind or Kubernetes itself.
    #[error(
        "{api} is in group {group:?}, which belongs to kbind or Kubernetes itself: kbind never installs, binds or deletes CRDs of core.kbind.io, the core group, dot-less groups, *.k8s.io or *.kcp.io; remove it from the binding's apis, and ask the provider to stop exporting it"
    )]
    ProtectedGroup {
        /// The API (`<plural>.<group>`).
        api: String,
        /// Its group.
        group: String,
    },
    /// The consumer CRD exists without the Connection annotation: kbind did not install it.
    #[error(
        "CRD {crd} on the consumer was not installed by kbind (no {CONNECTION_ANNOTATION} annotation), so kbind neither updates, binds nor deletes it; to bind the provider's API delete or rename the consumer's own CRD, or, if you manage it yourself (schema.pullPolicy None), annotate it {CONNECTION_ANNOTATION}={connection}"
    )]
    NotManaged {
        /// The CRD name.
        crd: String,
        /// The Connection asking.
        connection: String,
    },
    /// The consumer CRD is pinned to another Connection.
    #[error(
        "CRD {crd} on the consumer is pinned to Connection {other:?}; an API can be served by one Connection only: bind it through {other:?}, or delete that Connection's bindings of it first"
    )]
    BoundElsewhere {
        /// The CRD name.
        crd: String,
        /// The Connection it is pinned to.
        other: String,
    },
    /// The consumer CRD is pinned to a Connection that no longer exists and was installed from
    /// another (or an unrecorded) provider cluster, so it is not taken over
    /// ([`super::handover`]).
    #[error("{message}")]
    PinnedConnectionGone {
        /// The CRD name.
        crd: String,
        /// What the handover says, with the steps to hand it over by hand.
        message: String,
    },
}

/// The group of an API named `<plural>.<group>`; empty when the name has no dot.
pub fn api_group(api: &str) -> &str {
    api.split_once('.').map(|(_, group)| group).unwrap_or("")
}

/// Whether `api` (`<plural>.<group>`) is in a group kbind never touches.
pub fn is_protected_api(api: &str) -> bool {
    is_builtin_group(api_group(api))
}

/// Whether kbind may install (when `existing` is `None`), update or delete the consumer CRD of
/// `api` for `connection`.
pub fn check(
    api: &str,
    existing: Option<&CustomResourceDefinition>,
    connection: &str,
) -> Result<(), Refusal> {
    let group = existing.map_or_else(|| api_group(api), |crd| crd.spec.group.as_str());
    if is_protected_api(api) || is_builtin_group(group) {
        return Err(Refusal::ProtectedGroup {
            api: api.to_string(),
            group: group.to_string(),
        });
    }
    let Some(crd) = existing else {
        return Ok(());
    };
    match pinned_connection(crd) {
        Some(pinned) if pinned == connection => Ok(()),
        Some(other) => Err(Refusal::BoundElsewhere {
            crd: api.to_string(),
            other: other.to_string(),
        }),
        None => Err(Refusal::NotManaged {
            crd: api.to_string(),
            connection: connection.to_string(),
        }),
    }
}

/// The Connection a consumer CRD is pinned to (its `core.kbind.io/connection` annotation).
pub fn pinned_connection(crd: &CustomResourceDefinition) -> Option<&str> {
    crd.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONNECTION_ANNOTATION))
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn crd(name: &str, pinned: Option<&str>) -> CustomResourceDefinition {
        let mut crd = CustomResourceDefinition::default();
        crd.metadata.name = Some(name.into());
        crd.spec.group = api_group(name).into();
        crd.metadata.annotations =
            pinned.map(|p| BTreeMap::from([(CONNECTION_ANNOTATION.to_string(), p.to_string())]));
        crd
    }

    #[test]
    fn absent_crd_of_an_ordinary_group_may_be_installed() {
        assert_eq!(check("widgets.example.org", None, "p"), Ok(()));
    }

    #[test]
    fn crd_pinned_to_this_connection_may_be_updated_and_deleted() {
        let crd = crd("widgets.example.org", Some("p"));
        assert_eq!(check("widgets.example.org", Some(&crd), "p"), Ok(()));
    }

    #[test]
    fn crd_without_annotation_is_not_managed_and_the_message_says_what_to_do() {
        let crd = crd("widgets.example.org", None);
        let refusal = check("widgets.example.org", Some(&crd), "p").err();
        assert!(
            matches!(refusal, Some(Refusal::NotManaged { .. })),
            "{refusal:?}"
        );
        let text = refusal.map(|r| r.to_string()).unwrap_or_default();
        assert!(text.contains("not installed by kbind"), "{text}");
        assert!(text.contains("core.kbind.io/connection=p"), "{text}");
    }

    #[test]
    fn crd_pinned_to_another_connection_is_bound_elsewhere() {
        let crd = crd("widgets.example.org", Some("q"));
        assert!(matches!(
            check("widgets.example.org", Some(&crd), "p"),
            Err(Refusal::BoundElsewhere { other, .. }) if other == "q"
        ));
    }

    #[test]
    fn kbind_and_builtin_groups_are_refused_even_when_annotated_or_absent() {
        for api in [
            "clusterbindings.core.kbind.io",
            "connections.core.kbind.io",
            "pods",
            "deployments.apps",
            "roles.rbac.authorization.k8s.io",
            "customresourcedefinitions.apiextensions.k8s.io",
            "logicalclusters.core.kcp.io",
        ] {
            assert!(
                matches!(check(api, None, "p"), Err(Refusal::ProtectedGroup { .. })),
                "{api} absent"
            );
            let pinned = crd(api, Some("p"));
            assert!(
                matches!(
                    check(api, Some(&pinned), "p"),
                    Err(Refusal::ProtectedGroup { .. })
                ),
                "{api} annotated for this Connection"
            );
        }
    }

    #[test]
    fn a_crd_whose_group_is_protected_is_refused_whatever_its_name_says() {
        let mut sneaky = crd("widgets.example.org", Some("p"));
        sneaky.spec.group = "core.kbind.io".into();
        assert!(matches!(
            check("widgets.example.org", Some(&sneaky), "p"),
            Err(Refusal::ProtectedGroup { .. })
        ));
    }

    #[test]
    fn the_group_of_an_api_name_is_everything_after_the_first_dot() {
        assert_eq!(api_group("widgets.example.org"), "example.org");
        assert_eq!(api_group("pods"), "");
        assert!(is_protected_api("pods"));
        assert!(!is_protected_api("widgets.example.org"));
    }
}
