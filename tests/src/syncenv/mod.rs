//! The konnector's binding and sync stack, run in-process against a test cluster pair: what
//! the `sync_*` e2e tests drive.
//!
//! ```text
//! test ──engage()──▶ Engagements ─┐        (stands in for the Connection controller)
//!      ──Binding───▶ consumer ────┴─▶ konnector::manager::run_bindings ──▶ syncers ──▶ provider
//! ```
//!
//! Several tests share one pair, so each test runs its own stack with its own Connection name,
//! API group and namespaces, and its stack only handles bindings carrying its
//! [`STACK_LABEL`] (the `binding_selector` setting). Timings are shortened so that tests wait
//! on events, not on 30-second periods.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use konnector::api::names::{DEFAULT_KUBECONFIG_KEY, DEFAULT_SECRET_NAMESPACE};
use konnector::api::{
    ApiReference, Binding, BindingSpec, ClusterBinding, ConflictPolicy, Connection,
    ConnectionReference, ConnectionSpec, PullPolicy, SchemaPolicy, SecretReference,
};
use konnector::api::{ConditionType, ExportedApi, Isolation, IsolationInForce};
use konnector::binding::BindingObject;
use konnector::binding::Config;
use konnector::conditions::is_true;
use konnector::policy::Policies;
use konnector::registry::{Engagement, Engagements};
use konnector::shared::Shared;
use konnector::sync::SyncConfig;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::testenv::{Cluster, ClusterPair};

mod expect;
mod fixtures;
mod helpers;
pub mod provider_crds;
pub mod related;
pub mod remains;
mod scenario;

pub use expect::{appears, condition, has, markers, message, says, unwritten};
pub use fixtures::TestApi;
use fixtures::install_core_crds;
pub use helpers::{
    cluster_uid, delete, ensure_namespace, event_note, events_for, gone, holds_syncer_finalizer,
    init_logging, merge, set_status, stays, synced_condition, wait_for,
};
pub use scenario::{BINDING, Scenario, ScenarioBuilder, WAIT};

/// Label selecting the bindings one test's stack handles.
pub const STACK_LABEL: &str = "kbind.test/stack";
/// How long a new binding may take to become Ready (CRD installation included).
pub const READY_WAIT: Duration = Duration::from_secs(60);
/// How many objects of one API a failure dump shows per cluster.
const DUMP_ITEMS: usize = 40;
/// Field manager of the tests' own writes.
pub const TEST_MANAGER: &str = "kbind-e2e";

/// Config for tests: short periods, the same logic.
pub fn fast_settings(stack: &str) -> Config {
    Config {
        status_interval: Duration::from_secs(2),
        pending_requeue: Duration::from_millis(500),
        schema_wait: Duration::from_secs(30),
        binding_selector: Some(format!("{STACK_LABEL}={stack}")),
        secret_namespace: DEFAULT_SECRET_NAMESPACE.to_string(),
        konnector_namespace: None,
        provider_transport: Default::default(),
        sync: SyncConfig {
            resync_interval: Duration::from_secs(5),
            concurrency: 16,
            error_backoff_base: Duration::from_millis(200),
            error_backoff_max: Duration::from_secs(3),
            deletion_poll: Duration::from_secs(1),
            supervisor_tick: Duration::from_secs(1),
            ..SyncConfig::default()
        },
    }
}

/// One test's konnector stack.
pub struct Stack {
    /// The stack's name: also its Connection name and binding label value.
    pub name: String,
    /// Provider admin client.
    pub provider: Client,
    /// Consumer admin client.
    pub consumer: Client,
    /// The engagement registry the stack reads.
    pub engagements: Engagements,
    /// UID of the provider's kube-system Namespace.
    pub provider_uid: String,
    /// UID of the consumer's kube-system Namespace.
    pub consumer_uid: String,
    shutdown: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Stack {
    /// Starts a stack named `name` with [`fast_settings`].
    pub async fn start(pair: &ClusterPair, name: &str) -> anyhow::Result<Self> {
        Self::start_with(pair, name, fast_settings(name)).await
    }

    /// Starts a stack with explicit settings. Installs the core CRDs on the consumer first,
    /// and creates the stack's Connection object (`schema.pullPolicy: Bound`; nothing runs
    /// the Connection controller, the test engages the Connection itself).
    pub async fn start_with(
        pair: &ClusterPair,
        name: &str,
        settings: Config,
    ) -> anyhow::Result<Self> {
        Self::start_with_policies(pair, name, settings, Policies::builtin()?).await
    }

    /// Starts a stack with explicit settings and policy modules (e.g. a hostile conflict
    /// policy).
    pub async fn start_with_policies(
        pair: &ClusterPair,
        name: &str,
        settings: Config,
        policies: Policies,
    ) -> anyhow::Result<Self> {
        Self::start_on(&pair.provider, &pair.consumer, name, settings, policies).await
    }

    /// Starts a stack on any provider and consumer cluster: a second consumer of one
    /// provider gets a stack of its own this way.
    pub async fn start_on(
        provider: &Cluster,
        consumer: &Cluster,
        name: &str,
        settings: Config,
        policies: Policies,
    ) -> anyhow::Result<Self> {
        init_logging();
        let provider = provider.client().await?;
        let consumer = consumer.client().await?;
        install_core_crds(&consumer).await?;
        let provider_uid = cluster_uid(&provider).await?;
        let consumer_uid = cluster_uid(&consumer).await?;
        apply_connection(&consumer, name, PullPolicy::Bound).await?;
        let shared = Shared::new(consumer.clone(), policies, None);
        let engagements = shared.engagements.clone();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(konnector::manager::run_bindings(
            shared,
            settings,
            shutdown.clone(),
        ));
        Ok(Self {
            name: name.to_string(),
            provider,
            consumer,
            engagements,
            provider_uid,
            consumer_uid,
            shutdown,
            task: Some(task),
        })
    }

    /// Changes the pull policy of the stack's Connection (e.g. `None` when the test manages
    /// consumer CRDs itself).
    pub async fn set_pull_policy(&self, pull_policy: PullPolicy) -> anyhow::Result<()> {
        apply_connection(&self.consumer, &self.name, pull_policy).await
    }

    /// Engages the Connection `self.name` with the admin provider client, exporting `apis`,
    /// as the Connection controller does for a Ready Connection.
    pub fn engage(&self, apis: &[&TestApi]) -> Engagement {
        self.engage_with(self.provider.clone(), apis, "admin")
    }

    /// Engages with a given provider client; a new `credentials` value bumps the epoch.
    pub fn engage_with(
        &self,
        provider: Client,
        apis: &[&TestApi],
        credentials: &str,
    ) -> Engagement {
        self.engage_placed(provider, apis, credentials, IsolationInForce::default())
    }

    /// Engages with the admin provider client, copies placed by `isolation`'s strategy (its
    /// prefix resolved for this consumer), as the Connection controller engages a Connection
    /// whose `status.isolation` says so.
    pub fn engage_isolated(&self, apis: &[&TestApi], isolation: &Isolation) -> Engagement {
        let in_force = isolation.in_force(&self.consumer_uid);
        self.engage_placed(self.provider.clone(), apis, "admin", in_force)
    }

    /// Engages the Connection with the admin provider client, exporting `exported` as the
    /// Connection controller would discover them: the APIs of an operator on the provider,
    /// which are not [`TestApi`]s.
    pub fn engage_exports(&self, exported: Vec<ExportedApi>) -> Engagement {
        let mut engagement = self.engagement(
            self.provider.clone(),
            &[],
            "admin",
            IsolationInForce::default(),
        );
        engagement.exported = exported;
        self.engagements.engage(engagement)
    }

    /// A ClusterBinding of the APIs named `apis` (`<plural>.<group>`), labelled for this stack.
    pub fn cluster_binding_of(&self, name: &str, apis: &[&str]) -> ClusterBinding {
        let mut binding = self.cluster_binding(name, &[], ConflictPolicy::Fail);
        binding.spec.spec.apis = apis
            .iter()
            .map(|api| ApiReference {
                name: api.to_string(),
            })
            .collect();
        binding
    }

    /// Engages like [`Self::engage`], with each API's schema revision as the Connection
    /// controller records it for CRD exports (the provider CRD's `uid/generation`): an
    /// unchanged schema is then known unchanged without being read again.
    pub async fn engage_with_revisions(&self, apis: &[&TestApi]) -> anyhow::Result<Engagement> {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let crds = kube::Api::<CustomResourceDefinition>::all(self.provider.clone());
        let mut revisions = std::collections::BTreeMap::new();
        for api in apis {
            let name = api.name();
            let crd = crds.get(&name).await?;
            let (uid, generation) = (crd.metadata.uid, crd.metadata.generation);
            let (Some(uid), Some(generation)) = (uid, generation) else {
                anyhow::bail!("provider CRD {name} has no uid or generation");
            };
            revisions.insert(name, format!("{uid}/{generation}"));
        }
        let mut engagement = self.engagement(
            self.provider.clone(),
            apis,
            "admin",
            IsolationInForce::default(),
        );
        engagement.schema_revisions = revisions;
        Ok(self.engagements.engage(engagement))
    }

    fn engage_placed(
        &self,
        provider: Client,
        apis: &[&TestApi],
        credentials: &str,
        isolation: IsolationInForce,
    ) -> Engagement {
        self.engagements
            .engage(self.engagement(provider, apis, credentials, isolation))
    }

    fn engagement(
        &self,
        provider: Client,
        apis: &[&TestApi],
        credentials: &str,
        isolation: IsolationInForce,
    ) -> Engagement {
        Engagement {
            connection: self.name.clone(),
            provider,
            provider_uid: self.provider_uid.clone(),
            consumer_uid: self.consumer_uid.clone(),
            exported: apis.iter().map(|a| a.exported()).collect(),
            schema_revisions: Default::default(),
            isolation,
            heartbeat_namespace: konnector::api::names::DEFAULT_HEARTBEAT_NAMESPACE.into(),
            credentials_digest: credentials.to_string(),
            epoch: 0,
        }
    }

    /// Disengages the Connection, as when it leaves Ready.
    pub fn disengage(&self) {
        self.engagements.disengage(&self.name);
    }

    /// A Binding in `namespace` for `apis`, labelled for this stack.
    pub fn binding(
        &self,
        namespace: &str,
        name: &str,
        apis: &[&TestApi],
        policy: ConflictPolicy,
    ) -> Binding {
        let mut b = Binding::new(name, self.binding_spec(apis, policy));
        b.metadata.namespace = Some(namespace.to_string());
        b.metadata.labels = Some(BTreeMap::from([(
            STACK_LABEL.to_string(),
            self.name.clone(),
        )]));
        b
    }

    /// A ClusterBinding for `apis`, labelled for this stack.
    pub fn cluster_binding(
        &self,
        name: &str,
        apis: &[&TestApi],
        policy: ConflictPolicy,
    ) -> ClusterBinding {
        let mut b = ClusterBinding::new(name, self.binding_spec(apis, policy).into());
        b.metadata.labels = Some(BTreeMap::from([(
            STACK_LABEL.to_string(),
            self.name.clone(),
        )]));
        b
    }

    fn binding_spec(&self, apis: &[&TestApi], policy: ConflictPolicy) -> BindingSpec {
        BindingSpec {
            connection_ref: ConnectionReference {
                name: self.name.clone(),
            },
            apis: apis
                .iter()
                .map(|a| ApiReference { name: a.name() })
                .collect(),
            conflict_policy: policy,
            related_resources: vec![],
        }
    }

    /// Creates a Binding.
    pub async fn create_binding(&self, binding: &Binding) -> anyhow::Result<Binding> {
        let ns = binding.namespace().context("binding without namespace")?;
        ensure_namespace(&self.consumer, &ns).await?;
        Ok(Api::<Binding>::namespaced(self.consumer.clone(), &ns)
            .create(&PostParams::default(), binding)
            .await?)
    }

    /// Creates a ClusterBinding.
    pub async fn create_cluster_binding(
        &self,
        binding: &ClusterBinding,
    ) -> anyhow::Result<ClusterBinding> {
        Ok(Api::<ClusterBinding>::all(self.consumer.clone())
            .create(&PostParams::default(), binding)
            .await?)
    }

    /// Creates a Binding and waits until it is Ready (its consumer CRD installed and
    /// Established), so that the test can create instances right away.
    pub async fn create_ready_binding(&self, binding: &Binding) -> anyhow::Result<Binding> {
        let created = self.create_binding(binding).await?;
        ready(created.api_for(self.consumer.clone()), &created).await
    }

    /// Creates a ClusterBinding and waits until it is Ready.
    pub async fn create_ready_cluster_binding(
        &self,
        binding: &ClusterBinding,
    ) -> anyhow::Result<ClusterBinding> {
        let created = self.create_cluster_binding(binding).await?;
        ready(created.api_for(self.consumer.clone()), &created).await
    }

    /// Ends a test: stops the stack (so no controller is cut off mid-request by the test's
    /// runtime shutting down) and passes the test's result through.
    pub async fn finish<T>(self, result: anyhow::Result<T>) -> anyhow::Result<T> {
        self.stop().await;
        result
    }

    /// Runs a test body; on failure the error carries both clusters' copies of the given
    /// APIs' objects and this stack's bindings.
    pub async fn diagnose<T>(
        &self,
        apis: &[&TestApi],
        body: impl Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<T> {
        match body.await {
            Ok(t) => Ok(t),
            Err(e) => Err(anyhow!("{e:?}\n\n{}", self.dump(apis).await)),
        }
    }

    /// Both clusters' objects of `apis` (at most `DUMP_ITEMS` of each) and this stack's
    /// bindings, as YAML.
    pub async fn dump(&self, apis: &[&TestApi]) -> String {
        let mut out = String::new();
        let selector = ListParams::default().labels(&format!("{STACK_LABEL}={}", self.name));
        if let Ok(list) = Api::<Binding>::all(self.consumer.clone())
            .list(&selector)
            .await
        {
            out += &format!("--- consumer Bindings\n{}\n", yaml(&list.items));
        }
        if let Ok(list) = Api::<ClusterBinding>::all(self.consumer.clone())
            .list(&selector)
            .await
        {
            out += &format!("--- consumer ClusterBindings\n{}\n", yaml(&list.items));
        }
        for api in apis {
            for (side, client) in [("consumer", &self.consumer), ("provider", &self.provider)] {
                match api.all(client).list(&ListParams::default()).await {
                    Ok(list) => {
                        let total = list.items.len();
                        let mut items: Vec<_> = list.items.into_iter().take(DUMP_ITEMS).collect();
                        items
                            .iter_mut()
                            .for_each(|o| o.metadata.managed_fields = None);
                        out += &format!("--- {side} {} ({total})\n{}\n", api.name(), yaml(&items));
                    }
                    Err(e) => out += &format!("--- {side} {}: {e}\n", api.name()),
                }
            }
        }
        out
    }

    /// Stops the stack and waits for it (nothing is deleted by stopping).
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(40), task).await;
        }
    }
}

/// Waits until binding `created` is Ready, and returns it.
async fn ready<K: BindingObject>(api: Api<K>, created: &K) -> anyhow::Result<K> {
    let name = created.name_any();
    wait_for(&format!("binding {name} Ready"), READY_WAIT, || async {
        let b = api.get(&name).await?;
        let ready = b
            .binding_status()
            .is_some_and(|s| is_true(&s.conditions, ConditionType::Ready));
        Ok(ready.then_some(b))
    })
    .await
}

/// Creates or updates a Connection object with the given pull policy.
pub async fn apply_connection(
    consumer: &Client,
    name: &str,
    pull_policy: PullPolicy,
) -> anyhow::Result<()> {
    let connection = Connection::new(
        name,
        ConnectionSpec {
            kubeconfig_secret_ref: SecretReference {
                namespace: DEFAULT_SECRET_NAMESPACE.into(),
                name: name.into(),
                key: DEFAULT_KUBECONFIG_KEY.into(),
            },
            schema: SchemaPolicy {
                pull_policy,
                ..SchemaPolicy::default()
            },
            auto_bind: false,
            binding_namespace_selector: None,
            isolation: Default::default(),
            policies: None,
        },
    );
    Api::<Connection>::all(consumer.clone())
        .patch(
            name,
            &PatchParams::apply(TEST_MANAGER).force(),
            &Patch::Apply(&connection),
        )
        .await
        .with_context(|| format!("applying Connection {name}"))?;
    Ok(())
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn yaml<T: serde::Serialize>(items: &[T]) -> String {
    serde_saphyr::to_string(&items).unwrap_or_else(|e| format!("(unprintable: {e})"))
}
