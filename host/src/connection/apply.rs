//! The non-deleting path of a Connection, step by step as the spec's first flowchart draws it:
//!
//! ```text
//! secret (SecretValid) ─▶ identities (Connected) ─▶ discover (PermissionDenied, exportedAPIs)
//!   ─▶ refused installs ─▶ install schemas (SchemaInSync) ─▶ autoBind (AutoBindInSync)
//!   ─▶ heartbeat ─▶ Ready
//! ```
//!
//! A phase that cannot go on sets its condition and `Ready=False` with its reason and stops the
//! run ([`Stop`]); the status is persisted either way, and Events follow from the conditions
//! that changed (`super::events`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use tracing::{info, warn};

use super::{Context, Error, Result, autobind, persist_status, secret};
use crate::api::names::EXPORTED_LABEL;
use crate::api::{ConditionType, Connection, ConnectionStatus, ExportedApi, PullPolicy, Reason};
use crate::conditions::{self, Desired};
use crate::heartbeat::{self, LeaseLocation};
use crate::provider::discovery::{self, Discovered};
use crate::provider::identity::{self, IdentityError};
use crate::provider::kubeconfig::{self, ProviderCredentials};
use crate::registry::Engagement;
use crate::schema::{self, Refusal, Target, ownership};

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
        let discovered = self.discover(&credentials).await?;
        let refused = self.refused_installs(&discovered).await?;
        self.install_schemas(&credentials, &discovered, &refused)
            .await;
        self.auto_bind(&discovered, &refused).await?;
        self.heartbeat(&credentials, &consumer_uid).await;
        self.ready(credentials, provider_uid, consumer_uid, discovered);
        Ok(())
    }

    fn set(&mut self, desired: Desired) {
        conditions::set(&mut self.status.conditions, desired, self.generation);
    }

    /// Credentials: the Secret must be in the designated namespace and hold a usable
    /// kubeconfig (SecretValid).
    async fn secret(&mut self) -> Result<ProviderCredentials, Stop> {
        let connection = self.connection;
        let reference = &connection.spec.kubeconfig_secret_ref;
        match self.credentials().await.map_err(Stop::Retry)? {
            Ok(credentials) => {
                self.set(Desired::truthy(
                    ConditionType::SecretValid,
                    Reason::AsExpected,
                    format!(
                        "Secret {}/{} holds a usable kubeconfig",
                        reference.namespace, reference.name
                    ),
                ));
                Ok(credentials)
            }
            Err(error) => {
                let (reason, message) = (error.reason(), error.to_string());
                self.set(Desired::falsy(
                    ConditionType::SecretValid,
                    reason,
                    message.clone(),
                ));
                Err(self.not_ready(reason, message))
            }
        }
    }

    /// Discovery per `schema.source`; an RBAC denial is PermissionDenied, anything else is
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
            Err(error) => return Err(Stop::Fail(error.into())),
        };
        self.set(Desired::falsy(
            ConditionType::PermissionDenied,
            Reason::AsExpected,
            "the provider credentials may read what the konnector needs",
        ));
        self.status.active_schema_source = Some(discovered.source.as_str().to_string());
        self.status.exported_apis = discovered.apis.clone();
        Ok(discovered)
    }

    /// Which exported APIs kbind may not install for this Connection (a consumer CRD it does
    /// not manage); only needed where the Connection itself installs or binds.
    async fn refused_installs(
        &self,
        discovered: &Discovered,
    ) -> Result<BTreeMap<String, Refusal>, Stop> {
        let spec = &self.connection.spec;
        if !spec.auto_bind && spec.schema.pull_policy != PullPolicy::All {
            return Ok(BTreeMap::new());
        }
        refused_installs(
            &self.ctx.shared.consumer,
            &self.connection.name_any(),
            &discovered.apis,
        )
        .await
        .map_err(Stop::Fail)
    }

    /// autoBind: the managed ClusterBinding lists every exported API whose install was not
    /// refused (its teardown would otherwise reach a CRD kbind does not own); AutoBindInSync
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
        let condition = autobind::sync(self.ctx, self.connection, &bindable)
            .await
            .map_err(Stop::Fail)?;
        self.set(condition);
        Ok(())
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
        let engaged = self.ctx.shared.engagements.engage(Engagement {
            connection: name.clone(),
            provider: credentials.client,
            provider_uid,
            consumer_uid,
            exported: discovered.apis,
            credentials_digest: credentials.digest,
            epoch: 0,
        });
        info!(connection = %name, epoch = engaged.epoch, "connection ready");
    }

    /// Loads the Secret (placing its cleanup finalizer) and builds the provider client.
    /// The outer `Result` is a retryable API failure, the inner one a bad Secret.
    async fn credentials(
        &mut self,
    ) -> Result<Result<ProviderCredentials, kubeconfig::KubeconfigError>> {
        let reference = &self.connection.spec.kubeconfig_secret_ref;
        if reference.namespace != self.ctx.config.secret_namespace {
            return Ok(Err(kubeconfig::KubeconfigError::NamespaceNotAllowed {
                namespace: reference.namespace.clone(),
                name: reference.name.clone(),
                allowed: self.ctx.config.secret_namespace.clone(),
            }));
        }
        let secrets: Api<Secret> =
            Api::namespaced(self.ctx.shared.consumer.clone(), &reference.namespace);
        let found = secrets.get_opt(&reference.name).await.map_err(|e| {
            Error::ReadSecret(format!("{}/{}", reference.namespace, reference.name), e)
        })?;
        if let Some(found) = &found {
            secret::ensure_finalizer(&self.ctx.shared.consumer, found).await?;
        }
        let credentials = kubeconfig::credentials(
            reference,
            found.as_ref(),
            self.ctx.config.provider_transport,
        )
        .await;
        // Reuse the engaged client while the kubeconfig is unchanged: its connection pool and
        // watches stay warm across periodic reconciles.
        Ok(credentials.map(|mut credentials| {
            if let Some(engaged) = self.ctx.shared.engagements.get(&self.connection.name_any())
                && engaged.credentials_digest == credentials.digest
            {
                credentials.client = engaged.provider;
            }
            credentials
        }))
    }

    /// Identities: read both, pin on first success, refuse a different cluster afterwards
    /// (Connected).
    async fn identities(
        &mut self,
        credentials: &ProviderCredentials,
    ) -> Result<(String, String), Stop> {
        let provider_uid = match identity::cluster_uid(&credentials.client).await {
            Ok(uid) => uid,
            Err(error) => return Err(self.identity_failed("provider", error)),
        };
        let consumer_uid = match identity::cluster_uid(&self.ctx.shared.consumer).await {
            Ok(uid) => uid,
            Err(error) => return Err(self.identity_failed("consumer", error)),
        };
        for (side, pinned, observed) in [
            (
                "provider",
                self.status.remote_cluster_uid.clone(),
                &provider_uid,
            ),
            (
                "consumer",
                self.status.local_cluster_uid.clone(),
                &consumer_uid,
            ),
        ] {
            if let Some(pinned) = pinned.filter(|p| p != observed) {
                let message = format!(
                    "the {side} cluster is now {observed}, but this Connection is pinned to {pinned}; nothing is written to it. \
                     Restore the Secret to the original cluster's kubeconfig, or create a new Connection for the new cluster"
                );
                self.set(Desired::falsy(
                    ConditionType::Connected,
                    Reason::ClusterIdentityChanged,
                    message.clone(),
                ));
                return Err(self.not_ready(Reason::ClusterIdentityChanged, message));
            }
        }
        self.status.remote_cluster_uid = Some(provider_uid.clone());
        self.status.local_cluster_uid = Some(consumer_uid.clone());
        self.set(Desired::truthy(
            ConditionType::Connected,
            Reason::AsExpected,
            format!("provider cluster {provider_uid}, consumer cluster {consumer_uid}"),
        ));
        Ok((provider_uid, consumer_uid))
    }

    fn identity_failed(&mut self, side: &str, error: IdentityError) -> Stop {
        let message = format!("{side}: {error}");
        match error {
            IdentityError::Forbidden { .. } => {
                self.set(Desired::truthy(
                    ConditionType::PermissionDenied,
                    Reason::Forbidden,
                    message.clone(),
                ));
                self.set(Desired::falsy(
                    ConditionType::Connected,
                    Reason::Forbidden,
                    message.clone(),
                ));
                self.not_ready(Reason::Forbidden, message)
            }
            IdentityError::Missing { .. } => {
                self.set(Desired::falsy(
                    ConditionType::Connected,
                    Reason::IdentityUnavailable,
                    message.clone(),
                ));
                self.not_ready(Reason::IdentityUnavailable, message)
            }
            IdentityError::Read { .. } => {
                let message = format!("{message}; retrying");
                self.set(Desired::falsy(
                    ConditionType::Connected,
                    Reason::ProviderUnreachable,
                    message.clone(),
                ));
                self.not_ready(Reason::ProviderUnreachable, message);
                Stop::Fail(error.into())
            }
        }
    }

    /// `pullPolicy: All` installs every exported schema now (except the refused ones); Bound
    /// and None install nothing. SchemaInSync also reports what kbind refused: labelled
    /// provider CRDs of protected groups, and exported APIs whose consumer CRD it may not touch.
    async fn install_schemas(
        &mut self,
        credentials: &ProviderCredentials,
        discovered: &Discovered,
        refused: &BTreeMap<String, Refusal>,
    ) {
        let policy = &self.connection.spec.schema;
        let name = self.connection.name_any();
        let mut failures = Vec::new();
        if policy.pull_policy == PullPolicy::All {
            for api in discovered
                .apis
                .iter()
                .filter(|api| !refused.contains_key(&api.name))
            {
                let target = Target {
                    connection: &name,
                    api,
                    source: discovered.source,
                    update: policy.update_policy,
                };
                let installed = schema::ensure_installed(
                    &self.ctx.shared.consumer,
                    &credentials.client,
                    &self.ctx.shared.policies,
                    &self.ctx.applied_schemas,
                    &target,
                    self.ctx.config.schema_wait,
                )
                .await;
                if let Err(error) = installed {
                    failures.push(error.to_string());
                }
            }
        }
        let refusals: Vec<String> = discovered
            .ignored
            .iter()
            .map(|api| {
                format!(
                    "the provider labels {api} exported, but its group belongs to kbind or Kubernetes itself: ignored; ask the provider to remove the {EXPORTED_LABEL} label"
                )
            })
            .chain(refused.values().map(|refusal| {
                format!("{refusal} (left out of schema installation and autoBind)")
            }))
            .collect();
        // Warning Events follow from SchemaInSync changing state (see `super::events`).
        if !failures.is_empty() {
            let message = failures
                .iter()
                .chain(&refusals)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ");
            self.set(Desired::falsy(
                ConditionType::SchemaInSync,
                Reason::SchemaInstallFailed,
                message,
            ));
        } else if !refusals.is_empty() {
            self.set(Desired::falsy(
                ConditionType::SchemaInSync,
                Reason::CRDNotManaged,
                refusals.join("; "),
            ));
        } else {
            let message = match policy.pull_policy {
                PullPolicy::None => {
                    "pullPolicy None: consumer CRDs are managed outside kbind".to_string()
                }
                PullPolicy::Bound => {
                    "pullPolicy Bound: schemas are installed when a binding lists the API"
                        .to_string()
                }
                PullPolicy::All => format!(
                    "{} exported schema(s) installed and Established",
                    discovered.apis.len()
                ),
            };
            self.set(Desired::truthy(
                ConditionType::SchemaInSync,
                Reason::AsExpected,
                message,
            ));
        }
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

/// The exported APIs whose consumer CRD kbind may not install or update for `connection`
/// (`schema::ownership`), each with the reason.
async fn refused_installs(
    consumer: &kube::Client,
    connection: &str,
    apis: &[ExportedApi],
) -> Result<BTreeMap<String, Refusal>> {
    let crds: Api<CustomResourceDefinition> = Api::all(consumer.clone());
    let mut refused = BTreeMap::new();
    for api in apis {
        let existing = crds
            .get_opt(&api.name)
            .await
            .map_err(|e| Error::ReadCrd(api.name.clone(), e))?;
        if let Err(refusal) = ownership::check(&api.name, existing.as_ref(), connection) {
            refused.insert(api.name.clone(), refusal);
        }
    }
    Ok(refused)
}
