//! What one `relatedResources` entry selects: both sides listed in the binding's scope (never
//! a protected namespace; sources filtered by the entry's label selector on the server),
//! sources of a refused Secret type dropped, and the related-selection policy's plan over
//! what is left.

use kube::api::ListParams;
use kube::core::Selector;
use kube::{Client, ResourceExt};
use tracing::{debug, warn};

use crate::api::RelatedResource;
use crate::policy::{RelatedInput, RelatedPlan, RelatedSource, RelatedTarget};

use super::{Objects, RelatedScope, api, count_skipped, resource_label};
use crate::binding::related_guard::RelatedGuard;
use crate::binding::{Error, Result};

/// `related_skipped` reason of a source Secret whose type the host does not copy.
const SECRET_TYPE: &str = "secret-type";

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

/// Lists one side within the binding's scope (spec: "A Binding selects within its namespace,
/// a ClusterBinding lists across namespaces"), never reading a protected namespace: a
/// Binding in one lists nothing, an all-namespaces list leaves them out by field selector.
pub(super) async fn list(
    client: &Client,
    entry: &RelatedResource,
    scope: &RelatedScope<'_>,
    side: Side,
) -> Result<Objects> {
    let mut params = match scope.namespace {
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
    let api = api(client, entry, scope.namespace);
    let mut objects = Objects::new();
    loop {
        let page = api
            .list(&params)
            .await
            .map_err(|source| Error::ListRelated {
                resource: resource_label(entry.resource),
                source,
            })?;
        let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        objects.extend(
            page.items
                .into_iter()
                .filter_map(|o| Some(((o.metadata.namespace.clone()?, o.name_any()), o)))
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

/// Drops the Secrets of a type the host refuses to copy, counting each in `related_skipped`.
/// A copy of a dropped source that this binding made earlier is no longer selected and goes.
pub(super) fn refuse_sources(entry: &RelatedResource, sources: &mut Objects) {
    sources.retain(|(namespace, name), source| {
        if RelatedGuard::copyable(entry.resource, source) {
            return true;
        }
        debug!(%namespace, %name, "related Secret of a type the host does not copy; skipped");
        count_skipped(entry, SECRET_TYPE);
        false
    });
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
                labels: o.labels().clone(),
            })
            .collect(),
        targets: targets
            .iter()
            .map(|((ns, name), o)| RelatedTarget::from_annotations(ns, name, o.annotations()))
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
