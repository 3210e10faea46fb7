//! The CLI's pure decisions over plain values, unit-tested without a cluster: the order of a
//! teardown and what it removes, and how a deleting binding's drain is explained.

pub mod drain;
pub mod teardown;
