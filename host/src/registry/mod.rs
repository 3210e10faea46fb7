//! The in-memory state the controllers share, each part with one writer: which Connections
//! are engaged and with which provider client (written by the Connection controller), and
//! which binding selects which instances (written by the binding controllers). The syncer
//! supervisor and the syncers only read.
//!
//! ```text
//! shard coordinator ─────▶ Shards (what this replica may write)
//! Connection controller ──▶ Engagements ──┐
//! binding controllers ────▶ BindingIndex ─┴──▶ supervisor, syncers, binding controllers
//! ```

mod engagements;
mod gauges;
pub mod index;
pub mod outcomes;
mod shards;
mod summary;
mod syncers;
mod tally;

pub use engagements::{Engaged, Engagement, Engagements};
pub use gauges::publish_instance_counts;
pub use index::{BindingIndex, BindingKey, Entry, Reach, Scopes, Selection, SharedIndex, reach};
pub use outcomes::{ApiKey, DeniedBy, Outcome, Outcomes, Recorded};
pub use shards::{ConnectionWork, Held, Shards};
pub use summary::{Failing, Summary};
pub use syncers::RunningSyncers;
