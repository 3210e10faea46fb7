//! Copy ownership: how a provider copy names the consumer object it belongs to, and the one
//! rule for deleting an owned copy. Both the sync engine (deleting one instance) and the
//! binding teardown (draining an API) decide with these, so the two cannot drift apart.
//!
//! ```text
//! provider copy ──annotations──▶ OwnershipMarkers { consumer-cluster-uid, consumer-object-uid }
//!               ──recorded object──▶ origin_of ──▶ InstanceKey (namespace, name)
//!
//! deleting an instance: deletion-policy=Orphan ─────────────▶ Orphaned (copy kept)
//!                       no copy ────────────────────────────▶ Absent
//!                       markers not exactly this object's ─▶ NotOurs (delete nothing)
//!                       ours, already terminating ─────────▶ Terminating
//!                       ours ──────────────────────────────▶ Delete (UID precondition)
//! ```
//!
//! Ownership is decided by the two UID annotations only, never by the managed label or the
//! name (spec: "The ownership check uses both UIDs"). Also here: the namespaces of the cluster
//! itself, which no copy of any kind (instance or related) is ever written to.

use std::collections::BTreeMap;

use kube::api::{DeleteParams, DynamicObject, Preconditions};
use kube::{Resource, ResourceExt};
use serde::{Deserialize, Serialize};

use crate::api::IsolationStrategy;
use crate::api::names::{
    CONSUMER_CLUSTER_UID_ANNOTATION, CONSUMER_NAME_ANNOTATION, CONSUMER_NAMESPACE_ANNOTATION,
    CONSUMER_OBJECT_UID_ANNOTATION, DELETION_POLICY_ANNOTATION, DELETION_POLICY_ORPHAN,
};

/// The cluster's own namespaces: no placement puts a copy there and related copies never
/// touch them, on either cluster.
pub const PROTECTED_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

/// Whether `namespace` is one of [`PROTECTED_NAMESPACES`], so that every caller refuses the same
/// namespaces.
pub fn is_protected_namespace(namespace: &str) -> bool {
    PROTECTED_NAMESPACES.contains(&namespace)
}

/// Namespaces no copy goes to whatever a module answers: the cluster's own, and the one the
/// heartbeat Lease lives in.
pub fn protected(namespace: &str, heartbeat_namespace: &str) -> Option<&'static str> {
    if is_protected_namespace(namespace) {
        Some("a Kubernetes system namespace")
    } else if namespace == heartbeat_namespace {
        Some("the namespace of the konnector's heartbeat Lease")
    } else {
        None
    }
}

/// The consumer ownership annotations found on a provider object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OwnershipMarkers {
    /// `core.kbind.io/consumer-cluster-uid`, if present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_uid: Option<String>,
    /// `core.kbind.io/consumer-object-uid`, if present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_uid: Option<String>,
}

impl OwnershipMarkers {
    /// Reads the markers from an object's annotations.
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> Self {
        Self {
            cluster_uid: annotations.get(CONSUMER_CLUSTER_UID_ANNOTATION).cloned(),
            object_uid: annotations.get(CONSUMER_OBJECT_UID_ANNOTATION).cloned(),
        }
    }
}

/// Whether `target` carries both markers naming exactly this consumer cluster and object.
pub fn owned_by(
    target: &DynamicObject,
    consumer_cluster_uid: &str,
    consumer_object_uid: &str,
) -> bool {
    let markers = OwnershipMarkers::from_annotations(target.annotations());
    markers.cluster_uid.as_deref() == Some(consumer_cluster_uid)
        && markers.object_uid.as_deref() == Some(consumer_object_uid)
}

/// The namespace and name of a consumer instance.
pub type InstanceKey = (Option<String>, String);

/// The key of `obj`: its namespace and name.
pub fn key_of(obj: &impl Resource) -> InstanceKey {
    let meta = obj.meta();
    (
        meta.namespace.clone(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// The consumer instance a provider copy was copied from: the recorded namespace and name, or
/// the copy's own when it records none (placed where its object is). Under `None` copies are
/// where their objects are, whatever a copy's annotations say.
pub fn origin_of(copy: &DynamicObject, strategy: IsolationStrategy) -> InstanceKey {
    if strategy == IsolationStrategy::None {
        return key_of(copy);
    }
    let annotations = copy.annotations();
    match annotations.get(CONSUMER_NAME_ANNOTATION) {
        Some(name) => (
            annotations.get(CONSUMER_NAMESPACE_ANNOTATION).cloned(),
            name.clone(),
        ),
        None => key_of(copy),
    }
}

/// The consumer instance a placed copy records (`core.kbind.io/consumer-namespace` and
/// `core.kbind.io/consumer-name`), or `None` when it records none: a teardown finds placed
/// copies by this, never by their labels alone.
pub fn recorded_origin(copy: &DynamicObject) -> Option<InstanceKey> {
    let annotations = copy.annotations();
    let name = annotations.get(CONSUMER_NAME_ANNOTATION)?;
    Some((
        annotations.get(CONSUMER_NAMESPACE_ANNOTATION).cloned(),
        name.clone(),
    ))
}

/// Whether a consumer instance asks for its provider copy to be kept when it is deleted
/// (`core.kbind.io/deletion-policy: Orphan`).
pub fn orphaned(instance: &impl Resource) -> bool {
    instance
        .meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(DELETION_POLICY_ANNOTATION))
        .is_some_and(|v| v == DELETION_POLICY_ORPHAN)
}

/// What deleting a consumer instance does to its provider copy.
#[derive(Clone, Debug, PartialEq)]
pub enum CopyDeletion {
    /// There is no copy.
    Absent,
    /// The copy is not exactly this instance's (foreign, conflicting, or an older
    /// incarnation's): it is left alone.
    NotOurs,
    /// The copy is ours and already being deleted (provider-side finalizers).
    Terminating,
    /// The copy is ours: delete it with these parameters (its UID as precondition, so a
    /// replaced object is never deleted).
    Delete(DeleteParams),
}

/// The one rule for an owned copy: `copy` (if any) is deleted only when both markers name
/// `consumer_cluster_uid` and `consumer_object_uid`, and only under its own UID. An instance
/// that asks to be orphaned is checked with [`orphaned`] before this is asked.
pub fn copy_deletion(
    copy: Option<&DynamicObject>,
    consumer_cluster_uid: &str,
    consumer_object_uid: &str,
) -> CopyDeletion {
    let Some(copy) = copy else {
        return CopyDeletion::Absent;
    };
    if !owned_by(copy, consumer_cluster_uid, consumer_object_uid) {
        return CopyDeletion::NotOurs;
    }
    if copy.metadata.deletion_timestamp.is_some() {
        return CopyDeletion::Terminating;
    }
    CopyDeletion::Delete(DeleteParams {
        preconditions: Some(Preconditions {
            uid: copy.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::api::ObjectMeta;

    fn copy(annotations: &[(&str, &str)], terminating: bool) -> DynamicObject {
        DynamicObject {
            types: None,
            metadata: ObjectMeta {
                name: Some("w".into()),
                namespace: Some("team-a".into()),
                uid: Some("copy-uid".into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                        .collect(),
                ),
                deletion_timestamp: terminating
                    .then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
                ..ObjectMeta::default()
            },
            data: serde_json::Value::Null,
        }
    }

    const OURS: [(&str, &str); 2] = [
        (CONSUMER_CLUSTER_UID_ANNOTATION, "cluster"),
        (CONSUMER_OBJECT_UID_ANNOTATION, "object"),
    ];

    #[test]
    fn an_owned_copy_is_deleted_under_its_own_uid() {
        let CopyDeletion::Delete(params) =
            copy_deletion(Some(&copy(&OURS, false)), "cluster", "object")
        else {
            panic!("an owned copy is deleted");
        };
        let preconditions = params.preconditions.expect("a UID precondition");
        assert_eq!(preconditions.uid.as_deref(), Some("copy-uid"));
    }

    #[test]
    fn a_copy_with_one_marker_or_anothers_is_not_ours() {
        let partial = [(CONSUMER_CLUSTER_UID_ANNOTATION, "cluster")];
        assert_eq!(
            copy_deletion(Some(&copy(&partial, false)), "cluster", "object"),
            CopyDeletion::NotOurs
        );
        assert_eq!(
            copy_deletion(Some(&copy(&OURS, false)), "cluster", "another-object"),
            CopyDeletion::NotOurs
        );
    }

    #[test]
    fn no_copy_is_absent_and_a_terminating_copy_is_left_to_finish() {
        assert_eq!(
            copy_deletion(None, "cluster", "object"),
            CopyDeletion::Absent
        );
        assert_eq!(
            copy_deletion(Some(&copy(&OURS, true)), "cluster", "object"),
            CopyDeletion::Terminating
        );
    }

    #[test]
    fn a_placed_copy_is_of_the_object_it_records_and_of_none_without_a_record() {
        let recorded = copy(
            &[
                (CONSUMER_NAMESPACE_ANNOTATION, "team-a"),
                (CONSUMER_NAME_ANNOTATION, "mine"),
            ],
            false,
        );
        assert_eq!(
            recorded_origin(&recorded),
            Some((Some("team-a".into()), "mine".into()))
        );
        assert_eq!(recorded_origin(&copy(&OURS, false)), None);
    }

    #[test]
    fn only_the_orphan_deletion_policy_orphans() {
        let mut instance = copy(
            &[(DELETION_POLICY_ANNOTATION, DELETION_POLICY_ORPHAN)],
            false,
        );
        assert!(orphaned(&instance));
        instance.metadata.annotations = Some(BTreeMap::from([(
            DELETION_POLICY_ANNOTATION.to_string(),
            "Delete".to_string(),
        )]));
        assert!(!orphaned(&instance));
        instance.metadata.annotations = None;
        assert!(!orphaned(&instance));
    }
}
