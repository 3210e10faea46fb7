//! Discovering what a provider exports, per `schema.source`.
//!
//! - CRD: CRDs labelled `core.kbind.io/exported: "true"` (list, then get at install time),
//!   outside the built-in groups, like the OpenAPI source: a labelled `core.kbind.io` or
//!   Kubernetes CRD is reported as ignored, never exported.
//! - OpenAPI: every discovered resource outside the built-in Kubernetes groups; the
//!   credentials' reach is the export boundary, and schemas come from `/openapi/v3`.
//! - Auto: CRD first, OpenAPI only after a *successful* list that found no export; a list
//!   error is an error, never a reason to widen the export boundary.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};
use kube::discovery::{Discovery, Scope};

use super::{ApiFailure, classify};
use crate::api::names::EXPORTED_LABEL;
use crate::api::{ExportedApi, GROUP, ResourceScope, SchemaSource};

/// What discovery found: the source in effect and the exported APIs, sorted by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    /// CRD or OpenAPI (never Auto).
    pub source: SchemaSource,
    /// Exported APIs, sorted by name.
    pub apis: Vec<ExportedApi>,
    /// Labelled CRDs left out because their group is kbind's or Kubernetes' own, sorted.
    pub ignored: Vec<String>,
}

/// Why discovery failed.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// RBAC refused a discovery request.
    #[error("discovering exported APIs ({what}) was forbidden: {message}")]
    Forbidden {
        /// The request that was refused.
        what: &'static str,
        /// The API server's message.
        message: String,
    },
    /// Any other failure; retried with backoff.
    #[error("discovering exported APIs ({what}) failed: {source}")]
    Request {
        /// The request that failed.
        what: &'static str,
        /// The client error.
        source: kube::Error,
    },
}

impl DiscoveryError {
    fn from_kube(what: &'static str, source: kube::Error) -> Self {
        match classify(&source) {
            ApiFailure::Forbidden(message) => Self::Forbidden { what, message },
            _ => Self::Request { what, source },
        }
    }

    /// Whether the failure is an RBAC denial.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, Self::Forbidden { .. })
    }
}

/// Discovers the provider's exports for a Connection's schema source.
pub async fn discover(
    provider: &kube::Client,
    source: SchemaSource,
) -> Result<Discovered, DiscoveryError> {
    match source {
        SchemaSource::Crd => Ok(exported_crds(provider).await?),
        SchemaSource::OpenApi => Ok(Discovered {
            source,
            apis: served_apis(provider).await?,
            ignored: Vec::new(),
        }),
        SchemaSource::Auto => {
            let crds = exported_crds(provider).await?;
            // Only labelled CRDs that can be exported count: a provider labelling nothing
            // but built-in CRDs exports nothing through CRDs.
            if crds.apis.is_empty() {
                Ok(Discovered {
                    source: SchemaSource::OpenApi,
                    apis: served_apis(provider).await?,
                    ignored: crds.ignored,
                })
            } else {
                Ok(crds)
            }
        }
    }
}

/// Lists the CRDs labelled as exported, leaving out the built-in groups.
async fn exported_crds(provider: &kube::Client) -> Result<Discovered, DiscoveryError> {
    let crds: Api<CustomResourceDefinition> = Api::all(provider.clone());
    let selector = format!("{EXPORTED_LABEL}=true");
    let list = crds
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| DiscoveryError::from_kube("list exported CRDs", e))?;
    Ok(split_exported(list.items.iter().map(exported_from_crd)))
}

/// Splits labelled CRDs into exports and the ones ignored for their group.
fn split_exported(labelled: impl IntoIterator<Item = ExportedApi>) -> Discovered {
    let (mut ignored, mut apis): (Vec<ExportedApi>, Vec<ExportedApi>) = labelled
        .into_iter()
        .partition(|api| is_builtin_group(&api.group));
    apis.sort();
    ignored.sort();
    Discovered {
        source: SchemaSource::Crd,
        apis,
        ignored: ignored.into_iter().map(|api| api.name).collect(),
    }
}

/// The exported-API record for a provider CRD.
pub fn exported_from_crd(crd: &CustomResourceDefinition) -> ExportedApi {
    let spec = &crd.spec;
    ExportedApi {
        name: format!("{}.{}", spec.names.plural, spec.group),
        group: spec.group.clone(),
        resource: spec.names.plural.clone(),
        scope: if spec.scope == "Cluster" {
            ResourceScope::Cluster
        } else {
            ResourceScope::Namespaced
        },
        versions: spec
            .versions
            .iter()
            .filter(|v| v.served)
            .map(|v| v.name.clone())
            .collect(),
    }
}

/// Whether a group is one of Kubernetes' (or kcp's, or kbind's) own: never exported, whichever
/// the source, and never installed, bound or deleted on the consumer (`schema::ownership`).
pub fn is_builtin_group(group: &str) -> bool {
    group.is_empty()
        || !group.contains('.')
        || group.ends_with(".k8s.io")
        || group.ends_with(".kcp.io")
        || group == GROUP
}

/// Every resource the credentials can discover outside the built-in groups.
async fn served_apis(provider: &kube::Client) -> Result<Vec<ExportedApi>, DiscoveryError> {
    let discovery = Discovery::new(provider.clone())
        .run()
        .await
        .map_err(|e| DiscoveryError::from_kube("API discovery", e))?;
    let mut by_name: BTreeMap<String, ExportedApi> = BTreeMap::new();
    for group in discovery.groups().filter(|g| !is_builtin_group(g.name())) {
        for version in group.versions() {
            for (resource, capabilities) in group.versioned_resources(version) {
                let name = format!("{}.{}", resource.plural, resource.group);
                let entry = by_name.entry(name.clone()).or_insert_with(|| ExportedApi {
                    name,
                    group: resource.group.clone(),
                    resource: resource.plural.clone(),
                    scope: match capabilities.scope {
                        Scope::Cluster => ResourceScope::Cluster,
                        Scope::Namespaced => ResourceScope::Namespaced,
                    },
                    versions: Vec::new(),
                });
                entry.versions.push(version.to_string());
            }
        }
    }
    Ok(by_name.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_groups_are_never_exported() {
        for group in [
            "",
            "apps",
            "batch",
            "rbac.authorization.k8s.io",
            "apiextensions.k8s.io",
            "core.kbind.io",
        ] {
            assert!(is_builtin_group(group), "{group}");
        }
        assert!(
            is_builtin_group("core.kcp.io"),
            "kcp's own APIs are infrastructure"
        );
        for group in ["example.org", "wardle.example.com"] {
            assert!(!is_builtin_group(group), "{group}");
        }
    }

    fn labelled(plural: &str, group: &str) -> ExportedApi {
        ExportedApi {
            name: format!("{plural}.{group}"),
            group: group.into(),
            resource: plural.into(),
            scope: ResourceScope::Cluster,
            versions: vec!["v1alpha1".into()],
        }
    }

    #[test]
    fn labelled_crds_of_builtin_groups_are_ignored_not_exported() {
        let found = split_exported([
            labelled("widgets", "example.org"),
            labelled("clusterbindings", "core.kbind.io"),
            labelled("gateways", "gateway.networking.k8s.io"),
        ]);
        assert_eq!(
            found
                .apis
                .iter()
                .map(|a| a.name.as_str())
                .collect::<Vec<_>>(),
            ["widgets.example.org"]
        );
        assert_eq!(
            found.ignored,
            [
                "clusterbindings.core.kbind.io",
                "gateways.gateway.networking.k8s.io"
            ]
        );
        assert_eq!(found.source, SchemaSource::Crd);
    }
}
