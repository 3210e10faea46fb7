//! Trust boundaries on real clusters: whatever a binding lists, a provider exports or a schema
//! module answers, the host touches only what is kbind's. Each test injects the bad input and
//! counts what survived.
//!
//! One test binary (one shared cluster pair), three files: consumer CRDs kbind does not own,
//! which namespaces may bind, and what of a synthesized CRD reaches the consumer.

mod crds;
mod namespaces;
mod schemas;

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kbind_tests::syncenv::{Stack, WAIT, events_for, wait_for};
use konnector::api::{Binding, ClusterBinding, ConditionType, Reason};
use kube::Api;

/// How long "nothing happens" checks watch.
const STAYS: Duration = Duration::from_secs(4);

fn ready_of(conditions: &[Condition]) -> Option<&Condition> {
    conditions
        .iter()
        .find(|c| c.type_ == ConditionType::Ready.as_str())
}

/// Waits until ClusterBinding `name` is `Ready=False` with `reason`; returns the message.
async fn cluster_binding_refused(
    stack: &Stack,
    name: &str,
    reason: Reason,
) -> anyhow::Result<String> {
    let api = Api::<ClusterBinding>::all(stack.consumer.clone());
    wait_for(
        &format!("ClusterBinding {name} Ready=False {}", reason.as_str()),
        WAIT,
        || async {
            let b = api.get(name).await?;
            let conditions = b.status.map(|s| s.conditions).unwrap_or_default();
            Ok(ready_of(&conditions)
                .filter(|c| c.status == "False" && c.reason == reason.as_str())
                .map(|c| c.message.clone()))
        },
    )
    .await
}

/// Waits until Binding `namespace/name` has a Ready condition accepted by `check`.
async fn binding_ready_is(
    stack: &Stack,
    namespace: &str,
    name: &str,
    what: &str,
    check: impl Fn(&Condition) -> bool,
) -> anyhow::Result<Condition> {
    let api = Api::<Binding>::namespaced(stack.consumer.clone(), namespace);
    wait_for(what, WAIT, || async {
        let b = api.get(name).await?;
        let conditions = b.status.map(|s| s.conditions).unwrap_or_default();
        Ok(ready_of(&conditions).filter(|c| check(c)).cloned())
    })
    .await
}

/// Waits for a Warning Event with `reason` about the object `name` in `namespace` (`None`:
/// a cluster-scoped object, whose Events land in `default`).
async fn warning_event(
    stack: &Stack,
    namespace: Option<&str>,
    name: &str,
    reason: Reason,
) -> anyhow::Result<Event> {
    wait_for(
        &format!("a {} Warning Event on {name}", reason.as_str()),
        WAIT,
        || async {
            let events = events_for(&stack.consumer, namespace, name).await?;
            Ok(events.into_iter().find(|e| {
                e.reason.as_deref() == Some(reason.as_str())
                    && e.type_.as_deref() == Some("Warning")
            }))
        },
    )
    .await
}
