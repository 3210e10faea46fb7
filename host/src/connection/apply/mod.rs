//! The non-deleting path of a Connection, step by step as the spec's first flowchart draws it:
//!
//! ```text
//! secret (SecretValid) ─▶ identities (Connected) ─▶ discover (PermissionDenied, exportedAPIs)
//!   ─▶ refused installs ─▶ install schemas (SchemaInSync) ─▶ autoBind (AutoBindInSync)
//!   ─▶ heartbeat ─▶ own policy modules (PoliciesInSync, PolicyUnavailable) ─▶ Ready
//! ```
//!
//! A phase that cannot go on sets its condition and `Ready=False` with its reason and stops the
//! run ([`Stop`]); the status is persisted either way, and Events follow from the conditions
//! that changed (`super::events`). The phases that reach the clusters live beside this flow:
//! `connect` (Secret to client, both identities pinned) and `schemas` (which installs kbind
//! may not make, and installing the rest).

mod connect;
mod policies;
mod schemas;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use tracing::{info, warn};

use super::grace::Verdict;
use super::{Context, Error, Result, autobind, persist_status};
use crate::api::{
    ConditionType, Connection, ConnectionStatus, ExportedApi, IsolationInForce, IsolationStrategy,
    Reason,
};
use crate::conditions::{self, Desired};
use crate::heartbeat::{self, LeaseLocation};
use crate::provider::discovery::{self, Discovered};
use crate::provider::kubeconfig::ProviderCredentials;
use crate::registry::Engagement;
use crate::schema::Refusal;

/// Reconciles a non-deleting Connection: the phases of the spec's flowchart, each setting its
/// condition; a phase that fails ends the reconcile with the status persisted.
pub(super) async fn apply(connection: &Connection, ctx: &Context) -> Result<Action> {
    let generation = connection.metadata.generation;
    let mut status = connection.status.clone().unwrap_or_default();
    status.observed_generation = generation;
    let mut step = Steps {
        ctx,
        connection,
        status,
        generation,
    };
    match step.run().await {
        Ok(()) | Err(Stop::Settle) => step.settle().await,
        Err(Stop::Fail(error)) => step.fail(error).await,
        Err(Stop::Retry(error)) => Err(error),
    }
}

/// Why the phases stopped before Ready.
enum Stop {
    /// The Connection is not Ready and its status says why: persist it, requeue after resync.
    Settle,
    /// A failure to retry with backoff, after persisting what was learned so far.
    Fail(Error),
    /// A consumer read failed before anything was learned: retry with backoff.
    Retry(Error),
}

/// The state threaded through the steps of one reconcile.
struct Steps<'a> {
    ctx: &'a Context,
    connection: &'a Connection,
    status: ConnectionStatus,
    generation: Option<i64>,
}

impl Steps<'_> {
    /// The non-deleting flow, in the spec's order.
    async fn run(&mut self) -> Result<(), Stop> {
        let credentials = self.secret().await?;
        let (provider_uid, consumer_uid) = self.identities(&credentials).await?;
        let isolation = self.isolation(&consumer_uid).await?;
        let discovered = self.discover(&credentials).await?;
        let refused = self.refused_installs(&discovered).await?;
        self.install_schemas(&credentials, &discovered, &refused)
            .await;
        self.auto_bind(&discovered, &refused).await?;
        self.heartbeat(&credentials, &consumer_uid).await;
        self.policies().await?;
        self.ready(
            credentials,
            isolation,
            provider_uid,
            consumer_uid,
            discovered,
        );
        Ok(())
    }

    fn set(&mut self, desired: Desired) {
        conditions::set(&mut self.status.conditions, desired, self.generation);
    }

    /// Discovery per `schema.source`; an RBAC denial is PermissionDenied, a transient failure
    /// is ridden out (or turns the Connection not Ready once it lasts), anything else is
    /// retried.
    async fn discover(&mut self, credentials: &ProviderCredentials) -> Result<Discovered, Stop> {
        let source = self.connection.spec.schema.source;
        let discovered = match discovery::discover(&credentials.client, source).await {
            Ok(discovered) => discovered,
            Err(error) if error.is_forbidden() => {
                let message = format!(
                    "{error}; grant the provider credentials discovery access (see the konnector RBAC docs)"
                );
                self.set(Desired::truthy(
                    ConditionType::PermissionDenied,
                    Reason::Forbidden,
                    message.clone(),
                ));
                return Err(self.not_ready(Reason::Forbidden, message));
            }
            Err(error) if error.is_transient() => {
                let message = error.to_string();
                if !self.rides_out(&message) {
                    let _ =
                        self.not_ready(Reason::ProviderUnreachable, format!("{message}; retrying"));
                }
                return Err(Stop::Fail(error.into()));
            }
            // A cap the operator set: waiting does not shrink the answer.
            Err(error) if error.is_too_large() => {
                return Err(self.not_ready(Reason::ResponseTooLarge, error.to_string()));
            }
            Err(error) => return Err(Stop::Fail(error.into())),
        };
        self.set(Desired::falsy(
            ConditionType::PermissionDenied,
            Reason::AsExpected,
            "the provider credentials may read what the konnector needs",
        ));
        self.ctx
            .grace
            .provider_answered(&self.connection.name_any());
        let discovered = self.hold_failed_groups(discovered);
        self.status.active_schema_source = Some(discovered.source.as_str().to_string());
        self.status.exported_apis = discovered.apis.clone();
        Ok(discovered)
    }

    /// A transient provider failure (no answer, 429, 5xx). An engaged Connection rides it out
    /// while the failures last less than the grace period: ProviderDegraded says so, Ready and
    /// the engagement (every syncer's watches) stay, and the caller retries with backoff.
    /// Returns false when it is not ridden out (never engaged, or failing for longer): the
    /// caller then acts as on any failure.
    fn rides_out(&mut self, failure: &str) -> bool {
        let name = self.connection.name_any();
        if self.ctx.shared.engagements.get(&name).is_none() {
            return false;
        }
        let period = self.ctx.grace.period().as_secs();
        let (held, message) = match self.ctx.grace.provider_failed(&name, Instant::now()) {
            Verdict::Hold(_) => (
                true,
                format!(
                    "{failure}; the Connection stays Ready and its syncers keep running while this lasts less than {period}s \
                     (--provider-grace-period); check the provider's health and its API Priority and Fairness limits"
                ),
            ),
            Verdict::Expired(failing) => (
                false,
                format!(
                    "{failure}; failing for {}s ({} attempts), longer than the {period}s grace period: \
                     the Connection is not Ready until the provider answers",
                    failing.lasted(Instant::now()).as_secs(),
                    failing.failures
                ),
            ),
        };
        self.set(Desired::truthy(
            ConditionType::ProviderDegraded,
            Reason::ProviderUnreachable,
            message,
        ));
        held
    }

    /// Groups that failed discovery: one failing transiently within the grace period keeps its
    /// last known exports (so its bindings neither release nor restart); one failing for longer,
    /// or definitively, is left out and its APIs are released. ProviderDegraded names them.
    fn hold_failed_groups(&mut self, mut discovered: Discovered) -> Discovered {
        let name = self.connection.name_any();
        let failing: BTreeSet<String> = discovered
            .failed_groups
            .iter()
            .map(|failure| failure.group.clone())
            .collect();
        let verdicts = self
            .ctx
            .grace
            .groups_failed(&name, &failing, Instant::now());
        if discovered.failed_groups.is_empty() {
            self.set(Desired::falsy(
                ConditionType::ProviderDegraded,
                Reason::AsExpected,
                "the provider answers every read",
            ));
            return discovered;
        }
        let period = self.ctx.grace.period().as_secs();
        let mut notes = Vec::new();
        for failure in &discovered.failed_groups {
            let held =
                failure.transient && matches!(verdicts.get(&failure.group), Some(Verdict::Hold(_)));
            if held {
                let last_known = self
                    .status
                    .exported_apis
                    .iter()
                    .filter(|api| api.group == failure.group);
                discovered.apis.extend(last_known.cloned());
                notes.push(format!(
                    "{} (retrying; its last known exports, if any, are kept for up to {period}s: {})",
                    failure.group, failure.message
                ));
            } else {
                notes.push(format!(
                    "{} (its APIs are released: {})",
                    failure.group, failure.message
                ));
            }
        }
        discovered.apis.sort_by(|a, b| a.name.cmp(&b.name));
        discovered.apis.dedup_by(|a, b| a.name == b.name);
        self.set(Desired::truthy(
            ConditionType::ProviderDegraded,
            Reason::DiscoveryIncomplete,
            format!(
                "API groups not discovered: {}; fix or remove the APIService that serves them (kubectl get apiservices)",
                notes.join("; ")
            ),
        ));
        discovered
    }

    /// autoBind: the managed ClusterBinding lists every exported API whose install was not
    /// refused (its teardown would otherwise reach a CRD kbind does not own), and keeps the
    /// APIs no longer exported (released, never deleted); AutoBindInSync
    /// says whether it could (only while autoBind is on).
    async fn auto_bind(
        &mut self,
        discovered: &Discovered,
        refused: &BTreeMap<String, Refusal>,
    ) -> Result<(), Stop> {
        if !self.connection.spec.auto_bind {
            conditions::remove(&mut self.status.conditions, ConditionType::AutoBindInSync);
            return Ok(());
        }
        let bindable: Vec<ExportedApi> = discovered
            .apis
            .iter()
            .filter(|api| !refused.contains_key(&api.name))
            .cloned()
            .collect();
        let refused: BTreeSet<&str> = refused.keys().map(String::as_str).collect();
        let condition = autobind::sync(self.ctx, self.connection, &bindable, &refused)
            .await
            .map_err(Stop::Fail)?;
        self.set(condition);
        Ok(())
    }

    /// The isolation in force: `spec.isolation`, unless it differs from what is recorded while
    /// bindings use the Connection. Copies are never moved, so a change waits until those
    /// bindings are gone (their teardown drains the copies placed the old way), and
    /// IsolationInSync says so. A Connection that never recorded one takes the spec's at once.
    async fn isolation(&mut self, consumer_uid: &str) -> Result<IsolationInForce, Stop> {
        let wanted = self.connection.spec.isolation.in_force(consumer_uid);
        let in_force = match self.status.isolation.clone() {
            Some(current) if current != wanted => {
                let name = self.connection.name_any();
                let using = super::referencing_bindings(&self.ctx.shared.consumer, &name)
                    .await
                    .map_err(Stop::Fail)?;
                if using > 0 {
                    self.set(Desired::falsy(
                        ConditionType::IsolationInSync,
                        Reason::IsolationChangePending,
                        format!(
                            "spec.isolation asks for {} (prefix {}), but {using} binding(s) use this Connection and their copies                              stay where {} (prefix {}) placed them; delete those bindings (their copies are drained) for the                              new strategy to take effect, or set spec.isolation back",
                            wanted.strategy.as_str(),
                            wanted.prefix,
                            current.strategy.as_str(),
                            current.prefix
                        ),
                    ));
                    return Ok(current);
                }
                wanted
            }
            _ => wanted,
        };
        if in_force.strategy == IsolationStrategy::None {
            conditions::remove(&mut self.status.conditions, ConditionType::IsolationInSync);
        } else {
            self.set(Desired::truthy(
                ConditionType::IsolationInSync,
                Reason::AsExpected,
                format!(
                    "copies are placed by strategy {} with consumer prefix {}",
                    in_force.strategy.as_str(),
                    in_force.prefix
                ),
            ));
        }
        self.status.isolation = Some(in_force.clone());
        Ok(in_force)
    }

    /// Heartbeat: best-effort, never blocks Ready.
    async fn heartbeat(&self, credentials: &ProviderCredentials, consumer_uid: &str) {
        let name = self.connection.name_any();
        let location = LeaseLocation::new(
            &name,
            consumer_uid,
            credentials.context_namespace.as_deref(),
        );
        if let Err(error) =
            heartbeat::renew(&credentials.client, &location, &name, consumer_uid).await
        {
            warn!(connection = %name, %error, "heartbeat not renewed");
        }
    }

    /// Ready=True, and the provider client engaged for the binding and sync machinery.
    fn ready(
        &mut self,
        credentials: ProviderCredentials,
        isolation: IsolationInForce,
        provider_uid: String,
        consumer_uid: String,
        discovered: Discovered,
    ) {
        let name = self.connection.name_any();
        self.set(Desired::truthy(
            ConditionType::Ready,
            Reason::AsExpected,
            format!(
                "connected to provider cluster {provider_uid}; {} API(s) exported",
                discovered.apis.len()
            ),
        ));
        let heartbeat_namespace = LeaseLocation::new(
            &name,
            &consumer_uid,
            credentials.context_namespace.as_deref(),
        )
        .namespace;
        let engaged = self.ctx.shared.engagements.engage(Engagement {
            connection: name.clone(),
            provider: credentials.client,
            provider_uid,
            consumer_uid,
            exported: discovered.apis,
            schema_revisions: discovered.revisions,
            isolation,
            heartbeat_namespace,
            credentials_digest: credentials.digest,
            epoch: 0,
        });
        info!(connection = %name, epoch = engaged.epoch, "connection ready");
    }

    /// Marks the Connection not Ready and disengages it; the reconcile then settles.
    fn not_ready(&mut self, reason: Reason, message: String) -> Stop {
        self.set(Desired::falsy(ConditionType::Ready, reason, message));
        self.ctx
            .shared
            .engagements
            .disengage(&self.connection.name_any());
        Stop::Settle
    }

    /// Persists what was learned so far and returns the error for a backoff retry.
    async fn fail(&mut self, error: Error) -> Result<Action> {
        persist_status(self.ctx, self.connection, self.status.clone()).await?;
        Err(error)
    }

    /// Persists the status and requeues after the resync interval.
    async fn settle(&mut self) -> Result<Action> {
        persist_status(self.ctx, self.connection, self.status.clone()).await?;
        Ok(Action::requeue(self.ctx.config.resync))
    }
}
