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
use kbind_tests::faults::policy::constant_placement_policy;
use kbind_tests::faults::{FAULT_WAIT, Sides, create_binding, wait_binding_ready};
use kbind_tests::fixtures::{
    Konnector, condition, connection, crd_source, has_condition, put_kubeconfig_secret,
    start_konnector_pulling, unique, wait_connection,
};
use kbind_tests::registry::{Registry, RegistryUser};
use kbind_tests::syncenv::{TestApi, ensure_namespace, events_for, wait_for};
use kbind_tests::testenv::{ClusterPair, shared_pair};
use konnector::api::{Connection, ConnectionPolicies, Isolation, IsolationStrategy, PolicyChoice};
use konnector::artifact::{Fetcher, FetcherConfig, PolicyRef, PushMeta};
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
            // A list is counted once complete: the consumer watch's first may still be paging.
            wait_for("the consumer watch's first list", FAULT_WAIT, || async {
                Ok((watch_lists(&api_name, "consumer") >= 1).then_some(()))
            })
            .await?;
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

mod credentials;
mod status;
