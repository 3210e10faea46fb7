//! The one Lease engine of both HA modes. Leader election (`konnector run --leader-elect`) is
//! its one-shard case: the shard is the whole process's work, always assigned, held through
//! the spec's Lease (`konnector.kbind.io` by default, a plain coordination.k8s.io/v1 Lease).
//! Active-active replicas (`--sharding`) split the work into shards, each held by one replica
//! through its own consumer Lease, assigned by rendezvous hashing over the live replicas.
//! Kubernetes Leases are the only coordination; no replica talks to another.
//!
//! ```text
//! every retry period, per replica:
//!   1. renew, in parallel, every Lease held (and the membership Lease), from the Lease as
//!      last written: each good until its request's start + the renew deadline ─▶ holds
//!   2. then: live members (membership Leases not expired)
//!      shards: one per Connection + one per (Connection, API) the bindings use
//!              (leader election: the one leader shard)
//!      for each shard: rendezvous(live members) = me?
//!        yes, Lease free (released, expired, absent) ─▶ take it ─▶ work may start
//!        no, held by me ─▶ stop the work ─▶ release the Lease (the new owner takes it at once)
//!      and now and then, the Leases left behind are collected
//!   ownership = shards renewed within the renew deadline ─▶ controllers, supervisor, holds
//! ```
//!
//! Never a second writer: a replica starts a shard's work only once it holds the Lease, i.e.
//! after the previous holder released it or it expired; it drops the shard when its last
//! successful renewal is older than the renew deadline, which is shorter than the Lease
//! duration; and every write checks the hold of the work it belongs to before each attempt
//! (`crate::fencing::hold`). Leases do not fence a write already in flight, so every write is
//! bounded by the margin between the two ([`Config::write_timeout`]); this assumes bounded
//! clock skew between replicas and the apiserver, as kube-controller-manager's leader election
//! does.

mod coordinator;
mod decision;
mod leases;
mod membership;
pub mod rendezvous;

use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::fencing::hold;

pub use coordinator::run;
pub use leases::{MEMBER_LABEL, SHARD_ANNOTATION, SHARD_KIND_LABEL, live_holder, recorded_holder};

/// What the coordinator holds Leases for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Leader election: the Lease named `lease`, always wanted; its holder does everything.
    Leader {
        /// The Lease's name (`--leader-election-id`).
        lease: String,
    },
    /// Sharding: a membership Lease per replica and a Lease per shard.
    Shards,
}

impl Plan {
    /// The prefix of this mode's timing flags, for error messages.
    fn flags(&self) -> &'static str {
        match self {
            Self::Leader { .. } => "--leader-election",
            Self::Shards => "--shard",
        }
    }
}

/// Timings and place of the Leases of either HA mode.
#[derive(Debug, Clone)]
pub struct Config {
    /// Leader election or sharding.
    pub plan: Plan,
    /// Namespace of the Leases (the Pod's).
    pub namespace: String,
    /// This replica's identity (its Pod name).
    pub identity: String,
    /// How long a Lease stays held after its last renewal.
    pub lease_duration: Duration,
    /// How long after its last successful renewal a replica stops a shard's work.
    pub renew_deadline: Duration,
    /// How often a replica renews its Leases and re-evaluates the assignment.
    pub retry_period: Duration,
}

/// Why the HA settings cannot be used; `flags` is `--shard` or `--leader-election`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// The renew deadline must leave a margin before the Lease expires.
    #[error(
        "{flags}-renew-deadline ({deadline:?}) must be shorter than {flags}-lease-duration ({duration:?}): \
         a replica stops its work at the deadline, before another may take its Lease"
    )]
    DeadlineNotBeforeExpiry {
        /// The flags' prefix.
        flags: &'static str,
        /// The renew deadline.
        deadline: Duration,
        /// The Lease duration.
        duration: Duration,
    },
    /// Renewals must come more often than the deadline, or every hold would lapse.
    #[error(
        "{flags}-retry-period ({period:?}) must be shorter than {flags}-renew-deadline ({deadline:?})"
    )]
    PeriodNotBeforeDeadline {
        /// The flags' prefix.
        flags: &'static str,
        /// The retry period.
        period: Duration,
        /// The renew deadline.
        deadline: Duration,
    },
    /// Lease durations are whole seconds, at least two.
    #[error("{flags}-lease-duration must be at least 2s, got {duration:?}")]
    DurationTooShort {
        /// The flags' prefix.
        flags: &'static str,
        /// The Lease duration.
        duration: Duration,
    },
}

impl Config {
    /// Checks the timing rules the no-second-writer guarantee rests on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let flags = self.plan.flags();
        if self.lease_duration < Duration::from_secs(2) {
            return Err(ConfigError::DurationTooShort {
                flags,
                duration: self.lease_duration,
            });
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(ConfigError::DeadlineNotBeforeExpiry {
                flags,
                deadline: self.renew_deadline,
                duration: self.lease_duration,
            });
        }
        if self.retry_period >= self.renew_deadline {
            return Err(ConfigError::PeriodNotBeforeDeadline {
                flags,
                period: self.retry_period,
                deadline: self.renew_deadline,
            });
        }
        Ok(())
    }

    /// The longest a request may take: the margin between the renew deadline (when this
    /// replica stops) and the Lease's expiry (when another may start).
    pub fn write_timeout(&self) -> Duration {
        self.lease_duration.saturating_sub(self.renew_deadline)
    }

    /// How long a stopping syncer may finish in-flight reconciles before it is aborted: half
    /// the margin, so a lost shard's work is gone well before the Lease expires.
    pub fn stop_grace(&self) -> Duration {
        self.write_timeout() / 2
    }
}

/// One unit of work held through one Lease.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Shard {
    /// Everything, under leader election: held through the named Lease.
    Leader(String),
    /// A Connection's own work: its status, discovery, heartbeat, autoBind, schema installs,
    /// related resources, and its bindings' overall status and finalizers.
    Connection(String),
    /// The syncer of one API through one Connection.
    Api {
        /// The Connection.
        connection: String,
        /// `<plural>.<group>`.
        api: String,
    },
}

impl Shard {
    /// The shard's key, hashed for assignment and recorded on its Lease: `<connection>` or
    /// `<connection>/<api>` (Connection names hold no `/`).
    pub fn key(&self) -> String {
        match self {
            Self::Leader(_) => hold::LEADER.to_string(),
            Self::Connection(connection) => hold::connection_key(connection),
            Self::Api { connection, api } => hold::api_key(connection, api),
        }
    }

    /// `connection` or `api`: the shard Lease's kind label, and the metric label.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Leader(_) => "leader",
            Self::Connection(_) => "connection",
            Self::Api { .. } => "api",
        }
    }

    /// The shard's Lease name: a fixed-length digest of its key, valid whatever the names.
    pub fn lease_name(&self) -> String {
        if let Self::Leader(lease) = self {
            return lease.clone();
        }
        let digest = Sha256::digest(self.key().as_bytes());
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        format!("kbind-shard-{hex}")
    }

    /// The shard recorded on a Lease by its kind label and key annotation.
    pub fn from_recorded(kind: &str, key: &str) -> Option<Self> {
        match kind {
            "connection" => Some(Self::Connection(key.to_string())),
            "api" => {
                let (connection, api) = key.split_once('/')?;
                Some(Self::Api {
                    connection: connection.to_string(),
                    api: api.to_string(),
                })
            }
            _ => None,
        }
    }
}

/// Whether the syncer of `api` through `connection` may be running on some replica: its API
/// shard's Lease has a live holder. Always false without sharding; true when the Lease cannot
/// be read (a drain waiting on it retries rather than racing a syncer).
pub async fn api_shard_held(shared: &crate::shared::Shared, connection: &str, api: &str) -> bool {
    if !shared.shards.sharded() {
        return false;
    }
    let shard = Shard::Api {
        connection: connection.to_string(),
        api: api.to_string(),
    };
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(shared.consumer.clone(), shared.shards.lease_namespace());
    match leases.get_opt(&shard.lease_name()).await {
        Ok(Some(lease)) => live_holder(&lease, k8s_openapi::jiff::Timestamp::now()).is_some(),
        Ok(None) => false,
        Err(_) => true,
    }
}

/// The membership Lease name of replica `identity`.
pub fn member_lease_name(identity: &str) -> String {
    format!("kbind-member-{identity}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(duration: u64, deadline: u64, period: u64) -> Config {
        Config {
            plan: Plan::Shards,
            namespace: "kbind".into(),
            identity: "r".into(),
            lease_duration: Duration::from_secs(duration),
            renew_deadline: Duration::from_secs(deadline),
            retry_period: Duration::from_secs(period),
        }
    }

    #[test]
    fn the_renew_deadline_must_come_before_the_lease_expires() {
        assert!(config(15, 10, 2).validate().is_ok());
        assert!(matches!(
            config(15, 15, 2).validate(),
            Err(ConfigError::DeadlineNotBeforeExpiry { .. })
        ));
        assert!(matches!(
            config(15, 10, 10).validate(),
            Err(ConfigError::PeriodNotBeforeDeadline { .. })
        ));
    }

    #[test]
    fn leader_election_timings_are_checked_by_the_same_rules_under_its_own_flags() {
        let mut leader = config(15, 15, 2);
        leader.plan = Plan::Leader {
            lease: "konnector.kbind.io".into(),
        };
        let refused = leader.validate().map_err(|e| e.to_string());
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.starts_with("--leader-election-renew-deadline")),
            "{refused:?}"
        );
    }

    #[test]
    fn writes_are_bounded_by_the_margin_before_expiry() {
        let config = config(15, 10, 2);
        assert_eq!(config.write_timeout(), Duration::from_secs(5));
        assert!(config.stop_grace() < config.write_timeout());
    }

    #[test]
    fn shard_leases_are_named_by_digest_and_keys_round_trip() {
        let api = Shard::Api {
            connection: "provider".into(),
            api: "widgets.example.org".into(),
        };
        assert_eq!(api.key(), "provider/widgets.example.org");
        assert_eq!(Shard::from_recorded("api", &api.key()), Some(api.clone()));
        let connection = Shard::Connection("provider".into());
        assert_ne!(api.lease_name(), connection.lease_name());
        assert_eq!(api.lease_name().len(), "kbind-shard-".len() + 16);
        assert_eq!(
            Shard::from_recorded("connection", "provider"),
            Some(connection)
        );
        assert_eq!(Shard::from_recorded("other", "x"), None);
    }
}
