//! Related Secrets and ConfigMaps (spec, the `relatedResources` block): copied in binding
//! reconciliation, not on the instance watch path.
//!
//! ```text
//! for each relatedResources entry:
//!   list sources (source side, binding scope, ─┐   never in a protected namespace;
//!     the entry's label selector server-side)  │
//!   list targets (target side, binding scope) ─┤   sources of a refused Secret type
//!                                              │   skipped + related_skipped metric
//!                                              └▶ related-selection policy (Wasm)
//!        ▶ copy:   create namespace (attempt) ▶ SSA payload + core.kbind.io/related-binding
//!        ▶ skip:   target with another/absent marker: debug log + related_skipped metric
//!        ▶ delete: this binding's copies that no longer match (sources are never deleted)
//! ```
//!
//! FromProvider copies provider → consumer, FromConsumer consumer → provider. Selection is
//! the module's, within what the host allows ([`super::related_guard`]): the module only sees
//! the sources and targets the guard lets through, and the host writes and deletes only
//! objects from those lists.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    Preconditions,
};
use kube::core::Selector;
use kube::{Api, Client, ResourceExt};
use serde_json::{Map, Value, json};
use tracing::{debug, info, warn};

use crate::api::names::{RELATED_BINDING_ANNOTATION, RELATED_FIELD_MANAGER};
use crate::api::{RelatedDirection, RelatedResource, RelatedResourceKind};
use crate::k8s::{self, ApiErrorExt, NamespaceState};
use crate::policy::{RelatedInput, RelatedPlan, RelatedSource, RelatedTarget};
use crate::registry::Engagement;
use crate::telemetry::{RelatedLabels, metrics};

use super::related_guard::RelatedGuard;
use super::{Error, Result};

/// `related_skipped` reason of a target that carries another binding's marker, or none.
const FOREIGN_TARGET: &str = "foreign-target";
/// `related_skipped` reason of a source Secret whose type the host does not copy.
const SECRET_TYPE: &str = "secret-type";

/// The payload fields a copy carries (spec: "data, stringData, binaryData, type, and
/// immutable when present, not arbitrary source metadata").
const PAYLOAD_FIELDS: [&str; 5] = ["data", "stringData", "binaryData", "type", "immutable"];

/// The binding being reconciled, as far as related resources care.
#[derive(Clone, Debug)]
pub struct RelatedScope<'a> {
    /// The binding's UID, the value of every copy's marker.
    pub binding_uid: &'a str,
    /// The namespace of a Binding; `None` for a ClusterBinding (all namespaces).
    pub namespace: Option<&'a str>,
    /// The binding's `relatedResources`.
    pub entries: &'a [RelatedResource],
    /// The namespaces and Secret types copies may touch.
    pub guard: &'a RelatedGuard,
}

/// Copies, skips and garbage-collects every entry of one binding.
pub async fn sync(
    scope: &RelatedScope<'_>,
    consumer: &Client,
    engagement: &Engagement,
    policies: &crate::policy::Policies,
) -> Result<()> {
    for entry in scope.entries {
        if !entry.group.is_empty() {
            warn!(group = %entry.group, "related resources: only the core group is supported; entry ignored");
            continue;
        }
        if entry.resource == RelatedResourceKind::Secrets
            && entry.selector.names.is_empty()
            && entry.selector.label_selector.as_ref().is_none_or(|s| {
                s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
                    && s.match_expressions.as_ref().is_none_or(Vec::is_empty)
            })
        {
            // Spec: "An omitted/empty selector matches everything in scope. Avoid this for
            // Secrets."
            warn!(
                direction = direction_label(entry.direction),
                "related Secrets with an empty selector: every Secret in scope is copied"
            );
        }
        let sides = Sides::new(entry, consumer, engagement);
        let mut sources = list(&sides.source, entry, scope, Side::Source).await?;
        refuse_sources(entry, &mut sources);
        let targets = list(&sides.target, entry, scope, Side::Target).await?;
        let plan = plan(scope, entry, &sources, &targets, policies).await?;
        apply_plan(scope, entry, &sides, &plan, &sources, &targets).await?;
    }
    Ok(())
}

/// Deletes this binding's copies for the currently declared entries (binding deletion).
/// Sources are never touched.
pub async fn delete_copies(
    scope: &RelatedScope<'_>,
    consumer: &Client,
    engagement: &Engagement,
) -> Result<()> {
    for entry in scope.entries.iter().filter(|e| e.group.is_empty()) {
        let sides = Sides::new(entry, consumer, engagement);
        let targets = list(&sides.target, entry, scope, Side::Target).await?;
        for target in targets.values() {
            if marker(target) == Some(scope.binding_uid) {
                delete_target(&sides.target, entry, target).await?;
            }
        }
    }
    Ok(())
}

/// The clients an entry reads from and writes to.
struct Sides {
    source: Client,
    target: Client,
}

impl Sides {
    fn new(entry: &RelatedResource, consumer: &Client, engagement: &Engagement) -> Self {
        match entry.direction {
            RelatedDirection::FromProvider => Self {
                source: engagement.provider.clone(),
                target: consumer.clone(),
            },
            RelatedDirection::FromConsumer => Self {
                source: consumer.clone(),
                target: engagement.provider.clone(),
            },
        }
    }
}

type Objects = BTreeMap<(String, String), DynamicObject>;

fn resource(kind: RelatedResourceKind) -> ApiResource {
    match kind {
        RelatedResourceKind::Secrets => ApiResource::erase::<Secret>(&()),
        RelatedResourceKind::Configmaps => ApiResource::erase::<ConfigMap>(&()),
    }
}

fn resource_label(kind: RelatedResourceKind) -> &'static str {
    match kind {
        RelatedResourceKind::Secrets => "secrets",
        RelatedResourceKind::Configmaps => "configmaps",
    }
}

fn direction_label(direction: RelatedDirection) -> &'static str {
    match direction {
        RelatedDirection::FromProvider => "FromProvider",
        RelatedDirection::FromConsumer => "FromConsumer",
    }
}

fn api(client: &Client, entry: &RelatedResource, namespace: Option<&str>) -> Api<DynamicObject> {
    let ar = resource(entry.resource);
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// Which side of an entry a list reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
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
async fn list(
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
fn refuse_sources(entry: &RelatedResource, sources: &mut Objects) {
    sources.retain(|(namespace, name), source| {
        if RelatedGuard::copyable(entry.resource, source) {
            return true;
        }
        debug!(%namespace, %name, "related Secret of a type the host does not copy; skipped");
        metrics()
            .related_skipped
            .get_or_create(&RelatedLabels {
                resource: resource_label(entry.resource),
                direction: direction_label(entry.direction),
                reason: SECRET_TYPE,
            })
            .inc();
        false
    });
}

fn marker(obj: &DynamicObject) -> Option<&str> {
    obj.annotations()
        .get(RELATED_BINDING_ANNOTATION)
        .map(String::as_str)
}

async fn plan(
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

async fn apply_plan(
    scope: &RelatedScope<'_>,
    entry: &RelatedResource,
    sides: &Sides,
    plan: &RelatedPlan,
    sources: &Objects,
    targets: &Objects,
) -> Result<()> {
    let labels = RelatedLabels {
        resource: resource_label(entry.resource),
        direction: direction_label(entry.direction),
        reason: FOREIGN_TARGET,
    };
    for skipped in &plan.skip {
        // Spec: "These collisions are silently skipped and are not included in instance
        // conflict counts."
        debug!(namespace = %skipped.namespace, name = %skipped.name, reason = ?skipped.reason, "related target belongs to someone else; skipped");
        metrics().related_skipped.get_or_create(&labels).inc();
    }
    let mut namespaces = BTreeSet::new();
    for copy in &plan.copy {
        let key = (copy.namespace.clone(), copy.name.clone());
        // Only a source the guard let through is written, whatever the plan names.
        let Some(source) = sources.get(&key) else {
            continue;
        };
        if !scope.guard.allows_namespace(&copy.namespace) {
            continue;
        }
        let body = payload(entry, source, scope.binding_uid);
        let target_api = api(&sides.target, entry, Some(&copy.namespace));
        if let Some(existing) = targets.get(&key) {
            if is_immutable(existing) && payload_differs(existing, &body) {
                // An immutable object cannot be updated: recreate it.
                info!(namespace = %copy.namespace, name = %copy.name, resource = labels.resource, "immutable related source changed; recreating the copy");
                delete_target(&sides.target, entry, existing).await?;
                target_api
                    .create(&PostParams::default(), &serde_json::from_value(body)?)
                    .await
                    .map_err(|source| Error::ApplyRelated {
                        resource: labels.resource,
                        source,
                    })?;
                continue;
            }
        } else if namespaces.insert(copy.namespace.clone()) {
            ensure_namespace(&sides.target, &copy.namespace).await?;
        }
        target_api
            .patch(
                &copy.name,
                &PatchParams::apply(RELATED_FIELD_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await
            .map_err(|source| Error::ApplyRelated {
                resource: labels.resource,
                source,
            })?;
        debug!(namespace = %copy.namespace, name = %copy.name, "related copy applied");
    }
    for gone in &plan.delete {
        let key = (gone.namespace.clone(), gone.name.clone());
        if let Some(target) = targets
            .get(&key)
            .filter(|_| scope.guard.allows_namespace(&gone.namespace))
        {
            info!(namespace = %gone.namespace, name = %gone.name, "related copy no longer selected; deleting it");
            delete_target(&sides.target, entry, target).await?;
        }
    }
    Ok(())
}

/// The copy: namespace/name, the marker, and only the payload fields present on the source.
pub fn payload(entry: &RelatedResource, source: &DynamicObject, binding_uid: &str) -> Value {
    let (kind, ar) = match entry.resource {
        RelatedResourceKind::Secrets => ("Secret", resource(entry.resource)),
        RelatedResourceKind::Configmaps => ("ConfigMap", resource(entry.resource)),
    };
    let mut body = Map::new();
    body.insert("apiVersion".into(), json!(ar.api_version));
    body.insert("kind".into(), json!(kind));
    body.insert(
        "metadata".into(),
        json!({
            "name": source.name_any(),
            "namespace": source.metadata.namespace,
            "annotations": { RELATED_BINDING_ANNOTATION: binding_uid },
        }),
    );
    if let Some(fields) = source.data.as_object() {
        for field in PAYLOAD_FIELDS {
            if let Some(value) = fields.get(field).filter(|v| !v.is_null()) {
                body.insert(field.into(), value.clone());
            }
        }
    }
    Value::Object(body)
}

fn is_immutable(obj: &DynamicObject) -> bool {
    obj.data.get("immutable").and_then(Value::as_bool) == Some(true)
}

/// Whether the target's payload differs from the desired copy's.
fn payload_differs(existing: &DynamicObject, desired: &Value) -> bool {
    PAYLOAD_FIELDS
        .iter()
        .filter(|f| **f != "stringData")
        .any(|f| existing.data.get(*f) != desired.get(*f))
}

async fn delete_target(
    client: &Client,
    entry: &RelatedResource,
    target: &DynamicObject,
) -> Result<()> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: target.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api(client, entry, target.metadata.namespace.as_deref())
        .delete(&target.name_any(), &params)
        .await
    {
        Ok(_) => Ok(()),
        // Already gone, or replaced by someone else since the list: nothing of ours to delete.
        Err(e) if e.is_not_found() || e.is_conflict() => Ok(()),
        Err(source) => Err(Error::DeleteRelated {
            resource: resource_label(entry.resource),
            source,
        }),
    }
}

/// Spec: "Namespace creation and source/target RBAC are still required": a create attempt;
/// an existing namespace is fine, a refusal is logged and the copy's own write reports.
async fn ensure_namespace(client: &Client, name: &str) -> Result<()> {
    match k8s::ensure_namespace(client, name).await {
        Ok(NamespaceState::Created) => {
            info!(namespace = name, "namespace created for related copies");
            Ok(())
        }
        Ok(NamespaceState::Existed) => Ok(()),
        Ok(NamespaceState::CreateForbidden) => {
            debug!(
                namespace = name,
                "may not create namespace; trying the copy anyway"
            );
            Ok(())
        }
        Err(source) => Err(Error::CreateNamespace {
            namespace: name.to_string(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::RelatedSelector;

    fn entry(resource: RelatedResourceKind) -> RelatedResource {
        RelatedResource {
            group: String::new(),
            resource,
            direction: RelatedDirection::FromProvider,
            selector: RelatedSelector::default(),
        }
    }

    fn secret() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {
                "name": "s", "namespace": "ns", "uid": "u1",
                "labels": { "a": "b" }, "annotations": { "x": "y" },
                "finalizers": ["f"], "ownerReferences": [],
            },
            "data": { "k": "dg==" }, "type": "Opaque", "immutable": true,
        }))
        .unwrap_or_else(|e| panic!("fixture: {e}"))
    }

    #[test]
    fn payload_carries_only_payload_fields_and_the_marker() {
        let body = payload(&entry(RelatedResourceKind::Secrets), &secret(), "b-uid");
        assert_eq!(
            body,
            json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {
                    "name": "s", "namespace": "ns",
                    "annotations": { RELATED_BINDING_ANNOTATION: "b-uid" },
                },
                "data": { "k": "dg==" }, "type": "Opaque", "immutable": true,
            })
        );
    }

    #[test]
    fn an_immutable_target_with_other_data_differs() {
        let existing = secret();
        let mut desired = payload(&entry(RelatedResourceKind::Secrets), &existing, "b");
        assert!(is_immutable(&existing));
        assert!(!payload_differs(&existing, &desired));
        desired["data"] = json!({ "k": "dzI=" });
        assert!(payload_differs(&existing, &desired));
    }

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
