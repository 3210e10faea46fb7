//! Related Secrets and ConfigMaps (spec, the `relatedResources` block): copied in binding
//! reconciliation, not on the instance watch path.
//!
//! ```text
//! for each relatedResources entry:
//!   list sources, metadata only (source side, ─┐   never in a protected namespace
//!     binding scope, label selector server-side)│
//!   list targets, metadata only (target side)  ─┴▶ related-selection policy (Wasm)
//!        ▶ copy:   up to date (source resourceVersion and digest on the copy, no foreign
//!                  payload writer) ▶ nothing read, nothing written
//!                  otherwise read the source in full (refused Secret type: skipped, counted)
//!                  absent at list time ▶ create (AlreadyExists: someone else's, never taken)
//!                  ours ▶ SSA payload + markers, under the listed resourceVersion
//!        ▶ skip:   target with another/absent marker: debug log + related_skipped metric
//!        ▶ delete: this binding's copies that no longer match (sources are never deleted)
//! a failing copy (or entry) is counted and reported; the others go on
//! ```
//!
//! FromProvider copies provider → consumer, FromConsumer consumer → provider. Selection is
//! the module's, within what the host allows ([`guard`]): the module only sees
//! the sources and targets the guard lets through, and the host writes and deletes only
//! objects from those lists. `select` lists both sides and asks the module; `copy` writes and
//! deletes what it answered.

#![warn(unreachable_pub)]

mod condition;
mod copy;
mod decision;
mod error;
pub mod guard;
mod payload;
mod placed;
mod select;
mod write;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DynamicObject};
use kube::{Api, Client};
use tracing::warn;

pub use condition::{related_failed, related_partly_failed, related_synced};
pub use error::{Error, Result};
pub use guard::RelatedGuard;
pub use payload::{digest, payload};

use crate::api::names::RELATED_BINDING_ANNOTATION;
use crate::api::{RelatedDirection, RelatedResource, RelatedResourceKind};
use crate::registry::Engagement;
use crate::telemetry::{RelatedLabels, metrics};

use placed::{Placing, Sites};
use select::Side;

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

/// What a related pass came to: how many copies (or whole entries) failed, and the first
/// failure, for the `RelatedResourcesSynced` condition.
#[derive(Debug, Default)]
pub struct PassReport {
    /// Copies, deletions or entries that failed; the others went on.
    pub failed: usize,
    /// The first failure, reported and returned so the binding backs off.
    pub first: Option<Error>,
}

impl PassReport {
    /// Counts one failure, keeping the first.
    fn fail(&mut self, entry: &RelatedResource, error: Error) {
        warn!(resource = resource_label(entry.resource), direction = direction_label(entry.direction), %error, "related copy failed; going on with the others");
        metrics()
            .related_copy_failures
            .get_or_create(&RelatedLabels {
                resource: resource_label(entry.resource),
                direction: direction_label(entry.direction),
                reason: "failed",
            })
            .inc();
        self.failed += 1;
        self.first.get_or_insert(error);
    }
}

/// Copies, skips and garbage-collects every entry of one binding. A failing copy or entry is
/// counted in the outcome without stopping the others.
pub async fn sync(
    scope: &RelatedScope<'_>,
    consumer: &Client,
    engagement: &Engagement,
    policies: &crate::policy::Policies,
) -> PassReport {
    let policies = &policies.for_connection(&engagement.connection);
    let mut outcome = PassReport::default();
    for entry in scope.entries {
        if !entry.group.is_empty() {
            warn!(group = %entry.group, "related resources: only the core group is supported; entry ignored");
            continue;
        }
        warn_if_every_secret(entry);
        sync_entry(
            scope,
            entry,
            consumer,
            engagement,
            policies,
            &mut outcome,
            async || {},
        )
        .await;
    }
    outcome
}

/// One entry's pass, with `between` run after both sides were listed and before anything is
/// written: the window in which someone else may create or replace a target. Production
/// passes run nothing there; tests put their race in it.
pub async fn sync_entry(
    scope: &RelatedScope<'_>,
    entry: &RelatedResource,
    consumer: &Client,
    engagement: &Engagement,
    policies: &crate::policy::Policies,
    outcome: &mut PassReport,
    between: impl AsyncFnOnce(),
) {
    let sides = Sides::new(entry, consumer, engagement);
    let placing = Placing::new(engagement, policies, entry.resource);
    let listed = async {
        let Some((source_ns, target_ns)) = side_namespaces(scope, entry, &placing).await else {
            return Ok(None);
        };
        let sources = select::list(
            &sides.source,
            entry,
            scope,
            source_ns.as_deref(),
            Side::Source,
        )
        .await?;
        let targets = select::list(
            &sides.target,
            entry,
            scope,
            target_ns.as_deref(),
            Side::Target,
        )
        .await?;
        let (sources, targets, sites) = place(entry, &placing, sources, targets).await;
        let plan = select::plan(scope, entry, &sources, &targets, policies).await?;
        Ok::<_, Error>(Some((sources, targets, sites, plan)))
    };
    match listed.await {
        Ok(Some((sources, targets, sites, plan))) => {
            between().await;
            let listed = copy::Listed {
                sources: &sources,
                targets: &targets,
                sites: &sites,
            };
            copy::apply_plan(scope, entry, &sides, &plan, &listed, outcome).await;
        }
        Ok(None) => {}
        Err(error) => outcome.fail(entry, error),
    }
}

/// The namespaces the source and the target side are listed in: the Binding's, or on the
/// provider where isolation places it (`None` inside: a ClusterBinding, every namespace).
/// `None`: the Binding's namespace has no usable place on the provider; nothing is copied.
async fn side_namespaces(
    scope: &RelatedScope<'_>,
    entry: &RelatedResource,
    placing: &Placing<'_>,
) -> Option<(Option<String>, Option<String>)> {
    let here = scope.namespace.map(str::to_string);
    let there = match scope.namespace {
        Some(ns) => Some(placing.provider_namespace(ns).await?),
        None => None,
    };
    Some(match entry.direction {
        RelatedDirection::FromProvider => (there, here),
        RelatedDirection::FromConsumer => (here, there),
    })
}

/// Puts both sides in consumer coordinates for the selection policy, remembering where the
/// provider side's objects are (see [`placed`]). A FromConsumer source that cannot be placed
/// is not copied.
async fn place(
    entry: &RelatedResource,
    placing: &Placing<'_>,
    mut sources: Objects,
    targets: Objects,
) -> (Objects, Objects, Sites) {
    let mut sites = Sites::default();
    if !placing.active() {
        return (sources, targets, sites);
    }
    match entry.direction {
        RelatedDirection::FromProvider => {
            let sources = placing.to_consumer(sources, &mut sites.source).await;
            (sources, targets, sites)
        }
        RelatedDirection::FromConsumer => {
            let targets = placing.to_consumer(targets, &mut sites.target).await;
            let mut unplaced = Vec::new();
            for key in sources.keys() {
                match placing.place(key).await {
                    Some(at) => {
                        sites.target.insert(key.clone(), at);
                    }
                    None => unplaced.push(key.clone()),
                }
            }
            for key in unplaced {
                sources.remove(&key);
            }
            (sources, targets, sites)
        }
    }
}

/// Spec: "An omitted/empty selector matches everything in scope. Avoid this for Secrets.":
/// such an entry is copied as declared, with a warning.
fn warn_if_every_secret(entry: &RelatedResource) {
    if entry.resource == RelatedResourceKind::Secrets
        && entry.selector.names.is_empty()
        && entry.selector.label_selector.as_ref().is_none_or(|s| {
            s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
                && s.match_expressions.as_ref().is_none_or(Vec::is_empty)
        })
    {
        warn!(
            direction = direction_label(entry.direction),
            "related Secrets with an empty selector: every Secret in scope is copied"
        );
    }
}

/// Deletes this binding's copies for the currently declared entries (binding deletion).
/// Sources are never touched.
pub async fn delete_copies(
    scope: &RelatedScope<'_>,
    consumer: &Client,
    engagement: &Engagement,
    policies: &crate::policy::Policies,
) -> Result<()> {
    let policies = &policies.for_connection(&engagement.connection);
    for entry in scope.entries.iter().filter(|e| e.group.is_empty()) {
        let sides = Sides::new(entry, consumer, engagement);
        let placing = Placing::new(engagement, policies, entry.resource);
        let Some((_, namespace)) = side_namespaces(scope, entry, &placing).await else {
            continue;
        };
        let targets = select::list(
            &sides.target,
            entry,
            scope,
            namespace.as_deref(),
            Side::Target,
        )
        .await?;
        for target in targets.values() {
            if marker(target) == Some(scope.binding_uid) {
                write::delete_target(&sides.target, entry, target).await?;
            }
        }
    }
    Ok(())
}

/// The clients an entry reads from and writes to.
struct Sides {
    /// Where copies come from.
    source: Client,
    /// Where copies go.
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

/// Listed objects' metadata by (namespace, name).
type Objects = BTreeMap<(String, String), ObjectMeta>;

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

/// The binding UID a copy is marked with, if any.
fn marker(meta: &ObjectMeta) -> Option<&str> {
    annotation(meta, RELATED_BINDING_ANNOTATION)
}

/// One annotation of an object's metadata.
fn annotation<'m>(meta: &'m ObjectMeta, key: &str) -> Option<&'m str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// Counts one object left alone in `related_skipped`, with why.
fn count_skipped(entry: &RelatedResource, reason: &'static str) {
    metrics()
        .related_skipped
        .get_or_create(&RelatedLabels {
            resource: resource_label(entry.resource),
            direction: direction_label(entry.direction),
            reason,
        })
        .inc();
}

#[cfg(test)]
mod fixtures {
    use crate::api::{RelatedDirection, RelatedResource, RelatedResourceKind, RelatedSelector};

    /// A FromProvider entry for `resource` with an empty selector.
    pub(super) fn entry(resource: RelatedResourceKind) -> RelatedResource {
        RelatedResource {
            group: String::new(),
            resource,
            direction: RelatedDirection::FromProvider,
            selector: RelatedSelector::default(),
        }
    }
}
