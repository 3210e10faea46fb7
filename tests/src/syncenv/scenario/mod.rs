//! One e2e scenario set up in one call, so that a test body holds only the behaviour it
//! checks: a konnector [`Stack`] on a cluster pair, its test APIs exported and engaged, and a
//! Ready binding listing them.
//!
//! ```text
//! #[test]
//! fn drift_is_reverted() -> anyhow::Result<()> {
//!     Scenario::bound("drift")       stack and Connection "drift", API widgets.drift.e2e.kbind.io
//!         .conflict_policy(Adopt)    Binding drift/widgets (Adopt), waited for until Ready
//!         .run(async |s| { .. })     the behaviour; a failure carries both clusters' objects of
//! }                                  the APIs, the stack's bindings and the apiservers' log
//!                                    tails; the stack is stopped either way
//! ```
//!
//! [`Scenario::unbound`] starts the stack only: the test exports, engages and binds when its
//! behaviour needs something to happen first ([`Scenario::export`], [`Scenario::engage`],
//! [`Scenario::bind`]).

use std::ops::Deref;
use std::time::Duration;

use konnector::api::names::{DELETION_POLICY_ANNOTATION, DELETION_POLICY_ORPHAN};
use konnector::api::{Binding, ClusterBinding, ConflictPolicy, Isolation, RelatedResource};
use konnector::registry::Engagement;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject};
use serde_json::{Value, json};

use super::{Stack, TestApi, appears, delete, gone, merge, wait_for};
use crate::testenv::ClusterPair;

mod builder;

pub use builder::ScenarioBuilder;

/// The name of a scenario's Binding (a ClusterBinding is named after the scenario).
pub const BINDING: &str = "widgets";
/// How long a scenario helper waits for the konnector.
pub const WAIT: Duration = Duration::from_secs(60);

/// A running scenario: the stack (reachable through `Deref`), its APIs and its namespace.
pub struct Scenario {
    /// The konnector stack; its name is also the Connection's and the ClusterBinding's.
    pub stack: Stack,
    /// The API the scenario is about.
    pub api: TestApi,
    /// Further APIs, exported, engaged and bound with the main one.
    pub extra: Vec<TestApi>,
    namespace: String,
    cluster_binding: bool,
    policy: ConflictPolicy,
    related: Vec<RelatedResource>,
    isolation: Option<Isolation>,
    // Declared last: the stack stops before a private pair's clusters go.
    pair: Pair,
}

enum Pair {
    Shared(&'static ClusterPair),
    Private(Box<ClusterPair>),
}

impl Scenario {
    /// The cluster pair the scenario runs on.
    pub fn pair(&self) -> &ClusterPair {
        match &self.pair {
            Pair::Shared(pair) => pair,
            Pair::Private(pair) => pair,
        }
    }

    /// Whether the scenario binds with a ClusterBinding (named after it).
    pub fn is_cluster_binding(&self) -> bool {
        self.cluster_binding
    }

    /// The scenario's namespace: its Binding's, and its instances'.
    pub fn ns(&self) -> &str {
        &self.namespace
    }

    /// Every API of the scenario, the main one first.
    pub fn apis(&self) -> Vec<&TestApi> {
        std::iter::once(&self.api).chain(&self.extra).collect()
    }

    /// Exports every API on the provider.
    pub async fn export(&self) -> anyhow::Result<()> {
        for api in self.apis() {
            api.export(&self.stack).await?;
        }
        Ok(())
    }

    /// Engages the Connection exporting every API, as the Connection controller would.
    pub fn engage(&self) -> Engagement {
        match &self.isolation {
            Some(isolation) => self.stack.engage_isolated(&self.apis(), isolation),
            None => self.stack.engage(&self.apis()),
        }
    }

    /// The scenario's Binding `<ns>/widgets` as configured, not yet created.
    pub fn new_binding(&self) -> Binding {
        let mut b = self
            .stack
            .binding(&self.namespace, BINDING, &self.apis(), self.policy);
        b.spec.related_resources = self.related.clone();
        b
    }

    /// The scenario's ClusterBinding `<name>` as configured, not yet created.
    pub fn new_cluster_binding(&self) -> ClusterBinding {
        let mut b = self
            .stack
            .cluster_binding(&self.stack.name, &self.apis(), self.policy);
        b.spec.spec.related_resources = self.related.clone();
        b
    }

    /// Creates the configured Binding or ClusterBinding and waits until it is Ready.
    pub async fn bind(&self) -> anyhow::Result<()> {
        if self.cluster_binding {
            self.stack
                .create_ready_cluster_binding(&self.new_cluster_binding())
                .await?;
        } else {
            self.stack.create_ready_binding(&self.new_binding()).await?;
        }
        Ok(())
    }

    /// Deletes the configured Binding or ClusterBinding and waits until its teardown is done
    /// and it is gone.
    pub async fn unbind(&self) -> anyhow::Result<()> {
        self.delete_binding().await?;
        self.binding_gone().await
    }

    /// Asks for the configured Binding or ClusterBinding to be deleted, without waiting.
    pub async fn delete_binding(&self) -> anyhow::Result<()> {
        let dp = DeleteParams::default();
        if self.cluster_binding {
            self.cluster_bindings()
                .delete(&self.stack.name, &dp)
                .await?;
        } else {
            self.bindings().delete(BINDING, &dp).await?;
        }
        Ok(())
    }

    /// Waits until the configured Binding or ClusterBinding is gone.
    pub async fn binding_gone(&self) -> anyhow::Result<()> {
        wait_for("the binding gone", WAIT, || async {
            let gone = if self.cluster_binding {
                self.cluster_bindings()
                    .get_opt(&self.stack.name)
                    .await?
                    .is_none()
            } else {
                self.bindings().get_opt(BINDING).await?.is_none()
            };
            Ok(gone.then_some(()))
        })
        .await
    }

    /// Exports and engages every API, then binds: what [`Scenario::bound`] does on start, for a
    /// test that prepares something first.
    pub async fn export_and_bind(&self) -> anyhow::Result<()> {
        self.export().await?;
        self.engage();
        self.bind().await
    }

    /// Bindings in the scenario's namespace.
    pub fn bindings(&self) -> Api<Binding> {
        Api::namespaced(self.stack.consumer.clone(), &self.namespace)
    }

    /// ClusterBindings.
    pub fn cluster_bindings(&self) -> Api<ClusterBinding> {
        Api::all(self.stack.consumer.clone())
    }

    /// The main API's instances on the consumer, in the scenario's namespace.
    pub fn instances(&self) -> Api<DynamicObject> {
        self.api.api(&self.stack.consumer, Some(&self.namespace))
    }

    /// The main API's copies on the provider, in the scenario's namespace.
    pub fn copies(&self) -> Api<DynamicObject> {
        self.api.api(&self.stack.provider, Some(&self.namespace))
    }

    /// Creates an instance of the main API on the consumer, in the scenario's namespace.
    pub async fn create(&self, name: &str, spec: Value) -> anyhow::Result<DynamicObject> {
        self.api
            .create(&self.stack.consumer, Some(&self.namespace), name, spec)
            .await
    }

    /// Waits for the provider copy of instance `name` and returns it.
    pub async fn copy(&self, name: &str) -> anyhow::Result<DynamicObject> {
        appears(&self.copies(), name).await
    }

    /// Deletes instance `name` under `deletion-policy: Orphan` (its provider copy is to be
    /// kept) and waits until the instance is gone.
    pub async fn orphan(&self, name: &str) -> anyhow::Result<()> {
        let orphan = json!({ "metadata": { "annotations": {
            DELETION_POLICY_ANNOTATION: DELETION_POLICY_ORPHAN } } });
        merge(&self.instances(), name, orphan).await?;
        delete(&self.instances(), name).await?;
        gone(&self.instances(), name).await
    }

    /// Runs a test body, then stops the stack; a failure carries the diagnostics.
    pub async fn run(
        self,
        body: impl AsyncFnOnce(&Scenario) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let result = self.check(body).await;
        self.finish(result).await
    }

    /// Runs a test body, then `cleanup` whatever the body's outcome (for objects the stack does
    /// not remove when it stops, such as a ClusterBinding on the shared pair), then stops the
    /// stack; a failure carries the diagnostics.
    pub async fn run_then(
        self,
        body: impl AsyncFnOnce(&Scenario) -> anyhow::Result<()>,
        cleanup: impl AsyncFnOnce(&Scenario),
    ) -> anyhow::Result<()> {
        let result = self.check(body).await;
        cleanup(&self).await;
        self.finish(result).await
    }

    /// Asks for the ClusterBinding named after the scenario to be deleted, without waiting
    /// and ignoring a failure: a best-effort cleanup for [`Scenario::run_then`].
    pub async fn forget_cluster_binding(&self) {
        let _ = self
            .cluster_bindings()
            .delete(&self.stack.name, &DeleteParams::default())
            .await;
    }

    /// Runs a test body without stopping the stack (for a test that cleans up after it,
    /// whatever the outcome, before [`Scenario::finish`]); a failure carries both clusters'
    /// objects of the scenario's APIs, the stack's bindings and the apiservers' log tails.
    pub async fn check<T>(
        &self,
        body: impl AsyncFnOnce(&Scenario) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let apis = self.apis();
        self.pair()
            .diagnose(self.stack.diagnose(&apis, body(self)))
            .await
    }

    /// Stops the stack (then a private pair) and passes the test's result through.
    pub async fn finish<T>(self, result: anyhow::Result<T>) -> anyhow::Result<T> {
        let Self { stack, pair, .. } = self;
        let result = stack.finish(result).await;
        drop(pair);
        result
    }
}

impl Deref for Scenario {
    type Target = Stack;

    fn deref(&self) -> &Stack {
        &self.stack
    }
}
