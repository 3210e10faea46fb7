//! The four built-in policy components, built for `wasm32-wasip2` by `host/build.rs` from
//! `policies/*` and embedded in the binary.

use crate::artifact::sha256_digest;

use super::role::PolicyRole;

/// `policies/schema-synthesis`.
pub const SCHEMA_SYNTHESIS: &[u8] = include_bytes!(env!("KBIND_POLICY_SCHEMA_SYNTHESIS_WASM"));
/// `policies/conflict-policy`.
pub const CONFLICT_POLICY: &[u8] = include_bytes!(env!("KBIND_POLICY_CONFLICT_POLICY_WASM"));
/// `policies/related-selection`.
pub const RELATED_SELECTION: &[u8] = include_bytes!(env!("KBIND_POLICY_RELATED_SELECTION_WASM"));
/// `policies/placement-policy`.
pub const PLACEMENT_POLICY: &[u8] = include_bytes!(env!("KBIND_POLICY_PLACEMENT_POLICY_WASM"));

/// The embedded component of a role.
pub fn component(role: PolicyRole) -> &'static [u8] {
    match role {
        PolicyRole::SchemaSynthesis => SCHEMA_SYNTHESIS,
        PolicyRole::ConflictPolicy => CONFLICT_POLICY,
        PolicyRole::RelatedSelection => RELATED_SELECTION,
        PolicyRole::Placement => PLACEMENT_POLICY,
    }
}

/// The digest of a role's embedded component (computed once).
pub fn digest(role: PolicyRole) -> &'static str {
    static DIGESTS: std::sync::OnceLock<[String; 4]> = std::sync::OnceLock::new();
    let digests = DIGESTS.get_or_init(|| PolicyRole::ALL.map(|r| sha256_digest(component(r))));
    let index = PolicyRole::ALL
        .iter()
        .position(|r| *r == role)
        .unwrap_or_default();
    &digests[index]
}

/// How errors and logs name a built-in module.
pub const ORIGIN: &str = "built-in";
