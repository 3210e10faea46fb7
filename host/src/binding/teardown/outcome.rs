//! What a drain did, told apart for the `Drained` condition: binding cleanup does not wait for
//! provider finalizers (spec, "Unlike normal instance deletion, binding cleanup does not wait
//! for every provider object's finalizers"), so the condition must say which copies are gone
//! and which were only asked to go.
//!
//! ```text
//! per drained API ─▶ Tally { deleted, still there (count, first), released only (owner),
//!                            released unchecked }
//! tallies ─▶ Drained=True  AsExpected          every owned copy deleted (or none to delete)
//!            Drained=True  DeletionRequested   some copies' deletion requested, still on the
//!                                              provider (their finalizers): count and first
//!            (instances released without deleting name the Connection that owns the API)
//! ```
//!
//! Pure: the drain counts, this module words it.

use crate::api::{ConditionType, Reason};
use crate::conditions::Desired;

/// What draining one API's instances did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Owned provider copies the provider deleted at once.
    pub deleted: usize,
    /// Owned provider copies whose deletion was requested and that still exist (held by
    /// provider-side finalizers).
    pub still_there: usize,
    /// The first of those, as `namespace/name` on the provider.
    pub first_still_there: Option<String>,
    /// Instances whose finalizer was released without deleting anything, because their API is
    /// another Connection's (or no Connection's): their copies are left alone.
    pub released_only: usize,
    /// The Connection the API is pinned to when it is not the draining binding's, if any.
    pub owner: Option<String>,
    /// Instances released without a provider client to check their copies.
    pub unchecked: usize,
}

impl Tally {
    /// Records a copy whose deletion was requested and that is still on the provider.
    pub(crate) fn still_there(&mut self, at: String) {
        self.still_there += 1;
        self.first_still_there.get_or_insert(at);
    }

    /// Adds another tally of the same API (a drain over several passes).
    pub(crate) fn add(&mut self, other: Tally) {
        self.deleted += other.deleted;
        self.still_there += other.still_there;
        if self.first_still_there.is_none() {
            self.first_still_there = other.first_still_there;
        }
        self.released_only += other.released_only;
        if self.owner.is_none() {
            self.owner = other.owner;
        }
        self.unchecked += other.unchecked;
    }

    /// One API's part of the condition message.
    fn describe(&self, api: &str) -> String {
        let mut parts = vec![format!("{} owned copies deleted", self.deleted)];
        if self.still_there > 0 {
            parts.push(format!(
                "{} whose deletion was requested still on the provider (held by its finalizers; first: {})",
                self.still_there,
                self.first_still_there.as_deref().unwrap_or("unknown")
            ));
        }
        if self.released_only > 0 {
            let owner = match &self.owner {
                Some(owner) => {
                    format!("its API is pinned to Connection {owner}, whose syncer owns them")
                }
                None => "its consumer CRD is not kbind's for this binding's Connection".to_string(),
            };
            parts.push(format!(
                "{} instances released without deleting ({owner})",
                self.released_only
            ));
        }
        if self.unchecked > 0 {
            parts.push(format!(
                "{} instances released without a provider check",
                self.unchecked
            ));
        }
        format!("{api}: {}", parts.join(", "))
    }
}

/// The `Drained` condition after a drain through a provider client of `apis`, each with what
/// its drain did.
pub(crate) fn condition(apis: &[(String, Tally)]) -> Desired {
    let still_there: usize = apis.iter().map(|(_, t)| t.still_there).sum();
    let described: Vec<String> = apis.iter().map(|(api, t)| t.describe(api)).collect();
    let mut message = format!("drained: {}", described.join("; "));
    if still_there > 0 {
        message.push_str(
            ". Binding cleanup does not wait for provider finalizers: the copies still there go when the provider's finalizers finish; check them on the provider",
        );
        return Desired::truthy(ConditionType::Drained, Reason::DeletionRequested, message);
    }
    Desired::truthy(ConditionType::Drained, Reason::AsExpected, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(deleted: usize) -> Tally {
        Tally {
            deleted,
            ..Tally::default()
        }
    }

    #[test]
    fn copies_all_deleted_is_as_expected_with_the_count() {
        let c = condition(&[("widgets.example.org".into(), tally(3))]);
        assert_eq!((c.status, c.reason), (true, Reason::AsExpected));
        assert!(
            c.message
                .contains("widgets.example.org: 3 owned copies deleted"),
            "{}",
            c.message
        );
    }

    #[test]
    fn a_copy_still_there_after_its_deletion_is_named_with_the_count() {
        let mut t = tally(1);
        t.still_there("team-a/w1".into());
        t.still_there("team-a/w2".into());
        let c = condition(&[("widgets.example.org".into(), t)]);
        assert_eq!((c.status, c.reason), (true, Reason::DeletionRequested));
        for part in [
            "2 whose deletion was requested",
            "first: team-a/w1",
            "finalizers",
        ] {
            assert!(c.message.contains(part), "{} lacks {part:?}", c.message);
        }
    }

    #[test]
    fn instances_released_without_deleting_name_the_owning_connection() {
        let t = Tally {
            released_only: 2,
            owner: Some("real".into()),
            ..Tally::default()
        };
        let c = condition(&[("widgets.example.org".into(), t)]);
        assert_eq!(c.reason, Reason::AsExpected);
        assert!(
            c.message.contains(
                "2 instances released without deleting (its API is pinned to Connection real"
            ),
            "{}",
            c.message
        );
    }

    #[test]
    fn tallies_of_one_api_add_up_keeping_the_first_example() {
        let mut a = Tally::default();
        a.still_there("ns/a".into());
        let mut b = tally(2);
        b.still_there("ns/b".into());
        a.add(b);
        assert_eq!((a.deleted, a.still_there), (2, 2));
        assert_eq!(a.first_still_there.as_deref(), Some("ns/a"));
    }
}
