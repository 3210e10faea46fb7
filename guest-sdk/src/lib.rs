//! The crate a kbind policy author depends on.
//!
//! The kbind konnector delegates four decisions to WebAssembly components, one WIT world
//! per role (package `kbind:policy@0.2.0`, in `wit/policy.wit`; modules built against 0.1.0
//! still load). Every role's interface has `configure`, which takes the operator's settings
//! ([`settings`]):
//!
//! | role | module | export macro |
//! |---|---|---|
//! | schema synthesis | [`schema`] | [`export_schema_synthesis!`] |
//! | conflict policy | [`conflict`] | [`export_conflict_policy!`] |
//! | related-resource selection | [`related`] | [`export_related_selection!`] |
//! | placement | [`placement`] | [`export_placement_policy!`] |
//!
//! A policy is a `cdylib` crate built with `cargo build --target wasm32-wasip2`: implement
//! the role's `Guest` trait and export it with one line.
//!
//! ```ignore
//! use kbind_policy_sdk::conflict::{ConflictInput, Decision, Guest};
//!
//! struct AlwaysCreate;
//! impl Guest for AlwaysCreate {
//!     // No settings: an empty document only.
//!     fn configure(settings: String) -> Result<(), String> {
//!         kbind_policy_sdk::settings::none(&settings)
//!     }
//!     fn decide(_input: ConflictInput) -> Result<Decision, String> {
//!         Ok(Decision::Create)
//!     }
//! }
//! kbind_policy_sdk::export_conflict_policy!(AlwaysCreate);
//! ```
//!
//! The helpers the built-in policies use are here too: [`selector`] (Kubernetes label
//! selectors with their full semantics, invalid selectors are errors), [`openapi`]
//! (walking OpenAPI v3 documents and resolving `$ref`s) and [`placement::fit_name`] (a name
//! composed for the provider, cut to Kubernetes' length limits by a stable hash).

// Lets the generated bindings and export macros name this crate the same way from inside
// and outside it.
extern crate self as kbind_policy_sdk;

pub mod conflict;
pub mod openapi;
pub mod placement;
pub mod related;
pub mod schema;
pub mod selector;
pub mod settings;

#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;
