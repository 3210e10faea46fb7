//! What related copies may touch, decided by the host whatever the related-selection module
//! plans or the source cluster holds (the trust boundaries the host enforces).
//!
//! ```text
//! list sources / targets ──▶ never in a protected namespace (field selector + filter)
//!        sources ──▶ Secret types outside the copyable set: skipped, counted (`secret-type`)
//!        plan (Wasm) ──▶ only objects from the filtered lists are written or deleted
//! ```
//!
//! Protected namespaces are the cluster's own (`kube-system`, `kube-public`,
//! `kube-node-lease`), the credential namespace (`--secret-namespace`) and the konnector's
//! own namespace. Copies keep namespace and name, so a source in one of them would land in the
//! same namespace on the other cluster: neither side is read, written or deleted there, in
//! either direction. Only Secret types that carry user data are copied; service-account and
//! bootstrap tokens, Helm release records and any other type are not.

use std::collections::BTreeSet;

use kube::api::DynamicObject;

use crate::api::RelatedResourceKind;
use crate::markers::PROTECTED_NAMESPACES;

/// The Secret types a related copy may carry; any other type is skipped.
pub const COPYABLE_SECRET_TYPES: [&str; 6] = [
    "Opaque",
    "kubernetes.io/tls",
    "kubernetes.io/basic-auth",
    "kubernetes.io/ssh-auth",
    "kubernetes.io/dockerconfigjson",
    "kubernetes.io/dockercfg",
];

/// The namespaces related copies never touch, fixed at start-up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelatedGuard {
    protected: BTreeSet<String>,
}

impl RelatedGuard {
    /// The system namespaces plus the credential namespace and, when known, the konnector's.
    pub fn new(secret_namespace: &str, konnector_namespace: Option<&str>) -> Self {
        let protected = PROTECTED_NAMESPACES
            .into_iter()
            .chain(Some(secret_namespace))
            .chain(konnector_namespace)
            .filter(|ns| !ns.is_empty())
            .map(str::to_string)
            .collect();
        Self { protected }
    }

    /// Whether copies may read, write or delete in `namespace`.
    pub fn allows_namespace(&self, namespace: &str) -> bool {
        !self.protected.contains(namespace)
    }

    /// A field selector leaving the protected namespaces out of an all-namespaces list, so
    /// their objects are never even read.
    pub fn field_selector(&self) -> String {
        self.protected
            .iter()
            .map(|ns| format!("metadata.namespace!={ns}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Whether a source's kind and type may be copied: every ConfigMap, and Secrets of the
    /// [`COPYABLE_SECRET_TYPES`] (an absent type is `Opaque`, as the apiserver defaults it).
    pub fn copyable(kind: RelatedResourceKind, source: &DynamicObject) -> bool {
        if kind != RelatedResourceKind::Secrets {
            return true;
        }
        let type_ = source
            .data
            .get("type")
            .and_then(|t| t.as_str())
            .filter(|t| !t.is_empty())
            .unwrap_or("Opaque");
        COPYABLE_SECRET_TYPES.contains(&type_)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn secret(namespace: &str, type_: Option<&str>) -> DynamicObject {
        let mut value = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": { "name": "s", "namespace": namespace },
            "data": { "k": "dg==" },
        });
        if let Some(t) = type_ {
            value["type"] = json!(t);
        }
        serde_json::from_value(value).unwrap_or_else(|e| panic!("fixture: {e}"))
    }

    fn guard() -> RelatedGuard {
        RelatedGuard::new("kbind", Some("kbind-system"))
    }

    #[test]
    fn system_credential_and_own_namespaces_are_protected() {
        let guard = guard();
        for ns in [
            "kube-system",
            "kube-public",
            "kube-node-lease",
            "kbind",
            "kbind-system",
        ] {
            assert!(!guard.allows_namespace(ns), "{ns}");
        }
        assert!(guard.allows_namespace("team-a"));
        assert!(guard.allows_namespace("default"));
    }

    #[test]
    fn an_unknown_own_namespace_protects_the_rest() {
        let guard = RelatedGuard::new("creds", None);
        assert!(!guard.allows_namespace("creds"));
        assert!(!guard.allows_namespace("kube-system"));
        assert!(guard.allows_namespace("kbind"));
    }

    #[test]
    fn field_selector_excludes_every_protected_namespace() {
        assert_eq!(
            guard().field_selector(),
            "metadata.namespace!=kbind,metadata.namespace!=kbind-system,\
             metadata.namespace!=kube-node-lease,metadata.namespace!=kube-public,\
             metadata.namespace!=kube-system"
        );
    }

    #[test]
    fn only_user_data_secret_types_are_copied() {
        let copyable = |t| RelatedGuard::copyable(RelatedResourceKind::Secrets, &secret("a", t));
        for t in COPYABLE_SECRET_TYPES {
            assert!(copyable(Some(t)), "{t}");
        }
        assert!(copyable(None), "absent type is Opaque");
        for t in [
            "kubernetes.io/service-account-token",
            "bootstrap.kubernetes.io/token",
            "helm.sh/release.v1",
            "example.com/custom",
        ] {
            assert!(!copyable(Some(t)), "{t}");
        }
        // ConfigMaps have no type rule.
        let cm = secret("a", Some("bootstrap.kubernetes.io/token"));
        assert!(RelatedGuard::copyable(RelatedResourceKind::Configmaps, &cm));
    }
}
