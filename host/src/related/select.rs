//! What one `relatedResources` entry selects: both sides listed metadata-only in the binding's
//! scope (never a protected namespace; sources filtered by the entry's label selector on the
//! server), and the related-selection policy's plan over them. Payloads are read only for the
//! sources that are to be copied (`copy`), so a pass over an unchanged scope reads no data.

use kube::Client;
use kube::api::ListParams;
use kube::core::Selector;
use tracing::warn;

use crate::api::RelatedResource;
use crate::policy::{RelatedInput, RelatedPlan, RelatedSource, RelatedTarget};
use crate::telemetry::{RelatedReadLabels, metrics};

use super::{Error, Result};
use super::{Objects, RelatedScope, api, resource_label};

/// Which side of an entry a list reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Side {
    /// Where copies come from: listed with the entry's label selector, so the API server
    /// filters and only candidates travel.
    Source,
    /// Where copies go: every object in scope, to find this binding's copies and names taken
    /// by others.
    Target,
}

/// Objects per page of a list, so memory stays bounded however many exist.
const PAGE: u32 = 500;

/// Lists one side, metadata only (names, labels, markers, resourceVersions), within the
/// binding's scope (spec: "A Binding selects within its namespace, a ClusterBinding lists
/// across namespaces"): `namespace` is the Binding's, or where isolation placed it on the
/// provider; `None` for a ClusterBinding. Never reads a protected namespace: a Binding in one
/// lists nothing, an all-namespaces list leaves them out by field selector.
pub(super) async fn list(
    client: &Client,
    entry: &RelatedResource,
    scope: &RelatedScope<'_>,
    namespace: Option<&str>,
    side: Side,
) -> Result<Objects> {
    let mut params = match namespace {
        Some(ns) if !scope.guard.allows_namespace(ns) => {
            warn!(
                namespace = ns,
                "related resources: the binding's namespace is protected; nothing is copied"
            );
            return Ok(Objects::new());
        }
        Some(_) => ListParams::default(),
        None => ListParams::default().fields(&scope.guard.field_selector()),
    }
    .limit(PAGE);
    if side == Side::Source
        && let Some(selector) = server_selector(entry)
    {
        params = params.labels_from(&selector);
    }
    let api = api(client, entry, namespace);
    let mut objects = Objects::new();
    loop {
        let page = api
            .list_metadata(&params)
            .await
            .map_err(|source| Error::ListRelated {
                resource: resource_label(entry.resource),
                source,
            })?;
        count_read(entry, "list-metadata");
        let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        objects.extend(
            page.items
                .into_iter()
                .filter_map(|o| {
                    let meta = o.metadata;
                    Some(((meta.namespace.clone()?, meta.name.clone()?), meta))
                })
                .filter(|((ns, _), _)| scope.guard.allows_namespace(ns)),
        );
        match next {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(objects),
        }
    }
}

/// The entry's label selector for the API server, when it has a valid, non-empty one; an
/// invalid one is left to the selection module, which refuses it.
fn server_selector(entry: &RelatedResource) -> Option<Selector> {
    let selector = Selector::try_from(entry.selector.label_selector.clone()?).ok()?;
    (!selector.selects_all()).then_some(selector)
}

/// Counts one related read in `related_reads`.
pub(super) fn count_read(entry: &RelatedResource, read: &'static str) {
    metrics()
        .related_reads
        .get_or_create(&RelatedReadLabels {
            resource: resource_label(entry.resource),
            read,
        })
        .inc();
}

/// Asks the related-selection policy what to copy, skip and delete among the listed objects.
pub(super) async fn plan(
    scope: &RelatedScope<'_>,
    entry: &RelatedResource,
    sources: &Objects,
    targets: &Objects,
    policies: &crate::policy::Policies,
) -> Result<RelatedPlan> {
    let input = RelatedInput {
        binding_uid: scope.binding_uid.to_string(),
        binding_namespace: scope.namespace.map(str::to_string),
        entry: entry.clone(),
        sources: sources
            .iter()
            .map(|((ns, name), o)| RelatedSource {
                namespace: ns.clone(),
                name: name.clone(),
                labels: o.labels.clone().unwrap_or_default(),
            })
            .collect(),
        targets: targets
            .iter()
            .map(|((ns, name), o)| {
                RelatedTarget::from_annotations(
                    ns,
                    name,
                    &o.annotations.clone().unwrap_or_default(),
                )
            })
            .collect(),
    };
    policies
        .select_related(&input)
        .await
        .map_err(Error::RelatedPolicy)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::fixtures::entry;
    use super::*;
    use crate::api::RelatedResourceKind;

    #[test]
    fn source_label_selector_is_applied_by_the_api_server() {
        let mut selected = entry(RelatedResourceKind::Secrets);
        selected.selector.label_selector = Some(
            serde_json::from_value(json!({"matchLabels": {"app": "db"}}))
                .unwrap_or_else(|e| panic!("{e}")),
        );
        let selector = server_selector(&selected).map(|s| s.to_string());
        assert_eq!(selector.as_deref(), Some("app=db"));
    }

    #[test]
    fn empty_or_invalid_selector_lists_everything_for_the_module_to_judge() {
        assert!(server_selector(&entry(RelatedResourceKind::Secrets)).is_none());
        let mut invalid = entry(RelatedResourceKind::Configmaps);
        invalid.selector.label_selector = Some(
            serde_json::from_value(
                json!({"matchExpressions": [{"key": "app", "operator": "Nope"}]}),
            )
            .unwrap_or_else(|e| panic!("{e}")),
        );
        assert!(server_selector(&invalid).is_none());
    }
}
