//! Events on Connections: one per change of state, never one per requeue (a Connection is
//! reconciled every 30 seconds, and a konnector restart re-reads the stored status).
//!
//! ```text
//! stored conditions ─┐
//! new conditions ────┴▶ Ready turned False, or changed reason ─▶ Warning <reason>: <message>
//!                       Ready turned True ────────────────────▶ Normal Ready: <message>
//!                       SchemaInSync turned False / changed ──▶ Warning <reason>: <message>
//!                       AutoBindInSync turned False / changed ▶ Warning <reason>: <message>
//!                       PoliciesInSync turned False / changed ▶ Warning <reason>: <message>
//!                       ProviderDegraded turned True / changed ▶ Warning <reason>: <message>
//! ```
//!
//! Every failure of the non-deleting flow and of deletion ends in `Ready=False` with its reason
//! (SecretNotFound, KubeconfigInvalid, Forbidden, ClusterIdentityChanged, ProviderUnreachable,
//! DrainingBindings, ...), so Ready's transitions tell the whole story; SchemaInSync and
//! AutoBindInSync add what does not make the Connection unready (CRDNotManaged,
//! SchemaInstallFailed, AutoBindNameTaken), PoliciesInSync a changed policy module that
//! failed while the old one keeps running (PolicySwapFailed), and ProviderDegraded a provider failure that is
//! being ridden out (ProviderUnreachable, DiscoveryIncomplete).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::api::ConditionType;
use crate::conditions::{Announcement, transitions};

/// The Events a change from `old` to `new` conditions announces.
pub fn announcements(old: &[Condition], new: &[Condition]) -> Vec<Announcement> {
    transitions(old, new)
        .into_iter()
        .filter_map(|t| {
            let now = t.now;
            let status = now.status == "True";
            match now.type_.as_str() {
                x if x == ConditionType::Ready.as_str() => Some(if status {
                    Announcement::recovered(now)
                } else {
                    Announcement::warning(now)
                }),
                x if (x == ConditionType::SchemaInSync.as_str()
                    || x == ConditionType::AutoBindInSync.as_str()
                    || x == ConditionType::PoliciesInSync.as_str())
                    && !status =>
                {
                    Some(Announcement::warning(now))
                }
                x if x == ConditionType::ProviderDegraded.as_str() && status => {
                    Some(Announcement::warning(now))
                }
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Reason;

    use crate::conditions::{Desired, from_desired as conditions, with_desired};
    use crate::connection::autobind;

    fn ready(reason: Reason, status: bool, message: &str) -> Desired {
        Desired {
            type_: ConditionType::Ready,
            status,
            reason,
            message: message.into(),
        }
    }

    /// Ready and connected.
    fn fine() -> Vec<Condition> {
        conditions(&[ready(Reason::AsExpected, true, "connected")])
    }

    /// The one Event a change from `old` to `new` conditions announces.
    fn the_one_event(old: &[Condition], new: &[Condition]) -> Announcement {
        let mut events = announcements(old, new);
        assert_eq!(events.len(), 1, "{events:?}");
        events.remove(0)
    }

    #[test]
    fn each_failure_reason_is_one_warning_until_it_changes() {
        let missing = conditions(&[ready(Reason::SecretNotFound, false, "create it")]);
        let event = the_one_event(&[], &missing);
        assert!(event.warning);
        assert_eq!(event.reason, "SecretNotFound");
        assert_eq!(event.note, "create it");
        let requeued = conditions(&[ready(Reason::SecretNotFound, false, "create it!")]);
        assert!(announcements(&missing, &requeued).is_empty(), "per requeue");
        let forbidden = conditions(&[ready(Reason::Forbidden, false, "grant it")]);
        assert_eq!(the_one_event(&requeued, &forbidden).reason, "Forbidden");
    }

    #[test]
    fn becoming_ready_is_a_normal_event() {
        let broken = conditions(&[ready(Reason::ProviderUnreachable, false, "retrying")]);
        let event = the_one_event(&broken, &fine());
        assert!(!event.warning);
        assert_eq!(event.reason, "Ready");
        assert!(announcements(&fine(), &fine()).is_empty());
    }

    #[test]
    fn schema_refusals_warn_without_touching_ready() {
        let not_ours = Desired::falsy(
            ConditionType::SchemaInSync,
            Reason::CRDNotManaged,
            "not kbind's",
        );
        let refused = with_desired(&fine(), &[not_ours]);
        assert_eq!(the_one_event(&fine(), &refused).reason, "CRDNotManaged");
    }

    #[test]
    fn a_provider_blip_ridden_out_is_one_warning_and_ready_stays_quiet() {
        let blip = Desired::truthy(
            ConditionType::ProviderDegraded,
            Reason::ProviderUnreachable,
            "503",
        );
        let degraded = with_desired(&fine(), &[blip]);
        let event = the_one_event(&fine(), &degraded);
        assert!(event.warning);
        assert_eq!(event.reason, "ProviderUnreachable");
        assert!(announcements(&degraded, &degraded.clone()).is_empty());
        let healed = with_desired(
            &degraded,
            &[Desired::falsy(
                ConditionType::ProviderDegraded,
                Reason::AsExpected,
                "answers",
            )],
        );
        assert!(announcements(&degraded, &healed).is_empty(), "{healed:?}");
    }

    #[test]
    fn an_auto_bind_name_clash_is_one_warning_while_it_lasts() {
        let taken = with_desired(&fine(), &[autobind::name_taken("p")]);
        let event = the_one_event(&fine(), &taken);
        assert!(event.warning);
        assert_eq!(event.reason, "AutoBindNameTaken");
        assert!(event.note.contains("ClusterBinding p exists"), "{event:?}");
        assert!(
            announcements(&taken, &taken.clone()).is_empty(),
            "a periodic reconcile finding the same clash announces nothing"
        );
        let freed = with_desired(&taken, &[autobind::in_sync("p", 1)]);
        assert!(announcements(&taken, &freed).is_empty());
        assert!(
            !announcements(&freed, &taken).is_empty(),
            "a new clash after it cleared is announced again"
        );
    }
}
