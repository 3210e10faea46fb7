//! The provider heartbeat: a plain `coordination.k8s.io/v1` Lease that a consumer renews on
//! every successful Connection reconcile, so a provider can see which consumers are alive.
//!
//! Best-effort by design (spec: heartbeat failure "does not block instance sync or make the
//! Connection unready"). Only get/create/update are used, the verbs the spec's RBAC table
//! grants; the namespace is created by an attempt when it is missing.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::api::names::{
    CONNECTION_ANNOTATION, CONSUMER_CLUSTER_UID_ANNOTATION, DEFAULT_HEARTBEAT_NAMESPACE,
    FIELD_MANAGER, HEARTBEAT_LEASE_SECONDS, MANAGED_LABEL, heartbeat_lease_name,
};
use crate::k8s::ApiErrorExt;

/// Why a heartbeat could not be written (logged, never fatal).
#[derive(Debug, thiserror::Error)]
pub enum HeartbeatError {
    /// Reading, creating or updating the Lease failed.
    #[error("renewing heartbeat Lease {namespace}/{name} failed: {source}")]
    Renew {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// The client error.
        source: kube::Error,
    },
}

/// Where a Connection's heartbeat Lease lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseLocation {
    /// The kubeconfig context's namespace, or `kbind`.
    pub namespace: String,
    /// `<connection>-<first ten characters of the consumer cluster UID>`.
    pub name: String,
}

impl LeaseLocation {
    /// The Lease location for a Connection, per the spec's naming rule.
    pub fn new(connection: &str, consumer_uid: &str, context_namespace: Option<&str>) -> Self {
        Self {
            namespace: context_namespace
                .filter(|ns| !ns.is_empty())
                .unwrap_or(DEFAULT_HEARTBEAT_NAMESPACE)
                .to_string(),
            name: heartbeat_lease_name(connection, consumer_uid),
        }
    }
}

/// Creates or renews the heartbeat Lease on the provider.
pub async fn renew(
    provider: &kube::Client,
    location: &LeaseLocation,
    connection: &str,
    consumer_uid: &str,
) -> Result<Lease, HeartbeatError> {
    let failed = |source| HeartbeatError::Renew {
        namespace: location.namespace.clone(),
        name: location.name.clone(),
        source,
    };
    let now = MicroTime(Timestamp::now());
    let leases: Api<Lease> = Api::namespaced(provider.clone(), &location.namespace);
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    match leases.get_opt(&location.name).await.map_err(failed)? {
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            spec.holder_identity = Some(consumer_uid.to_string());
            spec.lease_duration_seconds = Some(HEARTBEAT_LEASE_SECONDS);
            spec.renew_time = Some(now);
            stamp(&mut lease.metadata, connection, consumer_uid);
            leases
                .replace(&location.name, &params, &lease)
                .await
                .map_err(failed)
        }
        None => {
            ensure_namespace(provider, &location.namespace).await;
            let mut lease = Lease {
                metadata: ObjectMeta {
                    name: Some(location.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(consumer_uid.to_string()),
                    lease_duration_seconds: Some(HEARTBEAT_LEASE_SECONDS),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    ..LeaseSpec::default()
                }),
            };
            stamp(&mut lease.metadata, connection, consumer_uid);
            leases.create(&params, &lease).await.map_err(failed)
        }
    }
}

fn stamp(metadata: &mut ObjectMeta, connection: &str, consumer_uid: &str) {
    metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(MANAGED_LABEL.into(), "true".into());
    let annotations = metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(CONSUMER_CLUSTER_UID_ANNOTATION.into(), consumer_uid.into());
    annotations.insert(CONNECTION_ANNOTATION.into(), connection.into());
}

/// Attempts to create a namespace; AlreadyExists and refusals are fine, the next request
/// reports anything that matters.
pub async fn ensure_namespace(client: &kube::Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    if let Err(error) = namespaces.create(&params, &namespace).await
        && !error.is_http_conflict()
    {
        tracing::debug!(namespace = name, %error, "namespace create attempt failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_lives_in_context_namespace_or_kbind() {
        let uid = "0123456789abcdef";
        assert_eq!(
            LeaseLocation::new("provider", uid, Some("team-a")),
            LeaseLocation {
                namespace: "team-a".into(),
                name: "provider-0123456789".into()
            }
        );
        assert_eq!(LeaseLocation::new("provider", uid, None).namespace, "kbind");
        assert_eq!(
            LeaseLocation::new("provider", uid, Some("")).namespace,
            "kbind"
        );
    }
}
