//! Where a consumer's copies live on a provider shared by many consumers: the Connection's
//! `spec.isolation`, what is in force (`status.isolation`), and the consumer prefix.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// How copies of this consumer's objects are placed on the provider.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum IsolationStrategy {
    /// Namespace and name unchanged (one consumer per namespace and name on the provider).
    #[default]
    None,
    /// Namespaced objects go to namespace `<prefix>-<namespace>` with their names; cluster-scoped
    /// objects are named `<prefix>-<name>`.
    Namespaced,
    /// Namespace unchanged, name `<prefix>-<name>`.
    Prefixed,
}

impl IsolationStrategy {
    /// The spelling in the Connection's spec and status.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::None => "None",
            Self::Namespaced => "Namespaced",
            Self::Prefixed => "Prefixed",
        }
    }
}

/// `spec.isolation` of a Connection.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Isolation {
    /// The strategy; `None` keeps namespaces and names unchanged.
    #[serde(default)]
    pub strategy: IsolationStrategy,
    /// The consumer prefix; absent: derived from the consumer cluster UID. A DNS label of at
    /// most 20 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 20),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub prefix: Option<String>,
}

impl Isolation {
    /// What is in force for a consumer cluster: the strategy, with the prefix resolved.
    pub fn in_force(&self, consumer_cluster_uid: &str) -> IsolationInForce {
        IsolationInForce {
            strategy: self.strategy,
            prefix: self
                .prefix
                .clone()
                .unwrap_or_else(|| default_prefix(consumer_cluster_uid)),
        }
    }
}

/// `status.isolation` of a Connection: the strategy its copies are placed by, and the prefix.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IsolationInForce {
    /// The strategy.
    pub strategy: IsolationStrategy,
    /// The consumer prefix, resolved.
    pub prefix: String,
}

/// The consumer prefix when a Connection sets none: `c` and eight hex digits of the consumer
/// cluster UID's sha256, stable for the cluster and short enough to leave names room.
pub fn default_prefix(consumer_cluster_uid: &str) -> String {
    let digest = Sha256::digest(consumer_cluster_uid.as_bytes());
    let hex: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("c{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_prefix_is_a_short_stable_dns_label() {
        let p = default_prefix("0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9");
        assert_eq!(p.len(), 9);
        assert!(p.starts_with('c'));
        assert!(
            p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
        assert_eq!(p, default_prefix("0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9"));
        assert_ne!(p, default_prefix("another-cluster"));
    }

    #[test]
    fn a_set_prefix_wins_over_the_derived_one() {
        let isolation = Isolation {
            strategy: IsolationStrategy::Namespaced,
            prefix: Some("east".into()),
        };
        assert_eq!(isolation.in_force("uid").prefix, "east");
        assert_eq!(
            Isolation::default().in_force("uid").prefix,
            default_prefix("uid")
        );
    }
}
