//! Small helpers for the sync tests: waiting, "nothing happens" checks, Events, patches.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use kube::api::{
    DeleteParams, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams,
};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

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
        Err(e) => Err(e).context(format!("creating namespace {name}")),
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

/// Waits until object `name` no longer exists.
pub async fn gone(api: &Api<DynamicObject>, name: &str) -> anyhow::Result<()> {
    wait_for(&format!("{name} gone"), super::WAIT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
}

/// Whether an instance holds the syncer's finalizer.
pub fn holds_syncer_finalizer(obj: &DynamicObject) -> bool {
    obj.finalizers()
        .iter()
        .any(|f| f == konnector::api::names::SYNCER_FINALIZER)
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

/// Waits up to `timeout` for an Event with `reason` (and, if given, of `type_`) about the
/// consumer object `name` in `namespace` that carries a note, and returns the note.
pub async fn event_note(
    consumer: &Client,
    (namespace, name): (&str, &str),
    reason: &str,
    type_: Option<&str>,
    timeout: Duration,
) -> anyhow::Result<String> {
    wait_for(
        &format!("{reason} Event on {namespace}/{name}"),
        timeout,
        || async {
            Ok(events_for(consumer, Some(namespace), name)
                .await?
                .into_iter()
                .filter(|e| {
                    e.reason.as_deref() == Some(reason)
                        && type_.is_none_or(|t| e.type_.as_deref() == Some(t))
                })
                .find_map(|e| e.note))
        },
    )
    .await
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

/// The instance's `Synced` condition, if it has one.
pub fn synced_condition(obj: &kube::api::DynamicObject) -> Option<serde_json::Value> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Synced")
        .cloned()
}
