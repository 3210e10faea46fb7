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

use kbind_tests::syncenv::{BINDING, Scenario, WAIT, event_note, wait_for};
use konnector::api::Reason;

/// How long "nothing happens" checks watch.
const STAYS: Duration = Duration::from_secs(4);

/// Waits until the scenario's ClusterBinding (`cluster`) or Binding is `Ready` with `status`
/// and `reason`; returns the condition's message.
async fn ready_is(
    s: &Scenario,
    cluster: bool,
    status: &str,
    reason: Reason,
) -> anyhow::Result<String> {
    let reason = reason.as_str();
    wait_for(&format!("Ready={status} {reason}"), WAIT, || async {
        let current = match cluster {
            true => s.cluster_bindings().get(&s.name).await?.status,
            false => s.bindings().get(BINDING).await?.status,
        };
        let mut conditions = current.unwrap_or_default().conditions.into_iter();
        Ok(conditions
            .find(|c| c.type_ == "Ready" && c.status == status && c.reason == reason)
            .map(|c| c.message))
    })
    .await
}

/// Waits until the scenario's ClusterBinding (`cluster`) or Binding is refused, `Ready=False`
/// with `reason`, and a Warning Event says so; returns the condition's message.
async fn refused(s: &Scenario, cluster: bool, reason: Reason) -> anyhow::Result<String> {
    let message = ready_is(s, cluster, "False", reason).await?;
    // The Events of a cluster-scoped object land in `default`.
    let at = if cluster {
        ("default", s.name.as_str())
    } else {
        (s.ns(), BINDING)
    };
    event_note(&s.consumer, at, reason.as_str(), Some("Warning"), WAIT).await?;
    Ok(message)
}
