//! A registry that answers only its own user: a module there is pulled with the pull Secret
//! the Connection names; without working credentials the Connection says the registry refused
//! authentication and whose credentials were sent, never a password; and a module that cannot
//! be had is asked for again on a growing delay, not on every reconcile.

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kbind_tests::fixtures::{SECRET_NAMESPACE, has_condition, unique, wait_connection};
use kbind_tests::registry::RegistryUser;
use kbind_tests::syncenv::events_for;
use konnector::api::{Connection, ConnectionPolicies, IsolationStrategy};
use konnector::artifact::{
    Credentials, DOCKER_CONFIG_JSON_KEY, Fetcher, FetcherConfig, PolicyRef, PushMeta,
};
use konnector::policy::{PolicyRole, builtin};
use kube::Api;
use kube::api::{Patch, PatchParams};

use crate::{World, choice, connect_with, message, running, until, world};

impl World {
    /// Pushes the built-in conflict module to the private registry as `repository:v1`, as its
    /// user; returns the pinned-by-tag reference and the manifest digest.
    async fn push_private(&self, repository: &str) -> anyhow::Result<(String, String)> {
        let host = self.private.host();
        let credentials =
            Credentials::from_docker_config(self.user.docker_config_json(host).as_bytes())?;
        let pusher = Fetcher::new(FetcherConfig {
            plain_http: vec![host.to_owned()],
            credentials,
            ..FetcherConfig::default()
        })?;
        let reference = format!("oci://{host}/{repository}:v1");
        let PolicyRef::Oci(target) = reference.parse::<PolicyRef>()? else {
            bail!("not a registry reference: {reference}");
        };
        let meta = PushMeta {
            world: Some(PolicyRole::ConflictPolicy.world().to_owned()),
            ..PushMeta::default()
        };
        let digest = pusher
            .push(&target, builtin::CONFLICT_POLICY, &meta)
            .await?;
        Ok((reference, digest))
    }

    /// Creates or replaces the pull Secret `name` in the credential namespace, giving `user`
    /// for the private registry.
    async fn put_pull_secret(&self, name: &str, user: &RegistryUser) -> anyhow::Result<()> {
        let secrets: Api<Secret> = Api::namespaced(self.consumer().await?, SECRET_NAMESPACE);
        let config = user.docker_config_json(self.private.host());
        let secret = Secret {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            type_: Some("kubernetes.io/dockerconfigjson".into()),
            data: Some(
                [(
                    DOCKER_CONFIG_JSON_KEY.to_owned(),
                    ByteString(config.into_bytes()),
                )]
                .into(),
            ),
            ..Secret::default()
        };
        secrets
            .patch(
                name,
                &PatchParams::apply("policy-connections-test").force(),
                &Patch::Apply(&secret),
            )
            .await?;
        Ok(())
    }
}

/// Waits until Connection `name` is `Ready=False PolicyUnavailable` with a message holding every
/// one of `says`; returns the Connection.
async fn unavailable_saying(
    world: &World,
    name: &str,
    says: &[&str],
) -> anyhow::Result<Connection> {
    let what = format!("Ready=False PolicyUnavailable saying {says:?}");
    wait_connection(&world.consumer().await?, name, &what, |c| {
        has_condition(c, "Ready", "False", "PolicyUnavailable")
            && says.iter().all(|s| message(c, "Ready").contains(s))
    })
    .await
}

/// The password the tests' wrong pull Secret holds.
const WRONG_PASSWORD: &str = "not-the-password";

/// Fails if a password (the registry user's or the wrong one) shows in `connection`'s status,
/// its Events or the registry's log.
async fn password_nowhere(world: &World, connection: &Connection) -> anyhow::Result<()> {
    let status = serde_json::to_string(&connection.status)?;
    let name = connection.metadata.name.as_deref().unwrap_or_default();
    let events = events_for(&world.consumer().await?, None, name).await?;
    let log = std::fs::read_to_string(world.private.log())?;
    for password in [world.user.password(), WRONG_PASSWORD] {
        ensure!(!status.contains(password), "the status shows a password");
        for event in &events {
            let text = event.note.as_deref().unwrap_or_default();
            ensure!(
                !text.contains(password),
                "an Event shows a password: {text}"
            );
        }
        ensure!(
            !log.contains(password),
            "the registry's log shows a password"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_module_in_a_registry_that_needs_credentials_is_pulled_with_the_connections_pull_secret()
-> anyhow::Result<()> {
    let world = world().await?;
    world
        .pair
        .diagnose(async {
            let (reference, digest) = world.push_private("policies/private-conflict").await?;
            let name = unique("pull-secret");
            let secret = format!("{name}-pull");
            let named = format!("{SECRET_NAMESPACE}/{secret}");
            let policies = ConnectionPolicies {
                conflict: Some(choice(&reference, None)),
                pull_secret_name: Some(secret.clone()),
                ..ConnectionPolicies::default()
            };
            connect_with(world, &name, policies, IsolationStrategy::None).await?;

            // The Secret it names is not there yet.
            unavailable_saying(world, &name, &["reading the policy pull Secret", &named]).await?;

            // A Secret with a wrong password: the registry's refusal, naming the Secret.
            let impostor = RegistryUser::new(world.user.name(), WRONG_PASSWORD);
            world.put_pull_secret(&secret, &impostor).await?;
            let refused = unavailable_saying(
                world,
                &name,
                &[
                    "refused authentication",
                    &format!("pull Secret {named}"),
                    &reference,
                ],
            )
            .await?;
            password_nowhere(world, &refused).await?;

            // The right password: pulled at once (new credentials are a new attempt) and run.
            world.put_pull_secret(&secret, &world.user).await?;
            let ready = until(world, &name, "Ready", "True", "AsExpected").await?;
            ensure!(
                running(&ready, "conflict") == Some(digest.clone()),
                "{:?}",
                ready.status
            );
            password_nowhere(world, &ready).await
        })
        .await
}

#[tokio::test]
async fn a_module_in_a_registry_that_needs_credentials_is_unavailable_without_them()
-> anyhow::Result<()> {
    let world = world().await?;
    world
        .pair
        .diagnose(async {
            let (reference, _) = world.push_private("policies/anonymous-conflict").await?;
            let name = unique("no-pull-secret");
            let policies = ConnectionPolicies {
                conflict: Some(choice(&reference, None)),
                ..ConnectionPolicies::default()
            };
            connect_with(world, &name, policies, IsolationStrategy::None).await?;
            let stuck = unavailable_saying(
                world,
                &name,
                &[
                    "refused authentication",
                    "asked anonymously",
                    "spec.policies.pullSecretName",
                    "next attempt at",
                ],
            )
            .await?;
            ensure!(running(&stuck, "conflict").is_none(), "{:?}", stuck.status);
            password_nowhere(world, &stuck).await
        })
        .await
}

/// How many times the private registry was asked for `repository`'s manifests (its access log).
fn manifest_requests(world: &World, repository: &str) -> anyhow::Result<usize> {
    let log = std::fs::read_to_string(world.private.log())?;
    let path = format!("/v2/{repository}/manifests/");
    Ok(log.lines().filter(|l| l.contains(&path)).count())
}

/// The attempt count the Connection's Ready message states (`attempt N failed`), if any.
fn attempts_stated(connection: &Connection) -> Option<u32> {
    let said = message(connection, "Ready");
    let (_, after) = said.split_once("attempt ")?;
    after.split_whitespace().next()?.parse().ok()
}

#[tokio::test]
async fn a_module_that_cannot_be_had_is_asked_for_again_on_a_growing_delay_not_on_every_reconcile()
-> anyhow::Result<()> {
    let world = world().await?;
    world
        .pair
        .diagnose(async {
            // The test konnector reconciles Connections every second and waits 1 s, 2 s, 4 s,
            // then 8 s between attempts.
            let repository = "policies/backoff-conflict";
            let (reference, _) = world.push_private(repository).await?;
            let name = unique("backoff");
            let policies = ConnectionPolicies {
                conflict: Some(choice(&reference, None)),
                ..ConnectionPolicies::default()
            };
            connect_with(world, &name, policies, IsolationStrategy::None).await?;
            let third = unavailable_saying(world, &name, &["attempt 3 failed"]).await?;
            ensure!(attempts_stated(&third) == Some(3), "{:?}", third.status);
            let asked = manifest_requests(world, repository)?;
            ensure!(
                asked >= 3,
                "the registry saw {asked} requests for three attempts"
            );
            let per_attempt = asked / 3;

            // Six reconciles later: one more attempt at most, where every reconcile would
            // have made six.
            tokio::time::sleep(std::time::Duration::from_secs(6)).await;
            let later = until(world, &name, "Ready", "False", "PolicyUnavailable").await?;
            let attempts = attempts_stated(&later).context("no attempt count stated")?;
            ensure!(attempts <= 4, "{attempts} attempts: {:?}", later.status);
            let asked_later = manifest_requests(world, repository)?;
            ensure!(
                asked_later <= asked + per_attempt,
                "the registry was asked {} more times in six reconciles",
                asked_later - asked
            );
            Ok(())
        })
        .await
}
