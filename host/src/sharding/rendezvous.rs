//! Rendezvous (highest-random-weight) hashing: each shard goes to the live member whose hash
//! with the shard's key is highest. A member joining takes only the shards it now wins; a
//! member leaving gives up only its own; nothing else moves. Every replica computes the same
//! answer from the same member list, with no coordination beyond the Leases it reads.

use sha2::{Digest, Sha256};

/// The weight of `member` for the shard `key`: the first eight bytes of
/// sha256(member, 0, key), so every replica (and every build) agrees.
fn weight(member: &str, key: &str) -> u64 {
    let mut hasher = Sha256::new();
    hasher.update(member.as_bytes());
    hasher.update([0]);
    hasher.update(key.as_bytes());
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The member that owns the shard `key`, or `None` when there are no members. Ties (never seen
/// in practice) go to the smaller name, so the answer does not depend on the list's order.
pub fn owner<'a>(members: impl IntoIterator<Item = &'a str>, key: &str) -> Option<&'a str> {
    members
        .into_iter()
        .map(|member| (weight(member, key), member))
        .max_by(|(wa, ma), (wb, mb)| wa.cmp(wb).then_with(|| mb.cmp(ma)))
        .map(|(_, member)| member)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn keys(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("provider/api{i}.example.org"))
            .collect()
    }

    fn assignment<'a>(members: &[&'a str], keys: &[String]) -> BTreeMap<String, &'a str> {
        keys.iter()
            .filter_map(|k| owner(members.iter().copied(), k).map(|m| (k.clone(), m)))
            .collect()
    }

    #[test]
    fn no_member_owns_nothing() {
        assert_eq!(owner([], "c/a"), None);
    }

    #[test]
    fn the_answer_does_not_depend_on_member_order() {
        for key in keys(50) {
            assert_eq!(owner(["a", "b", "c"], &key), owner(["c", "a", "b"], &key));
        }
    }

    #[test]
    fn shards_spread_over_members() {
        let keys = keys(300);
        let members = ["konnector-0", "konnector-1", "konnector-2"];
        let assigned = assignment(&members, &keys);
        for member in members {
            let share = assigned.values().filter(|m| **m == member).count();
            assert!((60..=140).contains(&share), "{member} owns {share} of 300");
        }
    }

    #[test]
    fn a_joining_member_takes_only_shards_it_now_wins() {
        let keys = keys(200);
        let before = assignment(&["a", "b", "c"], &keys);
        let after = assignment(&["a", "b", "c", "d"], &keys);
        for (key, owner_after) in &after {
            if before[key] != *owner_after {
                assert_eq!(*owner_after, "d", "{key} moved between old members");
            }
        }
        assert!(after.values().any(|m| *m == "d"));
    }

    #[test]
    fn a_leaving_member_gives_up_only_its_own_shards() {
        let keys = keys(200);
        let before = assignment(&["a", "b", "c"], &keys);
        let after = assignment(&["a", "c"], &keys);
        for (key, owner_before) in &before {
            if *owner_before != "b" {
                assert_eq!(
                    after[key], *owner_before,
                    "{key} moved though its owner stayed"
                );
            }
        }
    }
}
