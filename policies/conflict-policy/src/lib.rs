//! The built-in conflict policy: may the konnector write to the provider object at a
//! consumer instance's namespace/name?
//!
//! The decision table of the spec ("Ownership and conflicts"); the ownership check uses
//! both UIDs, never the managed label or the name:
//!
//! | provider target | `Fail` | `Adopt` |
//! |---|---|---|
//! | none | create | create |
//! | both markers are ours | update-owned | update-owned |
//! | no markers | conflict ForeignObjectExists | adopt |
//! | another consumer's or object's markers | conflict OwnedByAnother | conflict OwnedByAnother |
//! | only one marker (partial) | conflict OwnedByAnother | conflict OwnedByAnother |

use kbind_policy_sdk::conflict::{
    Conflict, ConflictInput, ConflictPolicy, ConflictReason, Decision, Guest,
};

/// The annotation names, as they appear in conflict messages.
const CLUSTER_MARKER: &str = "core.kbind.io/consumer-cluster-uid";
const OBJECT_MARKER: &str = "core.kbind.io/consumer-object-uid";

/// The built-in policy, exported as the component's `kbind:policy/conflict` interface.
pub struct BuiltinConflictPolicy;

impl Guest for BuiltinConflictPolicy {
    /// Takes no settings: an empty document, or the module is refused with a message naming
    /// what was given.
    fn configure(settings: String) -> Result<(), String> {
        kbind_policy_sdk::settings::none(&settings)
    }

    fn decide(input: ConflictInput) -> Result<Decision, String> {
        Ok(decide(&input))
    }
}

kbind_policy_sdk::export_conflict_policy!(BuiltinConflictPolicy);

/// Applies the decision table.
pub fn decide(input: &ConflictInput) -> Decision {
    let Some(target) = &input.target else {
        return Decision::Create;
    };
    let cluster = target.cluster_uid.as_deref();
    let object = target.object_uid.as_deref();
    match (cluster, object) {
        (Some(c), Some(o)) if c == input.consumer_cluster_uid && o == input.consumer_object_uid => {
            Decision::UpdateOwned
        }
        (None, None) => match input.policy {
            ConflictPolicy::Adopt => Decision::Adopt,
            ConflictPolicy::Fail => Decision::Conflict(Conflict {
                reason: ConflictReason::ForeignObjectExists,
                message: "the provider object exists without ownership markers and conflictPolicy is Fail; set conflictPolicy: Adopt on the binding to take it over".to_owned(),
            }),
        },
        (Some(c), Some(o)) => {
            let whose = if c != input.consumer_cluster_uid {
                format!("consumer cluster {c}")
            } else {
                format!("object {o} of this consumer cluster")
            };
            owned_by_another(format!(
                "the provider object is owned by {whose} ({CLUSTER_MARKER}={c}, {OBJECT_MARKER}={o}); neither Fail nor Adopt takes it"
            ))
        }
        (Some(c), None) => owned_by_another(format!(
            "the provider object carries only {CLUSTER_MARKER}={c} without {OBJECT_MARKER}; partial markers count as foreign ownership"
        )),
        (None, Some(o)) => owned_by_another(format!(
            "the provider object carries only {OBJECT_MARKER}={o} without {CLUSTER_MARKER}; partial markers count as foreign ownership"
        )),
    }
}

fn owned_by_another(message: String) -> Decision {
    Decision::Conflict(Conflict {
        reason: ConflictReason::OwnedByAnother,
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbind_policy_sdk::conflict::OwnershipMarkers;

    const CLUSTER: &str = "c-1";
    const OBJECT: &str = "o-1";

    fn input(
        policy: ConflictPolicy,
        target: Option<(Option<&str>, Option<&str>)>,
    ) -> ConflictInput {
        ConflictInput {
            consumer_cluster_uid: CLUSTER.into(),
            consumer_object_uid: OBJECT.into(),
            policy,
            target: target.map(|(c, o)| OwnershipMarkers {
                cluster_uid: c.map(Into::into),
                object_uid: o.map(Into::into),
            }),
        }
    }

    fn reason(d: Decision) -> Option<ConflictReason> {
        match d {
            Decision::Conflict(c) => Some(c.reason),
            _ => None,
        }
    }

    const BOTH: [ConflictPolicy; 2] = [ConflictPolicy::Fail, ConflictPolicy::Adopt];

    #[test]
    fn no_target_is_created() {
        for p in BOTH {
            assert_eq!(decide(&input(p, None)), Decision::Create);
        }
    }

    #[test]
    fn both_markers_ours_is_update_owned() {
        for p in BOTH {
            assert_eq!(
                decide(&input(p, Some((Some(CLUSTER), Some(OBJECT))))),
                Decision::UpdateOwned
            );
        }
    }

    #[test]
    fn fail_with_unmarked_target_is_foreign_object_exists() {
        let d = decide(&input(ConflictPolicy::Fail, Some((None, None))));
        assert_eq!(reason(d), Some(ConflictReason::ForeignObjectExists));
    }

    #[test]
    fn adopt_with_both_markers_absent_adopts() {
        assert_eq!(
            decide(&input(ConflictPolicy::Adopt, Some((None, None)))),
            Decision::Adopt
        );
    }

    #[test]
    fn another_consumer_cluster_is_owned_by_another_under_either_policy() {
        for p in BOTH {
            let d = decide(&input(p, Some((Some("c-2"), Some(OBJECT)))));
            assert_eq!(reason(d), Some(ConflictReason::OwnedByAnother), "{p:?}");
        }
    }

    #[test]
    fn another_object_of_this_cluster_is_owned_by_another_under_either_policy() {
        for p in BOTH {
            let d = decide(&input(p, Some((Some(CLUSTER), Some("o-2")))));
            assert_eq!(reason(d), Some(ConflictReason::OwnedByAnother), "{p:?}");
        }
    }

    #[test]
    fn partial_markers_count_as_foreign() {
        for p in BOTH {
            for target in [
                (Some(CLUSTER), None),
                (None, Some(OBJECT)),
                (Some("c-2"), None),
            ] {
                let d = decide(&input(p, Some(target)));
                assert_eq!(
                    reason(d),
                    Some(ConflictReason::OwnedByAnother),
                    "{p:?} {target:?}"
                );
            }
        }
    }

    #[test]
    fn conflict_messages_name_the_markers_found() {
        let Decision::Conflict(c) = decide(&input(
            ConflictPolicy::Adopt,
            Some((Some("c-2"), Some("o-9"))),
        )) else {
            panic!("expected a conflict");
        };
        assert!(c.message.contains("consumer cluster c-2"), "{}", c.message);
        assert!(
            c.message.contains("core.kbind.io/consumer-object-uid=o-9"),
            "{}",
            c.message
        );
    }
}
