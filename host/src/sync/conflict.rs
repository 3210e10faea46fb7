//! The ownership check in front of every provider write: read the target's two ownership
//! markers, hand them to the conflict policy, and act on its decision.
//!
//! ```text
//! provider target ──markers──▶ ConflictInput ──▶ conflict policy (Wasm) ──▶ Create | UpdateOwned
//!                                                                       | Adopt | Conflict
//! ```
//!
//! The decision itself is not made here: it comes from the conflict-policy module behind the
//! [`DecideConflict`] trait, so the host keeps no second decision table. This module only
//! extracts the markers (both UID annotations, never the managed label or the name: spec,
//! "The ownership check uses both UIDs") and names the outcomes.

use std::collections::BTreeMap;

use futures::future::BoxFuture;

use crate::api::names::{CONSUMER_CLUSTER_UID_ANNOTATION, CONSUMER_OBJECT_UID_ANNOTATION};
use crate::api::{ConflictPolicy, Reason};

/// The ownership markers found on an existing provider target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetMarkers {
    /// `core.kbind.io/consumer-cluster-uid`, when present.
    pub cluster_uid: Option<String>,
    /// `core.kbind.io/consumer-object-uid`, when present.
    pub object_uid: Option<String>,
}

impl TargetMarkers {
    /// Reads both markers from a target's annotations.
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> Self {
        Self {
            cluster_uid: annotations.get(CONSUMER_CLUSTER_UID_ANNOTATION).cloned(),
            object_uid: annotations.get(CONSUMER_OBJECT_UID_ANNOTATION).cloned(),
        }
    }

    /// Whether both markers name exactly this consumer cluster and object.
    pub fn owned_by(&self, cluster_uid: &str, object_uid: &str) -> bool {
        self.cluster_uid.as_deref() == Some(cluster_uid)
            && self.object_uid.as_deref() == Some(object_uid)
    }
}

/// Everything the conflict policy is told about one write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConflictInput {
    /// UID of this consumer cluster (pinned on the Connection).
    pub consumer_cluster_uid: String,
    /// UID of the consumer instance being synced.
    pub consumer_object_uid: String,
    /// The selecting binding's `conflictPolicy`.
    pub policy: ConflictPolicy,
    /// The existing provider target's markers, or `None` when there is no target.
    pub target: Option<TargetMarkers>,
}

/// Why a target is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConflictReason {
    /// The target exists without ownership markers and the policy is `Fail`.
    ForeignObjectExists,
    /// The target carries another consumer's or object's markers (or only one of them).
    OwnedByAnother,
}

impl ConflictReason {
    /// The condition/Event reason.
    pub const fn reason(self) -> Reason {
        match self {
            Self::ForeignObjectExists => Reason::ForeignObjectExists,
            Self::OwnedByAnother => Reason::OwnedByAnother,
        }
    }
}

/// What the conflict policy allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConflictDecision {
    /// No target: create it.
    Create,
    /// The target is ours: update it.
    UpdateOwned,
    /// The target is unmarked and the policy is `Adopt`: take it over.
    Adopt,
    /// Leave the target untouched and report.
    Conflict {
        /// Which kind of conflict.
        reason: ConflictReason,
        /// Operator-facing explanation.
        message: String,
    },
}

/// The conflict policy, as the sync engine sees it. Implemented by the Wasm policy runtime.
pub trait DecideConflict: Send + Sync + 'static {
    /// Decides one write. An `Err` is a policy failure (trap, timeout, malformed output) and
    /// must never lead to a write.
    fn decide<'a>(
        &'a self,
        input: &'a ConflictInput,
    ) -> BoxFuture<'a, Result<ConflictDecision, String>>;
}

/// The text stored in the consumer's `core.kbind.io/conflict` annotation: reason and message.
pub fn conflict_annotation_value(reason: ConflictReason, message: &str) -> String {
    format!("{}: {message}", reason.reason().as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_come_from_both_annotations_only() {
        let annotations = BTreeMap::from([
            (CONSUMER_CLUSTER_UID_ANNOTATION.to_string(), "c".to_string()),
            ("core.kbind.io/managed".to_string(), "true".to_string()),
        ]);
        let m = TargetMarkers::from_annotations(&annotations);
        assert_eq!(m.cluster_uid.as_deref(), Some("c"));
        assert_eq!(m.object_uid, None);
        assert!(!m.owned_by("c", "o"), "a partial marker is not ownership");
    }

    #[test]
    fn ownership_needs_both_uids_to_match() {
        let m = TargetMarkers {
            cluster_uid: Some("c".into()),
            object_uid: Some("o".into()),
        };
        assert!(m.owned_by("c", "o"));
        assert!(!m.owned_by("c", "other"));
        assert!(!m.owned_by("other", "o"));
    }

    #[test]
    fn annotation_value_starts_with_the_reason() {
        assert_eq!(
            conflict_annotation_value(ConflictReason::OwnedByAnother, "x"),
            "OwnedByAnother: x"
        );
    }
}
