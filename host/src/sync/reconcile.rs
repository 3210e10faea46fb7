//! Reconciling one consumer instance: the arrows of the data path, in the order the spec
//! fixes them.
//!
//! ```text
//! consumer instance
//!   │ 1. selected by a Ready binding? (binding index)        no ─▶ leave it alone
//!   │ 2. finalizer core.kbind.io/syncer, before the first provider write
//!   │ 3. namespace on the provider (create attempt, AlreadyExists is fine)
//!   │ 4. target's two UID markers ─▶ conflict policy (Wasm)
//!   │      Conflict ─▶ annotation + Warning Event + Synced=False, stop here
//!   │ 5. provider copy already matches? skip : SSA (kbind-konnector, force)
//!   │      refused by the provider (invalid, too large) ─▶ Warning Event ProviderRejected
//!   │      + Synced=False, retried with backoff
//!   │ 6. provider status ─▶ consumer status subresource (absent status never clears)
//!   ▼
//! conflict annotation cleared when the conflict is gone
//! ```
//!
//! Deleting instances is in [`super::delete`].

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{debug, info, instrument, warn};

use crate::api::Reason;
use crate::api::names::{CONFLICT_ANNOTATION, FIELD_MANAGER, SYNCER_FINALIZER};
use crate::policy::{ConflictDecision, ConflictReason};
use crate::telemetry::{ApiLabels, metrics};

use super::conflict::{conflict_annotation_value, conflict_input};
use super::desired;
use super::syncer::SyncContext;
use super::{Error, Result, api_code};

/// Reconciles one consumer instance. Wired into the syncer's controller.
#[instrument(skip(obj, ctx), fields(
    connection = %ctx.connection,
    api = %ctx.api,
    namespace = obj.metadata.namespace.as_deref().unwrap_or(""),
    name = obj.metadata.name.as_deref().unwrap_or(""),
))]
pub async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<SyncContext>) -> Result<Action> {
    let action = reconcile_inner(&obj, &ctx).await;
    if action.is_ok() {
        ctx.forget_failures(&obj);
    }
    action
}

async fn reconcile_inner(obj: &DynamicObject, ctx: &SyncContext) -> Result<Action> {
    let started = Instant::now();
    let namespace = obj.metadata.namespace.as_deref();
    let has_finalizer = obj.finalizers().iter().any(|f| f == SYNCER_FINALIZER);
    if obj.metadata.deletion_timestamp.is_some() {
        // A finalizer means this engine once wrote to the provider and owes the cleanup,
        // whether or not a binding still selects the object.
        return if has_finalizer {
            super::delete::cleanup(obj, ctx).await
        } else {
            Ok(Action::await_change())
        };
    }
    let Some(coverage) = ctx
        .index
        .read(|i| i.covering(&ctx.connection, &ctx.api, namespace))
    else {
        debug!("not selected by any Ready binding");
        return Ok(Action::await_change());
    };
    let uid = obj.metadata.uid.as_deref().ok_or(Error::MissingIdentity)?;
    if !ctx.provider_cache_ready().await {
        debug!("provider cache not synced yet");
        return Ok(Action::requeue(ctx.settings.error_backoff_base));
    }

    // Spec: "The engine places core.kbind.io/syncer on the consumer instance before its
    // first provider write."
    if !has_finalizer {
        add_finalizer(obj, ctx).await?;
    }
    if let Some(ns) = namespace {
        ctx.ensure_provider_namespace(ns).await?;
    }

    // The decision is re-taken from a live read once if the cached target moved under us
    // (the apply carries the resourceVersion the decision was made on).
    let mut target = ctx.cached_target(obj);
    if target.is_none() {
        // Never create from a possibly stale "absent": confirm with the provider.
        target = ctx.live_target(obj).await?;
    }
    let mut reread = false;
    loop {
        let input = conflict_input(
            &ctx.consumer_cluster_uid,
            uid,
            coverage.conflict_policy,
            target.as_ref(),
        );
        // Spec: force ownership only "after the object-ownership check".
        let decision = match ctx.policies.decide_conflict(&input).await {
            Ok(decision) => decision,
            Err(e) => {
                report_policy_failure(obj, ctx, &e.to_string()).await;
                return Err(Error::DecideConflict(e));
            }
        };
        let mut skipped = false;
        let written = match decision {
            ConflictDecision::Conflict { reason, message } => {
                mark_conflict(obj, ctx, reason, &message).await?;
                return Ok(Action::requeue(ctx.settings.resync_interval));
            }
            ConflictDecision::Create if target.is_some() => {
                return Err(Error::UnexpectedDecision {
                    decision: "Create".into(),
                    target: "an existing target",
                });
            }
            ConflictDecision::Create => apply_to_provider(obj, ctx, uid, None).await,
            ConflictDecision::UpdateOwned | ConflictDecision::Adopt => {
                let Some(existing) = target.as_ref() else {
                    return Err(Error::UnexpectedDecision {
                        decision: format!("{decision:?}"),
                        target: "an absent target",
                    });
                };
                if desired::provider_copy_matches(existing, obj, &ctx.consumer_cluster_uid, uid) {
                    debug!("provider copy already matches");
                    skipped = true;
                    Ok(existing.clone())
                } else {
                    if decision == ConflictDecision::Adopt {
                        info!("adopting unmarked provider object");
                    }
                    apply_to_provider(obj, ctx, uid, existing.resource_version().as_deref()).await
                }
            }
        };
        if !skipped && written.is_ok() {
            let labels = ApiLabels {
                api: ctx.api.clone(),
            };
            metrics().instances_synced.get_or_create(&labels).inc();
            metrics()
                .sync_lag
                .get_or_create(&labels)
                .observe(started.elapsed().as_secs_f64());
        }
        match written {
            Ok(copy) => {
                finish(obj, ctx, &copy).await?;
                return Ok(Action::requeue(ctx.settings.resync_interval));
            }
            // 409: the target changed since it was read; decide again on a fresh read.
            Err(Error::ApplyToProvider(e)) if !reread && api_code(&e) == Some(409) => {
                debug!("provider target changed while deciding; re-reading");
                reread = true;
                target = ctx.live_target(obj).await?;
            }
            Err(e) => {
                if let Error::ApplyToProvider(inner) = &e {
                    match (api_code(inner), namespace) {
                        // The namespace may have been deleted on the provider since we made it.
                        (Some(404), Some(ns)) => ctx.forget_provider_namespace(ns),
                        // The provider refuses this copy (invalid against its schema, too
                        // large): retrying will not help until the consumer object changes,
                        // so the object itself says why.
                        _ if rejected_by_provider(inner) => {
                            report_rejected(obj, ctx, inner).await;
                        }
                        _ => {}
                    }
                }
                return Err(e);
            }
        }
    }
}

/// After a successful write (or a skipped one): clear a resolved conflict and copy status.
async fn finish(obj: &DynamicObject, ctx: &SyncContext, copy: &DynamicObject) -> Result<()> {
    let had_conflict = obj.annotations().contains_key(CONFLICT_ANNOTATION);
    if had_conflict {
        clear_conflict(obj, ctx).await?;
    }
    if !ctx.target.status_subresource {
        return Ok(());
    }
    let consumer = ctx.consumer_api(obj.metadata.namespace.as_deref());
    let name = obj.name_any();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    if let Some(body) = desired::status_copy(copy, obj, &ctx.ar) {
        consumer
            .patch_status(&name, &params, &Patch::Apply(&body))
            .await
            .map_err(Error::CopyStatus)?;
        metrics()
            .instances_synced
            .get_or_create(&ApiLabels {
                api: ctx.api.clone(),
            })
            .inc();
        debug!("status copied to the consumer");
    } else if desired::has_synced_failure(obj)
        && let Some(body) = desired::synced_condition(obj, &ctx.ar, None)
    {
        // Best-effort, like setting it: the schema may prune conditions.
        if let Err(e) = consumer
            .patch_status(&name, &params, &Patch::Apply(&body))
            .await
        {
            debug!(error = %e, "could not remove the Synced condition");
        }
    }
    Ok(())
}

/// Server-side apply of the provider copy, forced: the policy has allowed it. Fields another
/// manager added under `spec` (drift that adds, or what an adopted object had) are then
/// removed with a merge patch, so the copy ends up with exactly the consumer's spec.
async fn apply_to_provider(
    obj: &DynamicObject,
    ctx: &SyncContext,
    uid: &str,
    resource_version: Option<&str>,
) -> Result<DynamicObject> {
    let api = ctx.provider_api(obj.metadata.namespace.as_deref());
    let name = obj.name_any();
    let body = desired::provider_copy(
        obj,
        &ctx.ar,
        &ctx.consumer_cluster_uid,
        uid,
        resource_version,
    );
    let mut applied = api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(Error::ApplyToProvider)?;
    let extra = desired::foreign_extra_spec_fields(&applied, obj);
    if !extra.is_empty() {
        debug!(fields = ?extra, "removing spec fields another manager added");
        let patch = desired::prune_patch(&extra, applied.resource_version().as_deref());
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        applied = api
            .patch(&name, &params, &Patch::Merge(&patch))
            .await
            .map_err(Error::ApplyToProvider)?;
    }
    info!("provider copy written");
    Ok(applied)
}

/// JSON patch with a `test`, like kube-runtime's `finalizer()`: fails instead of clobbering a
/// concurrent finalizer change.
async fn add_finalizer(obj: &DynamicObject, ctx: &SyncContext) -> Result<()> {
    let api = ctx.consumer_api(obj.metadata.namespace.as_deref());
    let patch = if obj.finalizers().is_empty() {
        json!([
            { "op": "test", "path": "/metadata/finalizers", "value": null },
            { "op": "add", "path": "/metadata/finalizers", "value": [SYNCER_FINALIZER] },
        ])
    } else {
        json!([
            { "op": "test", "path": "/metadata/finalizers", "value": obj.finalizers() },
            { "op": "add", "path": "/metadata/finalizers/-", "value": SYNCER_FINALIZER },
        ])
    };
    let patch = serde_json::from_value(patch)
        .map_err(|e| Error::AddFinalizer(kube::Error::SerdeError(e)))?;
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::<()>::Json(patch),
    )
    .await
    .map_err(Error::AddFinalizer)?;
    Ok(())
}

/// Conflict: the durable annotation, a Warning Event when the conflict is new or changed, and
/// the best-effort `Synced=False` condition. Nothing is written to the provider.
async fn mark_conflict(
    obj: &DynamicObject,
    ctx: &SyncContext,
    reason: ConflictReason,
    message: &str,
) -> Result<()> {
    let value = conflict_annotation_value(reason, message);
    let reason = Reason::from(reason);
    if obj.annotations().get(CONFLICT_ANNOTATION) == Some(&value) {
        return Ok(());
    }
    warn!(
        reason = reason.as_str(),
        message, "provider target conflict"
    );
    metrics()
        .conflicts
        .get_or_create(&ApiLabels {
            api: ctx.api.clone(),
        })
        .inc();
    let api = ctx.consumer_api(obj.metadata.namespace.as_deref());
    let patch = json!({ "metadata": { "annotations": { CONFLICT_ANNOTATION: value } } });
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(Error::MarkConflict)?;
    publish(ctx, obj, EventType::Warning, reason, "Sync", message).await;
    set_synced_failure(obj, ctx, reason, message).await;
    Ok(())
}

/// The best-effort `Synced=False` instance condition: the API's status schema may prune it,
/// so a failure to write it is only logged (spec: "the annotation is the durable
/// diagnostic").
async fn set_synced_failure(obj: &DynamicObject, ctx: &SyncContext, reason: Reason, message: &str) {
    if !ctx.target.status_subresource {
        return;
    }
    let Some(body) = desired::synced_condition(obj, &ctx.ar, Some((reason, message))) else {
        return;
    };
    if let Err(e) = ctx
        .consumer_api(obj.metadata.namespace.as_deref())
        .patch_status(
            &obj.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
    {
        debug!(error = %e, "could not set the Synced condition");
    }
}

async fn clear_conflict(obj: &DynamicObject, ctx: &SyncContext) -> Result<()> {
    let api = ctx.consumer_api(obj.metadata.namespace.as_deref());
    let patch = json!({ "metadata": { "annotations": { CONFLICT_ANNOTATION: null } } });
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(Error::ClearConflict)?;
    info!("conflict resolved");
    Ok(())
}

/// Whether the provider refused the copy itself (retrying the same spec cannot succeed):
/// invalid (400, 422), too large (413), or a spec whose types do not fit the provider's schema,
/// which the apiserver's server-side apply reports as a 500 "failed to create typed patch
/// object".
fn rejected_by_provider(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => match status.code {
            400 | 413 | 422 => true,
            500 => status
                .message
                .starts_with("failed to create typed patch object"),
            _ => false,
        },
        _ => false,
    }
}

/// Tells the consumer object why the provider refused its copy: a Warning Event and the
/// best-effort `Synced=False` condition, like a policy failure.
async fn report_rejected(obj: &DynamicObject, ctx: &SyncContext, error: &kube::Error) {
    let message = match error {
        kube::Error::Api(status) => format!("the provider rejected the copy: {}", status.message),
        other => format!("the provider rejected the copy: {other}"),
    };
    warn!(message, "provider rejected the copy");
    publish(
        ctx,
        obj,
        EventType::Warning,
        Reason::ProviderRejected,
        "Sync",
        &message,
    )
    .await;
    set_synced_failure(obj, ctx, Reason::ProviderRejected, &message).await;
}

async fn report_policy_failure(obj: &DynamicObject, ctx: &SyncContext, message: &str) {
    warn!(message, "conflict policy failed");
    publish(
        ctx,
        obj,
        EventType::Warning,
        Reason::PolicyFailed,
        "Sync",
        message,
    )
    .await;
    set_synced_failure(obj, ctx, Reason::PolicyFailed, message).await;
}

/// Publishes an Event about a consumer instance; failures are logged, never fatal.
pub(crate) async fn publish(
    ctx: &SyncContext,
    obj: &DynamicObject,
    type_: EventType,
    reason: Reason,
    action: &str,
    note: &str,
) {
    let reference = obj.object_ref(&ctx.ar);
    let event = Event {
        type_,
        reason: reason.as_str().into(),
        note: Some(note.into()),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &reference).await {
        debug!(error = %e, "could not publish event");
    }
}

impl SyncContext {
    /// Creates the namespace on the provider unless this syncer already saw it exist.
    /// Spec: "Namespace creation and source/target RBAC are still required."
    async fn ensure_provider_namespace(&self, ns: &str) -> Result<()> {
        if self.namespace_known(ns) {
            return Ok(());
        }
        let api: kube::Api<Namespace> = kube::Api::all(self.provider.clone());
        let namespace = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(ns.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&PostParams::default(), &namespace).await {
            Ok(_) => info!(namespace = ns, "namespace created on the provider"),
            Err(e) if api_code(&e) == Some(409) => {}
            // Credentials may not create namespaces the provider pre-created; the apply that
            // follows tells whether it exists.
            Err(e) if api_code(&e) == Some(403) => {
                debug!(
                    namespace = ns,
                    "namespace create forbidden; assuming it exists"
                );
                return Ok(());
            }
            Err(source) => {
                return Err(Error::CreateNamespace {
                    namespace: ns.to_string(),
                    source,
                });
            }
        }
        self.remember_namespace(ns);
        Ok(())
    }
}
