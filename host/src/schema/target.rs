//! Which concrete resource an installed API is on both clusters, read from the consumer CRD.
//!
//! The consumer CRD is the contract: the syncer watches the consumer and the provider with the
//! same group, version, kind and plural, so namespace and name are unchanged and a
//! cluster-scoped API stays cluster-scoped (spec, "Cluster Isolation").

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::{ApiResource, GroupVersionKind};

use super::versions::synced_version;

/// The resource one syncer works on, as resolved from an Established consumer CRD.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ApiTarget {
    /// API group.
    pub group: String,
    /// The version both watches use.
    pub version: String,
    /// Kind of the objects.
    pub kind: String,
    /// Plural resource name.
    pub plural: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Whether the consumer CRD serves a status subresource for this version; status is only
    /// copied back when it does (spec: "APIs intended for status round-tripping need an
    /// appropriate status schema/subresource on the consumer").
    pub status_subresource: bool,
}

impl ApiTarget {
    /// Resolves the target from a consumer CRD. The version is the storage version when it is
    /// served and exported, else the first served version the provider exports; `exported`
    /// empty means "no restriction" ([`synced_version`], the rule schema installation plans
    /// the consumer CRD's versions by). `None` when no such version exists.
    pub fn from_crd(crd: &CustomResourceDefinition, exported: &[String]) -> Option<Self> {
        let spec = &crd.spec;
        let version = synced_version(&spec.versions, exported)?;
        Some(Self {
            group: spec.group.clone(),
            version: version.name.clone(),
            kind: spec.names.kind.clone(),
            plural: spec.names.plural.clone(),
            namespaced: spec.scope == "Namespaced",
            status_subresource: version
                .subresources
                .as_ref()
                .is_some_and(|s| s.status.is_some()),
        })
    }

    /// The dynamic resource description used for `Api<DynamicObject>` on both clusters.
    pub fn api_resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&self.group, &self.version, &self.kind),
            &self.plural,
        )
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::schema::is_established;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceDefinitionCondition, CustomResourceDefinitionNames,
        CustomResourceDefinitionSpec, CustomResourceDefinitionStatus,
        CustomResourceDefinitionVersion, CustomResourceSubresourceStatus,
        CustomResourceSubresources,
    };

    /// A CRD `widgets.<group>` with the given versions as (name, served, storage, status).
    pub(crate) fn crd(
        group: &str,
        scope: &str,
        versions: &[(&str, bool, bool, bool)],
    ) -> CustomResourceDefinition {
        CustomResourceDefinition {
            metadata: kube::api::ObjectMeta {
                name: Some(format!("widgets.{group}")),
                ..Default::default()
            },
            spec: CustomResourceDefinitionSpec {
                group: group.into(),
                names: CustomResourceDefinitionNames {
                    kind: "Widget".into(),
                    plural: "widgets".into(),
                    ..Default::default()
                },
                scope: scope.into(),
                versions: versions
                    .iter()
                    .map(
                        |(name, served, storage, status)| CustomResourceDefinitionVersion {
                            name: (*name).into(),
                            served: *served,
                            storage: *storage,
                            subresources: status.then(|| CustomResourceSubresources {
                                status: Some(CustomResourceSubresourceStatus(Default::default())),
                                ..Default::default()
                            }),
                            ..Default::default()
                        },
                    )
                    .collect(),
                ..Default::default()
            },
            status: None,
        }
    }

    /// A served v1, and a served storage v2 with a status subresource.
    const V1_SERVED_V2_STORED: &[(&str, bool, bool, bool)] =
        &[("v1", true, false, false), ("v2", true, true, true)];

    #[test]
    fn storage_version_is_preferred_when_served_and_exported() {
        let c = crd("example.org", "Namespaced", V1_SERVED_V2_STORED);
        let t = ApiTarget::from_crd(&c, &[]).expect("a served version");
        assert_eq!(t.version, "v2");
        assert!(t.namespaced);
        assert!(t.status_subresource);
        assert_eq!(t.api_resource().api_version, "example.org/v2");
        assert_eq!(t.api_resource().plural, "widgets");
    }

    #[test]
    fn version_not_exported_by_the_provider_is_skipped() {
        let c = crd("example.org", "Cluster", V1_SERVED_V2_STORED);
        let t = ApiTarget::from_crd(&c, &["v1".into()]).expect("v1 is exported");
        assert_eq!(t.version, "v1");
        assert!(!t.namespaced);
        assert!(!t.status_subresource);
        assert!(ApiTarget::from_crd(&c, &["v3".into()]).is_none());
    }

    #[test]
    fn established_needs_the_true_condition() {
        let mut c = crd("example.org", "Namespaced", &[("v1", true, true, false)]);
        assert!(!is_established(&c));
        c.status = Some(CustomResourceDefinitionStatus {
            conditions: Some(vec![CustomResourceDefinitionCondition {
                type_: "Established".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert!(is_established(&c));
    }
}
