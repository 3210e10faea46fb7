//! The ownership check in front of every provider write: read the target's two ownership
//! markers, ask the conflict-policy module, act on its answer.
//!
//! ```text
//! provider target ──markers──▶ ConflictInput ──▶ Policies::decide_conflict (Wasm)
//!                                                   ──▶ Create | UpdateOwned | Adopt | Conflict
//! ```
//!
//! The module chooses (`policies/conflict-policy`, swappable), the host enforces: every answer
//! is checked against the ownership rule in `policy::validate` before anything is written
//! (`Create` only for an absent target, `UpdateOwned` only on both of our markers, `Adopt`
//! only under `conflictPolicy: Adopt` on an unmarked target); a refused answer is a policy
//! failure on the object. What stays here is reading the markers (both UID annotations, never
//! the managed label or the name: spec, "The ownership check uses both UIDs"). The deletion
//! path's "is this copy ours" check is not a policy choice and lives in `crate::markers`.

use crate::api::ConflictPolicy;
use crate::api::Reason;
use crate::policy::{ConflictInput, ConflictReason};

use super::cache::copy::CachedCopy;

/// The question for the conflict policy about writing `consumer`'s copy over `target`.
pub(super) fn conflict_input(
    consumer_cluster_uid: &str,
    consumer_object_uid: &str,
    policy: ConflictPolicy,
    target: Option<&CachedCopy>,
) -> ConflictInput {
    ConflictInput {
        consumer_cluster_uid: consumer_cluster_uid.to_string(),
        consumer_object_uid: consumer_object_uid.to_string(),
        conflict_policy: policy,
        target: target.map(|t| t.markers.clone()),
    }
}

/// The text stored in the consumer's `core.kbind.io/conflict` annotation: reason and message.
pub(super) fn conflict_annotation_value(reason: ConflictReason, message: &str) -> String {
    format!("{}: {message}", Reason::from(reason).as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::names::{
        CONSUMER_CLUSTER_UID_ANNOTATION, CONSUMER_OBJECT_UID_ANNOTATION, MANAGED_LABEL,
    };
    use crate::markers::owned_by;
    use kube::api::DynamicObject;
    use std::collections::BTreeMap;

    fn target(annotations: &[(&str, &str)]) -> DynamicObject {
        let mut obj = DynamicObject {
            types: None,
            metadata: Default::default(),
            data: serde_json::Value::Null,
        };
        obj.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect::<BTreeMap<_, _>>(),
        );
        obj.metadata.labels = Some(BTreeMap::from([(MANAGED_LABEL.into(), "true".into())]));
        obj
    }

    #[test]
    fn markers_come_from_both_annotations_only() {
        let t = target(&[(CONSUMER_CLUSTER_UID_ANNOTATION, "c")]);
        let input = conflict_input("c", "o", ConflictPolicy::Adopt, Some(&CachedCopy::of(&t)));
        let markers = input.target.expect("a target");
        assert_eq!(markers.cluster_uid.as_deref(), Some("c"));
        assert_eq!(markers.object_uid, None);
        assert!(
            !owned_by(&t, "c", "o"),
            "a partial marker (and the label) is not ownership"
        );
        assert_eq!(
            conflict_input("c", "o", ConflictPolicy::Fail, None).target,
            None
        );
    }

    #[test]
    fn ownership_needs_both_uids_to_match() {
        let t = target(&[
            (CONSUMER_CLUSTER_UID_ANNOTATION, "c"),
            (CONSUMER_OBJECT_UID_ANNOTATION, "o"),
        ]);
        assert!(owned_by(&t, "c", "o"));
        assert!(!owned_by(&t, "c", "other"));
        assert!(!owned_by(&t, "other", "o"));
    }

    #[test]
    fn annotation_value_starts_with_the_reason() {
        assert_eq!(
            conflict_annotation_value(ConflictReason::OwnedByAnother, "x"),
            "OwnedByAnother: x"
        );
    }
}
