//! How a [`Scenario`] is configured and started: the builder's settings, and the set-up that
//! [`Scenario::bound`] promises before a test body runs.

use konnector::api::{ConflictPolicy, Isolation, PullPolicy, RelatedResource};
use konnector::binding::Config;
use konnector::policy::Policies;

use super::{Pair, Scenario};
use crate::syncenv::{Stack, TestApi, fast_settings};
use crate::testenv::{Cluster, ClusterPair, shared_pair};

/// How a [`Scenario`] is set up; [`ScenarioBuilder::run`] or [`ScenarioBuilder::start`]
/// starts it.
pub struct ScenarioBuilder {
    name: String,
    namespace: String,
    api: TestApi,
    extra: Vec<TestApi>,
    cluster_binding: bool,
    policy: ConflictPolicy,
    related: Vec<RelatedResource>,
    settings: Config,
    policies: Option<Policies>,
    pull_policy: Option<PullPolicy>,
    private_pair: bool,
    bound: bool,
    isolation: Option<Isolation>,
    consumer: Option<&'static Cluster>,
}

impl Scenario {
    /// A scenario whose API is exported, engaged and bound by a Ready binding once started.
    /// `name` names the stack, the Connection, the namespace and the API group
    /// (`widgets.<name>.e2e.kbind.io`), so it must be unique in the test binary.
    pub fn bound(name: &str) -> ScenarioBuilder {
        ScenarioBuilder {
            name: name.to_string(),
            namespace: name.to_string(),
            api: TestApi::namespaced(&format!("{name}.e2e.kbind.io")),
            extra: Vec::new(),
            cluster_binding: false,
            policy: ConflictPolicy::Fail,
            related: Vec::new(),
            settings: fast_settings(name),
            policies: None,
            pull_policy: None,
            private_pair: false,
            bound: true,
            isolation: None,
            consumer: None,
        }
    }

    /// A scenario whose stack runs but whose API is neither exported, engaged nor bound yet.
    pub fn unbound(name: &str) -> ScenarioBuilder {
        ScenarioBuilder {
            bound: false,
            ..Self::bound(name)
        }
    }
}

impl ScenarioBuilder {
    /// The main API, for a test that prepares it before the stack starts.
    pub fn api(&self) -> &TestApi {
        &self.api
    }

    /// Binds and creates instances in `namespace` instead of the scenario's name.
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = namespace.to_string();
        self
    }

    /// Makes the main API cluster-scoped (only a ClusterBinding selects its instances).
    pub fn cluster_scoped(mut self) -> Self {
        self.api.namespaced = false;
        self
    }

    /// Adds an API, exported, engaged and bound with the main one.
    pub fn with_api(mut self, api: TestApi) -> Self {
        self.extra.push(api);
        self
    }

    /// Binds with a ClusterBinding named after the scenario instead of a Binding.
    pub fn cluster_binding(mut self) -> Self {
        self.cluster_binding = true;
        self
    }

    /// The binding's `conflictPolicy` (default `Fail`).
    pub fn conflict_policy(mut self, policy: ConflictPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The binding's `relatedResources` entries.
    pub fn related(mut self, entries: Vec<RelatedResource>) -> Self {
        self.related = entries;
        self
    }

    /// Changes the stack's settings (from [`fast_settings`]).
    pub fn settings(mut self, change: impl FnOnce(&mut Config)) -> Self {
        change(&mut self.settings);
        self
    }

    /// Runs the stack with these policy modules instead of the built-in ones.
    pub fn policies(mut self, policies: Policies) -> Self {
        self.policies = Some(policies);
        self
    }

    /// The Connection's `schema.pullPolicy` (default `Bound`).
    pub fn pull_policy(mut self, pull_policy: PullPolicy) -> Self {
        self.pull_policy = Some(pull_policy);
        self
    }

    /// Runs on a cluster pair of the scenario's own, for a test that stops or restarts a
    /// cluster.
    pub fn private_pair(mut self) -> Self {
        self.private_pair = true;
        self
    }

    /// Copies placed by `isolation` (the Connection is engaged with it in force).
    pub fn isolation(mut self, isolation: Isolation) -> Self {
        self.isolation = Some(isolation);
        self
    }

    /// Runs the stack on another consumer cluster of the shared pair's provider (e.g.
    /// [`crate::testenv::second_consumer`]): a second tenant of one provider.
    pub fn on_consumer(mut self, consumer: &'static Cluster) -> Self {
        self.consumer = Some(consumer);
        self
    }

    /// Starts the scenario and runs a test body in it ([`Scenario::run`]) on a runtime of its
    /// own, multi-threaded as the konnector's is: the whole of a `#[test]` function. (A test
    /// that needs to await something before the stack starts uses [`Self::start`] instead.)
    pub fn run(
        self,
        body: impl AsyncFnOnce(&Scenario) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        crate::runtime()?.block_on(async { self.start().await?.run(body).await })
    }

    /// Starts the stack and, for [`Scenario::bound`], exports, engages and binds; a failure
    /// on the way carries the diagnostics.
    pub async fn start(self) -> anyhow::Result<Scenario> {
        let pair = if self.private_pair {
            let pair = tokio::task::spawn_blocking(ClusterPair::start_private).await??;
            Pair::Private(Box::new(pair))
        } else {
            Pair::Shared(shared_pair()?)
        };
        let cluster_pair = match &pair {
            Pair::Shared(pair) => *pair,
            Pair::Private(pair) => pair,
        };
        let policies = match self.policies {
            Some(policies) => policies,
            None => Policies::builtin()?,
        };
        let consumer = self.consumer.unwrap_or(&cluster_pair.consumer);
        let stack = Stack::start_on(
            &cluster_pair.provider,
            consumer,
            &self.name,
            self.settings,
            policies,
        )
        .await?;
        let scenario = Scenario {
            stack,
            api: self.api,
            extra: self.extra,
            namespace: self.namespace,
            cluster_binding: self.cluster_binding,
            policy: self.policy,
            related: self.related,
            isolation: self.isolation,
            pair,
        };
        let (pull_policy, bound) = (self.pull_policy, self.bound);
        let setup = scenario
            .check(async |s| {
                if let Some(pull_policy) = pull_policy {
                    s.set_pull_policy(pull_policy).await?;
                }
                if bound {
                    s.export_and_bind().await?;
                }
                Ok(())
            })
            .await;
        match setup {
            Ok(()) => Ok(scenario),
            Err(e) => scenario.finish(Err(e)).await,
        }
    }
}
