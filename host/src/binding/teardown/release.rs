//! Releasing the APIs a provider stopped exporting: an un-export is not a deletion.
//!
//! ```text
//! listed API no longer exported, consumer CRD kbind's for this Connection (readiness)
//!   ─▶ no target in the index: its syncer stops; the API stays listed and pinned here
//!   ─▶ once the syncer has stopped: release core.kbind.io/syncer from the instances in scope
//!      (nothing is deleted: consumer CRD, instances and provider copies with their markers stay)
//!   ─▶ Released=True (APIReleased) naming the APIs, boundAPIs[].released, one Warning Event per
//!      newly released API
//! exported again ─▶ target resolved, the syncer starts and finds its copies by their markers
//! ```
//!
//! An instance deleted while its API is released has no finalizer left, so it goes at once and
//! its provider copy stays, as with `deletion-policy: Orphan`. What deletes is a consumer's own
//! action: removing the API from `apis` (a drain) or deleting the binding (its teardown).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, ResourceExt};
use tracing::info;

use crate::api::{BindingStatus, ConditionType, Reason};
use crate::conditions::Desired;
use crate::schema::ApiTarget;

use super::drain;
use crate::binding::object::BindingObject;
use crate::binding::{Context, Result};

/// What releasing did in one reconcile.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Release {
    /// Released APIs whose syncer has not stopped yet: their finalizers are released on a
    /// later reconcile (soon).
    pub pending: Vec<String>,
    /// The `Released` condition to store, if any.
    pub condition: Option<Desired>,
}

/// The `Released` condition for the `released` APIs of a binding whose stored status is `old`:
/// True naming them, False once none is left (only after one was, so a binding that never had
/// a released API carries no such condition).
pub(crate) fn condition(released: &[String], old: Option<&BindingStatus>) -> Option<Desired> {
    if !released.is_empty() {
        return Some(Desired::truthy(
            ConditionType::Released,
            Reason::APIReleased,
            format!(
                "no longer exported by the provider: {}; their sync stopped and nothing was deleted (consumer CRD, instances, provider copies). Sync resumes when the provider exports them again; to remove them for good, drop them from spec.apis or delete the binding",
                released.join(", ")
            ),
        ));
    }
    let was = old
        .iter()
        .flat_map(|s| s.conditions.iter())
        .any(|c| c.type_ == ConditionType::Released.as_str());
    was.then(|| {
        Desired::falsy(
            ConditionType::Released,
            Reason::AsExpected,
            "every listed API is exported",
        )
    })
}

/// The APIs of `released` that the stored status did not show released yet: the ones a
/// Warning Event announces.
pub(crate) fn newly_released<'a>(
    released: &'a [String],
    old: Option<&BindingStatus>,
) -> Vec<&'a str> {
    released
        .iter()
        .filter(|api| {
            !old.iter()
                .flat_map(|s| s.bound_apis.iter())
                .any(|b| b.name == **api && b.released)
        })
        .map(String::as_str)
        .collect()
}

/// Releases the `released` APIs of `obj`: once an API's syncer has stopped, the syncer
/// finalizer of every instance in the binding's scope is removed; nothing is deleted. Call
/// after the binding's index entry dropped their targets.
pub(crate) async fn run<K: BindingObject>(
    obj: &K,
    ctx: &Context,
    released: &[String],
) -> Result<Release> {
    let connection = obj.binding_spec().connection_ref.name.as_str();
    let namespace = obj.namespace();
    let mut pending = Vec::new();
    for api in released {
        if crate::binding::syncer_may_write(ctx, connection, api).await {
            // The syncer could still put a finalizer back: release once it is done.
            pending.push(api.clone());
            continue;
        }
        release_finalizers(ctx, api, namespace.as_deref()).await?;
    }
    let old = obj.binding_status();
    let fresh = newly_released(released, old);
    if !fresh.is_empty() {
        let note = format!(
            "the provider stopped exporting {} (Connection {connection}): sync stopped, nothing deleted; it resumes when they are exported again",
            fresh.join(", ")
        );
        ctx.warn(
            &obj.object_ref(&()),
            Reason::APIReleased.as_str(),
            note,
            ConditionType::Released.action(),
        )
        .await;
    }
    Ok(Release {
        pending,
        condition: condition(released, old),
    })
}

/// Removes `core.kbind.io/syncer` from the instances of `api` in `namespace` (every namespace
/// for `None`), as a drain without a provider client does: nothing is deleted.
async fn release_finalizers(ctx: &Context, api: &str, namespace: Option<&str>) -> Result<()> {
    let crds = Api::<CustomResourceDefinition>::all(ctx.shared.consumer.clone());
    let crd = drain::read_crd(&crds, api).await?;
    let Some(target) = crd.as_ref().and_then(|crd| ApiTarget::from_crd(crd, &[])) else {
        return Ok(());
    };
    if namespace.is_some() && !target.namespaced {
        // A Binding's scope holds no cluster-scoped instance.
        return Ok(());
    }
    info!(
        api,
        namespace, "API released: syncer finalizers removed, provider copies kept"
    );
    drain::release_finalizers(ctx, &target, namespace).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::BoundApi;
    use crate::conditions;

    fn status(released: &[&str]) -> BindingStatus {
        let mut s = BindingStatus {
            bound_apis: ["a.x", "b.x"]
                .iter()
                .map(|n| BoundApi {
                    name: (*n).into(),
                    released: released.contains(n),
                    ..BoundApi::default()
                })
                .collect(),
            ..BindingStatus::default()
        };
        if let Some(c) = condition(
            &released.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
            None,
        ) {
            conditions::set(&mut s.conditions, c, None);
        }
        s
    }

    #[test]
    fn released_apis_are_named_in_a_true_condition_with_the_way_out() {
        let c = condition(&["a.x".into(), "b.x".into()], None);
        let c = c.as_ref();
        assert_eq!(
            c.map(|c| (c.status, c.reason)),
            Some((true, Reason::APIReleased))
        );
        let message = c.map(|c| c.message.as_str()).unwrap_or_default();
        for part in ["a.x, b.x", "nothing was deleted", "spec.apis"] {
            assert!(message.contains(part), "{message:?} lacks {part:?}");
        }
    }

    #[test]
    fn no_released_api_means_no_condition_unless_one_was_released_before() {
        assert_eq!(condition(&[], None), None);
        assert_eq!(condition(&[], Some(&status(&[]))), None);
        let resumed = condition(&[], Some(&status(&["a.x"])));
        assert_eq!(
            resumed.map(|c| (c.status, c.reason)),
            Some((false, Reason::AsExpected))
        );
    }

    #[test]
    fn only_apis_not_stored_as_released_are_announced() {
        let released = vec!["a.x".to_string(), "b.x".to_string()];
        assert_eq!(newly_released(&released, None), ["a.x", "b.x"]);
        assert_eq!(newly_released(&released, Some(&status(&["a.x"]))), ["b.x"]);
        assert!(newly_released(&released, Some(&status(&["a.x", "b.x"]))).is_empty());
    }
}
