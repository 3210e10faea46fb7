//! The one wiring place: builds the shared context once and starts the Connection
//! controller, the Binding and ClusterBinding controllers and the syncer supervisor as
//! equals, each with a clone of it; they stop together. The binary runs this under leader
//! election, or beside the shard coordinator (`crate::sharding`) with `--sharding`; tests run
//! it in-process.
//!
//! ```text
//!            ┌─▶ Connection controller ──writes──▶ engagements
//! Shared ────┼─▶ binding controllers ────writes──▶ binding index
//!            └─▶ syncer supervisor ─────reads both, runs syncers ──writes──▶ outcomes
//! ```

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::shared::Shared;
use crate::sync::Supervisor;
use crate::{binding, connection};

/// Config of every controller.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Connection controller timings and credential namespace.
    pub connection: connection::Config,
    /// Binding controllers and instance sync engine settings.
    pub binding: binding::Config,
}

/// Runs every controller against the consumer until `shutdown` is cancelled.
pub async fn run(shared: Shared, settings: Config, shutdown: CancellationToken) {
    let connections = Arc::new(connection::Context::new(
        shared.clone(),
        settings.connection,
    ));
    tokio::join!(
        connection::run(connections, shutdown.clone()),
        run_bindings(shared, settings.binding, shutdown),
    );
}

/// Runs the binding controllers and the syncer supervisor without the Connection
/// controller: engagements then come from whoever fills `shared.engagements` (tests do).
pub async fn run_bindings(shared: Shared, settings: binding::Config, shutdown: CancellationToken) {
    let sharded = shared.shards.sharded();
    let supervisor = Supervisor::new(shared.clone(), settings.sync.clone());
    let gauges =
        crate::registry::publish_instance_counts(shared.outcomes.clone(), shutdown.clone());
    let bindings = Arc::new(binding::Context::new(shared, settings));
    let entries = async {
        // Sharded replicas write the binding status entries of the APIs they sync.
        if sharded {
            binding::run_shard_status(bindings.clone(), shutdown.clone()).await;
        }
    };
    tokio::join!(
        binding::run(bindings.clone(), shutdown.clone()),
        supervisor.run(shutdown.clone()),
        entries,
        gauges,
    );
}
