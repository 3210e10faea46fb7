//! The *required writes* floor as a process of its own: the writes the spec asks of a first
//! sync, done by a plain client on the konnector's client stack (`konnector::fencing::client`,
//! the same kube-rs layers), in a process started like the konnector (default tokio runtime,
//! `MALLOC_ARENA_MAX=2`), so that its CPU per object is read the way the konnector's is
//! (`/proc/<pid>/stat`) and the two compare as a ratio.
//!
//! ```text
//! bench ── installs the API, creates N instances ──▶ re-runs itself with FLOOR_FLAG
//!                                                      │ CPU before (/proc/self/stat)
//!                                                      │ N × (finalizer patch, provider apply,
//!                                                      │      Synced=True status), in flight
//!                                                      │      as many as the konnector may
//!                                                      │ CPU after, RSS
//! bench ◀── one JSON line on stdout: rate, CPU ────────┘
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::Context as _;
use futures::{StreamExt, TryStreamExt};
use kbind_tests::faults::instance_name;
use kbind_tests::faults::process::{cpu_seconds_of, rss_bytes_of};
use kbind_tests::syncenv::{TestApi, ensure_namespace};
use konnector::api::names::{
    CONSUMER_CLUSTER_UID_ANNOTATION, CONSUMER_OBJECT_UID_ANNOTATION, FIELD_MANAGER, MANAGED_LABEL,
    SYNCER_FINALIZER,
};
use kube::api::{Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::report::Report;
use crate::{Config, NS};

/// The argument that makes the bench binary the floor client instead of the bench.
pub const FLOOR_FLAG: &str = "--required-writes-floor";
/// The floor's API group (its own API, so that the konnector never sees its instances).
const GROUP: &str = "required.bench.kbind.io";

/// What the floor process measured, printed as one JSON line.
#[derive(serde::Serialize, serde::Deserialize)]
struct FloorFigures {
    objects_per_s: f64,
    /// CPU of the write phase only (start-up and client set-up left out, as the konnector's
    /// start-up is).
    cpu_seconds: f64,
    rss_mib: f64,
}

/// Prepares the floor's instances, runs the floor process on them and puts its figures in
/// `report`.
pub async fn required_writes(
    config: &Config,
    consumer_kubeconfig: &Path,
    provider_kubeconfig: &Path,
    consumer: &Client,
    provider: &Client,
    report: &mut Report,
) -> anyhow::Result<()> {
    let api = TestApi::namespaced(GROUP);
    api.install_on_provider(provider).await?;
    api.install_on_consumer(consumer, None).await?;
    ensure_namespace(consumer, NS).await?;
    futures::stream::iter(0..config.instances)
        .map(|i| {
            let api = &api;
            async move {
                api.create(
                    consumer,
                    Some(NS),
                    &instance_name("r", i),
                    json!({ "seq": 0 }),
                )
                .await
            }
        })
        .buffer_unordered(config.in_flight())
        .try_collect::<Vec<_>>()
        .await?;
    let mut command = Command::new(std::env::current_exe().context("the bench's own path")?);
    command
        .arg(FLOOR_FLAG)
        .arg(consumer_kubeconfig)
        .arg(provider_kubeconfig)
        .arg(config.instances.to_string())
        .arg(config.in_flight().to_string())
        // As the konnector runs (KonnectorProcess::start).
        .env("MALLOC_ARENA_MAX", "2")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let output = tokio::task::spawn_blocking(move || command.output()).await??;
    anyhow::ensure!(
        output.status.success(),
        "the required-writes floor process failed: {}",
        output.status
    );
    let stdout = String::from_utf8(output.stdout)?;
    let line = stdout
        .lines()
        .last()
        .context("the floor process printed nothing")?;
    let figures: FloorFigures =
        serde_json::from_str(line).with_context(|| format!("the floor's figures: {line}"))?;
    report.required_writes_objects_per_s = figures.objects_per_s;
    report.required_writes_cpu_seconds = figures.cpu_seconds;
    report.required_writes_cpu_us_per_object = figures.cpu_seconds * 1e6 / config.instances as f64;
    report.required_writes_rss_mib = figures.rss_mib;
    Ok(())
}

/// The floor process: `FLOOR_FLAG <consumer kubeconfig> <provider kubeconfig> <instances>
/// <in flight>`; prints its figures as one JSON line.
pub fn floor_main(args: &[String]) -> anyhow::Result<()> {
    let [consumer, provider, instances, in_flight] = args else {
        anyhow::bail!(
            "{FLOOR_FLAG} <consumer kubeconfig> <provider kubeconfig> <instances> <in flight>"
        );
    };
    let (instances, in_flight): (usize, usize) = (instances.parse()?, in_flight.parse()?);
    // The konnector's runtime: one worker per core (`konnector::cli::main`).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let figures = runtime.block_on(async {
        let consumer = client(Path::new(consumer), "consumer").await?;
        let provider = client(Path::new(provider), "provider").await?;
        let cpu = cpu_seconds_of(std::process::id())?;
        let started = Instant::now();
        writes(&consumer, &provider, instances, in_flight).await?;
        let elapsed = started.elapsed().as_secs_f64();
        anyhow::Ok(FloorFigures {
            objects_per_s: instances as f64 / elapsed,
            cpu_seconds: cpu_seconds_of(std::process::id())? - cpu,
            rss_mib: crate::report::mib(rss_bytes_of(std::process::id())?),
        })
    })?;
    println!("{}", serde_json::to_string(&figures)?);
    Ok(())
}

/// A client on the konnector's stack for the kubeconfig at `path`.
async fn client(path: &Path, cluster: &'static str) -> anyhow::Result<Client> {
    let kubeconfig = Kubeconfig::read_from(PathBuf::from(path))?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(konnector::fencing::client(config, cluster)?)
}

/// Per object the `core.kbind.io/syncer` finalizer patch on the consumer instance, the
/// server-side apply of its copy (managed label and both ownership markers) into the
/// provider, and the instance's `Synced=True` condition: what the spec asks of a first sync
/// and nothing more. The konnector cannot be faster than this without skipping a write.
async fn writes(
    consumer: &Client,
    provider: &Client,
    instances: usize,
    in_flight: usize,
) -> anyhow::Result<()> {
    let api = TestApi::namespaced(GROUP);
    let objects = api.api(consumer, Some(NS));
    let copies = api.api(provider, Some(NS));
    let params = PatchParams::apply(FIELD_MANAGER).force();
    futures::stream::iter(0..instances)
        .map(|i| {
            let (objects, copies, params, api) = (&objects, &copies, &params, &api);
            async move {
                let name = instance_name("r", i);
                let finalizer = json!({ "metadata": { "finalizers": [SYNCER_FINALIZER] } });
                let instance = objects
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&finalizer))
                    .await?;
                let mut copy = api.object(Some(NS), &name, json!({ "seq": 0 }));
                copy.labels_mut()
                    .insert(MANAGED_LABEL.into(), "true".into());
                let annotations = copy.annotations_mut();
                annotations.insert(
                    CONSUMER_CLUSTER_UID_ANNOTATION.into(),
                    "c0ffee00-0000-4000-8000-000000000001".into(),
                );
                annotations.insert(
                    CONSUMER_OBJECT_UID_ANNOTATION.into(),
                    instance.uid().unwrap_or_default(),
                );
                copies.patch(&name, params, &Patch::Apply(&copy)).await?;
                let synced = json!({
                    "apiVersion": api.resource().api_version, "kind": api.resource().kind,
                    "metadata": { "name": name, "namespace": NS },
                    "status": { "conditions": [{
                        "type": "Synced", "status": "True", "reason": "AsExpected",
                        "message": "the provider copy matches the spec",
                        "observedGeneration": instance.metadata.generation,
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }] },
                });
                objects
                    .patch_status(&name, params, &Patch::Apply(&synced))
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(in_flight)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}
