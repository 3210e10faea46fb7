//! Connecting: the credential Secret becomes a provider client (SecretValid), then both
//! clusters' identities are read and pinned on first success; a different cluster later is
//! refused, never re-pinned (Connected).

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;

use super::{Steps, Stop};
use crate::api::{ConditionType, Reason};
use crate::conditions::Desired;
use crate::connection::{Error, Result, secret};
use crate::provider::identity::{self, IdentityError};
use crate::provider::kubeconfig::{self, ProviderCredentials};

impl Steps<'_> {
    /// Credentials: the Secret must be in the designated namespace and hold a usable
    /// kubeconfig (SecretValid).
    pub(super) async fn secret(&mut self) -> Result<ProviderCredentials, Stop> {
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
    pub(super) async fn identities(
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
        // The consumer is the cluster we run in: only the provider's blips are ridden out.
        if side == "provider" && error.is_transient() && self.rides_out(&message) {
            return Stop::Fail(error.into());
        }
        let (reason, message) = match error {
            IdentityError::Forbidden { .. } => {
                self.set(Desired::truthy(
                    ConditionType::PermissionDenied,
                    Reason::Forbidden,
                    message.clone(),
                ));
                (Reason::Forbidden, message)
            }
            IdentityError::Missing { .. } => (Reason::IdentityUnavailable, message),
            IdentityError::Read { .. } => {
                (Reason::ProviderUnreachable, format!("{message}; retrying"))
            }
        };
        self.set(Desired::falsy(
            ConditionType::Connected,
            reason,
            message.clone(),
        ));
        let settle = self.not_ready(reason, message);
        // A failed read (neither a denial nor a missing identity) is retried with backoff.
        match error {
            IdentityError::Read { .. } => Stop::Fail(error.into()),
            _ => settle,
        }
    }
}
