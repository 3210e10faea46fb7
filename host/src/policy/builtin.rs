//! The four built-in policy components, built for `wasm32-wasip2` by `host/build.rs` from
//! `policies/*` and embedded in the binary.

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

/// How errors and logs name a built-in module.
pub const ORIGIN: &str = "built-in";
