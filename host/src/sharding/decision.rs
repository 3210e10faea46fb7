//! What a replica does with one shard's Lease on a tick, as a pure function of what it holds,
//! the Lease as listed, whether the shard is assigned here and the time, so that every case is
//! a row of a table test. The coordinator asks it for each shard and makes the requests.
//!
//! ```text
//! held here │ Lease names │ assigned │ work     ─▶ decision
//! ──────────┼─────────────┼──────────┼──────────────────────
//! yes       │ another/none│ any      │ any      ─▶ Lost     (drop the work, no request)
//! yes       │ me          │ yes      │ running  ─▶ Renew
//! yes       │ me          │ no       │ stopping ─▶ Stop     (renew until the work is gone)
//! yes       │ me          │ no       │ stopped  ─▶ Release
//! no        │ free / me   │ yes      │          ─▶ Take     (released, expired, or mine)
//! no        │ absent      │ yes      │          ─▶ Create
//! no        │ live other  │ yes      │          ─▶ Wait     (its holder releases or it expires)
//! no        │ any         │ no       │          ─▶ Wait
//! ```
//!
//! Leadership is the case of one shard that is always assigned: the same rows decide it.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;

use super::leases::{recorded_holder, takeable};

/// How this replica holds a shard, as far as the decision goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Hold {
    /// No longer assigned here: its work is stopping.
    pub(super) releasing: bool,
    /// The work has stopped (only asked while releasing).
    pub(super) stopped: bool,
}

/// What to do with one shard's Lease this tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Decision {
    /// Held here but the Lease names another holder (or is gone): drop the work.
    Lost,
    /// Held and assigned: renew.
    Renew,
    /// Held, no longer assigned, work still stopping: renew until it has.
    Stop,
    /// Held, no longer assigned, work stopped: release.
    Release,
    /// Assigned and free: take.
    Take,
    /// Assigned and no Lease yet: create it held.
    Create,
    /// Nothing to do here.
    Wait,
}

/// The decision for one shard: `held` is how this replica holds it (if it does), `lease` the
/// shard's Lease as listed this tick, `assigned` whether rendezvous hashing gives it to `me`.
pub(super) fn decide(
    me: &str,
    held: Option<Hold>,
    lease: Option<&Lease>,
    assigned: bool,
    now: Timestamp,
) -> Decision {
    match (held, lease) {
        (Some(_), lease) if lease.and_then(recorded_holder) != Some(me) => Decision::Lost,
        (Some(hold), Some(_)) if assigned && !hold.releasing => Decision::Renew,
        (Some(hold), Some(_)) if hold.releasing && hold.stopped => Decision::Release,
        (Some(_), Some(_)) => Decision::Stop,
        (Some(_), None) => Decision::Lost,
        (None, Some(lease)) if assigned && takeable(lease, me, now) => Decision::Take,
        (None, None) if assigned => Decision::Create,
        (None, _) => Decision::Wait,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use k8s_openapi::jiff::SignedDuration;

    const ME: &str = "r1";

    fn lease(holder: Option<&str>, renewed_secs_ago: i64) -> Lease {
        let now = Timestamp::UNIX_EPOCH + SignedDuration::from_secs(1_000);
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(now - SignedDuration::from_secs(renewed_secs_ago))),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    fn now() -> Timestamp {
        Timestamp::UNIX_EPOCH + SignedDuration::from_secs(1_000)
    }

    const RUNNING: Option<Hold> = Some(Hold {
        releasing: false,
        stopped: false,
    });
    const STOPPING: Option<Hold> = Some(Hold {
        releasing: true,
        stopped: false,
    });
    const STOPPED: Option<Hold> = Some(Hold {
        releasing: true,
        stopped: true,
    });

    #[test]
    fn every_row_of_the_table_decides_as_documented() {
        let mine = lease(Some(ME), 1);
        let other_live = lease(Some("r2"), 1);
        let other_expired = lease(Some("r2"), 60);
        let released = lease(None, 60);
        // (case, how it is held here, its Lease as listed, assigned here, decision)
        type Row<'a> = (&'a str, Option<Hold>, Option<&'a Lease>, bool, Decision);
        let rows: [Row; 16] = [
            (
                "held, Lease names another",
                RUNNING,
                Some(&other_live),
                true,
                Decision::Lost,
            ),
            (
                "held, Lease names an expired other",
                RUNNING,
                Some(&other_expired),
                true,
                Decision::Lost,
            ),
            (
                "held, Lease released",
                RUNNING,
                Some(&released),
                true,
                Decision::Lost,
            ),
            ("held, Lease gone", RUNNING, None, true, Decision::Lost),
            (
                "held while stopping, Lease gone",
                STOPPING,
                None,
                false,
                Decision::Lost,
            ),
            (
                "held and assigned",
                RUNNING,
                Some(&mine),
                true,
                Decision::Renew,
            ),
            (
                "held, unassigned, stopping",
                STOPPING,
                Some(&mine),
                false,
                Decision::Stop,
            ),
            (
                "held, unassigned, stopped",
                STOPPED,
                Some(&mine),
                false,
                Decision::Release,
            ),
            (
                "held, reassigned while stopping",
                STOPPING,
                Some(&mine),
                true,
                Decision::Stop,
            ),
            (
                "held, reassigned once stopped",
                STOPPED,
                Some(&mine),
                true,
                Decision::Release,
            ),
            (
                "assigned, Lease released",
                None,
                Some(&released),
                true,
                Decision::Take,
            ),
            (
                "assigned, Lease expired",
                None,
                Some(&other_expired),
                true,
                Decision::Take,
            ),
            (
                "assigned, Lease still mine",
                None,
                Some(&mine),
                true,
                Decision::Take,
            ),
            ("assigned, no Lease", None, None, true, Decision::Create),
            (
                "assigned, another holds it",
                None,
                Some(&other_live),
                true,
                Decision::Wait,
            ),
            ("not assigned, no Lease", None, None, false, Decision::Wait),
        ];
        for (case, held, lease, assigned, want) in rows {
            assert_eq!(decide(ME, held, lease, assigned, now()), want, "{case}");
        }
    }

    #[test]
    fn a_free_lease_not_assigned_here_is_left_alone() {
        for lease in [lease(None, 60), lease(Some("r2"), 60), lease(Some(ME), 1)] {
            assert_eq!(decide(ME, None, Some(&lease), false, now()), Decision::Wait);
        }
    }
}
