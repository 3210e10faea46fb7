//! `make demo`: the quick start, as a user types it, on two real local API servers.
//!
//! Starts a provider and a consumer cluster, then runs the marked commands of
//! `docs/src/getting-started/quick-start.md` one block at a time, printing each as written
//! (`kubectl`, `kubectl kbind`, `helm`, with `$PROVIDER_KUBECONFIG` and `$CONSUMER_KUBECONFIG`)
//! before its output. The chart is really installed into the consumer; its Pod cannot run (no
//! kubelet), so the konnector runs as that Deployment would ([`userpath::run_as_deployed`]).
//! It ends with the variables to set and what to type next. The same walk runs
//! non-interactively in a test.

use std::path::{Path, PathBuf};

use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};

use crate::testenv::{ClusterPair, Supervision};
use crate::userpath::{self, Shell, Walk};

/// Namespace the demo Widget lives in.
pub const NAMESPACE: &str = "team-a";
/// The page the demo walks.
pub const PAGE: &str = "docs/src/getting-started/quick-start.md";

/// What the demo proved, for the non-interactive test.
#[derive(Debug)]
pub struct Outcome {
    /// The provider copy's spec.
    pub provider_spec: serde_json::Value,
    /// The consumer Widget's status after the provider set it.
    pub consumer_status: serde_json::Value,
}

fn say(line: impl AsRef<str>) {
    println!("\n==> {}", line.as_ref());
}

/// The binaries the demo runs.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// `konnector`.
    pub konnector: PathBuf,
    /// `kubectl-kbind`, the plugin.
    pub kubectl_kbind: PathBuf,
}

/// Runs the demo in `dir`. With `interactive`, waits for Ctrl-C before tearing everything
/// down.
pub async fn run(dir: &Path, binaries: &Binaries, interactive: bool) -> anyhow::Result<Outcome> {
    say(format!(
        "starting a provider and a consumer kube-apiserver under {}",
        dir.display()
    ));
    let root = dir.join("clusters");
    std::fs::create_dir_all(&root)?;
    let pair =
        tokio::task::spawn_blocking(move || ClusterPair::start_with(&root, Supervision::Watchdog))
            .await??;
    let work = dir.join("user");
    let shell = Shell::new(&pair, &work, &binaries.kubectl_kbind)?;
    say(format!(
        "the quick start ({PAGE}), command by command, in {}",
        work.display()
    ));
    let text = std::fs::read_to_string(userpath::repository().join(PAGE))?;
    let blocks = userpath::blocks(PAGE, &text)?;
    let mut walk = Walk {
        pair: &pair,
        shell,
        konnector: binaries.konnector.clone(),
        log: dir.join("konnector.log"),
        echo: true,
        process: None,
    };
    for block in &blocks {
        if block.substituted {
            let why = userpath::SUBSTITUTES
                .iter()
                .find(|(id, _)| Some(*id) == block.id.as_deref())
                .map(|(_, why)| *why)
                .unwrap_or("it cannot run here");
            println!("\n(skipped: {}\n{why})", block.script.trim_end());
        }
        walk.step(block).await?;
        if block.id.as_deref() == Some(userpath::INSTALL_CHART) {
            say(format!(
                "the chart's Pod cannot run here (no kubelet): the konnector runs as its Deployment \
                 would, log in {}",
                walk.log.display()
            ));
        }
    }

    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.org", "v1", "Widget"),
        "widgets",
    );
    let copy =
        Api::<DynamicObject>::namespaced_with(pair.provider.client().await?, NAMESPACE, &resource)
            .get("my-widget")
            .await?;
    let back =
        Api::<DynamicObject>::namespaced_with(pair.consumer.client().await?, NAMESPACE, &resource)
            .get("my-widget")
            .await?;
    let outcome = Outcome {
        provider_spec: copy.data["spec"].clone(),
        consumer_status: back.data["status"].clone(),
    };
    if interactive {
        say("both clusters are yours. In another shell:");
        println!("  cd {}", walk.shell.dir.display());
        println!(
            "  export PATH=\"{}:$PATH\"",
            walk.shell.dir.join("bin").display()
        );
        for (name, value) in walk.shell.env() {
            if matches!(name.as_str(), "PROVIDER_KUBECONFIG" | "CONSUMER_KUBECONFIG") {
                println!("  export {name}={value}");
            }
        }
        println!(
            "\nthen, for instance:\n\
             \x20 kubectl kbind --kubeconfig \"$CONSUMER_KUBECONFIG\" status\n\
             \x20 kubectl --kubeconfig \"$CONSUMER_KUBECONFIG\" -n team-a patch widget my-widget --type=merge -p '{{\"spec\":{{\"size\":5}}}}'\n\
             \x20 kubectl --kubeconfig \"$PROVIDER_KUBECONFIG\" -n team-a get widgets\n\
             \x20 kubectl kbind --kubeconfig \"$CONSUMER_KUBECONFIG\" provider-setup --rotate --connection provider --provider-kubeconfig \"$PROVIDER_KUBECONFIG\"\n\
             \x20 kubectl kbind --kubeconfig \"$CONSUMER_KUBECONFIG\" unbind widgets -n team-a\n\
             \nThe docs: make docs, then open target/book/index.html. Konnector log: {}",
            walk.log.display()
        );
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
