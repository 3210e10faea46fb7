//! The one context every controller of a konnector is handed: the consumer client, the
//! in-memory registries (each with one writer) and the policy modules. `manager` builds it
//! once; the Connection controller, the binding controllers and the syncer supervisor each
//! take a clone, so none of them starts or owns another.
//!
//! ```text
//!                  ┌─ engagements ◀── Connection controller
//! manager ─Shared ─┼─ index, syncers' outcomes ◀── binding controllers / syncers
//!                  ├─ running syncers ◀── supervisor
//!                  └─ shards ◀──── shard coordinator (with --sharding)
//! ```

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};

use crate::api::names::FIELD_MANAGER;
use std::sync::{Arc, OnceLock};

use crate::artifact::{Cache, FetchError, Fetcher, FetcherConfig};
use crate::policy::Policies;
use crate::registry::{Engagements, Outcomes, RunningSyncers, Shards, SharedIndex};

/// What the controllers share; cheap to clone, every clone sees the same registries.
#[derive(Clone)]
pub struct Shared {
    /// Consumer cluster client.
    pub consumer: Client,
    /// Ready Connections' provider clients (written by the Connection controller).
    pub engagements: Engagements,
    /// Which binding selects which instance (written by the binding controllers).
    pub index: SharedIndex,
    /// What the last reconcile of each instance came to (written by the syncers).
    pub outcomes: Outcomes,
    /// Which syncers run (written by the supervisor), so a drain can wait for one to stop.
    pub syncers: RunningSyncers,
    /// Which shards this replica holds (written by the shard coordinator; everything when
    /// not sharded).
    pub shards: Shards,
    /// The policy modules (Wasm components in production).
    pub policies: Policies,
    /// How Connections' own registry modules are pulled (`spec.policies`): the konnector's
    /// cache and registries, with its pull Secret's credentials. None: Connections may name
    /// built-in modules only.
    pub policy_fetcher: Option<Arc<PolicyFetch>>,
    /// Who Events are reported as: the konnector, and its Pod when known.
    pub reporter: Reporter,
    /// Publishes Events as `reporter`.
    pub recorder: Recorder,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("reporter", &self.reporter)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// Fresh registries for `consumer`; Events name `pod` (the Pod's name) when given.
    pub fn new(consumer: Client, policies: Policies, pod: Option<String>) -> Self {
        let reporter = Reporter {
            controller: FIELD_MANAGER.to_string(),
            instance: pod.filter(|name| !name.is_empty()),
        };
        Self {
            recorder: Recorder::new(consumer.clone(), reporter.clone()),
            consumer,
            engagements: Engagements::default(),
            index: SharedIndex::default(),
            outcomes: Outcomes::default(),
            syncers: RunningSyncers::default(),
            shards: Shards::default(),
            policies,
            policy_fetcher: None,
            reporter,
        }
    }
}

/// The konnector's way to pull registry modules, for Connections that name their own.
#[derive(Debug)]
pub struct PolicyFetch {
    /// Pulls with the konnector's own pull Secret (or anonymously), built when a Connection
    /// first names a module: a registry client loads the system's trust store (about 90 ms
    /// of CPU and half a million allocations), which a konnector whose Connections name none
    /// should not pay.
    fetcher: OnceLock<Arc<Fetcher>>,
    /// The cache and registries, for a fetcher with a Connection's pull Secret.
    pub config: FetcherConfig,
}

impl PolicyFetch {
    /// Pulls with `config`; its cache directory is opened now, so a wrong one stops the start.
    pub fn new(config: FetcherConfig) -> Result<Self, FetchError> {
        if let Some(dir) = &config.cache_dir {
            Cache::open(dir)?;
        }
        Ok(Self {
            fetcher: OnceLock::new(),
            config,
        })
    }

    /// The konnector's own fetcher, built on first use.
    pub fn fetcher(&self) -> Result<Arc<Fetcher>, FetchError> {
        if let Some(fetcher) = self.fetcher.get() {
            return Ok(fetcher.clone());
        }
        let built = Arc::new(Fetcher::new(self.config.clone())?);
        // Two first uses at once build two; one is kept, and both pull alike.
        Ok(self.fetcher.get_or_init(|| built).clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_directory_that_cannot_be_opened_stops_the_start() {
        let scratch =
            std::env::temp_dir().join(format!("kbind-policy-fetch-{}", std::process::id()));
        std::fs::write(&scratch, b"a file, not a directory").ok();
        let refused = PolicyFetch::new(FetcherConfig {
            cache_dir: Some(scratch.join("cache")),
            ..FetcherConfig::default()
        });
        std::fs::remove_file(&scratch).ok();
        assert!(refused.is_err(), "{refused:?}");
    }

    #[test]
    fn the_registry_client_is_built_once_on_first_use() -> Result<(), FetchError> {
        let fetch = PolicyFetch::new(FetcherConfig::default())?;
        assert!(
            fetch.fetcher.get().is_none(),
            "built before any Connection asked"
        );
        let first = fetch.fetcher()?;
        let again = fetch.fetcher()?;
        assert!(Arc::ptr_eq(&first, &again));
        Ok(())
    }
}
