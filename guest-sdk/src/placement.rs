//! The `placement-policy` world: where on the provider a consumer object's copy lives.
//!
//! Implement [`Guest`] and export it with [`export_placement_policy!`](crate::export_placement_policy).
//! The built-in strategies (`None`, `Namespaced`, `Prefixed`) are in `policies/placement-policy`.
//!
//! A placement is asked once per consumer object, before its first provider write, and must
//! be stable (the same input always gives the same answer) and injective (two consumer
//! objects never share a place). Kubernetes bounds names: [`fit_name`] keeps a composed name
//! within a bound without letting two long names cut down to the same result.

use sha2::{Digest, Sha256};

#[doc(hidden)]
#[allow(unsafe_code, missing_docs, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "placement-policy",
        path: "wit",
        pub_export_macro: true,
        export_macro_name: "__export_placement_policy",
        default_bindings_module: "kbind_policy_sdk::placement::bindings",
        runtime_path: "kbind_policy_sdk::__wit_bindgen::rt",
        additional_derives: [PartialEq, Eq],
    });
}

pub use bindings::exports::kbind::policy::placement::{
    Api, Guest, Isolation, Location, PlacementInput, ResourceScope, Strategy,
};

/// The longest namespace name: namespaces are DNS labels.
pub const MAX_NAMESPACE_LEN: usize = 63;
/// The longest object name of a custom resource (or a Secret, a ConfigMap): a DNS subdomain.
pub const MAX_NAME_LEN: usize = 253;
/// How many hex digits [`short_hash`] gives and [`fit_name`] appends to a shortened name.
pub const HASH_LEN: usize = 10;

/// The first [`HASH_LEN`] hex digits of the SHA-256 of `text`: a short digest that is the same
/// on every call and every konnector, for names built from names (`<hash(namespace)>-...`).
pub fn short_hash(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .take(HASH_LEN / 2)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Fits a name into `max_len` bytes ([`MAX_NAMESPACE_LEN`] for namespaces, [`MAX_NAME_LEN`] for
/// object names), so that composing `<prefix>-<name>` never produces a name Kubernetes refuses.
///
/// A name that fits is returned unchanged. A longer one becomes a prefix of it, `-` and the
/// [`short_hash`] of the whole name, exactly `max_len` long or shorter: two long names that
/// start alike still end differently. The prefix loses trailing `-` and `.`, so a valid DNS
/// name stays valid (the helper fixes only the length, not the characters). Below
/// `HASH_LEN + 2` bytes there is no room for a prefix and the result is (part of) the hash.
pub fn fit_name(name: &str, max_len: usize) -> String {
    if name.len() <= max_len {
        return name.to_owned();
    }
    let hash = short_hash(name);
    if max_len <= HASH_LEN {
        // The hash is ASCII: any cut is on a character boundary.
        return hash.chars().take(max_len).collect();
    }
    let mut keep = max_len - HASH_LEN - 1;
    while !name.is_char_boundary(keep) {
        keep -= 1;
    }
    let head = name[..keep].trim_end_matches(['-', '.']);
    if head.is_empty() {
        hash
    } else {
        format!("{head}-{hash}")
    }
}

/// Exports a [`Guest`] implementation as the component's `kbind:policy/placement` interface.
///
/// Use it once, in the policy crate's root: `kbind_policy_sdk::export_placement_policy!(MyPolicy);`
#[macro_export]
macro_rules! export_placement_policy {
    ($ty:ident) => {
        #[cfg(target_arch = "wasm32")]
        #[allow(unsafe_code)]
        const _: () = {
    $crate::placement::bindings::__export_placement_policy!($ty with_types_in $crate::placement::bindings);
        };
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `s` is a DNS subdomain as Kubernetes checks object names.
    fn is_dns_subdomain(s: &str) -> bool {
        s.len() <= MAX_NAME_LEN
            && s.split('.').all(|label| {
                let b = label.as_bytes();
                matches!((b.first(), b.last()), (Some(f), Some(l)) if f.is_ascii_alphanumeric() && l.is_ascii_alphanumeric())
                    && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            })
    }

    #[test]
    fn a_name_that_fits_is_unchanged() {
        assert_eq!(fit_name("east-team-a", MAX_NAMESPACE_LEN), "east-team-a");
        let exactly = "a".repeat(MAX_NAMESPACE_LEN);
        assert_eq!(fit_name(&exactly, MAX_NAMESPACE_LEN), exactly);
    }

    #[test]
    fn a_long_name_is_cut_to_the_limit_and_ends_in_its_hash() {
        let long = format!("east-{}", "n".repeat(70));
        let fitted = fit_name(&long, MAX_NAMESPACE_LEN);
        assert_eq!(fitted.len(), MAX_NAMESPACE_LEN);
        assert_eq!(fitted, format!("{}-{}", &long[..52], short_hash(&long)));
        assert!(is_dns_subdomain(&fitted), "{fitted}");
    }

    #[test]
    fn two_long_names_that_start_alike_do_not_collide() {
        let stem = "w".repeat(MAX_NAME_LEN);
        let (a, b) = (format!("{stem}-one"), format!("{stem}-two"));
        let (fa, fb) = (fit_name(&a, MAX_NAME_LEN), fit_name(&b, MAX_NAME_LEN));
        assert_ne!(fa, fb);
        assert_eq!((fa.len(), fb.len()), (MAX_NAME_LEN, MAX_NAME_LEN));
    }

    #[test]
    fn a_cut_never_leaves_a_trailing_dash_or_dot() {
        // The cut (at 52 of 63) falls right after "-." : both go.
        let long = format!("{}-.{}", "a".repeat(50), "b".repeat(40));
        let fitted = fit_name(&long, MAX_NAMESPACE_LEN);
        assert_eq!(fitted, format!("{}-{}", "a".repeat(50), short_hash(&long)));
        assert!(is_dns_subdomain(&fitted), "{fitted}");
    }

    #[test]
    fn the_same_name_always_fits_the_same_way() {
        // sha256("abc") = ba7816bf 8f01cfea ...
        assert_eq!(short_hash("abc"), "ba7816bf8f");
        let long = "x".repeat(300);
        assert_eq!(fit_name(&long, MAX_NAME_LEN), fit_name(&long, MAX_NAME_LEN));
    }

    #[test]
    fn a_limit_without_room_for_a_prefix_gives_the_hash() {
        let long = "y".repeat(40);
        assert_eq!(fit_name(&long, HASH_LEN + 1), short_hash(&long));
        assert_eq!(fit_name(&long, 4), short_hash(&long)[..4]);
    }

    #[test]
    fn a_cut_inside_a_multibyte_character_moves_back_to_its_start() {
        let long = format!("{}é{}", "a".repeat(51), "b".repeat(20));
        let fitted = fit_name(&long, MAX_NAMESPACE_LEN);
        assert!(fitted.len() <= MAX_NAMESPACE_LEN);
        assert!(fitted.starts_with(&"a".repeat(51)), "{fitted}");
    }
}
