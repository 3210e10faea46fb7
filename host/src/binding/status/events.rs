//! Events on bindings: published when a condition changes state, never on a requeue that
//! finds the same state (a restarted konnector reading the stored status publishes nothing).
//!
//! ```text
//! stored conditions ─┐
//! new conditions ────┴▶ transitions (status or reason changed)
//!     ├─▶ into a failure state ─▶ Warning, reason = the condition's, note = its message
//!     └─▶ Ready / Synced recovered ─▶ Normal
//! ```
//!
//! Each Event's action is the step its condition reports on (`Sync`, `CheckPermissions`,
//! `CopyRelated`, `Teardown`, ...): the Event recorder folds Events of one binding with the
//! same type, reason and action into a series keeping the first note, and a binding refused
//! both instance writes and related copies has two different `Forbidden` stories to tell.
//!
//! Failure states: Ready=False for a reason only an operator can fix (not while something is
//! merely pending), Synced=False for instance failures, Conflicts=True, PermissionDenied=True,
//! RelatedResourcesSynced=False, TeardownFailed=True. Drains without a provider client publish
//! their own Event where they happen.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::api::{ConditionType, Reason};
use crate::conditions::{Announcement, Transition, transitions};

use super::summary::{is_instance_failure, is_waiting};
use crate::binding::Context;
use crate::binding::object::BindingObject;

/// The Events a change from `old` to `new` conditions announces.
pub(crate) fn announcements(old: &[Condition], new: &[Condition]) -> Vec<Announcement> {
    transitions(old, new)
        .into_iter()
        .filter_map(|t| {
            if is_failure(t.now) {
                Some(Announcement::warning(t.now))
            } else {
                recovered(&t).then(|| Announcement::recovered(t.now))
            }
        })
        .collect()
}

fn is_failure(c: &Condition) -> bool {
    let status = c.status == "True";
    match c.type_.as_str() {
        t if t == ConditionType::Ready.as_str() => !status && !is_waiting(&c.reason),
        t if t == ConditionType::Synced.as_str() => !status && is_instance_failure(&c.reason),
        t if t == ConditionType::Conflicts.as_str()
            || t == ConditionType::PermissionDenied.as_str()
            || t == ConditionType::TeardownFailed.as_str() =>
        {
            status
        }
        t if t == ConditionType::RelatedResourcesSynced.as_str() => !status,
        _ => false,
    }
}

/// Ready turning True (first time included; not back from the Connection's own outage, which
/// the Connection reports), or Synced turning True after instance failures.
fn recovered(t: &Transition<'_>) -> bool {
    let now = t.now;
    if now.status != "True" {
        return false;
    }
    match now.type_.as_str() {
        x if x == ConditionType::Ready.as_str() => t
            .before
            .is_none_or(|b| b.reason != Reason::ConnectionNotReady.as_str()),
        x if x == ConditionType::Synced.as_str() => t
            .before
            .is_some_and(|b| b.status == "False" && is_instance_failure(&b.reason)),
        _ => false,
    }
}

/// Publishes the Events announcing the change from `old` to `new` on `obj`; a failure to
/// publish is logged by the context.
pub(crate) async fn announce<K: BindingObject>(
    ctx: &Context,
    obj: &K,
    old: &[Condition],
    new: &[Condition],
) {
    let reference = obj.object_ref(&());
    for announcement in announcements(old, new) {
        ctx.publish(&announcement.event(), &reference).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::conditions::{Desired, from_desired as conditions};

    fn synced_false(reason: Reason, message: &str) -> Desired {
        Desired::falsy(ConditionType::Synced, reason, message)
    }

    #[test]
    fn a_new_instance_failure_is_one_warning_and_its_recovery_one_normal_event() {
        let ok = conditions(&[Desired::truthy(
            ConditionType::Synced,
            Reason::AsExpected,
            "1 instance(s) in sync",
        )]);
        let failing = conditions(&[synced_false(Reason::ProviderRejected, "1 of 1 ...")]);
        let events = announcements(&ok, &failing);
        assert_eq!(
            events,
            vec![Announcement {
                warning: true,
                reason: "ProviderRejected".into(),
                note: "1 of 1 ...".into(),
                action: "Sync",
            }]
        );
        let again = conditions(&[synced_false(Reason::ProviderRejected, "2 of 2 ...")]);
        assert!(announcements(&failing, &again).is_empty(), "same state");
        let recovered = announcements(&again, &ok);
        assert_eq!(recovered.len(), 1);
        assert!(!recovered[0].warning);
        assert_eq!(recovered[0].reason, "Synced");
    }

    #[test]
    fn waiting_is_not_a_failure() {
        let pending = conditions(&[
            Desired::falsy(ConditionType::Ready, Reason::Pending, "CRD not there yet"),
            synced_false(Reason::Pending, "nothing is synced"),
        ]);
        assert!(announcements(&[], &pending).is_empty());
        let refused = conditions(&[Desired::falsy(
            ConditionType::Ready,
            Reason::NamespaceNotAllowed,
            "ask the Connection's owner",
        )]);
        let events = announcements(&pending, &refused);
        assert_eq!(events.len(), 1);
        assert!(events[0].warning);
        assert_eq!(events[0].reason, "NamespaceNotAllowed");
    }

    #[test]
    fn ready_again_after_the_connection_came_back_is_quiet() {
        let waiting = conditions(&[Desired::falsy(
            ConditionType::Ready,
            Reason::ConnectionNotReady,
            "Connection p is not Ready",
        )]);
        let ready = conditions(&[Desired::truthy(
            ConditionType::Ready,
            Reason::AsExpected,
            "ready",
        )]);
        assert!(announcements(&waiting, &ready).is_empty());
    }

    #[test]
    fn ready_for_the_first_time_is_a_normal_event() {
        let ready = conditions(&[Desired::truthy(
            ConditionType::Ready,
            Reason::AsExpected,
            "ready",
        )]);
        let events = announcements(&[], &ready);
        assert_eq!(events.len(), 1);
        assert!(!events[0].warning);
        assert!(announcements(&ready, &ready).is_empty());
    }

    #[test]
    fn permission_related_and_teardown_failures_are_warnings() {
        let bad = conditions(&[
            Desired::truthy(ConditionType::PermissionDenied, Reason::Forbidden, "grant"),
            Desired::falsy(
                ConditionType::RelatedResourcesSynced,
                Reason::CopyFailed,
                "retrying",
            ),
            Desired::truthy(ConditionType::TeardownFailed, Reason::DeleteFailed, "x"),
            Desired::falsy(ConditionType::Conflicts, Reason::AsExpected, "no conflicts"),
        ]);
        let reasons: Vec<_> = announcements(&[], &bad)
            .into_iter()
            .filter(|a| a.warning)
            .map(|a| a.reason)
            .collect();
        assert_eq!(reasons, vec!["Forbidden", "CopyFailed", "DeleteFailed"]);
    }
}
