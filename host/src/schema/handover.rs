//! Handing a consumer CRD over from a Connection that no longer exists to the next one a
//! binding names, when both reach the same provider cluster.
//!
//! ```text
//! consumer CRD pinned (core.kbind.io/connection) to Connection A, a binding names B:
//!   A exists (a live read)? ── yes ──▶ Keep: A's (APIBoundElsewhere)
//!   A is gone (404) and the CRD records provider cluster U (core.kbind.io/provider-cluster-uid,
//!   written at install) == B's pinned provider ──▶ TakenOver: re-pinned to B under the CRD's
//!                                                 resourceVersion; B binds it as its own
//!   A is gone, any other provider (or none recorded) ──▶ Refused: PinnedConnectionGone, the
//!                                                 message says how to hand it over by hand
//! ```
//!
//! Why only then: the instances and their provider copies belong to that provider cluster; a
//! Connection to the same cluster finds them by their markers and syncs on, while one to
//! another cluster would write every instance to a provider that never had it. The decision
//! is [`decide`] (pure); [`take_over`] reads and writes.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tracing::info;

use super::managed::pinned_connection;
use crate::api::Connection;
use crate::api::names::{CONNECTION_ANNOTATION, PROVIDER_CLUSTER_UID_ANNOTATION};

/// What to do with a consumer CRD pinned to another Connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Handover {
    /// Not pinned elsewhere, or pinned to a Connection that exists: nothing to hand over.
    Keep,
    /// Pinned to a Connection that no longer exists, from the same provider cluster: re-pin.
    TakeOver,
    /// Pinned to a Connection that no longer exists, from another (or an unrecorded) provider
    /// cluster: the operator must hand it over; the text says how.
    Refused(String),
}

/// Why reading or re-pinning a consumer CRD for a handover failed.
#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    /// Reading the Connection the CRD is pinned to.
    #[error("reading Connection {connection} (the one CRD {crd} is pinned to): {source}")]
    ReadConnection {
        /// The CRD.
        crd: String,
        /// The Connection it is pinned to.
        connection: String,
        /// What the consumer said.
        #[source]
        source: kube::Error,
    },
    /// Re-pinning the CRD to the new Connection.
    #[error("re-pinning CRD {crd} to Connection {connection}: {source}")]
    Repin {
        /// The CRD.
        crd: String,
        /// The Connection taking it over.
        connection: String,
        /// What the consumer said (a conflict: the CRD changed since it was read).
        #[source]
        source: kube::Error,
    },
}

/// The provider cluster UID a consumer CRD was installed from, if it records one.
pub fn recorded_provider(crd: &CustomResourceDefinition) -> Option<&str> {
    crd.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PROVIDER_CLUSTER_UID_ANNOTATION))
        .map(String::as_str)
}

/// Whether `connection` (pinned to `provider_uid`) may take over `crd`, whose pinned
/// Connection `pinned_exists` says is still there or not. Pure.
pub fn decide(
    crd: &CustomResourceDefinition,
    connection: &str,
    provider_uid: &str,
    pinned_exists: bool,
) -> Handover {
    let name = crd.metadata.name.as_deref().unwrap_or_default();
    let Some(pinned) = pinned_connection(crd).filter(|p| *p != connection) else {
        return Handover::Keep;
    };
    if pinned_exists {
        return Handover::Keep;
    }
    match recorded_provider(crd) {
        Some(recorded) if recorded == provider_uid => Handover::TakeOver,
        recorded => {
            let from = match recorded {
                Some(recorded) => format!(
                    "was installed from provider cluster {recorded}, not {provider_uid} which Connection {connection} reaches"
                ),
                None => {
                    "records no provider cluster (installed before kbind recorded one, or by hand)"
                        .to_string()
                }
            };
            Handover::Refused(format!(
                "{name} is pinned to Connection {pinned}, which no longer exists, and {from}, so Connection {connection} does not take it over: its instances' copies live on that provider. \
                 To hand it over, first deal with the instances (their copies stay on the old provider; annotate them core.kbind.io/deletion-policy=Orphan or delete them), then run \
                 kubectl annotate crd {name} {CONNECTION_ANNOTATION}={connection} --overwrite"
            ))
        }
    }
}

/// Takes over `crd` for `connection` (pinned to `provider_uid`) when [`decide`] says so, after
/// a live read of the Connection it is pinned to (the watched copy may lag a deletion).
/// Returns the decision; on `TakeOver` the CRD is re-pinned under the resourceVersion it was
/// read at, so a CRD that changed meanwhile is judged again on the next reconcile.
pub async fn take_over(
    consumer: &kube::Client,
    crd: &CustomResourceDefinition,
    connection: &str,
    provider_uid: &str,
) -> Result<Handover, HandoverError> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let Some(pinned) = pinned_connection(crd).filter(|p| *p != connection) else {
        return Ok(Handover::Keep);
    };
    let exists = Api::<Connection>::all(consumer.clone())
        .get_opt(pinned)
        .await
        .map_err(|source| HandoverError::ReadConnection {
            crd: name.clone(),
            connection: pinned.to_string(),
            source,
        })?
        .is_some();
    let decision = decide(crd, connection, provider_uid, exists);
    if decision != Handover::TakeOver {
        return Ok(decision);
    }
    let patch = json!({
        "metadata": {
            "resourceVersion": crd.metadata.resource_version,
            "annotations": { CONNECTION_ANNOTATION: connection },
        }
    });
    Api::<CustomResourceDefinition>::all(consumer.clone())
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| HandoverError::Repin {
            crd: name.clone(),
            connection: connection.to_string(),
            source,
        })?;
    info!(crd = %name, from = pinned, to = connection, %provider_uid, "consumer CRD taken over: its Connection is gone and the new one reaches the same provider cluster");
    Ok(decision)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn crd(pinned: &str, provider: Option<&str>) -> CustomResourceDefinition {
        let mut crd = CustomResourceDefinition::default();
        crd.metadata.name = Some("widgets.example.org".into());
        let mut annotations = BTreeMap::from([(CONNECTION_ANNOTATION.to_string(), pinned.into())]);
        if let Some(provider) = provider {
            annotations.insert(PROVIDER_CLUSTER_UID_ANNOTATION.into(), provider.into());
        }
        crd.metadata.annotations = Some(annotations);
        crd
    }

    #[test]
    fn a_crd_of_a_gone_connection_to_the_same_provider_is_taken_over() {
        assert_eq!(
            decide(&crd("c1", Some("p-uid")), "c2", "p-uid", false),
            Handover::TakeOver
        );
    }

    #[test]
    fn a_crd_whose_connection_still_exists_is_kept() {
        assert_eq!(
            decide(&crd("c1", Some("p-uid")), "c2", "p-uid", true),
            Handover::Keep
        );
        assert_eq!(
            decide(&crd("c2", None), "c2", "p-uid", false),
            Handover::Keep
        );
    }

    #[test]
    fn a_crd_of_another_provider_is_refused_with_the_way_to_hand_it_over() {
        let Handover::Refused(text) = decide(&crd("c1", Some("q-uid")), "c2", "p-uid", false)
        else {
            panic!("another provider's CRD is not taken over");
        };
        for part in [
            "pinned to Connection c1, which no longer exists",
            "provider cluster q-uid",
            "kubectl annotate crd widgets.example.org core.kbind.io/connection=c2 --overwrite",
        ] {
            assert!(text.contains(part), "{text} lacks {part:?}");
        }
    }

    #[test]
    fn a_crd_recording_no_provider_is_refused() {
        assert!(matches!(
            decide(&crd("c1", None), "c2", "p-uid", false),
            Handover::Refused(text) if text.contains("records no provider cluster")
        ));
    }
}
