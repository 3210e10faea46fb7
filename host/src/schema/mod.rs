//! Installing an exported API's schema on the consumer as a CRD.
//!
//! The CRD comes from the provider's own CRD (CRD source, provider-only fields stripped) or is
//! synthesized from discovery and `/openapi/v3` by the schema-synthesis policy (OpenAPI
//! source). Installed CRDs carry `core.kbind.io/connection`, which pins the API to that
//! Connection: a CRD pinned to another Connection, or created by someone else, is never
//! overwritten. `updatePolicy: Once` leaves an installed CRD as it is.

mod install;
mod openapi;
mod pull;

pub use install::{Installed, SchemaError, Target, ensure_installed, established, schema_hash};
pub use openapi::{ApiFacts, VersionFacts, fetch_facts};
pub use pull::consumer_crd_from_provider;
