//! The consumer `coordination.k8s.io/v1` Leases sharding runs on: one membership Lease per
//! replica and one Lease per shard, read and written with optimistic concurrency (every update
//! carries the resourceVersion it read, so two replicas can never both take a Lease).
//!
//! Lease arithmetic is the same as Kubernetes leader election's (and the `kube-lease-manager`
//! crate's, which earlier releases ran for leader election on the same Lease, so a rolling
//! upgrade sees one holder): a Lease is held while `renewTime + leaseDurationSeconds` is in the
//! future by the reader's clock; a released one has no holder. Written by hand rather than
//! through that crate because both HA modes need what it does not give: a holder must learn
//! that a renewal was refused (its watch loop only logs the error and keeps reporting the lock
//! as held) so that it stops work before the Lease can expire, and one loop must manage tens of
//! Leases per tick.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams, Preconditions};

use crate::api::names::FIELD_MANAGER;

/// Label on every replica's membership Lease.
pub const MEMBER_LABEL: &str = "core.kbind.io/konnector-member";
/// Label on every shard Lease: `connection` or `api`.
pub const SHARD_KIND_LABEL: &str = "core.kbind.io/shard-kind";
/// Annotation on every shard Lease naming its shard (`<connection>` or `<connection>/<api>`).
pub const SHARD_ANNOTATION: &str = "core.kbind.io/shard";

/// The holder of `lease` while it is held at `now`; `None` when released or expired.
pub fn live_holder(lease: &Lease, now: Timestamp) -> Option<&str> {
    let spec = lease.spec.as_ref()?;
    let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty())?;
    let renewed = spec.renew_time.as_ref()?.0;
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(0)));
    let expires = renewed.checked_add(duration).ok()?;
    (expires > now).then_some(holder)
}

/// Whether `identity` may take `lease` at `now`: nobody else holds it.
pub fn takeable(lease: &Lease, identity: &str, now: Timestamp) -> bool {
    live_holder(lease, now).is_none_or(|holder| holder == identity)
}

/// The holder recorded on `lease`, live or not.
pub fn recorded_holder(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()?
        .holder_identity
        .as_deref()
        .filter(|h| !h.is_empty())
}

/// Whether `lease` has had no live holder for a long time (ten Lease durations after its last
/// renewal): a replica that is gone, or a shard that no longer exists, left it behind.
pub fn long_abandoned(lease: &Lease, now: Timestamp) -> bool {
    let Some(spec) = lease.spec.as_ref() else {
        return true;
    };
    let Some(renewed) = spec.renew_time.as_ref().map(|t| t.0) else {
        return true;
    };
    let ten = SignedDuration::from_secs(10 * i64::from(spec.lease_duration_seconds.unwrap_or(1)));
    renewed
        .checked_add(ten)
        .is_ok_and(|stale_at| stale_at < now)
}

/// Leases of one namespace, as the coordinator reads and writes them.
#[derive(Clone)]
pub struct Leases {
    api: Api<Lease>,
    identity: String,
    duration_seconds: i32,
}

impl Leases {
    /// The Leases `identity` holds for `duration_seconds` in `namespace`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        identity: &str,
        duration_seconds: i32,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            identity: identity.to_string(),
            duration_seconds,
        }
    }

    fn params() -> PostParams {
        PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        }
    }

    /// Every Lease carrying `label`, by name.
    pub async fn list(&self, label: &str) -> kube::Result<BTreeMap<String, Lease>> {
        let list = self.api.list(&ListParams::default().labels(label)).await?;
        Ok(list
            .items
            .into_iter()
            .map(|lease| (lease.name_any(), lease))
            .collect())
    }

    /// The client the Leases are reached with (no hold check: a lapsed hold must be renewable).
    pub fn client(&self) -> kube::Client {
        self.api.clone().into_client()
    }

    /// The Lease `name`, if it exists.
    pub async fn get(&self, name: &str) -> kube::Result<Option<Lease>> {
        self.api.get_opt(name).await
    }

    /// Creates `name` held by this replica.
    pub async fn create(
        &self,
        name: &str,
        labels: BTreeMap<String, String>,
        annotations: BTreeMap<String, String>,
    ) -> kube::Result<Lease> {
        let now = MicroTime(Timestamp::now());
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                labels: Some(labels),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(self.duration_seconds),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        self.api.create(&Self::params(), &lease).await
    }

    /// Takes `lease` (released, expired or already ours) for this replica; fails with 409 when
    /// another replica wrote it since it was read.
    pub async fn take(&self, lease: &Lease) -> kube::Result<Lease> {
        let now = MicroTime(Timestamp::now());
        let mut lease = lease.clone();
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(self.duration_seconds);
        spec.acquire_time = Some(now.clone());
        spec.renew_time = Some(now);
        self.api
            .replace(&lease.name_any(), &Self::params(), &lease)
            .await
    }

    /// Renews `lease`, held by this replica.
    pub async fn renew(&self, lease: &Lease) -> kube::Result<Lease> {
        let mut lease = lease.clone();
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(self.duration_seconds);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        self.api
            .replace(&lease.name_any(), &Self::params(), &lease)
            .await
    }

    /// Deletes `lease` as read: refused (409) when anyone wrote it since.
    pub async fn delete_unchanged(&self, lease: &Lease) -> kube::Result<()> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: lease.metadata.resource_version.clone(),
                uid: lease.metadata.uid.clone(),
            }),
            ..DeleteParams::default()
        };
        self.api.delete(&lease.name_any(), &params).await.map(drop)
    }

    /// Gives `lease` up: no holder, so the next replica takes it at once.
    pub async fn release(&self, lease: &Lease) -> kube::Result<Lease> {
        let mut lease = lease.clone();
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = None;
        self.api
            .replace(&lease.name_any(), &Self::params(), &lease)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed_secs_ago: i64, duration: i32) -> Lease {
        let renewed = Timestamp::now()
            .checked_sub(SignedDuration::from_secs(renewed_secs_ago))
            .unwrap_or(Timestamp::UNIX_EPOCH);
        Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                renew_time: Some(MicroTime(renewed)),
                lease_duration_seconds: Some(duration),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn a_renewed_lease_is_held_until_its_duration_passes() {
        let now = Timestamp::now();
        assert_eq!(live_holder(&lease(Some("a"), 5, 15), now), Some("a"));
        assert_eq!(live_holder(&lease(Some("a"), 20, 15), now), None);
    }

    #[test]
    fn a_released_lease_has_no_holder() {
        let now = Timestamp::now();
        assert_eq!(live_holder(&lease(None, 1, 15), now), None);
        assert_eq!(live_holder(&lease(Some(""), 1, 15), now), None);
        assert!(takeable(&lease(None, 1, 15), "b", now));
    }

    #[test]
    fn only_leases_stale_for_ten_durations_are_abandoned() {
        let now = Timestamp::now();
        assert!(!long_abandoned(&lease(None, 100, 15), now));
        assert!(long_abandoned(&lease(None, 200, 15), now));
        assert!(long_abandoned(&lease(Some("gone"), 200, 15), now));
    }

    #[test]
    fn only_the_holder_may_take_a_live_lease() {
        let now = Timestamp::now();
        let held = lease(Some("a"), 1, 15);
        assert!(takeable(&held, "a", now));
        assert!(!takeable(&held, "b", now));
        assert!(takeable(&lease(Some("a"), 30, 15), "b", now));
    }
}
