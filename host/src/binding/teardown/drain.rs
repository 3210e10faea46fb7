//! Draining one API's instances in a binding's scope, for a deleted binding and for an API a
//! binding stopped listing alike:
//!
//! ```text
//! consumer CRD not kbind's for this Connection (no or another core.kbind.io/connection, or a
//! protected group) ─▶ release core.kbind.io/syncer only, Warning Event; everything else stays
//! otherwise, per instance in scope with core.kbind.io/syncer:
//!   owned provider copy (both UIDs), not deletion-policy=Orphan ─▶ delete it (uid precondition)
//!   ─▶ release core.kbind.io/syncer
//! ClusterBinding teardown: then delete the consumer CRD, only while a fresh read still shows it
//!   annotated for this Connection
//! ```
//!
//! Without a provider client, finalizers are released and the instances that wanted their
//! copy deleted are counted, so the binding can say provider copies may remain.

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, DynamicObject, ListParams, Preconditions};
use kube::{Api, Client, ResourceExt};
use tracing::{info, warn};

use crate::api::names::{SYNCER_FINALIZER, own_copies_selector};
use crate::api::{ConditionType, IsolationStrategy, Reason};
use crate::k8s::{ApiErrorExt, dynamic_api, remove_finalizer};
use crate::markers::{CopyDeletion, InstanceKey, copy_deletion, key_of, origin_of, orphaned};
use crate::registry::Engagement;
use crate::schema::{ApiTarget, Refusal, managed};

use super::coverage::Covered;
use crate::binding::{Context, Error, Result};

/// Which binding is being torn down, for which Connection, over which namespace (`None`: a
/// ClusterBinding, every namespace).
pub(super) struct DrainScope<'a> {
    /// The Connection the binding names.
    pub(super) connection: &'a str,
    /// The binding, for Events.
    pub(super) binding: &'a ObjectReference,
    /// The Binding's namespace; `None` for a ClusterBinding.
    pub(super) namespace: Option<&'a str>,
}

/// Drains one API in scope, leaving alone what `others` still cover; for a ClusterBinding
/// (`namespace` `None`) with `remove_crd` then deletes the CRD when it is kbind's for this
/// Connection, only after every instance was checked. Returns how many instances were
/// released without a provider check.
pub(super) async fn drain_api(
    ctx: &Context,
    engagement: Option<&Engagement>,
    api_name: &str,
    scope: &DrainScope<'_>,
    others: &Covered,
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
    if let Err(refusal) = managed::check(api_name, Some(&crd), scope.connection) {
        release_only(ctx, &target, scope, &refusal).await?;
        return Ok(0);
    }
    let unchecked =
        drain_instances(ctx, engagement, &target, namespace, &others.namespaces).await?;
    if namespace.is_none() && remove_crd {
        // Spec: "Drain instances across the API, then delete the consumer CRD, which deletes
        // its consumer instances." Only a CRD kbind installed for this Connection, checked
        // again on a fresh read and deleted under that read's uid and resourceVersion, so a
        // CRD that changed hands meanwhile is never deleted.
        let Some(crd) = read_crd(&crds, api_name).await? else {
            return Ok(unchecked);
        };
        if let Err(refusal) = managed::check(api_name, Some(&crd), scope.connection) {
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
        release_finalizers(ctx, &target, namespace).await?;
    }
    Ok(unchecked)
}

pub(super) async fn read_crd(
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
    match release_finalizers(ctx, target, scope.namespace).await {
        Err(Error::ListInstances { source, .. }) if source.is_forbidden() => {
            warn!(api = %target.plural, error = %source, "instances not listable: no finalizer released");
            Ok(())
        }
        other => other,
    }
}

/// Releases `core.kbind.io/syncer` from every instance of `target` in `namespace` (every
/// namespace for `None`) and deletes nothing: the part of a drain that needs no provider.
pub(super) async fn release_finalizers(
    ctx: &Context,
    target: &ApiTarget,
    namespace: Option<&str>,
) -> Result<()> {
    drain_instances(ctx, None, target, namespace, &BTreeSet::new())
        .await
        .map(drop)
}

/// Deletes owned provider copies (unless the instance says Orphan) and releases the syncer
/// finalizers of every instance in scope outside the `covered` namespaces. `engagement` `None`: finalizers only. Returns how
/// many instances that wanted their copy deleted were released without a provider client.
async fn drain_instances(
    ctx: &Context,
    engagement: Option<&Engagement>,
    target: &ApiTarget,
    namespace: Option<&str>,
    covered: &BTreeSet<String>,
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
    let copies = match engagement {
        Some(engagement) => Copies::of(engagement, target).await?,
        None => Copies::Beside,
    };
    let mut unchecked = 0;
    let mut failed = 0;
    let mut first = None;
    for instance in &instances {
        let held = instance.finalizers().iter().any(|f| f == SYNCER_FINALIZER);
        // An instance of a released API (`super::release`) has no finalizer left but may
        // still have its owned copy: the consumer's drain deletes that too.
        if !held && engagement.is_none() {
            continue;
        }
        if instance
            .metadata
            .namespace
            .as_ref()
            .is_some_and(|ns| covered.contains(ns))
        {
            // Another binding still syncs this namespace: its instances and copies stay.
            continue;
        }
        let checked = match (engagement, orphaned(instance)) {
            (Some(engagement), false) => {
                delete_provider_copy(engagement, target, instance, &copies).await
            }
            (None, false) => {
                unchecked += 1;
                Ok(())
            }
            (_, true) => Ok(()),
        };
        // The finalizer goes only once the copy is checked; one instance's failure does not
        // stop the others.
        let released = match checked {
            Ok(()) if held => release_finalizer(&ctx.shared.consumer, target, instance).await,
            other => other,
        };
        if let Err(e) = released {
            warn!(api = %target.plural, namespace = instance.metadata.namespace.as_deref(), name = %instance.name_any(), error = %e, "instance not drained; its finalizer stays and the drain is retried");
            failed += 1;
            first.get_or_insert(e);
        }
    }
    match first {
        None => Ok(unchecked),
        Some(first) => Err(Error::DrainIncomplete {
            api: target.plural.clone(),
            failed,
            first: Box::new(first),
        }),
    }
}

/// Where the provider copies of one API's instances are.
enum Copies {
    /// Each where its instance is (no isolation): read one by one, live.
    Beside,
    /// Placed by an isolation strategy: this consumer's copies, listed once, by the instance
    /// each records.
    Placed(HashMap<InstanceKey, DynamicObject>),
}

impl Copies {
    /// The copies of `target` the engagement's isolation put on the provider.
    async fn of(engagement: &Engagement, target: &ApiTarget) -> Result<Self> {
        let strategy = engagement.isolation.strategy;
        if strategy == IsolationStrategy::None {
            return Ok(Self::Beside);
        }
        let ar = target.api_resource();
        let own = ListParams::default().labels(&own_copies_selector(&engagement.consumer_uid));
        let listed = Api::<DynamicObject>::all_with(engagement.provider.clone(), &ar)
            .list(&own)
            .await
            .map_err(|source| Error::ReadProviderCopy {
                name: format!("{} (list of this consumer's copies)", target.plural),
                source,
            })?;
        Ok(Self::Placed(
            listed
                .items
                .into_iter()
                .map(|copy| (origin_of(&copy, strategy), copy))
                .collect(),
        ))
    }
}

/// Deletes the provider copy when both ownership UIDs are this instance's. Only an absent copy
/// or one that is provably not ours counts as checked: a failed read or delete is an error,
/// so the instance keeps its finalizer and the drain is retried.
async fn delete_provider_copy(
    engagement: &Engagement,
    target: &ApiTarget,
    instance: &DynamicObject,
    copies: &Copies,
) -> Result<()> {
    let ar = target.api_resource();
    let at = |ns: Option<&str>| -> Api<DynamicObject> {
        match ns {
            Some(ns) if target.namespaced => {
                Api::namespaced_with(engagement.provider.clone(), ns, &ar)
            }
            _ => Api::all_with(engagement.provider.clone(), &ar),
        }
    };
    let copy = match copies {
        Copies::Beside => {
            let name = instance.name_any();
            match at(instance.metadata.namespace.as_deref())
                .get_opt(&name)
                .await
            {
                Ok(Some(copy)) => copy,
                Ok(None) => return Ok(()),
                Err(source) => return Err(Error::ReadProviderCopy { name, source }),
            }
        }
        Copies::Placed(copies) => match copies.get(&key_of(instance)) {
            Some(copy) => copy.clone(),
            None => return Ok(()),
        },
    };
    let ns = copy.metadata.namespace.as_deref();
    let name = copy.name_any();
    let uid = instance.metadata.uid.as_deref().unwrap_or_default();
    let CopyDeletion::Delete(params) = copy_deletion(Some(&copy), &engagement.consumer_uid, uid)
    else {
        return Ok(());
    };
    match at(ns).delete(&name, &params).await {
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
