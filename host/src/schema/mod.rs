//! Installing an exported API's schema on the consumer as a CRD.
//!
//! The CRD comes from the provider's own CRD (CRD source) or is synthesized from discovery and
//! `/openapi/v3` by the schema-synthesis policy (OpenAPI source); either way the host cuts it
//! down to what a consumer needs ([`sanitize`]). Installed CRDs carry
//! `core.kbind.io/connection`, which pins the API to that Connection; [`managed`] is the one
//! rule deciding which consumer CRDs kbind may install, update or delete: never one of a
//! protected group, never one kbind did not install for the same Connection.
//! `updatePolicy: Once` leaves an installed CRD as it is; `Always` applies again only when
//! the provider's schema changed ([`applied`]). A consumer CRD never converts by relabelling
//! what the provider converts for real: a webhook-converted (or synthesized) multi-version API
//! serves the synced version only ([`versions`]); a plural, singular or kind a built-in or
//! aggregated consumer resource answers to is refused ([`taken`]). An installed CRD also records
//! the provider cluster's UID, so that a CRD whose Connection was deleted can be taken over by
//! a new Connection to the same cluster ([`handover`]).

mod applied;
mod error;
pub mod handover;
mod install;
pub mod managed;
mod openapi;
pub mod sanitize;
pub mod taken;
mod target;
pub mod versions;

pub use applied::AppliedSchemas;
pub use error::SchemaError;
pub use install::{
    Installed, Target, as_applied, ensure_installed, established, is_established, schema_hash,
};
pub use managed::Refusal;
pub use openapi::{ApiFacts, VersionFacts, fetch_facts};
pub use sanitize::{Versioning, consumer_crd};
pub use taken::{Collision, TakenNames};
pub use target::ApiTarget;
