//! Discovering what a provider exports, per `schema.source`.
//!
//! - CRD: CRDs labelled `core.kbind.io/exported: "true"` (list, then get at install time).
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
        SchemaSource::Crd => Ok(Discovered {
            source,
            apis: exported_crds(provider).await?,
        }),
        SchemaSource::OpenApi => Ok(Discovered {
            source,
            apis: served_apis(provider).await?,
        }),
        SchemaSource::Auto => {
            let apis = exported_crds(provider).await?;
            if apis.is_empty() {
                Ok(Discovered {
                    source: SchemaSource::OpenApi,
                    apis: served_apis(provider).await?,
                })
            } else {
                Ok(Discovered {
                    source: SchemaSource::Crd,
                    apis,
                })
            }
        }
    }
}

/// Lists the CRDs labelled as exported.
async fn exported_crds(provider: &kube::Client) -> Result<Vec<ExportedApi>, DiscoveryError> {
    let crds: Api<CustomResourceDefinition> = Api::all(provider.clone());
    let selector = format!("{EXPORTED_LABEL}=true");
    let list = crds
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| DiscoveryError::from_kube("list exported CRDs", e))?;
    let mut apis: Vec<ExportedApi> = list.items.iter().map(exported_from_crd).collect();
    apis.sort();
    Ok(apis)
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

/// Whether a group is one of Kubernetes' (or kcp's) own, never exported under the OpenAPI source.
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
}
