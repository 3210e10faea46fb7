//! What gets written to the provider, as pure functions over objects: the provider copy of a
//! consumer instance and whether the provider copy already matches. The status written back
//! is [`super::instance_status`].
//!
//! ```text
//! consumer instance ──spec + managed label + both UID markers──▶ provider copy (SSA, force)
//! consumer instance ◀──────────────── status ───────────────────── provider copy
//! ```
//!
//! Spec: "The engine does not copy arbitrary consumer labels, annotations, owner references,
//! or finalizers to the provider, it writes its own management and ownership metadata.
//! Top-level fields other than spec are not a generic object replication interface."

use kube::api::DynamicObject;
use kube::core::ApiResource;
use serde_json::{Value, json};

use crate::api::names::{
    CONSUMER_CLUSTER_LABEL, CONSUMER_CLUSTER_UID_ANNOTATION, CONSUMER_OBJECT_UID_ANNOTATION,
    MANAGED_LABEL,
};

use super::cache::copy::CachedCopy;
use super::cache::instance::CachedInstance;
use super::placement::origin_annotations;
use crate::api::IsolationStrategy;
use crate::markers::key_of;
use crate::policy::Placement;

/// The server-side apply body for the provider copy: identity, the managed label, the
/// consumer-cluster label (what the provider watch selects on), both ownership markers and
/// `spec`, nothing else. `resource_version` makes the apply fail if
/// the target changed since it was read (the ownership check must hold for the object that
/// is actually written).
pub(super) fn provider_copy(
    consumer: &DynamicObject,
    place: &Placement,
    ar: &ApiResource,
    consumer_cluster_uid: &str,
    consumer_object_uid: &str,
    resource_version: Option<&str>,
) -> Value {
    let mut metadata = json!({
        "name": place.name,
        "labels": { MANAGED_LABEL: "true", CONSUMER_CLUSTER_LABEL: consumer_cluster_uid },
        "annotations": {
            CONSUMER_CLUSTER_UID_ANNOTATION: consumer_cluster_uid,
            CONSUMER_OBJECT_UID_ANNOTATION: consumer_object_uid,
        },
    });
    for (key, value) in origin_annotations(&key_of(consumer), place) {
        metadata["annotations"][key] = json!(value);
    }
    if let Some(ns) = &place.namespace {
        metadata["namespace"] = json!(ns);
    }
    if let Some(rv) = resource_version {
        metadata["resourceVersion"] = json!(rv);
    }
    let mut body = json!({
        "apiVersion": ar.api_version,
        "kind": ar.kind,
        "metadata": metadata,
    });
    if let Some(spec) = consumer.data.get("spec").filter(|s| !s.is_null()) {
        body["spec"] = spec.clone();
    }
    body
}

/// Whether the provider copy already is what [`provider_copy`] would write, so the write can
/// be skipped: both labels, both markers naming this consumer object, the object it records
/// (when placed elsewhere) is this one, identical `spec`. A copy written before the
/// consumer-cluster label existed is rewritten once, so the label-selected provider watch sees
/// it from then on.
pub(super) fn provider_copy_matches(
    target: &CachedCopy,
    consumer: &CachedInstance,
    strategy: IsolationStrategy,
    consumer_cluster_uid: &str,
    consumer_object_uid: &str,
) -> bool {
    let meta = &consumer.metadata;
    target.labelled_for(consumer_cluster_uid)
        && target.owned_by(consumer_cluster_uid, consumer_object_uid)
        && target.is_of(
            strategy,
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        )
        && target.spec_digest_is(consumer.spec_digest())
}

/// The object's `spec`, unless absent or null.
pub(super) fn spec_of(obj: &DynamicObject) -> Option<&Value> {
    obj.data.get("spec").filter(|s| !s.is_null())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use std::collections::BTreeMap;

    use crate::sync::testing::{consumer_widget, widgets as ar};

    /// Where a copy goes under `None`.
    fn here(c: &DynamicObject) -> Placement {
        crate::sync::placement::same_place(&key_of(c))
    }

    /// Whether `p` is `c`'s copy as written under `None` for object UID `uid`.
    fn matches(p: &DynamicObject, c: &DynamicObject, uid: &str) -> bool {
        provider_copy_matches(
            &CachedCopy::of(p),
            &CachedInstance::of(c.clone()),
            IsolationStrategy::None,
            "cluster-uid",
            uid,
        )
    }

    fn consumer() -> DynamicObject {
        let mut obj =
            consumer_widget(json!({ "spec": { "size": 3 }, "status": { "phase": "Old" } }));
        let meta = &mut obj.metadata;
        meta.labels = Some(BTreeMap::from([("app".into(), "x".into())]));
        meta.annotations = Some(BTreeMap::from([("note".into(), "private".into())]));
        meta.finalizers = Some(vec!["core.kbind.io/syncer".into(), "other/f".into()]);
        meta.owner_references = Some(vec![OwnerReference {
            name: "owner".into(),
            ..Default::default()
        }]);
        obj
    }

    #[test]
    fn provider_copy_carries_spec_and_markers_only() {
        let body = provider_copy(
            &consumer(),
            &here(&consumer()),
            &ar(),
            "cluster-uid",
            "obj-uid",
            None,
        );
        assert_eq!(
            body,
            json!({
                "apiVersion": "example.org/v1",
                "kind": "Widget",
                "metadata": {
                    "name": "w",
                    "namespace": "team-a",
                    "labels": {
                        "core.kbind.io/managed": "true",
                        "core.kbind.io/consumer-cluster": "cluster-uid",
                    },
                    "annotations": {
                        "core.kbind.io/consumer-cluster-uid": "cluster-uid",
                        "core.kbind.io/consumer-object-uid": "obj-uid",
                    },
                },
                "spec": { "size": 3 },
            })
        );
    }

    #[test]
    fn provider_copy_of_cluster_scoped_instance_has_no_namespace() {
        let mut c = consumer();
        c.metadata.namespace = None;
        let body = provider_copy(&c, &here(&c), &ar(), "c", "o", Some("42"));
        assert!(body["metadata"].get("namespace").is_none());
        assert_eq!(body["metadata"]["resourceVersion"], "42");
    }

    fn provider_of(c: &DynamicObject) -> DynamicObject {
        let body = provider_copy(c, &here(c), &ar(), "cluster-uid", "obj-uid", None);
        let mut p: DynamicObject = serde_json::from_value(body).expect("valid object");
        p.metadata.uid = Some("provider-uid".into());
        p
    }

    #[test]
    fn matching_copy_is_recognised_and_any_spec_change_is_not() {
        let c = consumer();
        let mut p = provider_of(&c);
        assert!(matches(&p, &c, "obj-uid"));
        assert!(!matches(&p, &c, "new-uid"), "recreated object");
        p.data["spec"]["size"] = json!(4);
        assert!(!matches(&p, &c, "obj-uid"));
    }

    #[test]
    fn a_placed_copy_records_its_object_and_matches_only_it() {
        let c = consumer();
        let place = Placement {
            namespace: Some("east-team-a".into()),
            name: "w".into(),
        };
        let body = provider_copy(&c, &place, &ar(), "cluster-uid", "obj-uid", None);
        assert_eq!(body["metadata"]["namespace"], "east-team-a");
        assert_eq!(
            body["metadata"]["annotations"]["core.kbind.io/consumer-namespace"],
            "team-a"
        );
        assert_eq!(
            body["metadata"]["annotations"]["core.kbind.io/consumer-name"],
            "w"
        );
        let mut p: DynamicObject = serde_json::from_value(body).expect("valid object");
        let strategy = IsolationStrategy::Namespaced;
        assert!(provider_copy_matches(
            &CachedCopy::of(&p),
            &CachedInstance::of(c.clone()),
            strategy,
            "cluster-uid",
            "obj-uid"
        ));
        if let Some(annotations) = p.metadata.annotations.as_mut() {
            annotations.insert("core.kbind.io/consumer-name".into(), "other".into());
        }
        assert!(
            !provider_copy_matches(
                &CachedCopy::of(&p),
                &CachedInstance::of(c.clone()),
                strategy,
                "cluster-uid",
                "obj-uid"
            ),
            "a copy recording another object is rewritten"
        );
    }

    #[test]
    fn missing_label_means_the_copy_must_be_rewritten() {
        let c = consumer();
        let mut p = provider_of(&c);
        p.metadata.labels = None;
        assert!(!matches(&p, &c, "obj-uid"));
    }

    #[test]
    fn copy_without_the_consumer_cluster_label_is_rewritten_once() {
        let c = consumer();
        let mut p = provider_of(&c);
        if let Some(labels) = p.metadata.labels.as_mut() {
            labels.remove(CONSUMER_CLUSTER_LABEL);
        }
        assert!(!matches(&p, &c, "obj-uid"));
    }
}
