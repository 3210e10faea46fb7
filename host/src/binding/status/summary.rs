//! A binding's instance conditions, from the sync engine's outcome summary of its scope: pure
//! functions from [`Summary`] to the `Synced`, `Conflicts` and `PermissionDenied` conditions.
//!
//! ```text
//! Outcomes::summarise(connection, apis, namespace | everything) ─▶ Summary
//!   ├─▶ Synced:           True (N in sync) | False (failing per reason, what to do)
//!   ├─▶ Conflicts:        True (count per API) | False
//!   └─▶ PermissionDenied: True (refused watches on either cluster, writes, related copies) | False
//! ```
//!
//! Spec: "Conflicts=True does not necessarily make Ready or Synced false" — Ready never
//! depends on these; Synced does count conflicting instances as not in sync, and says so.

use kube::ResourceExt;

use crate::api::{ConditionType, Reason};
use crate::conditions::Desired;
use crate::registry::Failing;
use crate::registry::{Outcomes, Summary};

use crate::binding::object::BindingObject;

/// Failing reasons in the order the `Synced` condition's reason picks them: the one that
/// blocks most comes first (permissions block every instance, a conflict one).
const PRIORITY: [Reason; 5] = [
    Reason::Forbidden,
    Reason::PolicyFailed,
    Reason::ProviderRejected,
    Reason::OwnedByAnother,
    Reason::ForeignObjectExists,
];

/// What the operator does when the consumer refuses the konnector's own watch of a bound API:
/// its consumer RBAC (the chart's ClusterRole) does not cover the API's group.
const CONSUMER_ADVICE: &str = "grant the konnector's consumer identity get, list, watch, \
     create, update, patch and delete on them (Helm value rbac.boundResourceGroups: add their \
     API groups)";

/// The summary of `obj`'s scope: its APIs through its Connection, in its namespace (a Binding)
/// or everywhere (a ClusterBinding).
pub(crate) fn of<K: BindingObject>(obj: &K, outcomes: &Outcomes) -> Summary {
    of_active(obj, outcomes, &[])
}

/// [`of`] without the `released` APIs: no syncer reports on them, so they would keep the
/// summary settling for ever.
pub(crate) fn of_active<K: BindingObject>(
    obj: &K,
    outcomes: &Outcomes,
    released: &[String],
) -> Summary {
    let spec = obj.binding_spec();
    outcomes.summarise(
        &spec.connection_ref.name,
        spec.apis
            .iter()
            .map(|a| a.name.as_str())
            .filter(|a| !released.iter().any(|r| r == a)),
        obj.namespace().as_deref(),
    )
}

/// Ready=False reasons that are waits, not faults: the binding gets there by itself (or the
/// Connection reports the fault on its own object).
const WAITING: [Reason; 5] = [
    Reason::Pending,
    Reason::SchemaNotEstablished,
    Reason::ConnectionNotReady,
    // Every API released: the provider's doing, resumed when it exports them again; the
    // `Released` condition and its Warning Event say so.
    Reason::APIReleased,
    // The consumer edited connectionRef: the previous Connection's drain runs by itself.
    Reason::ConnectionChanged,
];

/// Whether a binding with this `Ready` condition syncs instances: Ready, or some of its APIs
/// sync while others do not (`APIsNotReady`).
pub(crate) fn syncs(ready: &Desired) -> bool {
    ready.status || ready.reason == Reason::APIsNotReady
}

/// Whether a binding not Ready for `reason` is merely waiting.
pub(crate) fn is_waiting(reason: &str) -> bool {
    WAITING.iter().any(|r| r.as_str() == reason)
}

/// Whether the instance conditions can be computed now: the binding is Ready and the sync
/// engine's first pass over every API of its scope is done, or the binding is refused (and
/// syncs nothing). While it waits or settles, the last known conditions stand: a konnector
/// restart or a Connection blip does not flap them (nor publish their Events again).
pub(crate) fn is_current(ready: &Desired, summary: &Summary) -> bool {
    if syncs(ready) {
        !summary.settling
    } else {
        !is_waiting(ready.reason.as_str())
    }
}

/// `Synced` before anything is known.
pub(crate) fn synced_unknown() -> Desired {
    Desired::falsy(
        ConditionType::Synced,
        Reason::Pending,
        "waiting for the first sync of the binding's instances",
    )
}

/// The instance failure reasons a binding's `Synced` condition can carry.
pub(crate) fn is_instance_failure(reason: &str) -> bool {
    instance_failure(reason).is_some()
}

/// The instance failure reason stored as `reason`, if it is one.
pub(crate) fn instance_failure(reason: &str) -> Option<Reason> {
    PRIORITY.into_iter().find(|r| r.as_str() == reason)
}

/// The `Synced` condition: True when every instance the syncers know in scope is in sync;
/// False with the failing instances counted per reason and what to do about each. A binding
/// that syncs nothing says so with its Ready reason; one whose other APIs sync
/// (`APIsNotReady`) is judged on those.
pub(crate) fn synced(ready: &Desired, summary: &Summary) -> Desired {
    if !syncs(ready) {
        return Desired::falsy(
            ConditionType::Synced,
            ready.reason,
            format!(
                "nothing is synced while the binding is not Ready: {}",
                ready.message
            ),
        );
    }
    let failing = summary.failing_total();
    let refused = !summary.denied_apis.is_empty() || !summary.consumer_denied_apis.is_empty();
    if failing == 0 && !refused {
        return Desired::truthy(
            ConditionType::Synced,
            Reason::AsExpected,
            format!("{} instance(s) in sync", summary.in_sync()),
        );
    }
    let reason = PRIORITY
        .into_iter()
        .find(|r| summary.failing.contains_key(r))
        .unwrap_or(Reason::Forbidden);
    let mut parts = Vec::new();
    if !summary.denied_apis.is_empty() {
        let apis: Vec<&str> = summary.denied_apis.keys().map(String::as_str).collect();
        parts.push(format!(
            "the provider refuses to list/watch {}, so none of their instances sync",
            apis.join(", ")
        ));
    }
    if !summary.consumer_denied_apis.is_empty() {
        let apis: Vec<&str> = summary
            .consumer_denied_apis
            .keys()
            .map(String::as_str)
            .collect();
        parts.push(format!(
            "this cluster refuses the konnector list/watch of {}, so none of their instances sync",
            apis.join(", ")
        ));
    }
    if failing > 0 {
        parts.push(format!(
            "{failing} of {} instance(s) not in sync: {}",
            failing + summary.in_sync(),
            counts(summary)
        ));
    }
    let mut advice: Vec<String> = summary
        .failing
        .keys()
        .chain(
            (!summary.denied_apis.is_empty())
                .then_some(&Reason::Forbidden)
                .filter(|_| !summary.failing.contains_key(&Reason::Forbidden)),
        )
        .map(|r| format!("{}: {}", r.as_str(), advice(*r)))
        .collect();
    if !summary.consumer_denied_apis.is_empty() {
        advice.push(format!(
            "{}: {CONSUMER_ADVICE}.",
            Reason::Forbidden.as_str()
        ));
    }
    Desired::falsy(
        ConditionType::Synced,
        reason,
        format!("{}. {}", parts.join("; "), advice.join(" ")),
    )
}

/// "conflict: 2 (ForeignObjectExists: 1 e.g. a/x; OwnedByAnother: 1 e.g. a/y), ProviderRejected:
/// 1 e.g. b/z": conflicts grouped, the other reasons each on their own.
fn counts(summary: &Summary) -> String {
    let entry = |reason: &Reason, f: &Failing| {
        format!(
            "{}: {} e.g. {}",
            reason.as_str(),
            f.count,
            f.examples.join(", ")
        )
    };
    let (conflicts, others): (Vec<_>, Vec<_>) = summary
        .failing
        .iter()
        .partition(|(r, _)| matches!(r, Reason::ForeignObjectExists | Reason::OwnedByAnother));
    let mut parts = Vec::new();
    if !conflicts.is_empty() {
        let total: u64 = conflicts.iter().map(|(_, f)| f.count).sum();
        let each: Vec<String> = conflicts.iter().map(|(r, f)| entry(r, f)).collect();
        parts.push(format!("conflict: {total} ({})", each.join("; ")));
    }
    parts.extend(others.iter().map(|(r, f)| entry(r, f)));
    parts.join(", ")
}

/// What the operator does about instances failing for `reason`.
fn advice(reason: Reason) -> &'static str {
    match reason {
        Reason::ForeignObjectExists => {
            "a provider object of that name exists without kbind's ownership markers; delete or \
             rename it on the provider, rename the instance, or set conflictPolicy: Adopt to take \
             it over (see the instance's core.kbind.io/conflict annotation)."
        }
        Reason::OwnedByAnother => {
            "the provider object belongs to another consumer cluster or object; rename the \
             instance, or have that owner delete its copy (see the instance's \
             core.kbind.io/conflict annotation)."
        }
        Reason::ProviderRejected => {
            "the provider refused the copy; fix the instance's spec (its Synced condition and \
             Events quote the provider)."
        }
        Reason::PolicyFailed => {
            "the conflict policy module failed; see the instance's Events and the konnector log, \
             and fix or replace the module."
        }
        Reason::Forbidden => {
            "the provider credentials may not do this; grant the Connection's provider identity \
             get/list/watch/create/patch on the API (see `kubectl kbind provider-rbac`)."
        }
        _ => "see the instance's Synced condition and Events.",
    }
}

/// The `Conflicts` condition: True with the count per API while any instance in scope has a
/// provider target owned by someone else.
pub(crate) fn conflicts(summary: &Summary) -> Desired {
    let total = summary.conflicts();
    if total == 0 {
        return Desired::falsy(ConditionType::Conflicts, Reason::AsExpected, "no conflicts");
    }
    let per_api = summary
        .conflicts_per_api()
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(api, n)| format!("{api}: {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    Desired::truthy(
        ConditionType::Conflicts,
        Reason::ConflictsFound,
        format!(
            "{total} instance(s) have a provider target owned by someone else ({per_api}); see \
             their core.kbind.io/conflict annotation, then remove or rename the provider object \
             or the instance"
        ),
    )
}

/// The `PermissionDenied` condition: True when the provider refused the engine anything this
/// binding needs — watching an API, writing instance copies, or related copies (`related` is
/// the `RelatedResourcesSynced` condition, when related copies ran) — or when the consumer
/// refused the konnector the watch of a bound API; each with whose RBAC to fix.
pub(crate) fn permission_denied(summary: &Summary, related: Option<&Desired>) -> Desired {
    let consumer: Vec<&str> = summary
        .consumer_denied_apis
        .values()
        .map(String::as_str)
        .collect();
    let consumer =
        (!consumer.is_empty()).then(|| format!("{}; {CONSUMER_ADVICE}", consumer.join("; ")));
    let mut refused: Vec<String> = summary.denied_apis.values().cloned().collect();
    if let Some(forbidden) = summary.forbidden() {
        refused.push(format!(
            "{} instance copy write(s) refused, e.g. {}",
            forbidden.count,
            forbidden.examples.join(", ")
        ));
    }
    let provider = (!refused.is_empty()).then(|| {
        format!(
            "{}; grant the Connection's provider identity what is missing (see `kubectl kbind provider-rbac`)",
            refused.join("; ")
        )
    });
    // A related copy may be refused on either cluster: its message names the side and what
    // to grant there.
    let related = related
        .filter(|r| !r.status && r.reason == Reason::Forbidden)
        .map(|r| r.message.clone());
    let said: Vec<String> = consumer
        .into_iter()
        .chain(provider)
        .chain(related)
        .collect();
    if said.is_empty() {
        return Desired::falsy(
            ConditionType::PermissionDenied,
            Reason::AsExpected,
            "neither cluster refused anything this binding needs",
        );
    }
    Desired::truthy(
        ConditionType::PermissionDenied,
        Reason::Forbidden,
        said.join(". "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{DeniedBy, Outcome, Outcomes};

    const API: &str = "widgets.example.org";

    fn ready() -> Desired {
        Desired::truthy(ConditionType::Ready, Reason::AsExpected, "ready")
    }

    fn summary(outcomes: &[(&str, Outcome)]) -> Summary {
        let registry = Outcomes::default();
        for (name, outcome) in outcomes {
            registry.record("p", API, Some("ns"), name, *outcome);
        }
        registry.summarise("p", [API], Some("ns"))
    }

    #[test]
    fn every_instance_in_sync_is_synced_true() {
        let s = summary(&[("a", Outcome::InSync), ("b", Outcome::InSync)]);
        let c = synced(&ready(), &s);
        assert!(c.status);
        assert_eq!(c.message, "2 instance(s) in sync");
    }

    #[test]
    fn failing_instances_are_counted_per_reason_with_what_to_do() {
        let s = summary(&[
            ("a", Outcome::InSync),
            ("taken", Outcome::failure(Reason::ForeignObjectExists)),
            ("mine", Outcome::failure(Reason::OwnedByAnother)),
            ("bad", Outcome::failure(Reason::ProviderRejected)),
        ]);
        let c = synced(&ready(), &s);
        assert!(!c.status);
        assert_eq!(
            c.reason,
            Reason::ProviderRejected,
            "the most blocking reason"
        );
        assert!(
            c.message.starts_with("3 of 4 instance(s) not in sync"),
            "{}",
            c.message
        );
        assert!(
            c.message.contains(
                "conflict: 2 (ForeignObjectExists: 1 e.g. ns/taken; OwnedByAnother: 1 e.g. ns/mine)"
            ),
            "{}",
            c.message
        );
        assert!(c.message.contains("ProviderRejected: 1 e.g. ns/bad"));
        assert!(c.message.contains("fix the instance's spec"));
        assert!(c.message.contains("conflictPolicy: Adopt"));
    }

    #[test]
    fn a_binding_that_is_not_ready_is_not_synced_for_the_same_reason() {
        let not_ready = Desired::falsy(
            ConditionType::Ready,
            Reason::ConnectionNotReady,
            "Connection p is not Ready",
        );
        let c = synced(&not_ready, &Summary::default());
        assert!(!c.status);
        assert_eq!(c.reason, Reason::ConnectionNotReady);
        assert!(!is_instance_failure(c.reason.as_str()));
    }

    #[test]
    fn conflicts_are_counted_per_api() {
        let s = summary(&[
            ("taken", Outcome::failure(Reason::ForeignObjectExists)),
            ("b", Outcome::failure(Reason::ProviderRejected)),
        ]);
        let c = conflicts(&s);
        assert!(c.status);
        assert!(c.message.starts_with("1 instance(s)"));
        assert!(c.message.contains("widgets.example.org: 1"));
        assert!(!conflicts(&summary(&[("a", Outcome::InSync)])).status);
    }

    #[test]
    fn refused_writes_watches_and_related_copies_are_permission_denied() {
        assert!(!permission_denied(&summary(&[("a", Outcome::InSync)]), None).status);
        let s = summary(&[("w", Outcome::failure(Reason::Forbidden))]);
        let c = permission_denied(&s, None);
        assert!(c.status);
        assert_eq!(c.reason, Reason::Forbidden);
        assert!(
            c.message
                .contains("1 instance copy write(s) refused, e.g. ns/w")
        );

        let registry = Outcomes::default();
        registry.set_denied(
            "p",
            API,
            DeniedBy::Provider,
            Some("the provider refuses to list/watch it".into()),
        );
        let s = registry.summarise("p", [API], Some("ns"));
        assert!(permission_denied(&s, None).status);
        let c = synced(&ready(), &s);
        assert_eq!(
            c.reason,
            Reason::Forbidden,
            "nothing of a refused API syncs"
        );
        assert!(c.message.contains("kubectl kbind provider-rbac"));

        let related = Desired::falsy(
            ConditionType::RelatedResourcesSynced,
            Reason::Forbidden,
            "listing related secrets: forbidden",
        );
        let c = permission_denied(&Summary::default(), Some(&related));
        assert!(c.status);
        assert!(c.message.contains("listing related secrets"));
    }

    #[test]
    fn a_consumer_refusing_the_watch_is_permission_denied_naming_the_chart_value() {
        let registry = Outcomes::default();
        let said =
            "this cluster refuses the konnector list/watch of widgets.example.org: cannot list";
        registry.set_denied("p", API, DeniedBy::Consumer, Some(said.into()));
        let s = registry.summarise("p", [API], Some("ns"));
        let c = permission_denied(&s, None);
        assert!(c.status);
        assert_eq!(c.reason, Reason::Forbidden);
        assert!(c.message.starts_with(said), "{}", c.message);
        assert!(
            c.message.contains("rbac.boundResourceGroups"),
            "{}",
            c.message
        );
        assert!(!c.message.contains("provider-rbac"), "{}", c.message);
        let c = synced(&ready(), &s);
        assert_eq!(
            c.reason,
            Reason::Forbidden,
            "nothing of a refused API syncs"
        );
        assert!(
            c.message.contains("rbac.boundResourceGroups"),
            "{}",
            c.message
        );

        // The provider allowing its watch leaves the consumer's refusal standing.
        registry.set_denied("p", API, DeniedBy::Provider, None);
        let s = registry.summarise("p", [API], Some("ns"));
        assert!(permission_denied(&s, None).status);
        registry.set_denied("p", API, DeniedBy::Consumer, None);
        let s = registry.summarise("p", [API], Some("ns"));
        assert!(!permission_denied(&s, None).status);
    }
}
