//! What the last reconcile of one instance came to, and a binding scope's instances as the
//! running syncers know them: counts per API, failing
//! reasons with a few examples each, and the APIs whose watch a cluster refused. The outcome
//! registry builds it (`Outcomes::summarise`); the binding controllers turn it into conditions
//! and `boundAPIs` counts.

use std::collections::BTreeMap;

use crate::api::{InstanceCounts, Reason};

/// What the last reconcile of one instance came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The provider copy matches the instance's spec.
    InSync,
    /// The provider target belongs to someone else: ForeignObjectExists or OwnedByAnother.
    Conflict(Reason),
    /// The copy could not be written: ProviderRejected, PolicyFailed, Forbidden.
    Failed(Reason),
}

impl Outcome {
    /// The outcome an instance `Synced=False` reason stands for: a conflict for the two
    /// ownership reasons, a failure for the rest.
    pub fn failure(reason: Reason) -> Self {
        match reason {
            Reason::ForeignObjectExists | Reason::OwnedByAnother => Self::Conflict(reason),
            other => Self::Failed(other),
        }
    }

    /// The failing reason; `None` when in sync.
    pub fn reason(self) -> Option<Reason> {
        match self {
            Self::InSync => None,
            Self::Conflict(reason) | Self::Failed(reason) => Some(reason),
        }
    }
}

/// The instances of one reason in a summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Failing {
    /// How many instances fail for this reason.
    pub count: u64,
    /// A few of them as `namespace/name` (or `name`), for the operator to look at.
    pub examples: Vec<String>,
}

/// What a binding's scope looks like right now, as far as running syncers know.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Some API of the scope has no syncer yet, or one whose listed objects have not all been
    /// reconciled once: the counts are incomplete.
    pub settling: bool,
    /// Failing instances per reason (conflicts included).
    pub failing: BTreeMap<Reason, Failing>,
    /// APIs whose provider watch the provider refuses, with what it said.
    pub denied_apis: BTreeMap<String, String>,
    /// APIs whose consumer watch the konnector's own consumer RBAC refuses, with what the
    /// consumer said: the chart's RBAC (`rbac.boundResourceGroups`) does not cover them.
    pub consumer_denied_apis: BTreeMap<String, String>,
    /// Per API of the scope (every one has an entry): how its instances stand.
    pub per_api: BTreeMap<String, InstanceCounts>,
}

impl Summary {
    /// Instances whose provider copy matches their spec.
    pub fn in_sync(&self) -> u64 {
        self.per_api.values().map(|c| c.synced).sum()
    }

    /// Conflicting instances per API (every API of the scope has an entry).
    pub fn conflicts_per_api(&self) -> BTreeMap<String, i64> {
        let count = |c: &InstanceCounts| i64::try_from(c.conflicting).unwrap_or(i64::MAX);
        self.per_api
            .iter()
            .map(|(api, counts)| (api.clone(), count(counts)))
            .collect()
    }

    /// Conflicting instances over every API.
    pub fn conflicts(&self) -> i64 {
        self.conflicts_per_api().values().sum()
    }

    /// Instances not in sync, whatever the reason.
    pub fn failing_total(&self) -> u64 {
        self.failing.values().map(|f| f.count).sum()
    }

    /// Instances the provider refused to take (403).
    pub fn forbidden(&self) -> Option<&Failing> {
        self.failing.get(&Reason::Forbidden)
    }
}
