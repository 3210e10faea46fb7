//! `make demo`: the whole data path on two real local API servers, narrated.
//!
//! Starts a provider and a consumer cluster, exports a sample `widgets.example.org` CRD on
//! the provider, gives the consumer a kubeconfig Secret, a Connection and a Binding, runs the
//! real `konnector` binary against the consumer, creates a Widget there, and shows its
//! provider copy and the status coming back. The same steps run non-interactively in a test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use crate::eventually;
use crate::fixtures::{
    SECRET_NAMESPACE, ensure_namespace, install_core_crds, install_crd, put_kubeconfig_secret,
    widget_crd,
};
use crate::testenv::{ClusterPair, Supervision, kube_binary};
use konnector::api::{ApiReference, Binding, BindingSpec, Connection, ConnectionReference};

/// Namespace the demo Widget lives in.
pub const NAMESPACE: &str = "team-a";
/// How long each demo step may take.
const STEP: Duration = Duration::from_secs(90);

/// What the demo proved, for the non-interactive test.
#[derive(Debug)]
pub struct Outcome {
    /// The provider copy's spec.
    pub provider_spec: serde_json::Value,
    /// The consumer Widget's status after the provider set it.
    pub consumer_status: serde_json::Value,
}

/// Kills the konnector process when dropped.
struct KonnectorProcess(Child);

impl Drop for KonnectorProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn say(line: impl AsRef<str>) {
    println!("\n==> {}", line.as_ref());
}

/// Runs the demo in `dir` with the konnector binary at `konnector`. With `interactive`, waits
/// for Ctrl-C before tearing everything down.
pub async fn run(dir: &Path, konnector: &Path, interactive: bool) -> anyhow::Result<Outcome> {
    say(format!(
        "starting a provider and a consumer kube-apiserver under {}",
        dir.display()
    ));
    let root = dir.to_path_buf();
    let pair =
        tokio::task::spawn_blocking(move || ClusterPair::start_with(&root, Supervision::Watchdog))
            .await??;
    let provider = pair.provider.client().await?;
    let consumer = pair.consumer.client().await?;

    say("provider: exporting CRD widgets.example.org (label core.kbind.io/exported=true)");
    install_crd(&provider, &widget_crd("example.org", "Widget", true)?).await?;

    say(
        "consumer: kubeconfig Secret kbind/provider-kubeconfig, Connection provider, Binding team-a/widgets",
    );
    install_core_crds(&consumer).await?;
    ensure_namespace(&consumer, SECRET_NAMESPACE).await?;
    ensure_namespace(&consumer, NAMESPACE).await?;
    put_kubeconfig_secret(
        &consumer,
        "provider-kubeconfig",
        &pair.provider.admin().kubeconfig_yaml()?,
    )
    .await?;
    let mut connection =
        crate::fixtures::connection("provider", "provider-kubeconfig", Default::default(), false);
    connection.spec.kubeconfig_secret_ref.name = "provider-kubeconfig".into();
    Api::<Connection>::all(consumer.clone())
        .create(&PostParams::default(), &connection)
        .await?;
    let binding = Binding::new(
        "widgets",
        BindingSpec {
            connection_ref: ConnectionReference {
                name: "provider".into(),
            },
            apis: vec![ApiReference {
                name: "widgets.example.org".into(),
            }],
            conflict_policy: Default::default(),
            related_resources: Vec::new(),
        },
    );
    Api::<Binding>::namespaced(consumer.clone(), NAMESPACE)
        .create(&PostParams::default(), &binding)
        .await?;

    say("running the konnector against the consumer");
    let log_path = dir.join("konnector.log");
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let child = Command::new(konnector)
        .args(["run", "--kubeconfig"])
        .arg(pair.consumer.admin().kubeconfig_path())
        .args([
            "--metrics-bind-address",
            "127.0.0.1:0",
            "--health-probe-bind-address",
            "127.0.0.1:0",
        ])
        .args(["--connection-resync", "5s", "--binding-resync", "5s"])
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .spawn()
        .with_context(|| format!("starting {}", konnector.display()))?;
    let _konnector = KonnectorProcess(child);

    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.org", "v1", "Widget"),
        "widgets",
    );
    let consumer_widgets: Api<DynamicObject> =
        Api::namespaced_with(consumer.clone(), NAMESPACE, &resource);
    let provider_widgets: Api<DynamicObject> =
        Api::namespaced_with(provider.clone(), NAMESPACE, &resource);

    say(
        "consumer: waiting for the binding to install widgets.example.org, then creating team-a/my-widget",
    );
    eventually(STEP, || async {
        Api::<CustomResourceDefinition>::all(consumer.clone())
            .get("widgets.example.org")
            .await
    })
    .await
    .with_context(|| {
        format!(
            "the consumer never got the Widget CRD; konnector log: {}",
            log_path.display()
        )
    })?;
    let mut widget = DynamicObject::new("my-widget", &resource).within(NAMESPACE);
    widget.data = json!({"spec": {"size": 3, "color": "blue"}});
    eventually(STEP, || async {
        consumer_widgets
            .create(&PostParams::default(), &widget)
            .await
    })
    .await?;

    say("provider: the copy appears, with ownership markers");
    let copy = eventually(STEP, || async { provider_widgets.get("my-widget").await })
        .await
        .with_context(|| format!("no provider copy; konnector log: {}", log_path.display()))?;
    println!(
        "{}",
        serde_yaml::to_string(
            &json!({"metadata": {"annotations": copy.metadata.annotations, "labels": copy.metadata.labels}, "spec": copy.data["spec"]})
        )?
    );

    say("provider: its operator reports status.phase=Ready");
    let status =
        json!({"apiVersion": "example.org/v1", "kind": "Widget", "status": {"phase": "Ready"}});
    provider_widgets
        .patch_status(
            "my-widget",
            &PatchParams::apply("demo-operator").force(),
            &Patch::Apply(&status),
        )
        .await?;

    say("consumer: the status comes back");
    let back = eventually(STEP, || async {
        let current = consumer_widgets.get("my-widget").await?;
        match current
            .data
            .pointer("/status/phase")
            .and_then(|p| p.as_str())
        {
            Some("Ready") => Ok(current),
            _ => Err(anyhow::anyhow!("consumer status not synced yet")),
        }
    })
    .await
    .with_context(|| {
        format!(
            "status never came back; konnector log: {}",
            log_path.display()
        )
    })?;
    println!("{}", serde_yaml::to_string(&back.data["status"])?);

    let outcome = Outcome {
        provider_spec: copy.data["spec"].clone(),
        consumer_status: back.data["status"].clone(),
    };
    if interactive {
        let kubectl = kube_binary()
            .map(|p| format!("{} kubectl", p.display()))
            .unwrap_or_else(|_| "kubectl".into());
        say("both clusters are yours to poke at:");
        println!(
            "  {kubectl} --kubeconfig {} get widgets -A",
            pair.provider.admin().kubeconfig_path().display()
        );
        println!(
            "  {kubectl} --kubeconfig {} get widgets,kbind -A",
            pair.consumer.admin().kubeconfig_path().display()
        );
        println!("  konnector log: {}", log_path.display());
        println!("\nPress Ctrl-C to tear everything down.");
        tokio::signal::ctrl_c().await?;
        say("tearing down");
    }
    Ok(outcome)
}

/// The default demo directory.
pub fn default_dir() -> PathBuf {
    PathBuf::from(".testenv/demo")
}
