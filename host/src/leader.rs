//! Leader election on a consumer `coordination.k8s.io/v1` Lease (default name
//! `konnector.kbind.io`), so that of several replicas only one reconciles.
//!
//! Built on `kube-lease-manager` (kube 5 compatible, server-side-apply locking, releases the
//! lease when its channel closes) rather than a hand-written lease loop: lease arithmetic and
//! clock-skew handling are not our domain.

use kube_lease_manager::{LeaseCreateMode, LeaseManager, LeaseParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Where and how long to hold the lease.
#[derive(Debug, Clone)]
pub struct ElectionConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity (pod name).
    pub identity: String,
    /// Seconds a leader holds the lease without renewing; a standby takes over after it.
    pub lease_seconds: u64,
}

/// Why leader election failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The lease parameters are unusable.
    #[error("invalid leader election settings: lease duration must be at least 2 seconds, got {0}")]
    Settings(u64),
    /// Creating or reading the Lease failed.
    #[error("leader election on Lease {namespace}/{name} failed: {source}")]
    Lease {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// The manager's error.
        source: kube_lease_manager::LeaseManagerError,
    },
    /// The election task ended, so leadership can no longer be guaranteed.
    #[error("the leader election task ended")]
    Ended,
}

/// A running election. Dropping it (or calling [`Leadership::release`]) releases the lease.
pub struct Leadership {
    state: watch::Receiver<bool>,
    task: JoinHandle<Result<LeaseManager, kube_lease_manager::LeaseManagerError>>,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("leader", &*self.state.borrow())
            .finish()
    }
}

/// Starts campaigning for the lease.
pub async fn campaign(
    client: kube::Client,
    config: &ElectionConfig,
) -> Result<Leadership, LeaderError> {
    if config.lease_seconds < 2 {
        return Err(LeaderError::Settings(config.lease_seconds));
    }
    // Renew a third of the duration before expiry: a missed renewal still leaves time.
    let grace = (config.lease_seconds / 3).max(1);
    let params = LeaseParams::new(config.identity.clone(), config.lease_seconds, grace);
    let manager = LeaseManager::new(
        client,
        &config.name,
        &config.namespace,
        params,
        LeaseCreateMode::AutoCreate,
    )
    .await
    .map_err(|source| LeaderError::Lease {
        namespace: config.namespace.clone(),
        name: config.name.clone(),
        source,
    })?;
    let (state, task) = manager.watch().await;
    Ok(Leadership { state, task })
}

impl Leadership {
    /// Resolves once this replica holds the lease.
    pub async fn acquired(&mut self) -> Result<(), LeaderError> {
        self.state
            .wait_for(|leader| *leader)
            .await
            .map(drop)
            .map_err(|_| LeaderError::Ended)
    }

    /// Resolves when this replica no longer holds the lease (or the election ended).
    pub async fn lost(&mut self) {
        let _ = self.state.wait_for(|leader| !*leader).await;
    }

    /// Releases the lease and waits for the election task to finish.
    pub async fn release(self) {
        let Self { state, task } = self;
        drop(state);
        match task.await {
            Ok(Ok(_)) => tracing::info!("leader lease released"),
            Ok(Err(error)) => tracing::warn!(%error, "releasing the leader lease failed"),
            Err(error) => tracing::warn!(%error, "the leader election task panicked"),
        }
    }
}
