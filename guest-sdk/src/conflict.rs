//! The `conflict-policy` world: may the konnector write to a provider object?
//!
//! Implement [`Guest`] and export it with [`export_conflict_policy!`](crate::export_conflict_policy).
//! The built-in policy's decision table is in `policies/conflict-policy`.

#[doc(hidden)]
#[allow(unsafe_code, missing_docs, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "conflict-policy",
        path: "wit",
        pub_export_macro: true,
        export_macro_name: "__export_conflict_policy",
        default_bindings_module: "kbind_policy_sdk::conflict::bindings",
        runtime_path: "kbind_policy_sdk::__wit_bindgen::rt",
        additional_derives: [PartialEq, Eq],
    });
}

pub use bindings::exports::kbind::policy::conflict::{
    Conflict, ConflictInput, ConflictPolicy, ConflictReason, Decision, Guest, OwnershipMarkers,
};

/// Exports a [`Guest`] implementation as the component's `kbind:policy/conflict` interface.
///
/// Use it once, in the policy crate's root: `kbind_policy_sdk::export_conflict_policy!(MyPolicy);`
#[macro_export]
macro_rules! export_conflict_policy {
    ($ty:ident) => {
        #[cfg(target_arch = "wasm32")]
        #[allow(unsafe_code)]
        const _: () = {
    $crate::conflict::bindings::__export_conflict_policy!($ty with_types_in $crate::conflict::bindings);
        };
    };
}
