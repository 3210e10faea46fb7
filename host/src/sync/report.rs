//! What a consumer instance is told about its sync, in one place: its `Synced` condition, its
//! conflict annotation, Warning Events, and the outcome the binding controllers summarise.
//!
//! ```text
//! in sync ──────▶ clear conflict annotation ─▶ Synced=True (observedGeneration) ─▶ outcome InSync
//! status over --max-copy-status-bytes ─▶ Synced=False ResponseTooLarge (spec written, status
//!                                         not copied back)
//! conflict ─────▶ annotation ─┐
//! rejected, policy failure, ──┴▶ Warning Event (once per reason and message) ─▶ Synced=False
//! forbidden write                                                           ─▶ outcome reason
//! ```
//!
//! Every failure reason clears when the cause is gone: the next successful write sets
//! `Synced=True` over it and records the instance in sync. An Event is published when the
//! instance's failure is new or different (its stored `Synced` condition does not say it yet,
//! or its annotation differs), not on every retry.

use kube::api::{DynamicObject, ObjectMeta, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use crate::api::Reason;
use crate::api::names::{
    CONFLICT_ANNOTATION, DELETION_POLICY_ANNOTATION, DELETION_POLICY_ORPHAN, FIELD_MANAGER,
    SYNCER_FINALIZER,
};
use crate::k8s::{ApiErrorExt, patch_params};
use crate::policy::ConflictReason;
use crate::provider::limits::{COPY_STATUS_FLAG, limits};
use crate::telemetry::{ApiLabels, metrics};

use super::cache::copy::CachedCopy;
use super::cache::instance::{Confirmation, KBIND_ANNOTATION_PREFIX};
use super::cache::watched::Watched;
use super::conflict::conflict_annotation_value;
use super::context::SyncContext;
use super::instance_status::{
    Synced, already_says, in_instance_generations, instance_status, keeps_synced,
};
use super::{Error, Result};
use crate::registry::Outcome;

/// After a successful (or skipped) write: clears a resolved conflict, copies the provider
/// status and says `Synced=True` for this generation in one status write (none when the
/// instance already says all that), and records the instance in sync.
pub(super) async fn in_sync(
    obj: &DynamicObject,
    ctx: &SyncContext,
    copy: &CachedCopy,
) -> Result<Reported> {
    let mut reported = Reported::Unchanged;
    if obj.annotations().contains_key(CONFLICT_ANNOTATION) {
        clear_conflict(obj, ctx).await?;
        reported = Reported::Written;
    }
    if let Some(size) = copy.status_too_large() {
        // The spec is written; the status the provider gave is more than the konnector holds.
        let message = format!(
            "the provider copy's status is {size} bytes, more than the konnector keeps of a copy ({} bytes, --{COPY_STATUS_FLAG}): it is not copied back; shrink it on the provider, or raise --{COPY_STATUS_FLAG}",
            limits().copy_status
        );
        failure(obj, ctx, Reason::ResponseTooLarge, &message).await;
        return Ok(Reported::Written);
    }
    ctx.record_outcome(obj, Outcome::InSync);
    let placed = (ctx.spec.isolation.strategy != crate::api::IsolationStrategy::None)
        .then(|| super::placement::display(copy.namespace.as_deref(), &copy.name));
    let synced = Synced::True {
        generation: obj.metadata.generation,
        placed_at: placed.as_deref(),
    };
    // The copy holds this instance's current spec, so its observed generations are the
    // instance's to tell.
    let status = copy
        .status()
        .map(|s| in_instance_generations(s, copy.generation, obj.metadata.generation));
    let written = write_status(obj, ctx, status.as_ref(), synced, Some(copy))
        .await
        .map_err(Error::CopyStatus)?;
    Ok(if written { Reported::Written } else { reported })
}

/// Whether reporting an instance in sync wrote to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reported {
    /// The instance already said all of it: status, `Synced` and no conflict annotation.
    Unchanged,
    /// Its status or annotation was written; the instance changes with it.
    Written,
}

/// Conflict: the durable annotation, a Warning Event when the conflict is new or changed, and
/// the best-effort `Synced=False` condition. Nothing is written to the provider.
pub(super) async fn conflict(
    obj: &DynamicObject,
    ctx: &SyncContext,
    reason: ConflictReason,
    message: &str,
) -> Result<()> {
    let value = conflict_annotation_value(reason, message);
    let reason = Reason::from(reason);
    ctx.record_outcome(obj, Outcome::Conflict(reason));
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
            api: ctx.spec.api.clone(),
        })
        .inc();
    annotate_conflict(obj, ctx, Some(&value))
        .await
        .map_err(Error::MarkConflict)?;
    publish(ctx, obj, EventType::Warning, reason, "Sync", message).await;
    set_synced_failure(obj, ctx, reason, message).await;
    Ok(())
}

/// What a failed provider write teaches: a vanished namespace is created again next time; a
/// copy the provider refuses (invalid against its schema, too large) or the credentials may
/// not write cannot succeed until something changes, so the object itself says why.
pub(super) async fn write_failed(obj: &DynamicObject, ctx: &SyncContext, error: &kube::Error) {
    match obj.metadata.namespace.as_deref() {
        Some(ns) if error.is_not_found() => ctx.forget_provider_namespace(ns),
        _ if error.is_rejected_object() => {
            let message = match error {
                kube::Error::Api(status) => {
                    format!(
                        "the provider rejected the copy: {}; fix the instance's spec",
                        status.message
                    )
                }
                other => format!("the provider rejected the copy: {other}"),
            };
            failure(obj, ctx, Reason::ProviderRejected, &message).await;
        }
        _ if error.is_forbidden() => {
            let message = format!(
                "the provider credentials may not write {} copies: grant create/patch on them to \
                 the Connection's provider identity (see `kubectl kbind provider-rbac`)",
                ctx.spec.api
            );
            failure(obj, ctx, Reason::Forbidden, &message).await;
        }
        _ => {}
    }
}

/// The conflict policy module failed for this instance; nothing was written.
pub(super) async fn policy_failed(obj: &DynamicObject, ctx: &SyncContext, message: &str) {
    failure(obj, ctx, Reason::PolicyFailed, message).await;
}

/// A failure that is not a conflict: the outcome, a Warning Event unless the instance already
/// says exactly this, and the best-effort `Synced=False` condition.
async fn failure(obj: &DynamicObject, ctx: &SyncContext, reason: Reason, message: &str) {
    ctx.record_outcome(obj, Outcome::failure(reason));
    if already_says(obj.data.get("status"), reason, message) {
        debug!(reason = reason.as_str(), "failure already reported");
        return;
    }
    warn!(reason = reason.as_str(), message, "instance not synced");
    publish(ctx, obj, EventType::Warning, reason, "Sync", message).await;
    set_synced_failure(obj, ctx, reason, message).await;
}

/// The `Synced=False` instance condition. Best-effort: the API's status schema may prune it,
/// so a failure to write it is only logged (spec: "the annotation is the durable
/// diagnostic").
async fn set_synced_failure(obj: &DynamicObject, ctx: &SyncContext, reason: Reason, message: &str) {
    if let Err(e) = write_status(obj, ctx, None, Synced::False { reason, message }, None).await {
        debug!(error = %e, "could not set the Synced condition");
    }
}

async fn clear_conflict(obj: &DynamicObject, ctx: &SyncContext) -> Result<()> {
    annotate_conflict(obj, ctx, None)
        .await
        .map_err(Error::ClearConflict)?;
    info!("conflict resolved");
    Ok(())
}

/// Sets (`Some`) or removes (`None`) the instance's conflict annotation.
async fn annotate_conflict(
    obj: &DynamicObject,
    ctx: &SyncContext,
    value: Option<&str>,
) -> Result<(), kube::Error> {
    let api = ctx.consumer_writes(obj.metadata.namespace.as_deref());
    let patch = json!({ "metadata": { "annotations": { CONFLICT_ANNOTATION: value } } });
    let stored = api
        .patch(&obj.name_any(), &patch_params(), &Patch::Merge(&patch))
        .await?;
    ctx.wrote_instance(stored.0, None);
    Ok(())
}

/// Writes the instance status from [`instance_status`] (true when it wrote, false when the
/// instance already said it); learns once per syncer when the API's schema prunes the `Synced`
/// condition, and then stops writing it. `in_sync_with`: the copy the instance is in sync with
/// once this status is written; when the answer shows nothing else changed, the instance as
/// written is confirmed in sync with it.
async fn write_status(
    obj: &DynamicObject,
    ctx: &SyncContext,
    provider_status: Option<&serde_json::Value>,
    synced: Synced<'_>,
    in_sync_with: Option<&CachedCopy>,
) -> Result<bool, kube::Error> {
    if !ctx.spec.target.status_subresource {
        return Ok(false);
    }
    let synced = (!ctx.conditions_pruned()).then_some(synced);
    let Some(mut body) = instance_status(obj, &ctx.ar, provider_status, synced) else {
        return Ok(false);
    };
    let api = ctx.consumer_writes(obj.metadata.namespace.as_deref());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let Watched(stored) = match api
        .patch_status(&obj.name_any(), &params, &Patch::Apply(&body))
        .await
    {
        Ok(stored) => stored,
        // A status schema without `conditions` makes server-side apply refuse the whole
        // body; the status copy must not depend on kbind's condition, so write it without.
        Err(e) if synced.is_some() && e.is_rejected_object() => {
            debug!(error = %e, "the API's status schema has no conditions; Synced is not written");
            ctx.set_conditions_pruned();
            let Some(without) = instance_status(obj, &ctx.ar, provider_status, None) else {
                return Ok(false);
            };
            body = without;
            api.patch_status(&obj.name_any(), &params, &Patch::Apply(&body))
                .await?
        }
        Err(e) => return Err(e),
    };
    if synced.is_some() && !keeps_synced(stored.data.get("status")) {
        debug!("the API's status schema prunes conditions; Synced is not written");
        ctx.set_conditions_pruned();
    }
    let settled = in_sync_with
        .filter(|_| settled_by(obj, &stored, body.get("status")))
        .map(|copy| Confirmation::of(copy, ctx.conditions_pruned()));
    ctx.wrote_instance(stored, settled);
    debug!("instance status written");
    Ok(true)
}

/// Whether `stored`, the answer to a status write made while reconciling `obj`, is `obj` with
/// nothing changed but what that reconcile wrote: the same uid, generation and spec, not
/// deleting, the syncer finalizer on it, no conflict annotation and kbind's other annotations
/// as they were, and its status exactly the status written. Such an instance is in sync with
/// the copy the reconcile wrote against, and a reconcile of it would write nothing.
fn settled_by(obj: &DynamicObject, stored: &DynamicObject, written: Option<&Value>) -> bool {
    let (before, after) = (&obj.metadata, &stored.metadata);
    fn kbind_annotations(meta: &ObjectMeta) -> impl Iterator<Item = (&String, &String)> {
        meta.annotations
            .iter()
            .flatten()
            .filter(|(key, _)| key.starts_with(KBIND_ANNOTATION_PREFIX))
            .filter(|(key, _)| key.as_str() != CONFLICT_ANNOTATION)
    }
    after.uid.is_some()
        && after.uid == before.uid
        && after.generation == before.generation
        && after.deletion_timestamp.is_none()
        && stored.finalizers().iter().any(|f| f == SYNCER_FINALIZER)
        && !stored.annotations().contains_key(CONFLICT_ANNOTATION)
        && kbind_annotations(after).eq(kbind_annotations(before))
        && stored.data.get("spec") == obj.data.get("spec")
        && written.is_some()
        && stored.data.get("status") == written
}

/// A deleting instance whose provider copy is terminating but held by the provider's own
/// finalizers (spec: "a provider-side finalizer can therefore hold normal instance deletion
/// open"): a Normal Event and the best-effort `Synced=False` condition, reason
/// `ProviderFinalizers`, name the copy and each finalizer it waits on, once per change.
pub(super) async fn deletion_waits(
    obj: &DynamicObject,
    ctx: &SyncContext,
    copy_at: &str,
    finalizers: &[String],
) {
    let message = deletion_wait_message(copy_at, finalizers);
    let reason = Reason::ProviderFinalizers;
    if already_says(obj.data.get("status"), reason, &message) {
        return;
    }
    info!(
        copy = copy_at,
        ?finalizers,
        "waiting for provider-side finalizers"
    );
    publish(ctx, obj, EventType::Normal, reason, "Delete", &message).await;
    set_synced_failure(obj, ctx, reason, &message).await;
}

/// What a deletion held by provider finalizers says, and what the operator can do about it.
fn deletion_wait_message(copy_at: &str, finalizers: &[String]) -> String {
    let held = if finalizers.is_empty() {
        "no finalizer is left on it, it is going".to_string()
    } else {
        format!(
            "finalizers of the provider's controllers hold it: {}",
            finalizers.join(", ")
        )
    };
    format!(
        "waiting for the provider copy {copy_at} to be deleted ({held}); this instance goes once they release it, or annotate it {DELETION_POLICY_ANNOTATION}={DELETION_POLICY_ORPHAN} to keep the copy and finish now"
    )
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
        note: Some(crate::k8s::event_note(note.into())),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = ctx.shared.recorder.publish(&event, &reference).await {
        debug!(error = %e, "could not publish event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use crate::sync::testing::consumer_widget;

    /// The instance a reconcile read, and the answer to its status write that left it in sync.
    fn read_and_answered() -> (DynamicObject, DynamicObject, Value) {
        let mut read = consumer_widget(json!({ "spec": { "size": 3 } }));
        read.metadata.uid = Some("u-1".into());
        read.metadata.resource_version = Some("10".into());
        read.metadata.generation = Some(2);
        read.metadata.annotations = Some(BTreeMap::from([
            (DELETION_POLICY_ANNOTATION.to_string(), "Orphan".to_string()),
            (
                CONFLICT_ANNOTATION.to_string(),
                "OwnedByAnother".to_string(),
            ),
        ]));
        let written =
            json!({ "phase": "Ready", "conditions": [{ "type": "Synced", "status": "True" }] });
        let mut answer = read.clone();
        answer.metadata.resource_version = Some("12".into());
        answer.metadata.finalizers = Some(vec![SYNCER_FINALIZER.to_string()]);
        answer.metadata.annotations = Some(BTreeMap::from([
            (DELETION_POLICY_ANNOTATION.to_string(), "Orphan".to_string()),
            ("note".to_string(), "someone else's".to_string()),
        ]));
        answer.data["status"] = written.clone();
        (read, answer, written)
    }

    #[test]
    fn a_status_write_whose_answer_changed_nothing_else_settles_the_instance() {
        let (read, answer, written) = read_and_answered();
        assert!(settled_by(&read, &answer, Some(&written)));
    }

    #[test]
    fn a_status_write_does_not_settle_an_instance_that_changed_meanwhile() {
        let (read, answer, written) = read_and_answered();
        type Change = fn(&mut DynamicObject);
        let changes: [(&str, Change); 8] = [
            ("spec", |a| a.data["spec"]["size"] = json!(4)),
            ("generation", |a| a.metadata.generation = Some(3)),
            ("uid", |a| a.metadata.uid = Some("u-2".into())),
            ("deleting", |a| {
                a.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH))
            }),
            ("finalizer gone", |a| a.metadata.finalizers = None),
            ("conflict annotated", |a| {
                a.annotations_mut()
                    .insert(CONFLICT_ANNOTATION.into(), "x".into());
            }),
            ("deletion policy", |a| {
                a.annotations_mut().remove(DELETION_POLICY_ANNOTATION);
            }),
            ("status", |a| a.data["status"]["phase"] = json!("Pending")),
        ];
        for (what, change) in changes {
            let mut changed = answer.clone();
            change(&mut changed);
            assert!(!settled_by(&read, &changed, Some(&written)), "{what}");
        }
        assert!(!settled_by(&read, &answer, None), "nothing written");
    }

    #[test]
    fn a_deletion_wait_names_the_copy_each_finalizer_and_the_way_out() {
        let held = [
            "example.org/cleanup".to_string(),
            "other.io/hold".to_string(),
        ];
        let message = deletion_wait_message("team-a/w", &held);
        for said in [
            "team-a/w",
            "example.org/cleanup, other.io/hold",
            "deletion-policy=Orphan",
        ] {
            assert!(message.contains(said), "{said} in {message}");
        }
        let going = deletion_wait_message("w", &[]);
        assert!(going.contains("no finalizer is left on it"), "{going}");
    }
}
