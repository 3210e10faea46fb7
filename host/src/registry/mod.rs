//! The in-memory state the controllers share, each part with one writer: which Connections
//! are engaged and with which provider client (written by the Connection controller), and
//! which binding selects which instances (written by the binding controllers). The syncer
//! supervisor and the syncers only read.
//!
//! ```text
//! shard coordinator ─────▶ Ownership (what this replica may write)
//! Connection controller ──▶ Engagements ──┐
//! binding controllers ────▶ BindingIndex ─┴──▶ supervisor, syncers, binding controllers
//! ```

mod engagements;
pub mod index;
pub mod outcomes;
mod ownership;
mod syncers;
mod tally;

pub use engagements::{Engaged, Engagement, Engagements};
pub use index::{BindingIndex, BindingKey, Coverage, Entry, Reach, Scopes, SharedIndex, reach};
pub use outcomes::{ApiKey, DeniedBy, Outcome, Outcomes, Recorded, Summary};
pub use ownership::{ConnectionWork, Owned, Ownership};
pub use syncers::RunningSyncers;
