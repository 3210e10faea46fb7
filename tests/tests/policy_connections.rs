//! Policy modules chosen per Connection (`spec.policies`), with settings: the whole konnector
//! (the Connection controller loads each Connection's modules) runs in this process against
//! the shared cluster pair, pulling from a real OCI registry (distribution's, built from its Go
//! module). A Connection's module places, decides and fails for that Connection only; a module
//! that cannot be had is `Ready=False PolicyUnavailable`, never a silent built-in; a changed
//! module is swapped in live with no syncer restarted and no list made again; one refusing its
//! settings is reported while the module before keeps running. A second registry answers only a
//! user of its own (htpasswd): a module there is pulled with the pull Secret the Connection
//! names, and without working credentials the Connection says the registry refused it and which
//! Secret (if any) was used, never the password.

use std::sync::OnceLock;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kbind_tests::faults::policy::constant_placement_policy;
use kbind_tests::faults::{FAULT_WAIT, Sides, create_binding, wait_binding_ready};
use kbind_tests::fixtures::{
    Konnector, SECRET_NAMESPACE, condition, connection, crd_source, has_condition,
    put_kubeconfig_secret, start_konnector_pulling, unique, wait_connection,
};
use kbind_tests::registry::{Registry, RegistryUser};
use kbind_tests::syncenv::{TestApi, ensure_namespace, events_for, wait_for};
use kbind_tests::testenv::{ClusterPair, shared_pair};
use konnector::api::{Connection, ConnectionPolicies, Isolation, IsolationStrategy, PolicyChoice};
use konnector::artifact::{
    Credentials, DOCKER_CONFIG_JSON_KEY, Fetcher, FetcherConfig, PolicyRef, PushMeta,
};
use konnector::policy::{PolicyRole, builtin};
use konnector::telemetry::{ApiLabels, WatchLabels, metrics};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The registry and the konnector every test of this binary shares.
struct World {
    pair: &'static ClusterPair,
    registry: Registry,
    /// A registry that answers only `user`.
    private: Registry,
    user: RegistryUser,
    _konnector: Konnector,
}

/// Starts (once) the registry and a konnector that pulls from it.
async fn world() -> anyhow::Result<&'static World> {
    static WORLD: tokio::sync::OnceCell<World> = tokio::sync::OnceCell::const_new();
    static FAILED: OnceLock<String> = OnceLock::new();
    if let Some(failed) = FAILED.get() {
        bail!("{failed}");
    }
    WORLD
        .get_or_try_init(|| async {
            let pair = shared_pair()?;
            let registry =
                Registry::start(&pair.root().join("policy-connections-registry")).await?;
            let user = RegistryUser::random("robot")?;
            let private = Registry::start_with_user(
                &pair.root().join("policy-connections-private-registry"),
                user.clone(),
            )
            .await?;
            let config = FetcherConfig {
                cache_dir: Some(pair.root().join("policy-connections-cache")),
                plain_http: vec![registry.host().to_owned(), private.host().to_owned()],
                ..FetcherConfig::default()
            };
            let consumer = &pair.consumer;
            let konnector =
                tokio::task::spawn_blocking(move || start_konnector_pulling(consumer, config))
                    .await??;
            anyhow::Ok(World {
                pair,
                registry,
                private,
                user,
                _konnector: konnector,
            })
        })
        .await
        .inspect_err(|e| {
            let _ = FAILED.set(format!("{e:#}"));
        })
}

impl World {
    /// `oci://<registry>/<repository>:<tag>`.
    fn reference(&self, repository: &str, tag: &str) -> String {
        format!("oci://{}/{repository}:{tag}", self.registry.host())
    }

    /// Pushes `module` for `role` as `repository:tag`; `version` makes its manifest distinct.
    /// Returns the manifest digest.
    async fn push(
        &self,
        role: PolicyRole,
        module: &[u8],
        repository: &str,
        tag: &str,
        version: &str,
    ) -> anyhow::Result<String> {
        let pusher = Fetcher::new(FetcherConfig {
            plain_http: vec![self.registry.host().to_owned()],
            ..FetcherConfig::default()
        })?;
        let target = match self.reference(repository, tag).parse::<PolicyRef>()? {
            PolicyRef::Oci(oci) => oci,
            other => bail!("not a registry reference: {other:?}"),
        };
        let meta = PushMeta {
            world: Some(role.world().to_owned()),
            annotations: [(
                "org.opencontainers.image.version".to_owned(),
                version.to_owned(),
            )]
            .into(),
        };
        Ok(pusher.push(&target, module, &meta).await?)
    }

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

    async fn consumer(&self) -> anyhow::Result<kube::Client> {
        Ok(self.pair.consumer.client().await?)
    }
}

/// A module reference with optional settings.
fn choice(module: &str, settings: Option<Value>) -> PolicyChoice {
    PolicyChoice {
        module: module.to_owned(),
        settings,
    }
}

/// Creates Connection `name` to the shared provider with `policies` and `isolation`.
async fn connect_with(
    world: &World,
    name: &str,
    policies: ConnectionPolicies,
    isolation: IsolationStrategy,
) -> anyhow::Result<()> {
    let consumer = world.consumer().await?;
    let kubeconfig = world.pair.provider.admin().kubeconfig_yaml()?;
    put_kubeconfig_secret(&consumer, name, &kubeconfig).await?;
    let mut object = connection(name, name, crd_source(), false);
    object.spec.policies = Some(policies);
    object.spec.isolation = Isolation {
        strategy: isolation,
        prefix: Some("tenant".into()),
    };
    Api::<Connection>::all(consumer)
        .create(&PostParams::default(), &object)
        .await?;
    Ok(())
}

/// Waits until Connection `name` has condition `type_` with `status` and `reason`; returns it.
async fn until(
    world: &World,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> anyhow::Result<Connection> {
    let what = format!("{type_}={status} {reason}");
    wait_connection(&world.consumer().await?, name, &what, |c| {
        has_condition(c, type_, status, reason)
    })
    .await
}

/// The message of condition `type_`.
fn message(connection: &Connection, type_: &str) -> String {
    condition(connection, type_)
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// The digest `status.policies` reports for `role`, if any.
fn running(connection: &Connection, role: &str) -> Option<String> {
    connection
        .status
        .as_ref()?
        .policies
        .iter()
        .find(|p| p.role == role)
        .and_then(|p| p.digest.clone())
}

/// Sets `spec.policies` of Connection `name`.
async fn set_policies(world: &World, name: &str, policies: Value) -> anyhow::Result<()> {
    Api::<Connection>::all(world.consumer().await?)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"policies": policies}})),
        )
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_module_that_can_be_neither_pulled_nor_found_in_the_cache_is_policy_unavailable()
-> anyhow::Result<()> {
    let world = world().await?;
    world
        .pair
        .diagnose(async {
            let missing = unique("missing");
            let reference = world.reference("policies/never-pushed", "v1");
            let policies = ConnectionPolicies {
                conflict: Some(choice(&reference, None)),
                ..ConnectionPolicies::default()
            };
            connect_with(world, &missing, policies, IsolationStrategy::None).await?;
            let stuck = until(world, &missing, "Ready", "False", "PolicyUnavailable").await?;
            let said = message(&stuck, "Ready");
            ensure!(
                said.contains(&reference),
                "the message names the reference: {said}"
            );
            ensure!(
                said.contains("nothing runs in its place"),
                "the message says no built-in stands in: {said}"
            );

            // Another Connection to the same provider, naming no module, becomes Ready.
            let other = unique("other");
            connect_with(
                world,
                &other,
                ConnectionPolicies::default(),
                IsolationStrategy::None,
            )
            .await?;
            until(world, &other, "Ready", "True", "AsExpected").await?;
            let still = until(world, &missing, "Ready", "False", "PolicyUnavailable").await?;
            ensure!(running(&still, "conflict").is_none(), "{:?}", still.status);
            Ok(())
        })
        .await
}

#[tokio::test]
async fn a_module_refusing_its_settings_says_why_and_the_old_one_keeps_running()
-> anyhow::Result<()> {
    let world = world().await?;
    world
        .pair
        .diagnose(async {
            // Refused from the start: nothing ran before, so the Connection is not Ready.
            let refused = unique("refused");
            let policies = ConnectionPolicies {
                placement: Some(choice("built-in", Some(json!({"strategy": "Prefixed"})))),
                ..ConnectionPolicies::default()
            };
            connect_with(world, &refused, policies, IsolationStrategy::None).await?;
            let stuck = until(world, &refused, "Ready", "False", "PolicyUnavailable").await?;
            let said = message(&stuck, "Ready");
            ensure!(
                said.contains("refused its settings") && said.contains("`strategy`"),
                "the module's own message is shown: {said}"
            );

            // Accepted first, then changed to settings the module refuses: the old one stays.
            let swapped = unique("settings");
            let policies = ConnectionPolicies {
                placement: Some(choice("built-in", None)),
                ..ConnectionPolicies::default()
            };
            connect_with(world, &swapped, policies, IsolationStrategy::None).await?;
            let ready = until(world, &swapped, "PoliciesInSync", "True", "AsExpected").await?;
            let before = running(&ready, "placement").context("no placement digest")?;
            ensure!(before == builtin::digest(PolicyRole::Placement), "{before}");
            set_policies(
                world,
                &swapped,
                json!({"placement": {"module": "built-in", "settings": {"prefix": "x"}}}),
            )
            .await?;
            let kept = until(
                world,
                &swapped,
                "PoliciesInSync",
                "False",
                "PolicySwapFailed",
            )
            .await?;
            let said = message(&kept, "PoliciesInSync");
            ensure!(
                said.contains("`prefix`") && said.contains("keeps running"),
                "{said}"
            );
            ensure!(
                has_condition(&kept, "Ready", "True", "AsExpected"),
                "{:?}",
                kept.status
            );
            ensure!(
                running(&kept, "placement") == Some(before),
                "{:?}",
                kept.status
            );
            let consumer = world.consumer().await?;
            wait_for("a Warning PolicySwapFailed Event", FAULT_WAIT, || async {
                let events = events_for(&consumer, None, &swapped).await?;
                Ok(events
                    .iter()
                    .any(|e| {
                        e.type_.as_deref() == Some("Warning")
                            && e.reason.as_deref() == Some("PolicySwapFailed")
                    })
                    .then_some(()))
            })
            .await
        })
        .await
}

/// How many times this process's konnector started a syncer for `api`.
fn syncer_starts(api: &str) -> u64 {
    let labels = ApiLabels { api: api.into() };
    metrics().syncer_starts.get_or_create(&labels).get()
}

/// How many full lists this process's konnector made of `api` on `cluster`.
fn watch_lists(api: &str, cluster: &'static str) -> u64 {
    let labels = WatchLabels {
        api: api.into(),
        cluster,
    };
    metrics().watch_lists.get_or_create(&labels).get()
}

/// Binds `api` in namespace `namespace` through Connection `connection` and waits until the
/// binding is Ready.
async fn bind(
    world: &World,
    api: &TestApi,
    namespace: &str,
    connection: &str,
) -> anyhow::Result<()> {
    let consumer = world.consumer().await?;
    api.install_on_provider(&world.pair.provider.client().await?)
        .await?;
    ensure_namespace(&consumer, namespace).await?;
    create_binding(&consumer, namespace, connection, &[api]).await?;
    wait_binding_ready(&consumer, namespace, FAULT_WAIT).await
}

#[tokio::test]
async fn a_spec_change_swaps_the_module_without_restarting_or_listing_again() -> anyhow::Result<()>
{
    let world = world().await?;
    world
        .pair
        .diagnose(async {
            let v1 = world
                .push(
                    PolicyRole::ConflictPolicy,
                    builtin::CONFLICT_POLICY,
                    "policies/swap",
                    "v1",
                    "1.0.0",
                )
                .await?;
            let v2 = world
                .push(
                    PolicyRole::ConflictPolicy,
                    builtin::CONFLICT_POLICY,
                    "policies/swap",
                    "v2",
                    "2.0.0",
                )
                .await?;
            let name = unique("swap");
            let policies = ConnectionPolicies {
                conflict: Some(choice(&world.reference("policies/swap", "v1"), None)),
                ..ConnectionPolicies::default()
            };
            connect_with(world, &name, policies, IsolationStrategy::None).await?;
            let ready = until(world, &name, "Ready", "True", "AsExpected").await?;
            ensure!(
                running(&ready, "conflict") == Some(v1.clone()),
                "{:?}",
                ready.status
            );
            let api = TestApi::namespaced(&format!("{name}.e2e.kbind.io"));
            bind(world, &api, &name, &name).await?;
            let sides = Sides::on(world.pair, api.clone(), &name).await?;
            sides.create("w1", json!({"size": 1})).await?;
            sides.wait_copies(1).await?;
            let api_name = api.name();
            let (starts, lists) = (syncer_starts(&api_name), watch_lists(&api_name, "consumer"));
            ensure!(
                starts >= 1 && lists >= 1,
                "the syncer runs ({starts} starts, {lists} lists)"
            );

            set_policies(
                world,
                &name,
                json!({"conflict": {"module": world.reference("policies/swap", "v2")}}),
            )
            .await?;
            let consumer = world.consumer().await?;
            wait_connection(&consumer, &name, "v2 running", |c| {
                running(c, "conflict") == Some(v2.clone())
            })
            .await?;
            // New writes are decided by v2 (the same decision table): sync goes on.
            sides.create("w2", json!({"size": 2})).await?;
            sides.wait_copies(2).await?;
            ensure!(
                syncer_starts(&api_name) == starts,
                "the syncer was started again"
            );
            let after = watch_lists(&api_name, "consumer");
            ensure!(
                after == lists,
                "listed again: {lists} full lists before, {after} after"
            );
            Ok(())
        })
        .await
}

#[tokio::test]
async fn two_connections_with_different_placement_modules_place_copies_differently()
-> anyhow::Result<()> {
    let world = world().await?;
    world
        .pair
        .diagnose(async {
            let (a, b) = (unique("place-a"), unique("place-b"));
            // b's module puts every copy at one fixed place in b's namespace.
            let fixed = constant_placement_policy(Some(&b), "placed-by-module")?;
            world
                .push(
                    PolicyRole::Placement,
                    &fixed,
                    "policies/fixed-place",
                    "v1",
                    "1.0.0",
                )
                .await?;
            let built_in = ConnectionPolicies {
                placement: Some(choice("built-in", None)),
                ..ConnectionPolicies::default()
            };
            let own = ConnectionPolicies {
                placement: Some(choice(&world.reference("policies/fixed-place", "v1"), None)),
                ..ConnectionPolicies::default()
            };
            connect_with(world, &a, built_in, IsolationStrategy::Prefixed).await?;
            connect_with(world, &b, own, IsolationStrategy::Prefixed).await?;
            until(world, &a, "Ready", "True", "AsExpected").await?;
            until(world, &b, "Ready", "True", "AsExpected").await?;
            let (api_a, api_b) = (
                TestApi::namespaced(&format!("{a}.e2e.kbind.io")),
                TestApi::namespaced(&format!("{b}.e2e.kbind.io")),
            );
            bind(world, &api_a, &a, &a).await?;
            bind(world, &api_b, &b, &b).await?;
            let provider = world.pair.provider.client().await?;
            for (api, namespace) in [(&api_a, &a), (&api_b, &b)] {
                let sides = Sides::on(world.pair, (*api).clone(), namespace).await?;
                sides.create("w1", json!({"size": 1})).await?;
            }
            // a: the built-in Prefixed placement, `<prefix>-<name>` in the same namespace.
            let copies_a = api_a.api(&provider, Some(&a));
            wait_for("a's copy at tenant-w1", FAULT_WAIT, || async {
                Ok(copies_a.get_opt("tenant-w1").await?.map(|_| ()))
            })
            .await?;
            // b: where its own module says, not where the built-in would have put it.
            let copies_b = api_b.api(&provider, Some(&b));
            wait_for("b's copy at placed-by-module", FAULT_WAIT, || async {
                Ok(copies_b.get_opt("placed-by-module").await?.map(|_| ()))
            })
            .await?;
            ensure!(
                copies_b.get_opt("tenant-w1").await?.is_none(),
                "b's copy was placed by the built-in module"
            );
            Ok(())
        })
        .await
}

#[tokio::test]
async fn a_connection_may_not_name_a_module_file_on_the_konnectors_filesystem() -> anyhow::Result<()>
{
    let world = world().await?;
    world
        .pair
        .diagnose(async {
            let name = unique("file-path");
            let policies = ConnectionPolicies {
                conflict: Some(choice("/etc/kbind/conflict.wasm", None)),
                ..ConnectionPolicies::default()
            };
            let refused = connect_with(world, &name, policies, IsolationStrategy::None).await;
            let message = match refused {
                Ok(()) => bail!("a Connection naming a file path was accepted"),
                Err(e) => format!("{e:#}"),
            };
            ensure!(message.contains("file paths are not allowed"), "{message}");
            Ok(())
        })
        .await
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

/// `kubectl kbind status NAME` as the consumer's admin: its exit code and standard output.
async fn kbind_status(world: &World, name: &str) -> anyhow::Result<(Option<i32>, String)> {
    let mut command = std::process::Command::new(kbind_tests::kubectl_kbind_binary!());
    command
        .arg("--kubeconfig")
        .arg(world.pair.consumer.admin().kubeconfig_path())
        .args(["status", name])
        .env_remove("KUBECONFIG")
        .env("NO_COLOR", "1");
    let output = tokio::task::spawn_blocking(move || command.output()).await??;
    Ok((
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    ))
}

/// The `Connection NAME ...` line of a `status` output.
fn connection_line<'a>(output: &'a str, name: &str) -> anyhow::Result<&'a str> {
    let head = format!("Connection {name} ");
    output
        .lines()
        .find(|l| l.starts_with(&head))
        .with_context(|| format!("no line for Connection {name} in:\n{output}"))
}

#[tokio::test]
async fn kubectl_kbind_status_shows_each_role_a_connection_runs_with_its_reference_and_digest()
-> anyhow::Result<()> {
    let world = world().await?;
    world
        .pair
        .diagnose(async {
            let digest = world
                .push(
                    PolicyRole::ConflictPolicy,
                    builtin::CONFLICT_POLICY,
                    "policies/status",
                    "v1",
                    "1.0.0",
                )
                .await?;
            let conflict = world.reference("policies/status", "v1");
            let name = unique("status");
            let policies = ConnectionPolicies {
                conflict: Some(choice(&conflict, None)),
                placement: Some(choice("built-in", None)),
                ..ConnectionPolicies::default()
            };
            connect_with(world, &name, policies, IsolationStrategy::None).await?;
            until(world, &name, "Ready", "True", "AsExpected").await?;
            let (_, output) = kbind_status(world, &name).await?;
            let line = connection_line(&output, &name)?;
            let placement = builtin::digest(PolicyRole::Placement);
            let expected = format!(
                "policies: conflict={conflict} ({digest}), placement=built-in ({placement})"
            );
            ensure!(
                line.contains(&expected),
                "expected `{expected}` in `{line}`"
            );

            // A module that cannot be had: the role is listed as unavailable, and status fails.
            let missing = unique("status-missing");
            let never = world.reference("policies/status-never-pushed", "v1");
            let policies = ConnectionPolicies {
                conflict: Some(choice(&never, None)),
                ..ConnectionPolicies::default()
            };
            connect_with(world, &missing, policies, IsolationStrategy::None).await?;
            until(world, &missing, "Ready", "False", "PolicyUnavailable").await?;
            let (code, output) = kbind_status(world, &missing).await?;
            ensure!(code == Some(1), "status exited {code:?}:\n{output}");
            let line = connection_line(&output, &missing)?;
            let expected = format!("policies: conflict={never} (unavailable)");
            ensure!(
                line.contains(&expected),
                "expected `{expected}` in `{line}`"
            );
            Ok(())
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
