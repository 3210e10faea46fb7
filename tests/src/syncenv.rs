//! The konnector's binding and sync stack, run in-process against a test cluster pair: what
//! the `sync_*` e2e tests drive.
//!
//! ```text
//! test ──engage()──▶ Engagements ─┐        (stands in for the Connection controller)
//!      ──Binding───▶ consumer ────┴─▶ konnector::binding::run ──▶ syncers ──▶ provider
//! ```
//!
//! Several tests share one pair, so each test runs its own stack with its own Connection name,
//! API group and namespaces, and its stack only handles bindings carrying its
//! [`STACK_LABEL`] (the `binding_selector` setting). Timings are shortened so that tests wait
//! on events, not on 30-second periods.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use konnector::api::names::{CONNECTION_ANNOTATION, EXPORTED_LABEL};
use konnector::api::{
    ApiReference, Binding, BindingSpec, ClusterBinding, ConflictPolicy, ConnectionReference,
    ExportedApi, ResourceScope,
};
use konnector::binding::{Context, Settings};
use konnector::provider::{Engagement, Engagements};
use konnector::sync::{DecideConflict, SyncSettings, is_established};
use kube::api::{
    DeleteParams, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams,
};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::testenv::ClusterPair;

/// Label selecting the bindings one test's stack handles.
pub const STACK_LABEL: &str = "kbind.test/stack";
/// Field manager of the tests' own writes.
pub const TEST_MANAGER: &str = "kbind-e2e";

/// Settings for tests: short periods, the same logic.
pub fn fast_settings(stack: &str) -> Settings {
    Settings {
        status_interval: Duration::from_secs(2),
        pending_requeue: Duration::from_millis(500),
        binding_selector: Some(format!("{STACK_LABEL}={stack}")),
        sync: SyncSettings {
            resync_interval: Duration::from_secs(5),
            concurrency: 16,
            error_backoff_base: Duration::from_millis(200),
            error_backoff_max: Duration::from_secs(3),
            deletion_poll: Duration::from_secs(1),
            supervisor_tick: Duration::from_secs(1),
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

    /// Starts a stack with explicit settings. Installs the core CRDs on the consumer first.
    pub async fn start_with(
        pair: &ClusterPair,
        name: &str,
        settings: Settings,
    ) -> anyhow::Result<Self> {
        init_logging();
        let provider = pair.provider.client().await?;
        let consumer = pair.consumer.client().await?;
        install_core_crds(&consumer).await?;
        let provider_uid = cluster_uid(&provider).await?;
        let consumer_uid = cluster_uid(&consumer).await?;
        let engagements = Engagements::default();
        let ctx = Arc::new(Context::new(
            consumer.clone(),
            engagements.clone(),
            conflict_policy(),
            settings,
        ));
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(konnector::binding::run(ctx, shutdown.clone()));
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
        self.engagements.engage(Engagement {
            connection: self.name.clone(),
            provider,
            provider_uid: self.provider_uid.clone(),
            consumer_uid: self.consumer_uid.clone(),
            exported: apis.iter().map(|a| a.exported()).collect(),
            credentials_digest: credentials.to_string(),
            epoch: 0,
        })
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

    /// Both clusters' objects of `apis` and this stack's bindings, as YAML.
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
                        let mut items = list.items;
                        items
                            .iter_mut()
                            .for_each(|o| o.metadata.managed_fields = None);
                        out += &format!("--- {side} {}\n{}\n", api.name(), yaml(&items));
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

impl Drop for Stack {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn yaml<T: serde::Serialize>(items: &[T]) -> String {
    serde_yaml::to_string(items).unwrap_or_else(|e| format!("(unprintable: {e})"))
}

/// The conflict policy the stacks use.
///
/// Temporary: a native table standing in for the Wasm conflict-policy module until
/// `konnector::policy::Policies` is on main; then this returns the Wasm runtime and the table
/// goes away (the decision must come from the module).
pub fn conflict_policy() -> Arc<dyn DecideConflict> {
    Arc::new(interim::InterimConflictPolicy)
}

mod interim {
    use futures::future::BoxFuture;
    use konnector::api::ConflictPolicy;
    use konnector::sync::{ConflictDecision, ConflictInput, ConflictReason, DecideConflict};

    pub(super) struct InterimConflictPolicy;

    impl DecideConflict for InterimConflictPolicy {
        fn decide<'a>(
            &'a self,
            input: &'a ConflictInput,
        ) -> BoxFuture<'a, Result<ConflictDecision, String>> {
            Box::pin(async move {
                Ok(match &input.target {
                    None => ConflictDecision::Create,
                    Some(m)
                        if m.owned_by(&input.consumer_cluster_uid, &input.consumer_object_uid) =>
                    {
                        ConflictDecision::UpdateOwned
                    }
                    Some(m) if m.cluster_uid.is_none() && m.object_uid.is_none() => {
                        match input.policy {
                            ConflictPolicy::Adopt => ConflictDecision::Adopt,
                            ConflictPolicy::Fail => ConflictDecision::Conflict {
                                reason: ConflictReason::ForeignObjectExists,
                                message: "provider object exists without ownership markers".into(),
                            },
                        }
                    }
                    Some(_) => ConflictDecision::Conflict {
                        reason: ConflictReason::OwnedByAnother,
                        message: "provider object is owned by another consumer object".into(),
                    },
                })
            })
        }
    }
}

/// A test API `widgets.<group>`, kind `Widget`, version `v1`, with a status subresource and
/// free-form `spec` and `status`.
#[derive(Clone, Debug)]
pub struct TestApi {
    /// API group, unique per test.
    pub group: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
}

impl TestApi {
    /// A namespaced API in `group`.
    pub fn namespaced(group: &str) -> Self {
        Self {
            group: group.to_string(),
            namespaced: true,
        }
    }

    /// A cluster-scoped API in `group`.
    pub fn cluster_scoped(group: &str) -> Self {
        Self {
            group: group.to_string(),
            namespaced: false,
        }
    }

    /// `widgets.<group>`.
    pub fn name(&self) -> String {
        format!("widgets.{}", self.group)
    }

    /// The export record the Connection controller would discover.
    pub fn exported(&self) -> ExportedApi {
        ExportedApi {
            name: self.name(),
            group: self.group.clone(),
            resource: "widgets".into(),
            scope: if self.namespaced {
                ResourceScope::Namespaced
            } else {
                ResourceScope::Cluster
            },
            versions: vec!["v1".into()],
        }
    }

    /// The dynamic resource.
    pub fn resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&self.group, "v1", "Widget"),
            "widgets",
        )
    }

    /// The API in one namespace (or cluster-wide for a cluster-scoped API).
    pub fn api(&self, client: &Client, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) if self.namespaced => {
                Api::namespaced_with(client.clone(), ns, &self.resource())
            }
            _ => Api::all_with(client.clone(), &self.resource()),
        }
    }

    /// The API across namespaces.
    pub fn all(&self, client: &Client) -> Api<DynamicObject> {
        Api::all_with(client.clone(), &self.resource())
    }

    /// An object of this API with `spec`.
    pub fn object(&self, namespace: Option<&str>, name: &str, spec: Value) -> DynamicObject {
        let mut obj = DynamicObject::new(name, &self.resource()).data(json!({ "spec": spec }));
        if self.namespaced {
            obj.metadata.namespace = namespace.map(str::to_string);
        }
        obj
    }

    /// Creates an object, and its namespace when needed.
    pub async fn create(
        &self,
        client: &Client,
        namespace: Option<&str>,
        name: &str,
        spec: Value,
    ) -> anyhow::Result<DynamicObject> {
        if let (Some(ns), true) = (namespace, self.namespaced) {
            ensure_namespace(client, ns).await?;
        }
        Ok(self
            .api(client, namespace)
            .create(&PostParams::default(), &self.object(namespace, name, spec))
            .await?)
    }

    /// The CRD, as the provider exports it.
    pub fn crd(&self) -> anyhow::Result<CustomResourceDefinition> {
        let free_form = json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true });
        Ok(serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": { "name": self.name() },
            "spec": {
                "group": self.group,
                "names": { "kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList" },
                "scope": if self.namespaced { "Namespaced" } else { "Cluster" },
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "subresources": { "status": {} },
                    "schema": { "openAPIV3Schema": {
                        "type": "object",
                        "properties": { "spec": free_form, "status": free_form },
                    }},
                }],
            },
        }))?)
    }

    /// Installs the CRD on the provider, labelled exported, and waits until Established.
    pub async fn install_on_provider(&self, provider: &Client) -> anyhow::Result<()> {
        let mut crd = self.crd()?;
        crd.metadata.labels = Some(BTreeMap::from([(
            EXPORTED_LABEL.to_string(),
            "true".to_string(),
        )]));
        apply_crd(provider, &crd).await
    }

    /// Installs the CRD on the consumer as schema installation would (pinned to `connection`)
    /// and waits until Established.
    pub async fn install_on_consumer(
        &self,
        consumer: &Client,
        connection: Option<&str>,
    ) -> anyhow::Result<()> {
        let mut crd = self.crd()?;
        if let Some(connection) = connection {
            crd.metadata.annotations = Some(BTreeMap::from([(
                CONNECTION_ANNOTATION.to_string(),
                connection.to_string(),
            )]));
        }
        apply_crd(consumer, &crd).await
    }

    /// Installs on both clusters (consumer pinned to the stack's Connection).
    pub async fn install(&self, stack: &Stack) -> anyhow::Result<()> {
        self.install_on_provider(&stack.provider).await?;
        self.install_on_consumer(&stack.consumer, Some(&stack.name))
            .await
    }
}

async fn apply_crd(client: &Client, crd: &CustomResourceDefinition) -> anyhow::Result<()> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let name = crd.name_any();
    api.patch(
        &name,
        &PatchParams::apply(TEST_MANAGER).force(),
        &Patch::Apply(crd),
    )
    .await
    .with_context(|| format!("applying CRD {name}"))?;
    wait_for(
        &format!("CRD {name} Established"),
        Duration::from_secs(30),
        || async { Ok(api.get_opt(&name).await?.filter(is_established).map(|_| ())) },
    )
    .await
}

async fn install_core_crds(consumer: &Client) -> anyhow::Result<()> {
    for (_, crd) in konnector::api::core_crds() {
        apply_crd(consumer, &crd).await?;
    }
    Ok(())
}

/// The cluster identity used when no kcp logical cluster exists: kube-system's UID.
pub async fn cluster_uid(client: &Client) -> anyhow::Result<String> {
    Api::<Namespace>::all(client.clone())
        .get("kube-system")
        .await?
        .uid()
        .context("kube-system has no uid")
}

/// Creates a namespace unless it exists.
pub async fn ensure_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Waits until `probe` yields `Some` (retrying with [`crate::eventually`]); on timeout the
/// error says what was awaited and the probe's last error.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    crate::eventually(timeout, || {
        let attempt = probe();
        async move { attempt.await?.context("not yet") }
    })
    .await
    .with_context(|| format!("timed out after {timeout:?} waiting for {what}"))
}

/// Asserts that `probe` keeps yielding `true` for `period` (for "nothing happens" checks,
/// after a positive signal showed the machinery is running).
pub async fn stays<F, Fut>(what: &str, period: Duration, mut probe: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let start = Instant::now();
    while start.elapsed() < period {
        anyhow::ensure!(probe().await?, "expected {what} to hold for {period:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Events about a consumer object (by name) in `namespace` (`default` for cluster-scoped).
pub async fn events_for(
    consumer: &Client,
    namespace: Option<&str>,
    name: &str,
) -> anyhow::Result<Vec<Event>> {
    let ns = namespace.unwrap_or("default");
    let list = Api::<Event>::namespaced(consumer.clone(), ns)
        .list(&ListParams::default())
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect())
}

/// Deletes an object, ignoring NotFound.
pub async fn delete(api: &Api<DynamicObject>, name: &str) -> anyhow::Result<()> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Writes a status onto an object through its status subresource.
pub async fn set_status(
    api: &Api<DynamicObject>,
    name: &str,
    status: Value,
) -> anyhow::Result<DynamicObject> {
    Ok(api
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await?)
}

/// Merge-patches an object.
pub async fn merge(
    api: &Api<DynamicObject>,
    name: &str,
    patch: Value,
) -> anyhow::Result<DynamicObject> {
    Ok(api
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await?)
}

/// Sends the konnector's logs to the test output (shown for failing tests), once per binary.
pub fn init_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("konnector=info"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    });
}
