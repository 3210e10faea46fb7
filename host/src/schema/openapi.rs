//! Gathering what schema synthesis needs for one API from a provider without CRDs: its
//! discovery facts and the `/openapi/v3` document of each served group-version.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIGroup, APIResourceList};
use kube::core::Version;
use serde_json::Value;

use super::error::SchemaError;
use crate::api::ExportedApi;
use crate::policy::{SchemaInput, SchemaVersion};
use crate::provider::limits::{DISCOVERY_RESPONSE_FLAG, OPENAPI_INDEX_FLAG, get_json, limits};

/// Discovery facts and OpenAPI documents for one API, as read from the provider.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiFacts {
    /// The exported API.
    pub api: ExportedApi,
    /// Kind of the resource.
    pub kind: String,
    /// Singular name (may be empty on servers that do not publish it).
    pub singular: String,
    /// Short names.
    pub short_names: Vec<String>,
    /// Categories.
    pub categories: Vec<String>,
    /// The version the consumer CRD stores: see [`storage_version`].
    pub storage_version: String,
    /// Per served version: its subresources and OpenAPI v3 document (JSON text).
    pub versions: Vec<VersionFacts>,
}

/// What one served version offers.
#[derive(Debug, Clone, PartialEq)]
pub struct VersionFacts {
    /// Version name.
    pub name: String,
    /// Subresources discovery lists (`status`, `scale`, ...).
    pub subresources: Vec<String>,
    /// The `/openapi/v3` document for this group-version.
    pub openapi: Value,
}

impl ApiFacts {
    /// The schema-synthesis policy's input.
    pub fn synthesis_input(&self) -> SchemaInput {
        SchemaInput {
            group: self.api.group.clone(),
            resource: self.api.resource.clone(),
            kind: self.kind.clone(),
            singular: self.singular.clone(),
            short_names: self.short_names.clone(),
            categories: self.categories.clone(),
            scope: self.api.scope,
            versions: self
                .versions
                .iter()
                .map(|v| SchemaVersion {
                    name: v.name.clone(),
                    served: true,
                    storage: v.name == self.storage_version,
                    subresources: v.subresources.clone(),
                    openapi: v.openapi.clone(),
                })
                .collect(),
        }
    }
}

/// The storage version of a resource served at `served`: the group's preferred version when
/// the resource is served there, else the resource's own highest-priority version (a resource
/// only served at `v1alpha1` in a group preferring `v1` stores `v1alpha1`). Versions are taken
/// per resource, because a group's versions need not all serve every resource.
pub fn storage_version(preferred: Option<&str>, served: &[String]) -> Option<String> {
    if let Some(preferred) = preferred.filter(|p| served.iter().any(|v| v == p)) {
        return Some(preferred.to_string());
    }
    served
        .iter()
        .max_by_key(|v| Version::parse(v).priority())
        .cloned()
}

/// Reads discovery facts and OpenAPI v3 documents for `api` from the provider.
pub async fn fetch_facts(
    provider: &kube::Client,
    api: &ExportedApi,
) -> Result<ApiFacts, SchemaError> {
    let unusable = |detail: String| SchemaError::OpenApi {
        api: api.name.clone(),
        detail,
    };

    let caps = limits();
    let bounded = |source| SchemaError::Read {
        api: api.name.clone(),
        source,
    };
    let group_path = format!("/apis/{}", api.group);
    let group: APIGroup = get_json(
        provider,
        &group_path,
        caps.discovery_response,
        DISCOVERY_RESPONSE_FLAG,
    )
    .await
    .map_err(bounded)?;
    let preferred = group.preferred_version.map(|v| v.version);
    let storage_version = storage_version(preferred.as_deref(), &api.versions)
        .ok_or_else(|| unusable(format!("discovery lists no version of {}", api.name)))?;

    let index: Value = get_json(
        provider,
        "/openapi/v3",
        caps.openapi_index,
        OPENAPI_INDEX_FLAG,
    )
    .await
    .map_err(bounded)?;
    let mut facts: Option<(String, String, Vec<String>, Vec<String>)> = None;
    let mut versions = Vec::new();
    for version in &api.versions {
        let gv = format!("{}/{}", api.group, version);
        let list: APIResourceList = get_json(
            provider,
            &format!("/apis/{gv}"),
            caps.discovery_response,
            DISCOVERY_RESPONSE_FLAG,
        )
        .await
        .map_err(bounded)?;
        let resource = list
            .resources
            .iter()
            .find(|r| r.name == api.resource)
            .ok_or_else(|| unusable(format!("{gv} does not list resource {}", api.resource)))?;
        facts.get_or_insert_with(|| {
            (
                resource.kind.clone(),
                resource.singular_name.clone(),
                resource.short_names.clone().unwrap_or_default(),
                resource.categories.clone().unwrap_or_default(),
            )
        });
        let prefix = format!("{}/", api.resource);
        let subresources = list
            .resources
            .iter()
            .filter_map(|r| r.name.strip_prefix(&prefix).map(str::to_string))
            .collect();
        let url = index
            .pointer(&format!(
                "/paths/apis~1{}~1{}/serverRelativeURL",
                api.group, version
            ))
            .and_then(Value::as_str)
            .ok_or_else(|| SchemaError::NotPublished {
                api: api.name.clone(),
                group_version: gv.clone(),
            })?;
        let document = read_document(provider, api, url).await?;
        versions.push(VersionFacts {
            name: version.clone(),
            subresources,
            openapi: document,
        });
    }
    let (kind, singular, short_names, categories) =
        facts.ok_or_else(|| unusable("the API serves no version".into()))?;
    let mut by_name: BTreeMap<String, VersionFacts> =
        versions.into_iter().map(|v| (v.name.clone(), v)).collect();
    Ok(ApiFacts {
        api: api.clone(),
        kind,
        singular,
        short_names,
        categories,
        storage_version,
        versions: api
            .versions
            .iter()
            .filter_map(|v| by_name.remove(v))
            .collect(),
    })
}

/// Largest OpenAPI v3 document (one group-version) read from a provider; a larger one is
/// refused while it streams in, never buffered whole first.
pub const MAX_OPENAPI_DOCUMENT_BYTES: usize = 16 * 1024 * 1024;

/// Reads one OpenAPI v3 document, at most [`MAX_OPENAPI_DOCUMENT_BYTES`] of it.
async fn read_document(
    provider: &kube::Client,
    api: &ExportedApi,
    url: &str,
) -> Result<Value, SchemaError> {
    read_bounded(provider, api, url, MAX_OPENAPI_DOCUMENT_BYTES).await
}

/// Reads the JSON at `url`, refusing it once more than `cap` bytes have arrived.
async fn read_bounded(
    provider: &kube::Client,
    api: &ExportedApi,
    url: &str,
    cap: usize,
) -> Result<Value, SchemaError> {
    let bytes = crate::provider::limits::read_capped(provider, url, cap)
        .await
        .map_err(|error| match error {
            crate::provider::limits::ReadError::Request { source, .. } => {
                SchemaError::ProviderRead {
                    api: api.name.clone(),
                    source,
                }
            }
            other => SchemaError::OpenApi {
                api: api.name.clone(),
                detail: other.to_string(),
            },
        })?;
    if bytes.len() > cap {
        return Err(SchemaError::OpenApi {
            api: api.name.clone(),
            detail: format!(
                "the OpenAPI document {url} is larger than {} MiB; the konnector does not read \
                 it (split the API group, or use the CRD schema source)",
                cap / (1024 * 1024)
            ),
        });
    }
    serde_json::from_slice(&bytes).map_err(|e| SchemaError::OpenApi {
        api: api.name.clone(),
        detail: format!("{url} is not a JSON document: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(versions: &[&str]) -> Vec<String> {
        versions.iter().map(|v| v.to_string()).collect()
    }

    #[test]
    fn a_resource_served_only_at_an_alpha_version_gets_it_as_storage() {
        let only_alpha = served(&["v1alpha1"]);
        assert_eq!(
            storage_version(Some("v1"), &only_alpha).as_deref(),
            Some("v1alpha1")
        );
    }

    #[test]
    fn the_preferred_version_is_storage_where_the_resource_is_served_there() {
        let both = served(&["v1alpha1", "v1"]);
        assert_eq!(storage_version(Some("v1"), &both).as_deref(), Some("v1"));
        // A group preferring its beta keeps it, though the resource also serves v1.
        let beta_preferred = served(&["v1", "v1beta1"]);
        assert_eq!(
            storage_version(Some("v1beta1"), &beta_preferred).as_deref(),
            Some("v1beta1")
        );
    }

    #[test]
    fn without_the_preferred_version_the_resource_s_highest_priority_version_stores() {
        let versions = served(&["v1alpha1", "v1beta2", "v1beta1"]);
        assert_eq!(
            storage_version(Some("v2"), &versions).as_deref(),
            Some("v1beta2")
        );
        assert_eq!(storage_version(None, &versions).as_deref(), Some("v1beta2"));
        assert_eq!(storage_version(Some("v1"), &[]), None);
    }

    #[test]
    fn synthesis_input_marks_exactly_the_resource_s_storage_version() {
        let facts = ApiFacts {
            api: ExportedApi {
                name: "things.example.org".into(),
                group: "example.org".into(),
                resource: "things".into(),
                scope: crate::api::ResourceScope::Namespaced,
                versions: served(&["v1alpha1"]),
            },
            kind: "Thing".into(),
            singular: "thing".into(),
            short_names: vec![],
            categories: vec![],
            storage_version: storage_version(Some("v1"), &served(&["v1alpha1"]))
                .unwrap_or_default(),
            versions: vec![VersionFacts {
                name: "v1alpha1".into(),
                subresources: vec![],
                openapi: Value::Null,
            }],
        };
        let input = facts.synthesis_input();
        let storage: Vec<&str> = input
            .versions
            .iter()
            .filter(|v| v.storage)
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(storage, ["v1alpha1"]);
    }
}
