//! The outcome registry's instance counts as `kbind_instances{api,state}` gauges, for alerts on
//! failing or conflicting instances: recomputed when outcomes change, at most every
//! [`REFRESH`], summed over the Connections that bind an API.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::api::InstanceCounts;
use crate::telemetry::{InstanceStateLabels, metrics};

use super::Outcomes;

/// The shortest time between two recomputations while outcomes keep changing.
pub const REFRESH: Duration = Duration::from_secs(5);

/// Keeps the gauges equal to the registry's counts until `shutdown`.
pub async fn publish_instance_counts(outcomes: Outcomes, shutdown: CancellationToken) {
    let mut changes = outcomes.subscribe();
    let mut shown = BTreeSet::new();
    loop {
        shown = set_gauges(&outcomes.counts_per_api(), shown);
        tokio::select! {
            () = shutdown.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(REFRESH) => {}
        }
    }
}

/// Sets a gauge per API and state; the APIs shown before and gone now are removed. Returns the
/// APIs shown.
fn set_gauges(
    counts: &BTreeMap<String, InstanceCounts>,
    shown: BTreeSet<String>,
) -> BTreeSet<String> {
    let family = &metrics().instances;
    for gone in shown.iter().filter(|api| !counts.contains_key(*api)) {
        for state in STATES {
            family.remove(&InstanceStateLabels {
                api: gone.clone(),
                state,
            });
        }
    }
    for (api, counts) in counts {
        for (state, value) in by_state(counts) {
            let value = i64::try_from(value).unwrap_or(i64::MAX);
            family
                .get_or_create(&InstanceStateLabels {
                    api: api.clone(),
                    state,
                })
                .set(value);
        }
    }
    counts.keys().cloned().collect()
}

/// The states the gauges tell apart.
const STATES: [&str; 4] = ["synced", "conflicting", "failing", "pending"];

fn by_state(counts: &InstanceCounts) -> [(&'static str, u64); 4] {
    [
        ("synced", counts.synced),
        ("conflicting", counts.conflicting),
        ("failing", counts.failing),
        ("pending", counts.pending),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Outcome;

    fn gauge(api: &str, state: &'static str) -> Option<i64> {
        let text = metrics().encode();
        let wanted = format!("kbind_instances{{api=\"{api}\",state=\"{state}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(wanted.as_str()))
            .and_then(|v| v.parse().ok())
    }

    #[test]
    fn instances_are_counted_per_api_and_state_over_every_connection() {
        let outcomes = Outcomes::default();
        let api = "gaugewidgets.example.org";
        for connection in ["p", "q"] {
            outcomes.listing_started(connection, api);
            outcomes.listing_done(connection, api);
        }
        outcomes.record("p", api, Some("a"), "ok", Outcome::InSync);
        outcomes.record("q", api, Some("a"), "ok", Outcome::InSync);
        outcomes.record(
            "q",
            api,
            Some("b"),
            "bad",
            Outcome::Failed(crate::api::Reason::ProviderRejected),
        );
        let shown = set_gauges(&outcomes.counts_per_api(), BTreeSet::new());
        assert_eq!(gauge(api, "synced"), Some(2));
        assert_eq!(gauge(api, "failing"), Some(1));
        assert_eq!(gauge(api, "conflicting"), Some(0));
        outcomes.forget_api("p", api);
        outcomes.forget_api("q", api);
        set_gauges(&outcomes.counts_per_api(), shown);
        assert_eq!(
            gauge(api, "synced"),
            None,
            "an API no syncer runs is not shown"
        );
    }
}
