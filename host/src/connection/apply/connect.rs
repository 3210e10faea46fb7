//! Connecting: the credential Secret becomes a provider client (SecretValid), then both
//! clusters' identities are read and pinned on first success; a different cluster later is
//! refused, never re-pinned (Connected).

use std::time::Instant;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use tracing::warn;

use super::{Steps, Stop};
use crate::api::{ConditionType, Reason};
use crate::conditions::Desired;
use crate::connection::grace::Verdict;
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
            Err(error) => return Err(self.identity_failed(Side::Provider, error)),
        };
        let consumer_uid = match identity::cluster_uid(&self.ctx.shared.consumer).await {
            Ok(uid) => uid,
            Err(error) => return Err(self.identity_failed(Side::Consumer, error)),
        };
        self.ctx
            .grace
            .consumer_answered(&self.connection.name_any());
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

    fn identity_failed(&mut self, side: Side, error: IdentityError) -> Stop {
        let message = format!("{}: {error}", side.as_str());
        // A blip on either side is ridden out while it lasts less than the grace period.
        if error.is_transient() && self.rides_out_on(side, &message) {
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
            IdentityError::Read { .. } => (side.unreachable(), format!("{message}; retrying")),
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

    /// The grace clock of `side`: the provider's also says so on ProviderDegraded; the
    /// consumer's is only logged (a consumer that does not answer cannot store a condition).
    fn rides_out_on(&mut self, side: Side, message: &str) -> bool {
        match side {
            Side::Provider => self.rides_out(message),
            Side::Consumer => self.rides_out_consumer(message),
        }
    }

    /// A transient failure reading the consumer's identity. An engaged Connection keeps its
    /// engagement (and every syncer's watches) while the failures last less than the grace
    /// period; returns false when it is not ridden out (never engaged, or failing for longer).
    fn rides_out_consumer(&mut self, failure: &str) -> bool {
        let name = self.connection.name_any();
        if self.ctx.shared.engagements.get(&name).is_none() {
            return false;
        }
        match self.ctx.grace.consumer_failed(&name, Instant::now()) {
            Verdict::Hold(failing) => {
                warn!(
                    connection = %name,
                    failures = failing.failures,
                    grace_seconds = self.ctx.grace.period().as_secs(),
                    error = failure,
                    "the consumer identity read failed transiently; the Connection stays Ready and engaged while this lasts less than the grace period"
                );
                true
            }
            Verdict::Expired(_) => false,
        }
    }
}

/// Which cluster an identity read went to: a failure's reason names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Provider,
    Consumer,
}

impl Side {
    fn as_str(self) -> &'static str {
        match self {
            Self::Provider => "provider",
            Self::Consumer => "consumer",
        }
    }

    /// The reason of a read of this side that got no usable answer.
    fn unreachable(self) -> Reason {
        match self {
            Self::Provider => Reason::ProviderUnreachable,
            Self::Consumer => Reason::ConsumerUnreachable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unanswered_identity_read_names_its_side() {
        assert_eq!(Side::Provider.unreachable(), Reason::ProviderUnreachable);
        assert_eq!(Side::Consumer.unreachable(), Reason::ConsumerUnreachable);
    }
}
