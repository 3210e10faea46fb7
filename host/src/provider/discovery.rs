//! Discovering what a provider exports, per `schema.source`.
//!
//! - CRD: CRDs labelled `core.kbind.io/exported: "true"` (list, then get at install time),
//!   outside the built-in groups, like the OpenAPI source: a labelled `core.kbind.io` or
//!   Kubernetes CRD is reported as ignored, never exported.
//! - OpenAPI: every discovered resource outside the built-in Kubernetes groups; the
//!   credentials' reach is the export boundary, and schemas come from `/openapi/v3`. Groups
//!   are read one by one: a group whose APIService is down (503) or slow is reported in
//!   [`Discovered::failed_groups`] and the others are discovered as usual, where one
//!   all-or-nothing discovery would fail as a whole.
//! - Auto: CRD first, OpenAPI only after a *successful* list that found no export; a list
//!   error is an error, never a reason to widen the export boundary.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIGroup, APIGroupList, APIResourceList};
use kube::api::{Api, ListParams};
use kube::core::Version;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::limits::{DISCOVERY_RESPONSE_FLAG, OPENAPI_INDEX_FLAG, ReadError, get_json, limits};
use super::{ApiFailure, classify};
use crate::api::names::EXPORTED_LABEL;
use crate::api::{ExportedApi, GROUP, ResourceScope, SchemaSource};
use crate::k8s::ApiErrorExt;

/// What discovery found: the source in effect and the exported APIs, sorted by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    /// CRD or OpenAPI (never Auto).
    pub source: SchemaSource,
    /// Exported APIs, sorted by name.
    pub apis: Vec<ExportedApi>,
    /// Labelled CRDs left out because their group is kbind's or Kubernetes' own, sorted.
    pub ignored: Vec<String>,
    /// OpenAPI source: groups whose discovery failed, sorted by group; their APIs are missing
    /// from `apis`.
    pub failed_groups: Vec<GroupFailure>,
    /// Per exported API (by name), a revision of its provider schema: the CRD's UID and
    /// generation, or a digest of its discovery entries and `/openapi/v3` document hashes.
    /// The schema is fetched again only when it changes; an API without one is always fetched.
    pub revisions: BTreeMap<String, String>,
}

/// One API group that could not be discovered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupFailure {
    /// The group's name.
    pub group: String,
    /// What went wrong, for the Connection's condition.
    pub message: String,
    /// Whether it may pass on its own (timeout, 429, 5xx): its last known exports are kept
    /// for a while instead of being released at once.
    pub transient: bool,
}

/// How long one group's discovery may take before it counts as failed (transiently).
const GROUP_TIMEOUT: Duration = Duration::from_secs(10);

/// How many groups are discovered at once.
const GROUP_PARALLELISM: usize = 4;

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
    /// An answer was larger than its cap, broke off or was not JSON: not retried fast, the
    /// Connection says so (`ResponseTooLarge` for a cap).
    #[error("discovering exported APIs ({what}) failed: {source}")]
    Read {
        /// The request that failed.
        what: &'static str,
        /// What the bounded read said.
        source: ReadError,
    },
}

impl DiscoveryError {
    fn from_kube(what: &'static str, source: kube::Error) -> Self {
        match classify(&source) {
            ApiFailure::Forbidden(message) => Self::Forbidden { what, message },
            _ => Self::Request { what, source },
        }
    }

    fn from_read(what: &'static str, source: ReadError) -> Self {
        match source {
            ReadError::Request { source, .. } => Self::from_kube(what, source),
            source => Self::Read { what, source },
        }
    }

    /// Whether an answer was larger than the konnector's cap for it.
    pub fn is_too_large(&self) -> bool {
        matches!(
            self,
            Self::Read {
                source: ReadError::TooLarge { .. },
                ..
            }
        )
    }

    /// Whether the failure is an RBAC denial.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, Self::Forbidden { .. })
    }

    /// Whether the failure may pass on its own (no answer, 429, 5xx).
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Request { source, .. } if source.is_transient())
    }
}

/// Discovers the provider's exports for a Connection's schema source.
pub async fn discover(
    provider: &kube::Client,
    source: SchemaSource,
) -> Result<Discovered, DiscoveryError> {
    match source {
        SchemaSource::Crd => Ok(exported_crds(provider).await?),
        SchemaSource::OpenApi => Ok(served_apis(provider, Vec::new()).await?),
        SchemaSource::Auto => {
            let crds = exported_crds(provider).await?;
            // Only labelled CRDs that can be exported count: a provider labelling nothing
            // but built-in CRDs exports nothing through CRDs.
            if crds.apis.is_empty() {
                Ok(served_apis(provider, crds.ignored).await?)
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
    let mut discovered = split_exported(list.items.iter().map(exported_from_crd));
    discovered.revisions = list
        .items
        .iter()
        .filter_map(|crd| {
            // A CRD's name is its API's: `<plural>.<group>`.
            let (name, uid) = (crd.metadata.name.clone()?, crd.metadata.uid.as_ref()?);
            Some((name, format!("{uid}/{}", crd.metadata.generation?)))
        })
        .filter(|(name, _)| discovered.apis.iter().any(|api| &api.name == name))
        .collect();
    Ok(discovered)
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
        failed_groups: Vec::new(),
        revisions: BTreeMap::new(),
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
/// the source, and never installed, bound or deleted on the consumer (`schema::managed`).
pub fn is_builtin_group(group: &str) -> bool {
    group.is_empty()
        || !group.contains('.')
        || group.ends_with(".k8s.io")
        || group.ends_with(".kcp.io")
        || group == GROUP
}

/// Every resource the credentials can discover outside the built-in groups, group by group.
/// Only the list of groups itself failing fails the discovery.
async fn served_apis(
    provider: &kube::Client,
    ignored: Vec<String>,
) -> Result<Discovered, DiscoveryError> {
    let caps = limits();
    let groups: APIGroupList = get_json(
        provider,
        "/apis",
        caps.discovery_response,
        DISCOVERY_RESPONSE_FLAG,
    )
    .await
    .map_err(|e| DiscoveryError::from_read("API discovery", e))?;
    let wanted = groups
        .groups
        .into_iter()
        .filter(|g| !is_builtin_group(&g.name));
    let answers: Vec<Result<Vec<GroupApi>, GroupFailure>> = futures::stream::iter(wanted)
        .map(|group| async move { group_apis(provider, &group).await })
        .buffer_unordered(GROUP_PARALLELISM)
        .collect()
        .await;
    // Without the index (an old server, say), schemas are fetched on every check, as before;
    // an index larger than its cap is refused outright (the Connection says so).
    let documents = openapi_hashes(provider, caps.openapi_index)
        .await?
        .unwrap_or_default();
    let mut apis = Vec::new();
    let mut revisions = BTreeMap::new();
    let mut failed_groups = Vec::new();
    for answer in answers {
        match answer {
            Ok(found) => {
                for GroupApi { api, entries } in found {
                    if let Some(revision) = openapi_revision(&api, &entries, &documents) {
                        revisions.insert(api.name.clone(), revision);
                    }
                    apis.push(api);
                }
            }
            Err(failure) => failed_groups.push(failure),
        }
    }
    apis.sort_by(|a, b| a.name.cmp(&b.name));
    failed_groups.sort_by(|a, b| a.group.cmp(&b.group));
    Ok(Discovered {
        source: SchemaSource::OpenApi,
        apis,
        ignored,
        failed_groups,
        revisions,
    })
}

/// One resource of a group, with the discovery entries (its own and its subresources', per
/// version) that schema synthesis reads.
struct GroupApi {
    api: ExportedApi,
    entries: Vec<serde_json::Value>,
}

/// The `/openapi/v3` index: each group-version's document URL, which carries a hash of the
/// document (`?hash=...`), so a changed schema shows without fetching it. `None` when it cannot
/// be read; an index larger than `cap` is an error.
async fn openapi_hashes(
    provider: &kube::Client,
    cap: usize,
) -> Result<Option<BTreeMap<String, String>>, DiscoveryError> {
    #[derive(serde::Deserialize)]
    struct Index {
        paths: BTreeMap<String, Path>,
    }
    #[derive(serde::Deserialize)]
    struct Path {
        #[serde(rename = "serverRelativeURL")]
        server_relative_url: String,
    }
    let read = get_json::<Index>(provider, "/openapi/v3", cap, OPENAPI_INDEX_FLAG);
    let index = match tokio::time::timeout(GROUP_TIMEOUT, read).await {
        Ok(Ok(index)) => index,
        Ok(Err(too_large @ ReadError::TooLarge { .. })) => {
            return Err(DiscoveryError::Read {
                what: "the /openapi/v3 index",
                source: too_large,
            });
        }
        Ok(Err(_)) | Err(_) => return Ok(None),
    };
    Ok(Some(
        index
            .paths
            .into_iter()
            .map(|(path, entry)| (path, entry.server_relative_url))
            .collect(),
    ))
}

/// A digest of what an OpenAPI-sourced schema is built from, or None when a version's
/// document is not in the index (it must then be fetched to know).
fn openapi_revision(
    api: &ExportedApi,
    entries: &[serde_json::Value],
    documents: &BTreeMap<String, String>,
) -> Option<String> {
    let urls = api
        .versions
        .iter()
        .map(|version| documents.get(&format!("apis/{}/{version}", api.group)))
        .collect::<Option<Vec<_>>>()?;
    let facts = serde_json::json!({ "entries": entries, "documents": urls });
    Some(source_hash(&facts))
}

/// Hash of a schema source as JSON: what discovery reports as an API's revision and what
/// the schema installer records as applied, so the two compare.
pub fn source_hash(source: &impl Serialize) -> String {
    let bytes = serde_json::to_vec(source).unwrap_or_default();
    Sha256::digest(&bytes)
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The resources (not subresources) of every version a group serves, versions in
/// Kubernetes' priority order.
async fn group_apis(
    provider: &kube::Client,
    group: &APIGroup,
) -> Result<Vec<GroupApi>, GroupFailure> {
    let mut versions: Vec<_> = group.versions.iter().collect();
    versions.sort_by_cached_key(|v| Reverse(Version::parse(&v.version).priority()));
    let mut by_name: BTreeMap<String, GroupApi> = BTreeMap::new();
    for version in versions {
        let failed = |what: String, transient| GroupFailure {
            group: group.name.clone(),
            message: format!("{}: {what}", version.group_version),
            transient,
        };
        let path = format!("/apis/{}", version.group_version);
        let cap = limits().discovery_response;
        let read = get_json::<APIResourceList>(provider, &path, cap, DISCOVERY_RESPONSE_FLAG);
        let list = match tokio::time::timeout(GROUP_TIMEOUT, read).await {
            Ok(Ok(list)) => list,
            Ok(Err(error)) => {
                let transient = error.kube_error().is_some_and(|e| e.is_transient());
                return Err(failed(error.to_string(), transient));
            }
            Err(_) => {
                let silence = format!("no answer within {}s", GROUP_TIMEOUT.as_secs());
                return Err(failed(silence, true));
            }
        };
        for resource in &list.resources {
            let (plural, _) = resource
                .name
                .split_once('/')
                .unwrap_or((&resource.name, ""));
            let name = format!("{plural}.{}", group.name);
            let entry = by_name.entry(name.clone()).or_insert_with(|| GroupApi {
                api: ExportedApi {
                    name,
                    group: group.name.clone(),
                    resource: plural.to_string(),
                    scope: if resource.namespaced {
                        ResourceScope::Namespaced
                    } else {
                        ResourceScope::Cluster
                    },
                    versions: Vec::new(),
                },
                entries: Vec::new(),
            });
            if !resource.name.contains('/') {
                entry.api.versions.push(version.version.clone());
            }
            let mut facts = serde_json::to_value(resource).unwrap_or_default();
            facts["groupVersion"] = version.group_version.clone().into();
            entry.entries.push(facts);
        }
    }
    // A subresource listed without its resource is not an API.
    Ok(by_name
        .into_values()
        .filter(|found| !found.api.versions.is_empty())
        .collect())
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
