//! Starts every controller of the konnector as one unit and stops them together: the
//! Connection controller, the Binding and ClusterBinding controllers, and the syncer
//! supervisor they drive. The binary runs this under leader election; tests run it
//! in-process.

use std::sync::Arc;

use kube::runtime::events::{Recorder, Reporter};
use tokio_util::sync::CancellationToken;

use crate::policy::Policies;
use crate::registry::Engagements;
use crate::sync::Supervisor;
use crate::{binding, connection};

/// Name reported on Events and used as field manager prefix in logs.
pub const REPORTER: &str = "kbind-konnector";

/// Settings of every controller.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Connection controller timings and credential namespace.
    pub connection: connection::Config,
    /// Binding controllers and instance sync engine settings.
    pub binding: binding::Settings,
}

/// Runs every controller against the consumer until `shutdown` is cancelled.
pub async fn run(
    client: kube::Client,
    policies: Policies,
    settings: Settings,
    shutdown: CancellationToken,
) {
    let engagements = Engagements::default();
    run_with(client, policies, settings, engagements, shutdown).await;
}

/// Like [`run`], with an engagement registry the caller can observe (tests do).
pub async fn run_with(
    client: kube::Client,
    policies: Policies,
    settings: Settings,
    engagements: Engagements,
    shutdown: CancellationToken,
) {
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: REPORTER.into(),
            instance: pod_name(),
        },
    );
    let connections = Arc::new(connection::Context::new(
        client.clone(),
        engagements.clone(),
        policies.clone(),
        recorder.clone(),
        settings.connection.clone(),
    ));
    let bindings = Arc::new(binding::Context::new(
        client.clone(),
        engagements.clone(),
        policies.clone(),
        settings.binding,
    ));
    tokio::join!(
        connection::run(connections, shutdown.clone()),
        run_bindings(bindings, shutdown),
    );
}

/// Runs the binding controllers and the syncer supervisor, which share the binding context's
/// registry; without the Connection controller, engagements come from whoever fills the
/// registry (tests do).
pub async fn run_bindings(bindings: Arc<binding::Context>, shutdown: CancellationToken) {
    let supervisor = Supervisor::new(
        bindings.consumer.clone(),
        bindings.engagements.clone(),
        bindings.index.clone(),
        bindings.policies.clone(),
        bindings.reporter.clone(),
        bindings.settings.sync.clone(),
        bindings.syncers.clone(),
        bindings.outcomes.clone(),
    );
    tokio::join!(
        binding::run(bindings, shutdown.clone()),
        supervisor.run(shutdown),
    );
}

fn pod_name() -> Option<String> {
    std::env::var("POD_NAME").ok().filter(|n| !n.is_empty())
}
