//! The non-deleting path of a Connection, step by step as the spec's first flowchart draws it.

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

/// Reconciles a non-deleting Connection.
pub(super) async fn apply(connection: &Connection, ctx: &Context) -> Result<Action> {
    let name = connection.name_any();
    let generation = connection.metadata.generation;
    let mut status = connection.status.clone().unwrap_or_default();
    status.observed_generation = generation;
    let mut step = Steps {
        ctx,
        connection,
        status,
        generation,
    };

    // Credentials: the Secret must be in the designated namespace and hold a usable kubeconfig.
    let reference = &connection.spec.kubeconfig_secret_ref;
    let credentials = match step.credentials().await? {
        Ok(credentials) => credentials,
        Err(error) => {
            let (reason, message) = (error.reason(), error.to_string());
            step.set(Desired::falsy(
                ConditionType::SecretValid,
                reason,
                message.clone(),
            ));
            return step.not_ready(reason, message).await;
        }
    };
    step.set(Desired::truthy(
        ConditionType::SecretValid,
        Reason::AsExpected,
        format!(
            "Secret {}/{} holds a usable kubeconfig",
            reference.namespace, reference.name
        ),
    ));

    // Identities: read both, pin on first success, refuse a different cluster afterwards.
    let Some((provider_uid, consumer_uid)) = step.identities(&credentials).await? else {
        return step.settle().await;
    };

    // Discovery per schema.source.
    let discovered = match discovery::discover(&credentials.client, connection.spec.schema.source)
        .await
    {
        Ok(discovered) => discovered,
        Err(error) if error.is_forbidden() => {
            let message = format!(
                "{error}; grant the provider credentials discovery access (see the konnector RBAC docs)"
            );
            step.set(Desired::truthy(
                ConditionType::PermissionDenied,
                Reason::Forbidden,
                message.clone(),
            ));
            return step.not_ready(Reason::Forbidden, message).await;
        }
        Err(error) => return step.fail(error.into()).await,
    };
    step.set(Desired::falsy(
        ConditionType::PermissionDenied,
        Reason::AsExpected,
        "the provider credentials may read what the konnector needs",
    ));
    step.status.active_schema_source = Some(discovered.source.as_str().to_string());
    step.status.exported_apis = discovered.apis.clone();

    // Which exported APIs kbind may not install for this Connection (a consumer CRD it does
    // not manage); only needed where the Connection itself installs or binds.
    let refused =
        if connection.spec.auto_bind || connection.spec.schema.pull_policy == PullPolicy::All {
            match refused_installs(&ctx.client, &name, &discovered.apis).await {
                Ok(refused) => refused,
                Err(error) => return step.fail(error).await,
            }
        } else {
            BTreeMap::new()
        };
    step.install_schemas(&credentials, &discovered, &refused)
        .await;

    if connection.spec.auto_bind {
        // autoBind never lists an API whose install was refused: its teardown would otherwise
        // reach a CRD kbind does not own.
        let bindable: Vec<ExportedApi> = discovered
            .apis
            .iter()
            .filter(|api| !refused.contains_key(&api.name))
            .cloned()
            .collect();
        if let Err(error) = autobind::sync(ctx, connection, &bindable).await {
            return step.fail(error).await;
        }
    }

    // Heartbeat: best-effort, never blocks Ready.
    let location = LeaseLocation::new(
        &name,
        &consumer_uid,
        credentials.context_namespace.as_deref(),
    );
    if let Err(error) = heartbeat::renew(&credentials.client, &location, &name, &consumer_uid).await
    {
        warn!(connection = %name, %error, "heartbeat not renewed");
    }

    step.set(Desired::truthy(
        ConditionType::Ready,
        Reason::AsExpected,
        format!(
            "connected to provider cluster {provider_uid}; {} API(s) exported",
            discovered.apis.len()
        ),
    ));
    let engaged = ctx.engagements.engage(Engagement {
        connection: name.clone(),
        provider: credentials.client.clone(),
        provider_uid,
        consumer_uid,
        exported: discovered.apis,
        credentials_digest: credentials.digest.clone(),
        epoch: 0,
    });
    info!(connection = %name, epoch = engaged.epoch, "connection ready");
    step.settle().await
}

/// The state threaded through the steps of one reconcile.
struct Steps<'a> {
    ctx: &'a Context,
    connection: &'a Connection,
    status: ConnectionStatus,
    generation: Option<i64>,
}

impl Steps<'_> {
    fn set(&mut self, desired: Desired) {
        conditions::set(&mut self.status.conditions, desired, self.generation);
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
        let secrets: Api<Secret> = Api::namespaced(self.ctx.client.clone(), &reference.namespace);
        let found = secrets.get_opt(&reference.name).await.map_err(|e| {
            Error::ReadSecret(format!("{}/{}", reference.namespace, reference.name), e)
        })?;
        if let Some(found) = &found {
            secret::ensure_finalizer(&self.ctx.client, found).await?;
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
            if let Some(engaged) = self.ctx.engagements.get(&self.connection.name_any())
                && engaged.credentials_digest == credentials.digest
            {
                credentials.client = engaged.provider;
            }
            credentials
        }))
    }

    /// Reads and checks both identities. `None` means the reconcile settled on a failure.
    async fn identities(
        &mut self,
        credentials: &ProviderCredentials,
    ) -> Result<Option<(String, String)>> {
        let provider_uid = match identity::cluster_uid(&credentials.client).await {
            Ok(uid) => uid,
            Err(error) => {
                self.identity_failed("provider", error).await?;
                return Ok(None);
            }
        };
        let consumer_uid = match identity::cluster_uid(&self.ctx.client).await {
            Ok(uid) => uid,
            Err(error) => {
                self.identity_failed("consumer", error).await?;
                return Ok(None);
            }
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
                self.ctx
                    .warn(
                        self.connection,
                        Reason::ClusterIdentityChanged.as_str(),
                        message.clone(),
                    )
                    .await;
                self.not_ready(Reason::ClusterIdentityChanged, message)
                    .await?;
                return Ok(None);
            }
        }
        self.status.remote_cluster_uid = Some(provider_uid.clone());
        self.status.local_cluster_uid = Some(consumer_uid.clone());
        self.set(Desired::truthy(
            ConditionType::Connected,
            Reason::AsExpected,
            format!("provider cluster {provider_uid}, consumer cluster {consumer_uid}"),
        ));
        Ok(Some((provider_uid, consumer_uid)))
    }

    async fn identity_failed(&mut self, side: &str, error: IdentityError) -> Result<()> {
        match error {
            IdentityError::Forbidden { .. } => {
                let message = format!("{side}: {error}");
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
                self.not_ready(Reason::Forbidden, message).await.map(drop)
            }
            IdentityError::Missing { .. } => {
                let message = format!("{side}: {error}");
                self.set(Desired::falsy(
                    ConditionType::Connected,
                    Reason::IdentityUnavailable,
                    message.clone(),
                ));
                self.not_ready(Reason::IdentityUnavailable, message)
                    .await
                    .map(drop)
            }
            IdentityError::Read { .. } => {
                let message = format!("{side}: {error}; retrying");
                self.set(Desired::falsy(
                    ConditionType::Connected,
                    Reason::ProviderUnreachable,
                    message.clone(),
                ));
                self.set(Desired::falsy(
                    ConditionType::Ready,
                    Reason::ProviderUnreachable,
                    message,
                ));
                self.ctx.engagements.disengage(&self.connection.name_any());
                persist_status(self.ctx, self.connection, self.status.clone()).await?;
                Err(error.into())
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
                    &self.ctx.client,
                    &credentials.client,
                    &self.ctx.policies,
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
        if !refusals.is_empty() {
            self.ctx
                .warn(
                    self.connection,
                    Reason::CRDNotManaged.as_str(),
                    refusals.join("; "),
                )
                .await;
        }
        if !failures.is_empty() {
            let message = failures
                .iter()
                .chain(&refusals)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ");
            self.ctx
                .warn(
                    self.connection,
                    Reason::SchemaInstallFailed.as_str(),
                    failures.join("; "),
                )
                .await;
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

    /// Marks the Connection not Ready, disengages it and persists; requeued after resync.
    async fn not_ready(&mut self, reason: Reason, message: String) -> Result<Action> {
        self.set(Desired::falsy(ConditionType::Ready, reason, message));
        self.ctx.engagements.disengage(&self.connection.name_any());
        self.settle().await
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
