//! Draining one API's instances in a binding's scope, for a deleted binding and for an API a
//! binding stopped listing alike:
//!
//! ```text
//! consumer CRD not kbind's for this Connection (no or another core.kbind.io/connection, or a
//! protected group) ─▶ release core.kbind.io/syncer only, Warning Event; everything else stays,
//!   and the instances the API's own Connection still syncs (its pin: the CRD's annotation,
//!   else the binding index's) keep their finalizers: they are that syncer's, not ours
//! otherwise, per instance in scope with core.kbind.io/syncer:
//!   owned provider copy (both UIDs), not deletion-policy=Orphan ─▶ delete it (uid precondition)
//!   ─▶ release core.kbind.io/syncer
//!   (a copy read as 404 counts as absent only while the provider serves the resource; placed
//!    copies are found by the consumer object they record)
//! ClusterBinding teardown: then delete the consumer CRD, only while a fresh read still shows it
//!   annotated for this Connection
//! ```
//!
//! Without a provider client, finalizers are released and the instances that wanted their
//! copy deleted are counted, so the binding can say provider copies may remain. What each
//! drain did is a [`Tally`] the `Drained` condition words ([`super::outcome`]).

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, DynamicObject, ListParams, Preconditions};
use kube::{Api, Client, ResourceExt};
use tracing::{info, warn};

use crate::api::names::{SYNCER_FINALIZER, own_copies_selector};
use crate::api::{ConditionType, IsolationStrategy, Reason};
use crate::k8s::{ApiErrorExt, dynamic_api, remove_finalizer};
use crate::markers::{CopyDeletion, InstanceKey, copy_deletion, key_of, orphaned, recorded_origin};
use crate::registry::Engagement;
use crate::schema::{ApiTarget, Refusal, managed};

use super::coverage::Covered;
use super::outcome::Tally;
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
/// Connection, only after every instance was checked. Returns what the drain did.
pub(super) async fn drain_api(
    ctx: &Context,
    engagement: Option<&Engagement>,
    api_name: &str,
    scope: &DrainScope<'_>,
    others: &Covered,
    remove_crd: bool,
) -> Result<Tally> {
    let namespace = scope.namespace;
    let crds = Api::<CustomResourceDefinition>::all(ctx.shared.consumer.clone());
    let Some(crd) = read_crd(&crds, api_name).await? else {
        return Ok(Tally::default());
    };
    let Some(target) = ApiTarget::from_crd(&crd, &[]) else {
        return Ok(Tally::default());
    };
    if namespace.is_some() && !target.namespaced {
        // A Binding covers instances in its namespace only; cluster-scoped ones are not in
        // its scope.
        return Ok(Tally::default());
    }
    if let Err(refusal) = managed::check(api_name, Some(&crd), scope.connection) {
        return release_only(ctx, api_name, &target, scope, &refusal, others).await;
    }
    let mode = match engagement {
        Some(engagement) => Mode::Drain(engagement),
        None => Mode::Unchecked,
    };
    let tally = drain_instances(ctx, mode, &target, namespace, &others.namespaces).await?;
    if namespace.is_none() && remove_crd {
        // Spec: "Drain instances across the API, then delete the consumer CRD, which deletes
        // its consumer instances." Only a CRD kbind installed for this Connection, checked
        // again on a fresh read and deleted under that read's uid and resourceVersion, so a
        // CRD that changed hands meanwhile is never deleted.
        let Some(crd) = read_crd(&crds, api_name).await? else {
            return Ok(tally);
        };
        if let Err(refusal) = managed::check(api_name, Some(&crd), scope.connection) {
            let mut tally = tally;
            tally.add(release_only(ctx, api_name, &target, scope, &refusal, others).await?);
            return Ok(tally);
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
    Ok(tally)
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
/// syncer finalizers are released; the CRD, its objects and any provider copies stay. The
/// instances the API's own Connection syncs (the pin rule: the CRD's annotation, else the
/// binding index's pin for an unannotated CRD) keep theirs: that Connection's syncer owns
/// them, and releasing them would let a consumer delete go through without its copy. An
/// instance list the consumer refuses (RBAC) leaves nothing to release.
async fn release_only(
    ctx: &Context,
    api_name: &str,
    target: &ApiTarget,
    scope: &DrainScope<'_>,
    refusal: &Refusal,
    others: &Covered,
) -> Result<Tally> {
    let owner = match refusal {
        Refusal::BoundElsewhere { other, .. } => Some(other.clone()),
        Refusal::NotManaged { .. } => ctx
            .shared
            .index
            .read(|i| i.pinned_connection(api_name, None).map(str::to_string)),
        // The Connection it is pinned to is gone: nobody syncs it.
        Refusal::ProtectedGroup { .. } | Refusal::PinnedConnectionGone { .. } => None,
    }
    .filter(|owner| owner != scope.connection);
    let mut kept = others.namespaces.clone();
    if let Some(owner) = &owner {
        // No binding of ours is being torn down there: every binding of the owner counts.
        let view = super::gather::consumer(&ctx.shared.consumer, &BTreeSet::new()).await?;
        let theirs = view.covered(owner, &BTreeSet::new());
        let theirs = theirs.of(api_name);
        if theirs.covers_scope(scope.namespace) {
            info!(api = api_name, %owner, "the API's own Connection syncs this scope: no finalizer released");
            return Ok(Tally {
                owner: Some(owner.clone()),
                ..Tally::default()
            });
        }
        kept.extend(theirs.namespaces.iter().cloned());
    }
    let note = format!(
        "teardown left {}.{} alone (CRD, objects and provider copies), releasing only kbind's finalizers of instances no other Connection syncs: {refusal}",
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
    match drain_instances(ctx, Mode::ReleaseOnly, target, scope.namespace, &kept).await {
        Ok(mut tally) => {
            tally.owner = owner;
            Ok(tally)
        }
        Err(Error::ListInstances { source, .. }) if source.is_forbidden() => {
            warn!(api = %target.plural, error = %source, "instances not listable: no finalizer released");
            Ok(Tally::default())
        }
        Err(other) => Err(other),
    }
}

/// Releases `core.kbind.io/syncer` from every instance of `target` in `namespace` (every
/// namespace for `None`) and deletes nothing: the part of a drain that needs no provider.
pub(super) async fn release_finalizers(
    ctx: &Context,
    target: &ApiTarget,
    namespace: Option<&str>,
) -> Result<()> {
    drain_instances(ctx, Mode::ReleaseOnly, target, namespace, &BTreeSet::new())
        .await
        .map(drop)
}

/// What a drain does with each instance in scope.
#[derive(Clone, Copy)]
enum Mode<'a> {
    /// Delete its owned copy through this provider client, then release its finalizer.
    Drain(&'a Engagement),
    /// No provider client: release its finalizer, counting the copies left unchecked.
    Unchecked,
    /// Not this binding's to delete anything: release its finalizer only.
    ReleaseOnly,
}

/// Deletes owned provider copies (unless the instance says Orphan, or `mode` deletes nothing)
/// and releases the syncer finalizers of every instance in scope outside the `covered`
/// namespaces. Returns what it did.
async fn drain_instances(
    ctx: &Context,
    mode: Mode<'_>,
    target: &ApiTarget,
    namespace: Option<&str>,
    covered: &BTreeSet<String>,
) -> Result<Tally> {
    let ar = target.api_resource();
    let consumer: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(ctx.shared.consumer.clone(), ns, &ar),
        None => Api::all_with(ctx.shared.consumer.clone(), &ar),
    };
    let instances = match consumer.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(e) if e.is_not_found() => return Ok(Tally::default()),
        Err(source) => {
            return Err(Error::ListInstances {
                api: target.plural.clone(),
                source,
            });
        }
    };
    let mut copies = match mode {
        Mode::Drain(engagement) => Copies::of(engagement, target).await?,
        Mode::Unchecked | Mode::ReleaseOnly => Copies::Beside { served: None },
    };
    let mut tally = Tally::default();
    let mut failed = 0;
    let mut first = None;
    for instance in &instances {
        let held = instance.finalizers().iter().any(|f| f == SYNCER_FINALIZER);
        // An instance of a released API (`super::release`) has no finalizer left but may
        // still have its owned copy: the consumer's drain deletes that too.
        if !held && !matches!(mode, Mode::Drain(_)) {
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
        let checked = match (mode, orphaned(instance)) {
            (Mode::Drain(engagement), false) => {
                delete_provider_copy(engagement, target, instance, &mut copies, &mut tally).await
            }
            (Mode::Unchecked, false) => {
                tally.unchecked += 1;
                Ok(())
            }
            (Mode::ReleaseOnly, _) => {
                tally.released_only += 1;
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
        None => Ok(tally),
        Some(first) => Err(Error::DrainIncomplete {
            api: target.plural.clone(),
            failed,
            first: Box::new(first),
        }),
    }
}

/// Where the provider copies of one API's instances are.
enum Copies {
    /// Each where its instance is (no isolation): read one by one, live; `served` remembers,
    /// once asked, whether the provider serves the resource (a 404 of an unserved resource
    /// says nothing about the copy).
    Beside {
        /// Whether the provider serves the resource, once a 404 made it worth asking.
        served: Option<bool>,
    },
    /// Placed by an isolation strategy: this consumer's copies, listed once, by the instance
    /// each records.
    Placed(HashMap<InstanceKey, DynamicObject>),
}

impl Copies {
    /// The copies of `target` the engagement's isolation put on the provider.
    async fn of(engagement: &Engagement, target: &ApiTarget) -> Result<Self> {
        let strategy = engagement.isolation.strategy;
        if strategy == IsolationStrategy::None {
            return Ok(Self::Beside { served: None });
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
        // Found by the consumer object each records, never by the label alone: a labelled
        // object that records no instance is no instance's copy.
        Ok(Self::Placed(
            listed
                .items
                .into_iter()
                .filter_map(|copy| recorded_origin(&copy).map(|origin| (origin, copy)))
                .collect(),
        ))
    }
}

/// Whether the provider serves `target`'s resource: a 404 for a copy counts as "absent" only
/// then (a resource no longer served answers 404 for every name).
async fn served(engagement: &Engagement, target: &ApiTarget) -> Result<bool> {
    let gv = format!("{}/{}", target.group, target.version);
    match engagement.provider.list_api_group_resources(&gv).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == target.plural)),
        Err(e) if e.is_not_found() => Ok(false),
        Err(source) => Err(Error::ReadProviderCopy {
            name: format!("{} (discovery of {gv})", target.plural),
            source,
        }),
    }
}

/// Deletes the provider copy when both ownership UIDs are this instance's. Only an absent copy
/// or one that is provably not ours counts as checked: a failed read or delete is an error,
/// so the instance keeps its finalizer and the drain is retried. What happened is counted in
/// `tally`.
async fn delete_provider_copy(
    engagement: &Engagement,
    target: &ApiTarget,
    instance: &DynamicObject,
    copies: &mut Copies,
    tally: &mut Tally,
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
        Copies::Beside { served: known } => {
            let name = instance.name_any();
            match at(instance.metadata.namespace.as_deref())
                .get_opt(&name)
                .await
            {
                Ok(Some(copy)) => copy,
                Ok(None) => {
                    let is_served = match *known {
                        Some(is_served) => is_served,
                        None => *known.insert(served(engagement, target).await?),
                    };
                    if is_served {
                        return Ok(());
                    }
                    return Err(Error::CopiesNotServed {
                        api: format!("{}.{}", target.plural, target.group),
                        version: target.version.clone(),
                    });
                }
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
    let at_name = ns.map_or_else(|| name.clone(), |ns| format!("{ns}/{name}"));
    let uid = instance.metadata.uid.as_deref().unwrap_or_default();
    let params = match copy_deletion(Some(&copy), &engagement.consumer_uid, uid) {
        CopyDeletion::Delete(params) => params,
        // Asked before (an earlier pass, or the instance's own deletion): still there.
        CopyDeletion::Terminating => {
            tally.still_there(at_name);
            return Ok(());
        }
        CopyDeletion::Absent | CopyDeletion::NotOurs => return Ok(()),
    };
    match at(ns).delete(&name, &params).await {
        // Spec: "binding cleanup does not wait for every provider object's finalizers".
        // The object comes back with finalizers while they hold it; a Status (or the object as
        // it was deleted, without finalizers) once it is gone.
        Ok(answer)
            if answer
                .as_ref()
                .left()
                .is_some_and(|obj| !obj.finalizers().is_empty()) =>
        {
            info!(
                namespace = ns,
                name, "provider copy deletion requested; its finalizers hold it"
            );
            tally.still_there(at_name);
            Ok(())
        }
        Ok(_) => {
            info!(namespace = ns, name, "provider copy deleted");
            tally.deleted += 1;
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
