//! The consumer instance's status, as one pure function: the provider's status copied back,
//! and kbind's own `Synced` condition saying whether this instance is in sync.
//!
//! ```text
//! provider copy's status (or, without one, the instance's own) ─┐
//! Synced: True (observedGeneration) | False (reason, message) ───┴▶ status apply body, or
//!                                                                   nothing when unchanged
//! ```
//!
//! Spec: "Absence of provider status does not actively clear an existing consumer status."
//! kbind writes the `Synced` condition type on instances, so "in sync" can be told from "never
//! seen" and every failure reason clears once the cause is gone; but an operator on the
//! provider may own a condition of that type too (trust-manager's bundles, Crossplane's
//! resources), and while the copy is in sync that one is the product's word on the instance:
//! it is copied as it is, and kbind's `Synced=True` is written only where the provider's
//! status has no `Synced`. A failure replaces it (the provider's status is not about the
//! instance's current spec then). `lastTransitionTime` moves only when the status flips.

use k8s_openapi::jiff::Timestamp;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use serde_json::{Value, json};

use crate::api::{ConditionType, Reason};

/// What the instance's `Synced` condition says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Synced<'a> {
    /// The provider copy matches the spec of this generation.
    True {
        /// `metadata.generation` of the instance the copy was written from.
        generation: Option<i64>,
        /// Where the copy is, `namespace/name`, when isolation placed it elsewhere than the
        /// instance: the message says so, so `kubectl kbind status` can show it.
        placed_at: Option<&'a str>,
    },
    /// The copy could not be written; the reason says why.
    False {
        /// ForeignObjectExists, OwnedByAnother, PolicyFailed, ProviderRejected, Forbidden.
        reason: Reason,
        /// What the operator should do.
        message: &'a str,
    },
}

/// The status-subresource apply body for the instance, or `None` when it already is that:
/// the provider copy's status when it has one, else the instance's current status, with `Synced` set
/// as given (`None` leaves conditions as they are: the API's schema prunes them).
pub(super) fn instance_status(
    consumer: &DynamicObject,
    ar: &ApiResource,
    provider_status: Option<&Value>,
    synced: Option<Synced<'_>>,
) -> Option<Value> {
    let current = consumer.data.get("status").filter(|s| !s.is_null());
    let provider_status = provider_status.filter(|s| !s.is_null());
    let provider_says_synced = keeps_synced(provider_status);
    let mut status = provider_status
        .or(current)
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Some(synced) = synced {
        if !status.is_object() {
            // A scalar status cannot carry conditions; copy it as it is.
            return (Some(&status) != current).then(|| status_body(consumer, ar, status));
        }
        let operators_word = provider_says_synced && matches!(synced, Synced::True { .. });
        if !operators_word {
            set_synced(&mut status, current, synced);
        }
    }
    if Some(&status) == current || (current.is_none() && status == json!({})) {
        return None;
    }
    Some(status_body(consumer, ar, status))
}

/// The provider copy's `status` with each `observedGeneration` it carries (its own and each
/// condition's) told in the instance's generations instead of the copy's. The two clusters
/// count generations apart (an instance edited before it was bound, a copy re-created or
/// repaired), but a copy in sync holds the instance's current spec: what observed the copy's
/// current generation observed the instance's, and anything older observed an older spec, so
/// it says less than the instance's generation. Tools that compare `observedGeneration` with
/// `metadata.generation` (kstatus, GitOps health checks) then read the consumer object right.
pub(super) fn in_instance_generations(
    mut status: Value,
    copy_generation: Option<i64>,
    instance_generation: Option<i64>,
) -> Value {
    let (Some(copy), Some(instance)) = (copy_generation, instance_generation) else {
        return status;
    };
    let told = |observed: &mut Value| {
        if let Some(seen) = observed.as_i64() {
            let said = if seen == copy {
                instance
            } else {
                seen.min(instance - 1).max(0)
            };
            *observed = json!(said);
        }
    };
    if let Some(observed) = status.get_mut("observedGeneration") {
        told(observed);
    }
    if let Some(list) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        for condition in list {
            if let Some(observed) = condition.get_mut("observedGeneration") {
                told(observed);
            }
        }
    }
    status
}

/// Whether `status` (as the apiserver stored it) kept kbind's `Synced` condition; an API
/// whose status schema prunes conditions never does.
pub(super) fn keeps_synced(status: Option<&Value>) -> bool {
    conditions(status).any(|c| c["type"] == ConditionType::Synced.as_str())
}

/// Whether `status` already carries kbind's `Synced=False` with this reason and message: the
/// failure was reported before, and its Warning Event need not be published again.
pub(super) fn already_says(status: Option<&Value>, reason: Reason, message: &str) -> bool {
    conditions(status).any(|c| {
        c["type"] == ConditionType::Synced.as_str()
            && c["status"] == "False"
            && c["reason"] == reason.as_str()
            && c["message"] == message
    })
}

fn conditions(status: Option<&Value>) -> impl Iterator<Item = &Value> {
    status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The `Synced=True` message of a copy where its instance is.
const IN_SYNC_MESSAGE: &str = "the provider copy matches the spec";
/// How the `Synced=True` message of a placed copy begins; the copy's `namespace/name` follows.
pub const PLACED_PREFIX: &str = "the provider copy at ";

fn set_synced(status: &mut Value, current: Option<&Value>, synced: Synced<'_>) {
    let type_ = ConditionType::Synced.as_str();
    let (state, reason, message, generation) = match synced {
        Synced::True {
            generation,
            placed_at: None,
        } => (
            "True",
            Reason::AsExpected,
            IN_SYNC_MESSAGE.to_string(),
            generation,
        ),
        Synced::True {
            generation,
            placed_at: Some(at),
        } => (
            "True",
            Reason::AsExpected,
            format!("{PLACED_PREFIX}{at} matches the spec"),
            generation,
        ),
        Synced::False { reason, message } => ("False", reason, message.to_string(), None),
    };
    let previous = conditions(current).find(|c| c["type"] == type_);
    let since = previous
        .filter(|c| c["status"] == state)
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| json!(Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()));
    let mut condition = json!({
        "type": type_,
        "status": state,
        "reason": reason.as_str(),
        "message": message,
        "lastTransitionTime": since,
    });
    if let Some(generation) = generation {
        condition["observedGeneration"] = json!(generation);
    }
    let mut list: Vec<Value> = conditions(Some(status))
        .filter(|c| c["type"] != type_)
        .cloned()
        .collect();
    list.push(condition);
    status["conditions"] = Value::Array(list);
}

fn status_body(consumer: &DynamicObject, ar: &ApiResource, status: Value) -> Value {
    let mut metadata = json!({ "name": consumer.metadata.name });
    if let Some(ns) = &consumer.metadata.namespace {
        metadata["namespace"] = json!(ns);
    }
    json!({
        "apiVersion": ar.api_version,
        "kind": ar.kind,
        "metadata": metadata,
        "status": status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    use crate::sync::testing::widgets as ar;

    fn object(data: Value) -> DynamicObject {
        DynamicObject {
            types: None,
            metadata: ObjectMeta {
                name: Some("w".into()),
                namespace: Some("team-a".into()),
                generation: Some(3),
                ..Default::default()
            },
            data,
        }
    }

    fn written(body: Option<Value>) -> Value {
        body.map(|b| b["status"].clone()).unwrap_or(Value::Null)
    }

    const IN_SYNC: Synced<'static> = Synced::True {
        generation: Some(3),
        placed_at: None,
    };

    #[test]
    fn provider_status_is_copied_only_when_present_and_different() {
        let c = object(json!({ "spec": {}, "status": { "phase": "Old" } }));
        let p = object(json!({ "spec": {} }));
        assert_eq!(
            instance_status(&c, &ar(), p.data.get("status"), None),
            None,
            "absent provider status never clears"
        );
        let p = object(json!({ "status": { "phase": "Old" } }));
        assert_eq!(
            instance_status(&c, &ar(), p.data.get("status"), None),
            None,
            "equal"
        );
        let p = object(json!({ "status": { "phase": "Ready" } }));
        let body = instance_status(&c, &ar(), p.data.get("status"), None).expect("a write");
        assert_eq!(body["status"], json!({ "phase": "Ready" }));
        assert_eq!(
            body["metadata"],
            json!({ "name": "w", "namespace": "team-a" })
        );
    }

    #[test]
    fn in_sync_instance_says_synced_true_with_its_generation() {
        let c = object(json!({ "spec": {} }));
        let status = written(instance_status(&c, &ar(), None, Some(IN_SYNC)));
        let condition = &status["conditions"][0];
        assert_eq!(condition["type"], "Synced");
        assert_eq!(condition["status"], "True");
        assert_eq!(condition["reason"], "AsExpected");
        assert_eq!(condition["observedGeneration"], 3);
        let c = object(json!({ "spec": {}, "status": status }));
        assert_eq!(
            instance_status(&c, &ar(), None, Some(IN_SYNC)),
            None,
            "written once"
        );
    }

    #[test]
    fn a_provider_synced_condition_is_kept_in_sync_and_replaced_on_failure() {
        let c = object(json!({ "spec": {} }));
        let p = object(json!({ "status": { "phase": "Ready", "conditions": [
            { "type": "Available", "status": "True" },
            { "type": "Synced", "status": "False", "reason": "BackendDown" },
        ] } }));
        let status = written(instance_status(
            &c,
            &ar(),
            p.data.get("status"),
            Some(IN_SYNC),
        ));
        assert_eq!(status["phase"], "Ready");
        let types: Vec<_> = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| (c["type"].clone(), c["status"].clone()))
            .collect();
        assert_eq!(
            types,
            vec![
                (json!("Available"), json!("True")),
                (json!("Synced"), json!("False"))
            ],
            "the provider's own Synced is the operator's word while the copy is in sync"
        );
        assert_eq!(status["conditions"][1]["reason"], "BackendDown");
        // A failure replaces it: the provider's status is not about the current spec then.
        let failed = Synced::False {
            reason: Reason::ProviderRejected,
            message: "invalid",
        };
        let status = written(instance_status(
            &c,
            &ar(),
            p.data.get("status"),
            Some(failed),
        ));
        assert_eq!(status["conditions"][1]["reason"], "ProviderRejected");
    }

    #[test]
    fn a_failure_reason_clears_when_the_cause_is_gone() {
        let c = object(json!({ "spec": {}, "status": { "phase": "Old" } }));
        let failed = Synced::False {
            reason: Reason::ProviderRejected,
            message: "spec.size: must be positive",
        };
        let status = written(instance_status(&c, &ar(), None, Some(failed)));
        assert_eq!(status["phase"], "Old", "the rest of status is kept");
        assert_eq!(status["conditions"][0]["reason"], "ProviderRejected");
        let c = object(json!({ "spec": {}, "status": status }));
        assert_eq!(instance_status(&c, &ar(), None, Some(failed)), None);
        let status = written(instance_status(&c, &ar(), None, Some(IN_SYNC)));
        assert_eq!(status["conditions"].as_array().map(Vec::len), Some(1));
        assert_eq!(status["conditions"][0]["status"], "True");
        assert_eq!(status["conditions"][0]["reason"], "AsExpected");
    }

    #[test]
    fn transition_time_moves_only_when_the_status_flips() {
        let c = object(json!({ "status": { "conditions": [{
            "type": "Synced", "status": "False", "reason": "PolicyFailed", "message": "a",
            "lastTransitionTime": "2020-01-01T00:00:00Z",
        }] } }));
        let again = Synced::False {
            reason: Reason::ForeignObjectExists,
            message: "b",
        };
        let status = written(instance_status(&c, &ar(), None, Some(again)));
        assert_eq!(
            status["conditions"][0]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
        let status = written(instance_status(&c, &ar(), None, Some(IN_SYNC)));
        assert_ne!(
            status["conditions"][0]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
    }

    #[test]
    fn a_reported_failure_is_recognised_by_reason_and_message() {
        let c = object(json!({ "spec": {} }));
        let failed = Synced::False {
            reason: Reason::Forbidden,
            message: "grant create",
        };
        let status = written(instance_status(&c, &ar(), None, Some(failed)));
        assert!(already_says(
            Some(&status),
            Reason::Forbidden,
            "grant create"
        ));
        assert!(!already_says(
            Some(&status),
            Reason::Forbidden,
            "another message"
        ));
        assert!(!already_says(
            Some(&status),
            Reason::ProviderRejected,
            "grant create"
        ));
        let status = written(instance_status(&c, &ar(), None, Some(IN_SYNC)));
        assert!(!already_says(
            Some(&status),
            Reason::Forbidden,
            "grant create"
        ));
        assert!(!already_says(None, Reason::Forbidden, "grant create"));
    }

    #[test]
    fn pruned_conditions_are_recognised() {
        assert!(!keeps_synced(Some(&json!({ "phase": "Ready" }))));
        assert!(keeps_synced(Some(
            &json!({ "conditions": [{ "type": "Synced" }] })
        )));
    }

    #[test]
    fn observed_generations_are_told_in_the_instance_s_generations() {
        let status = json!({
            "observedGeneration": 7,
            "conditions": [
                { "type": "Ready", "observedGeneration": 7 },
                { "type": "Issuing", "observedGeneration": 6 },
                { "type": "Old", "observedGeneration": 1 },
                { "type": "Plain" },
            ],
        });
        // The copy is at generation 7, the instance (in sync with it) at 3.
        let told = in_instance_generations(status.clone(), Some(7), Some(3));
        let expected = json!({
            "observedGeneration": 3,
            "conditions": [
                { "type": "Ready", "observedGeneration": 3 },
                { "type": "Issuing", "observedGeneration": 2 },
                { "type": "Old", "observedGeneration": 1 },
                { "type": "Plain" },
            ],
        });
        assert_eq!(told, expected);
        // Counted alike on both clusters, nothing changes.
        assert_eq!(
            in_instance_generations(status.clone(), Some(7), Some(7)),
            status
        );
        // Without either generation there is nothing to translate by.
        assert_eq!(
            in_instance_generations(status.clone(), None, Some(3)),
            status
        );
        // A copy behind the instance: what observed the copy observed the instance.
        let behind = in_instance_generations(json!({ "observedGeneration": 1 }), Some(1), Some(5));
        assert_eq!(behind, json!({ "observedGeneration": 5 }));
    }
}
