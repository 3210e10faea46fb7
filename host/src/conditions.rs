//! Setting conditions the Kubernetes way, once for every controller: `lastTransitionTime`
//! changes only when the status flips, and `observedGeneration` records what was seen.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::{Event, EventType};

use crate::api::{ConditionType, Reason};

/// A condition to set, before timestamps are decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    /// Which condition.
    pub type_: ConditionType,
    /// True or False.
    pub status: bool,
    /// Why, in one CamelCase word.
    pub reason: Reason,
    /// What happened and what the operator should do.
    pub message: String,
}

impl Desired {
    /// A True condition.
    pub fn truthy(type_: ConditionType, reason: Reason, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: true,
            reason,
            message: message.into(),
        }
    }

    /// A False condition.
    pub fn falsy(type_: ConditionType, reason: Reason, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: false,
            reason,
            message: message.into(),
        }
    }
}

/// Sets `desired` in `conditions`, keeping `lastTransitionTime` unless the status flipped.
pub fn set(conditions: &mut Vec<Condition>, desired: Desired, generation: Option<i64>) {
    let status = if desired.status { "True" } else { "False" };
    let type_ = desired.type_.as_str();
    let now = Time(Timestamp::now());
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            if existing.status != status {
                existing.last_transition_time = now;
            }
            existing.status = status.to_string();
            existing.reason = desired.reason.as_str().to_string();
            existing.message = desired.message;
            existing.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: desired.reason.as_str().to_string(),
            message: desired.message,
            observed_generation: generation,
            last_transition_time: now,
        }),
    }
}

/// Removes a condition that no longer applies.
pub fn remove(conditions: &mut Vec<Condition>, type_: ConditionType) {
    conditions.retain(|c| c.type_ != type_.as_str());
}

/// Whether the condition is present and True.
pub fn is_true(conditions: &[Condition], type_: ConditionType) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_.as_str() && c.status == "True")
}

/// Compares two condition lists ignoring `lastTransitionTime`, so that a status write is
/// skipped when nothing an operator can see changed.
pub fn same_ignoring_time(a: &[Condition], b: &[Condition]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.type_ == y.type_
                && x.status == y.status
                && x.reason == y.reason
                && x.message == y.message
                && x.observed_generation == y.observed_generation
        })
}

/// A condition whose status or reason differs from what was stored before: the "change of
/// state" an Event announces (a new message alone is not one, so retries stay quiet).
#[derive(Clone, Copy, Debug)]
pub struct Transition<'a> {
    /// The condition as it is now.
    pub now: &'a Condition,
    /// The condition as it was stored, if it was.
    pub before: Option<&'a Condition>,
}

impl Transition<'_> {
    /// Whether the condition was stored before with status `status`.
    pub fn was(&self, status: bool) -> bool {
        let status = if status { "True" } else { "False" };
        self.before.is_some_and(|b| b.status == status)
    }
}

/// The conditions of `new` whose status or reason changed from `old`.
pub fn transitions<'a>(old: &'a [Condition], new: &'a [Condition]) -> Vec<Transition<'a>> {
    new.iter()
        .filter_map(|now| {
            let before = old.iter().find(|c| c.type_ == now.type_);
            let changed = before.is_none_or(|b| b.status != now.status || b.reason != now.reason);
            changed.then_some(Transition { now, before })
        })
        .collect()
}

/// An Event announcing a condition's change of state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Announcement {
    /// Warning (a failure state) or Normal (a recovery).
    pub warning: bool,
    /// The Event reason.
    pub reason: String,
    /// What happened and what to do: the condition's message.
    pub note: String,
    /// The step the condition reports on ([`ConditionType::action`]), so that Events of
    /// different conditions with the same reason are never folded into one series.
    pub action: &'static str,
}

/// The action of Events about a condition type the konnector does not know.
const OTHER_ACTION: &str = "Reconcile";

fn action_of(condition: &Condition) -> &'static str {
    ConditionType::parse(&condition.type_).map_or(OTHER_ACTION, ConditionType::action)
}

impl Announcement {
    /// A Warning carrying the condition's reason and message.
    pub fn warning(condition: &Condition) -> Self {
        Self {
            warning: true,
            reason: condition.reason.clone(),
            note: condition.message.clone(),
            action: action_of(condition),
        }
    }

    /// A Normal Event named after the condition type (`Ready`, `Synced`), with its message.
    pub fn recovered(condition: &Condition) -> Self {
        Self {
            warning: false,
            reason: condition.type_.clone(),
            note: condition.message.clone(),
            action: action_of(condition),
        }
    }

    /// The Event to publish.
    pub fn event(self) -> Event {
        Event {
            type_: if self.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: self.reason,
            note: Some(crate::k8s::event_note(self.note)),
            action: self.action.to_string(),
            secondary: None,
        }
    }
}

/// Conditions as a fresh status holds them after setting each of `desired` in turn.
#[cfg(test)]
pub(crate) fn from_desired(desired: &[Desired]) -> Vec<Condition> {
    with_desired(&[], desired)
}

/// `conditions` after setting each of `desired` in turn, unobserved.
#[cfg(test)]
pub(crate) fn with_desired(conditions: &[Condition], desired: &[Desired]) -> Vec<Condition> {
    let mut out = conditions.to_vec();
    for d in desired {
        set(&mut out, d.clone(), None);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ConditionType::{Connected, Ready, SchemaInSync};

    fn ready(message: &str) -> Desired {
        Desired::truthy(Ready, Reason::AsExpected, message)
    }

    #[test]
    fn transition_time_is_kept_while_status_holds() {
        let mut conditions = Vec::new();
        set(&mut conditions, ready("ok"), Some(1));
        let first = conditions[0].last_transition_time.clone();
        set(&mut conditions, ready("still ok"), Some(2));
        assert_eq!(conditions[0].last_transition_time, first);
        assert_eq!(conditions[0].message, "still ok");
        assert_eq!(conditions[0].observed_generation, Some(2));
    }

    #[test]
    fn transition_time_moves_when_status_flips() {
        let mut conditions = from_desired(&[ready("")]);
        conditions[0].last_transition_time = Time(Timestamp::UNIX_EPOCH);
        let conditions = with_desired(
            &conditions,
            &[Desired::falsy(Ready, Reason::SecretNotFound, "x")],
        );
        assert_ne!(
            conditions[0].last_transition_time,
            Time(Timestamp::UNIX_EPOCH)
        );
        assert_eq!(conditions[0].status, "False");
        assert_eq!(conditions[0].reason, "SecretNotFound");
    }

    #[test]
    fn transitions_are_status_or_reason_changes_only() {
        let old = from_desired(&[
            Desired::falsy(Ready, Reason::SecretNotFound, "create it"),
            Desired::truthy(Connected, Reason::AsExpected, "ok"),
        ]);
        let reworded = with_desired(
            &old,
            &[Desired::falsy(Ready, Reason::SecretNotFound, "other words")],
        );
        assert!(
            transitions(&old, &reworded).is_empty(),
            "a new message only"
        );
        let new = with_desired(
            &reworded,
            &[
                Desired::falsy(Ready, Reason::KubeconfigInvalid, "fix it"),
                Desired::truthy(SchemaInSync, Reason::AsExpected, "ok"),
            ],
        );
        let changed: Vec<_> = transitions(&old, &new)
            .iter()
            .map(|t| (t.now.type_.as_str(), t.before.is_some(), t.was(false)))
            .collect();
        assert_eq!(
            changed,
            vec![("Ready", true, true), ("SchemaInSync", false, false)]
        );
    }

    #[test]
    fn the_same_reason_on_two_conditions_is_announced_under_two_actions() {
        let conditions = from_desired(&[
            Desired::falsy(
                ConditionType::RelatedResourcesSynced,
                Reason::Forbidden,
                "listing related secrets refused",
            ),
            Desired::truthy(
                ConditionType::TeardownFailed,
                Reason::Forbidden,
                "teardown blocked: deleting provider copy w refused",
            ),
        ]);
        let events: Vec<Event> = conditions
            .iter()
            .map(|c| Announcement::warning(c).event())
            .collect();
        assert_eq!(events[0].reason, events[1].reason);
        assert_eq!(events[0].action, "CopyRelated");
        assert_eq!(events[1].action, "Teardown");
        assert_eq!(
            events[1].note.as_deref(),
            Some("teardown blocked: deleting provider copy w refused")
        );
    }

    #[test]
    fn comparison_ignores_only_transition_time() {
        let a = from_desired(&[ready("ok")]);
        let mut b = a.clone();
        b[0].last_transition_time = Time(Timestamp::UNIX_EPOCH);
        assert!(same_ignoring_time(&a, &b));
        b[0].message = "other".into();
        assert!(!same_ignoring_time(&a, &b));
    }
}
