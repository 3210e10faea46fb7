//! Binding teardown under `core.kbind.io/cleanup` (spec, "Delete a binding"), and the same
//! drain for an API a binding stops listing:
//!
//! ```text
//! deleted binding ─▶ leave the index (syncers stop selecting its instances)
//!   for each listed API no other non-deleting binding lists:
//!     consumer CRD not kbind's for this Connection (no or another core.kbind.io/connection,
//!     or a protected group): release core.kbind.io/syncer only; CRD, objects and provider
//!     copies stay, and a Warning Event says so
//!     otherwise drain instances in scope: delete owned provider copies (both UIDs; Orphan
//!                               keeps them), release core.kbind.io/syncer
//!     ClusterBinding: delete the consumer CRD (which deletes its consumer instances), only
//!                     while it is still annotated for this Connection
//!   delete this binding's related copies for the declared entries
//!
//! API dropped from apis (edited, or autoBind after an un-export), seen as a name in
//! status.boundAPIs that spec.apis no longer lists:
//!   no other non-deleting binding lists it ─▶ wait until its syncer has stopped
//!     ─▶ drain instances in scope as above (the CRD stays) ─▶ status.boundAPIs drops it
//! ```
//!
//! Both drain through [`super::drain_provider`]: the engaged client, or one built from the
//! Connection's credentials (a deleting Connection after a restart). Never because a
//! Connection went not Ready: readiness changes neither `apis` nor the binding's existence.
//!
//! Limits, as the spec documents them: an API listed by any other non-deleting binding is
//! skipped as a whole; without any provider client (or when a provider read fails) the drain
//! is best-effort and provider copies may remain, which the binding reports (`Drained=False`,
//! a Warning Event); provider delete errors block (retry); deletion is requested, not waited
//! for.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, DynamicObject, ListParams, Preconditions};
use kube::{Api, Client, ResourceExt};
use tracing::{info, warn};

use crate::api::names::{DELETION_POLICY_ANNOTATION, DELETION_POLICY_ORPHAN, SYNCER_FINALIZER};
use crate::api::{Binding, ClusterBinding, ConditionType, Reason};
use crate::conditions::Desired;
use crate::k8s::{ApiErrorExt, dynamic_api, remove_finalizer};
use crate::registry::Engagement;
use crate::schema::ApiTarget;
use crate::schema::Refusal;
use crate::schema::ownership;
use crate::sync::conflict::owned_by;

use super::controller::{BindingObject, write_condition};
use super::drain_provider;
use super::related::{self, RelatedScope};
use super::{Context, Error, Result};

/// Runs the whole teardown of a deleted binding.
pub async fn run<K: BindingObject>(obj: &K, ctx: &Context) -> Result<()> {
    let spec = obj.binding_spec();
    let uid = obj.meta().uid.clone().unwrap_or_default();
    let namespace = obj.namespace();
    let binding = obj.object_ref(&());
    let provider = drain_provider::resolve(ctx, &spec.connection_ref.name).await?;
    let engagement = provider.as_ref().ok();
    let scope = DrainScope {
        connection: &spec.connection_ref.name,
        binding: &binding,
        namespace: namespace.as_deref(),
    };
    let others = apis_listed_elsewhere(&ctx.shared.consumer, &uid).await?;
    let mut unchecked = Vec::new();
    for listed in &spec.apis {
        if others.contains(&listed.name) {
            // Spec: "If any other non-deleting binding anywhere lists the same API, cleanup
            // skips that API as a whole."
            info!(api = %listed.name, "another binding lists this API; skipping its cleanup");
            continue;
        }
        if drain_api(ctx, engagement, &listed.name, &scope, true).await? > 0 {
            unchecked.push(listed.name.clone());
        }
    }
    // An API dropped from `apis` whose drain was still pending: drained too; its CRD stays.
    for api in dropped_apis(obj)
        .into_iter()
        .filter(|a| !others.contains(*a))
    {
        if drain_api(ctx, engagement, api, &scope, false).await? > 0 {
            unchecked.push(api.to_string());
        }
    }
    match engagement {
        Some(engagement) => {
            let scope = RelatedScope {
                binding_uid: &uid,
                namespace: namespace.as_deref(),
                entries: &spec.related_resources,
                guard: &ctx.related_guard,
            };
            related::delete_copies(&scope, &ctx.shared.consumer, engagement).await?;
        }
        None if !spec.related_resources.is_empty() => unchecked.push("related copies".into()),
        None => {}
    }
    if let (Err(why), false) = (&provider, unchecked.is_empty()) {
        let condition = drain_provider::report_unavailable(obj, ctx, &unchecked, why).await;
        write_condition(obj, ctx, condition).await;
    }
    Ok(())
}

/// What draining the APIs a binding stopped listing did.
#[derive(Debug, Default)]
pub struct Dropped {
    /// Dropped APIs whose syncer has not stopped yet: drained on a later reconcile, and kept
    /// in `status.boundAPIs` until then.
    pub pending: Vec<String>,
    /// The `Drained` condition to store, when a drain ran.
    pub condition: Option<Desired>,
}

/// Drains, in the binding's scope, the instances of every API its stored `boundAPIs` has but
/// its spec no longer lists, unless another non-deleting binding lists it. Call after the
/// binding's index entry no longer lists those APIs. The consumer CRD stays.
pub async fn drain_dropped<K: BindingObject>(obj: &K, ctx: &Context) -> Result<Dropped> {
    let spec = obj.binding_spec();
    let dropped = dropped_apis(obj);
    if dropped.is_empty() {
        return Ok(Dropped::default());
    }
    let uid = obj.meta().uid.clone().unwrap_or_default();
    let others = apis_listed_elsewhere(&ctx.shared.consumer, &uid).await?;
    let connection = spec.connection_ref.name.as_str();
    let (pending, ready): (Vec<&str>, Vec<&str>) = dropped
        .into_iter()
        .filter(|api| !others.contains(*api))
        // The syncer could still put a finalizer back or write a copy: drain once it is done.
        .partition(|api| ctx.shared.syncers.contains(connection, api));
    let mut out = Dropped {
        pending: pending.iter().map(|a| a.to_string()).collect(),
        condition: None,
    };
    if ready.is_empty() {
        return Ok(out);
    }
    let provider = drain_provider::resolve(ctx, connection).await?;
    let namespace = obj.namespace();
    let binding = obj.object_ref(&());
    let scope = DrainScope {
        connection,
        binding: &binding,
        namespace: namespace.as_deref(),
    };
    let mut unchecked = Vec::new();
    for api in &ready {
        info!(
            api,
            "API no longer listed by the binding; draining its instances"
        );
        if drain_api(ctx, provider.as_ref().ok(), api, &scope, false).await? > 0 {
            unchecked.push(api.to_string());
        }
    }
    let ready: Vec<String> = ready.iter().map(|a| a.to_string()).collect();
    out.condition = match &provider {
        Ok(_) => Some(drain_provider::drained(&ready)),
        Err(why) if !unchecked.is_empty() => {
            Some(drain_provider::report_unavailable(obj, ctx, &unchecked, why).await)
        }
        // Nothing was left to drain: whatever an earlier drain reported still stands.
        Err(_) => None,
    };
    Ok(out)
}

/// The APIs the stored `status.boundAPIs` has and the spec no longer lists.
fn dropped_apis<K: BindingObject>(obj: &K) -> Vec<&str> {
    let listed: BTreeSet<&str> = obj
        .binding_spec()
        .apis
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    obj.binding_status()
        .iter()
        .flat_map(|s| s.bound_apis.iter())
        .map(|b| b.name.as_str())
        .filter(|name| !listed.contains(name))
        .collect()
}

/// Names of the APIs listed by every binding other than `uid` that is not being deleted,
/// whichever konnector handles it ("anywhere").
async fn apis_listed_elsewhere(consumer: &Client, uid: &str) -> Result<BTreeSet<String>> {
    let lp = ListParams::default();
    let bindings = Api::<Binding>::all(consumer.clone())
        .list(&lp)
        .await
        .map_err(Error::ListBindings)?;
    let cluster_bindings = Api::<ClusterBinding>::all(consumer.clone())
        .list(&lp)
        .await
        .map_err(Error::ListBindings)?;
    let live =
        |m: &kube::api::ObjectMeta| m.uid.as_deref() != Some(uid) && m.deletion_timestamp.is_none();
    let mut out = BTreeSet::new();
    for b in bindings.items.iter().filter(|b| live(&b.metadata)) {
        out.extend(b.spec.apis.iter().map(|a| a.name.clone()));
    }
    for b in cluster_bindings.items.iter().filter(|b| live(&b.metadata)) {
        out.extend(b.spec.apis.iter().map(|a| a.name.clone()));
    }
    Ok(out)
}

/// Which binding is being torn down, for which Connection, over which namespace (`None`: a
/// ClusterBinding, every namespace).
struct DrainScope<'a> {
    connection: &'a str,
    binding: &'a ObjectReference,
    namespace: Option<&'a str>,
}

/// Drains one API in scope; for a ClusterBinding (`namespace` `None`) with `remove_crd` then
/// deletes the CRD when it is kbind's for this Connection. Returns how many instances were
/// released without a provider check.
async fn drain_api(
    ctx: &Context,
    engagement: Option<&Engagement>,
    api_name: &str,
    scope: &DrainScope<'_>,
    remove_crd: bool,
) -> Result<usize> {
    let namespace = scope.namespace;
    let crds = Api::<CustomResourceDefinition>::all(ctx.shared.consumer.clone());
    let Some(crd) = read_crd(&crds, api_name).await? else {
        return Ok(0);
    };
    let Some(target) = ApiTarget::from_crd(&crd, &[]) else {
        return Ok(0);
    };
    if namespace.is_some() && !target.namespaced {
        // A Binding covers instances in its namespace only; cluster-scoped ones are not in
        // its scope.
        return Ok(0);
    }
    if let Err(refusal) = ownership::check(api_name, Some(&crd), scope.connection) {
        release_only(ctx, &target, scope, &refusal).await?;
        return Ok(0);
    }
    let unchecked = drain_instances(ctx, engagement, &target, namespace).await?;
    if namespace.is_none() && remove_crd {
        // Spec: "Drain instances across the API, then delete the consumer CRD, which deletes
        // its consumer instances." Only a CRD kbind installed for this Connection, checked
        // again on a fresh read and deleted under that read's uid and resourceVersion, so a
        // CRD that changed hands meanwhile is never deleted.
        let Some(crd) = read_crd(&crds, api_name).await? else {
            return Ok(unchecked);
        };
        if let Err(refusal) = ownership::check(api_name, Some(&crd), scope.connection) {
            release_only(ctx, &target, scope, &refusal).await?;
            return Ok(unchecked);
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: crd.metadata.uid.clone(),
                resource_version: crd.metadata.resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        match crds.delete(api_name, &params).await {
            Ok(_) => info!(
                api = api_name,
                "last ClusterBinding gone: consumer CRD deleted"
            ),
            Err(e) if e.is_not_found() => {}
            Err(source) => {
                return Err(Error::DeleteCrd {
                    name: api_name.to_string(),
                    source,
                });
            }
        }
        // A syncer that had not stopped yet may have put a finalizer back; release again so
        // the CRD's own instance deletion is not held open.
        drain_instances(ctx, None, &target, namespace).await?;
    }
    Ok(unchecked)
}

async fn read_crd(
    crds: &Api<CustomResourceDefinition>,
    name: &str,
) -> Result<Option<CustomResourceDefinition>> {
    crds.get_opt(name).await.map_err(|source| Error::ReadCrd {
        name: name.to_string(),
        source,
    })
}

/// Teardown of an API whose consumer CRD is not kbind's for this Connection: only kbind's own
/// syncer finalizers are released; the CRD, its objects and any provider copies stay. An
/// instance list the consumer refuses (RBAC) leaves nothing to release.
async fn release_only(
    ctx: &Context,
    target: &ApiTarget,
    scope: &DrainScope<'_>,
    refusal: &Refusal,
) -> Result<()> {
    let note = format!(
        "teardown left {}.{} alone (CRD, objects and provider copies), releasing only kbind's finalizers: {refusal}",
        target.plural, target.group
    );
    warn!(api = %target.plural, group = %target.group, %refusal, "consumer CRD not kbind's: finalizers released only");
    // Under the teardown's action: a Ready=False CRDNotManaged Warning (action Reconcile) on
    // the same binding must not swallow this note into its series.
    ctx.warn(
        scope.binding,
        Reason::CRDNotManaged.as_str(),
        note,
        ConditionType::TeardownFailed.action(),
    )
    .await;
    match drain_instances(ctx, None, target, scope.namespace).await {
        Err(Error::ListInstances { source, .. }) if source.is_forbidden() => {
            warn!(api = %target.plural, error = %source, "instances not listable: no finalizer released");
            Ok(())
        }
        other => other.map(|_| ()),
    }
}

/// Deletes owned provider copies (unless the instance says Orphan) and releases the syncer
/// finalizers of every instance in scope. `engagement` `None`: finalizers only. Returns how
/// many instances that wanted their copy deleted were released without a provider client.
async fn drain_instances(
    ctx: &Context,
    engagement: Option<&Engagement>,
    target: &ApiTarget,
    namespace: Option<&str>,
) -> Result<usize> {
    let ar = target.api_resource();
    let consumer: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(ctx.shared.consumer.clone(), ns, &ar),
        None => Api::all_with(ctx.shared.consumer.clone(), &ar),
    };
    let instances = match consumer.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(e) if e.is_not_found() => return Ok(0),
        Err(source) => {
            return Err(Error::ListInstances {
                api: target.plural.clone(),
                source,
            });
        }
    };
    let mut unchecked = 0;
    for instance in &instances {
        if !instance.finalizers().iter().any(|f| f == SYNCER_FINALIZER) {
            continue;
        }
        let orphan = instance
            .annotations()
            .get(DELETION_POLICY_ANNOTATION)
            .is_some_and(|v| v == DELETION_POLICY_ORPHAN);
        match (engagement, orphan) {
            (Some(engagement), false) => delete_provider_copy(engagement, target, instance).await?,
            (None, false) => unchecked += 1,
            (_, true) => {}
        }
        release_finalizer(&ctx.shared.consumer, target, instance).await?;
    }
    Ok(unchecked)
}

/// Deletes the provider copy when both ownership UIDs are this instance's. A failed read is
/// best-effort (logged); a failed delete blocks.
async fn delete_provider_copy(
    engagement: &Engagement,
    target: &ApiTarget,
    instance: &DynamicObject,
) -> Result<()> {
    let ar = target.api_resource();
    let ns = instance.metadata.namespace.as_deref();
    let provider: Api<DynamicObject> = match ns {
        Some(ns) if target.namespaced => Api::namespaced_with(engagement.provider.clone(), ns, &ar),
        _ => Api::all_with(engagement.provider.clone(), &ar),
    };
    let name = instance.name_any();
    let copy = match provider.get_opt(&name).await {
        Ok(Some(copy)) => copy,
        Ok(None) => return Ok(()),
        Err(e) => {
            warn!(namespace = ns, name, error = %e, "reading the provider copy failed; it may remain");
            return Ok(());
        }
    };
    let uid = instance.metadata.uid.as_deref().unwrap_or_default();
    if !owned_by(&copy, &engagement.consumer_uid, uid) || copy.metadata.deletion_timestamp.is_some()
    {
        return Ok(());
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: copy.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match provider.delete(&name, &params).await {
        // Spec: "binding cleanup does not wait for every provider object's finalizers".
        Ok(_) => {
            info!(namespace = ns, name, "provider copy deletion requested");
            Ok(())
        }
        Err(e) if e.is_not_found() || e.is_conflict() => Ok(()),
        Err(source) => Err(Error::DeleteProviderCopy { name, source }),
    }
}

/// Releases the syncer finalizer of one instance (only ours: see
/// [`crate::k8s::remove_finalizer`]).
async fn release_finalizer(
    consumer: &Client,
    target: &ApiTarget,
    instance: &DynamicObject,
) -> Result<()> {
    let api = dynamic_api(
        consumer,
        &target.api_resource(),
        target.namespaced,
        instance.metadata.namespace.as_deref(),
    );
    // A failed `test` (the list changed under us) is an error; the next attempt reads again.
    remove_finalizer(&api, instance, SYNCER_FINALIZER)
        .await
        .map_err(|source| Error::ReleaseFinalizer {
            name: instance.name_any(),
            source,
        })
}
