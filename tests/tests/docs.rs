//! The docs, run: every marked command block (```` ```sh docs-test ````) of the book's pages
//! and of the README, in the order a reader meets them, against a real provider and consumer,
//! with the chart installed and the konnector run as its Deployment would run it; and the
//! provider credential rotation the docs describe, under load.
//!
//! Commands are read from the Markdown itself (`kbind_tests::userpath::blocks`), never copied
//! here. A page with marked blocks must be listed in [`PAGES`], a `substituted` block must have
//! a stand-in (`userpath::SUBSTITUTES`), and every block of the README's quick start must be one
//! the book's quick start runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kbind_tests::faults::process::KonnectorProcess;
use kbind_tests::fixtures::{SECRET_NAMESPACE, ensure_namespace, install_core_crds};
use kbind_tests::syncenv::wait_for;
use kbind_tests::testenv::{ClusterPair, tail};
use kbind_tests::userpath::{self, Block, Shell, Walk};
use konnector::api::Connection;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

/// The pages with marked blocks, in the order they run: the quick start first, the teardown
/// last.
const PAGES: &[&str] = &[
    "docs/src/getting-started/quick-start.md",
    "docs/src/getting-started/provider-identity.md",
    "docs/src/concepts/related-resources.md",
    "docs/src/operations/high-availability.md",
    "docs/src/operations/uninstall.md",
];

/// How long a test waits for one effect.
const WAIT: Duration = Duration::from_secs(90);

fn widgets() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.org", "v1", "Widget"),
        "widgets",
    )
}

/// Every Markdown file of the book, and the README.
fn markdown_files() -> Result<Vec<String>> {
    fn walk(dir: &std::path::Path, base: &std::path::Path, out: &mut Vec<String>) -> Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_dir() {
                walk(&path, base, out)?;
            } else if path.extension().is_some_and(|e| e == "md") {
                let relative = path.strip_prefix(base)?;
                out.push(relative.to_string_lossy().into_owned());
            }
        }
        Ok(())
    }
    let root = userpath::repository();
    let mut files = vec!["README.md".to_string()];
    walk(&root.join("docs/src"), &root, &mut files)?;
    files.sort();
    Ok(files)
}

fn page_blocks(page: &str) -> Result<Vec<Block>> {
    let text = std::fs::read_to_string(userpath::repository().join(page))
        .with_context(|| format!("reading {page}"))?;
    userpath::blocks(page, &text)
}

#[test]
fn every_marked_block_is_on_a_listed_page_and_every_substitute_is_known() -> Result<()> {
    let mut used = Vec::new();
    for file in markdown_files()? {
        let blocks = page_blocks(&file)?;
        if blocks.is_empty() {
            continue;
        }
        ensure!(
            file == "README.md" || PAGES.contains(&file.as_str()),
            "{file} has marked blocks but the docs test does not run it: add it to PAGES"
        );
        for block in blocks.iter().filter(|b| b.substituted) {
            let id = block.id.as_deref().unwrap_or_default();
            ensure!(
                userpath::SUBSTITUTES.iter().any(|(known, _)| *known == id),
                "{}:{}: substituted block {id:?} has no stand-in",
                block.page,
                block.line
            );
            used.push(id.to_string());
        }
    }
    for (id, _) in userpath::SUBSTITUTES {
        ensure!(
            used.iter().any(|u| u == id),
            "stand-in {id:?} stands in for no block"
        );
    }
    let quick = page_blocks(PAGES[0])?;
    for block in page_blocks("README.md")? {
        ensure!(
            quick
                .iter()
                .any(|q| q.script == block.script && q.id == block.id),
            "README.md:{}: a quick-start block the book's quick start does not run:\n{}",
            block.line,
            block.script
        );
    }
    Ok(())
}

#[test]
fn the_docs_marked_commands_take_a_reader_from_two_clusters_to_a_bound_api_and_back() -> Result<()>
{
    let pair = ClusterPair::start_private()?;
    let log = pair.root().join("konnector.log");
    let result = kbind_tests::runtime()?.block_on(pair.diagnose(async {
        let shell = Shell::new(
            &pair,
            &pair.root().join("reader"),
            &kbind_tests::kubectl_kbind_binary!(),
        )?;
        let mut walk = Walk {
            pair: &pair,
            shell,
            konnector: kbind_tests::konnector_binary!(),
            log: log.clone(),
            echo: false,
            process: None,
        };
        for page in PAGES {
            for block in page_blocks(page)? {
                walk.step(&block).await?;
                after(&walk, &block)
                    .await
                    .with_context(|| format!("after {}:{}", block.page, block.line))?;
            }
        }
        Ok::<_, anyhow::Error>(())
    }));
    result.map_err(|e| anyhow!("{e:?}\n--- konnector log (tail)\n{}", tail(&log, 60)))
}

/// What must hold after a block, beyond its own exit status.
async fn after(walk: &Walk<'_>, block: &Block) -> Result<()> {
    let provider = walk.pair.provider.client().await?;
    let consumer = walk.pair.consumer.client().await?;
    let copies = Api::<DynamicObject>::namespaced_with(provider.clone(), "team-a", &widgets());
    match block.id.as_deref() {
        Some("rotate") => {
            // One token anchor left: the one the Connection's Secret now holds.
            let anchors = Api::<Secret>::namespaced(provider, "kbind")
                .list(&ListParams::default().labels("core.kbind.io/token-of=konnector"))
                .await?;
            ensure!(
                anchors.items.len() == 1,
                "{} anchors left",
                anchors.items.len()
            );
            let connection = Api::<Connection>::all(consumer).get("provider").await?;
            ensure!(is_ready(&connection), "{:?}", connection.status);
        }
        Some("sharding-values") => {
            let deployment = Api::<Deployment>::namespaced(consumer, "kbind-system")
                .get("konnector")
                .await?;
            let spec = deployment.spec;
            ensure!(spec.replicas == Some(3), "{:?}", spec.replicas);
            let pod = spec.template.spec.context("no pod spec")?;
            let args = pod.containers.first().and_then(|c| c.args.clone());
            ensure!(
                args.unwrap_or_default().iter().any(|a| a == "--sharding"),
                "no --sharding"
            );
        }
        Some("helm-uninstall") => {
            // What unbind and disconnect left: the instance on the consumer, no copy.
            ensure!(copies.get_opt("my-widget").await?.is_none(), "copy kept");
            let instances =
                Api::<DynamicObject>::namespaced_with(consumer.clone(), "team-a", &widgets());
            ensure!(
                instances.get_opt("my-widget").await?.is_some(),
                "instance gone"
            );
            // The core CRDs stay (crds.keep, the default) and hold no Connection; with
            // crds.keep off they went along with the release, and the list answers 404.
            let connections = Api::<Connection>::all(consumer);
            match connections.list(&ListParams::default()).await {
                Ok(left) => ensure!(left.items.is_empty(), "a Connection is left"),
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        _ if block.page == PAGES[0]
            && block.script.starts_with("kubectl kbind")
            && block.script.trim_end().ends_with(" status") =>
        {
            let copy = copies.get("my-widget").await?;
            ensure!(copy.data["spec"]["size"] == 3, "{:?}", copy.data);
        }
        _ => {}
    }
    Ok(())
}

fn is_ready(connection: &Connection) -> bool {
    let conditions = connection.status.as_ref().map(|s| s.conditions.as_slice());
    conditions
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Rotates the provider token with `provider-setup --rotate` while an instance is updated
/// every 200 ms: the Connection never leaves Ready, the instance never reports a failed sync,
/// every update reaches the provider, and the old token is refused afterwards.
#[test]
fn rotating_the_provider_token_keeps_the_connection_ready_and_loses_no_write() -> Result<()> {
    let pair = ClusterPair::start_private()?;
    let log = pair.root().join("konnector.log");
    let result = kbind_tests::runtime()?.block_on(pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        install_core_crds(&consumer).await?;
        ensure_namespace(&consumer, SECRET_NAMESPACE).await?;
        let konnector = KonnectorProcess::start(
            &kbind_tests::konnector_binary!(),
            pair.consumer.admin().kubeconfig_path(),
            &log,
            &["--connection-resync", "2s", "--binding-resync", "2s"],
        )?;
        konnector.wait_ready(WAIT).await?;
        let dir = pair.root().join("operator");
        let shell = Shell::new(&pair, &dir, &kbind_tests::kubectl_kbind_binary!())?;
        let k = "--kubeconfig \"$CONSUMER_KUBECONFIG\"";
        let setup = format!(
            "kubectl --kubeconfig \"$PROVIDER_KUBECONFIG\" apply -f examples/provider/widgets-crd.yaml\n\
             kubectl kbind provider-setup --provider-kubeconfig \"$PROVIDER_KUBECONFIG\" \
               --api widgets.example.org -o first.kubeconfig\n\
             kubectl kbind {k} connect provider --provider-kubeconfig first.kubeconfig\n\
             kubectl {k} create namespace team-a\n\
             kubectl kbind {k} bind widgets.example.org --connection provider -n team-a\n\
             kubectl {k} apply -f examples/consumer/widget.yaml\n\
             kubectl {k} -n team-a wait widget/my-widget --for=condition=Synced --timeout=90s\n"
        );
        shell.run(&setup, false).await?;

        let instances = Api::<DynamicObject>::namespaced_with(consumer.clone(), "team-a", &widgets());
        let copies = Api::<DynamicObject>::namespaced_with(
            pair.provider.client().await?,
            "team-a",
            &widgets(),
        );
        let connections = Api::<Connection>::all(consumer.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let written = Arc::new(AtomicI64::new(3));
        // The load: an update every 200 ms; and the watch: Ready and Synced on every look.
        let writer = tokio::spawn({
            let (stop, written, instances) = (stop.clone(), written.clone(), instances.clone());
            async move {
                let mut size = 3;
                while !stop.load(Ordering::SeqCst) {
                    size += 1;
                    let patch = json!({"spec": {"size": size}});
                    instances
                        .patch("my-widget", &PatchParams::default(), &Patch::Merge(&patch))
                        .await?;
                    written.store(size, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok::<_, anyhow::Error>(size)
            }
        });
        let watcher = tokio::spawn({
            let (stop, instances, connections) = (stop.clone(), instances.clone(), connections.clone());
            async move {
                let mut looks = 0;
                while !stop.load(Ordering::SeqCst) {
                    let connection = connections.get("provider").await?;
                    ensure!(is_ready(&connection), "the Connection left Ready: {:?}", connection.status);
                    let instance = instances.get("my-widget").await?;
                    let failed = instance.data["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == "Synced" && c["status"] == "False");
                    ensure!(!failed, "a sync failed: {}", instance.data["status"]);
                    looks += 1;
                    tokio::time::sleep(Duration::from_millis(150)).await;
                }
                Ok::<_, anyhow::Error>(looks)
            }
        });

        let rotate = format!(
            "kubectl kbind {k} provider-setup --rotate --connection provider \
               --provider-kubeconfig \"$PROVIDER_KUBECONFIG\" --revoke-after 5s -o second.kubeconfig\n"
        );
        let rotated = shell.run(&rotate, false).await;
        // Writes go on after the revocation: they must land through the new token.
        tokio::time::sleep(Duration::from_secs(4)).await;
        stop.store(true, Ordering::SeqCst);
        let last = writer.await??;
        let looks = watcher.await??;
        rotated?;
        ensure!(looks > 20, "only {looks} looks at the Connection during the rotation");
        ensure!(written.load(Ordering::SeqCst) == last);
        wait_for("the last update on the provider", WAIT, || async {
            let copy = copies.get("my-widget").await?;
            Ok((copy.data["spec"]["size"] == last).then_some(()))
        })
        .await?;

        // The old token is refused; the new one works.
        let refused = read_kube_system(&dir.join("first.kubeconfig")).await?;
        ensure!(
            matches!(&refused, Err(kube::Error::Api(s)) if s.code == 401),
            "the old token still answers: {refused:?}"
        );
        read_kube_system(&dir.join("second.kubeconfig")).await??;
        Ok::<_, anyhow::Error>(())
    }));
    result.map_err(|e| anyhow!("{e:?}\n--- konnector log (tail)\n{}", tail(&log, 60)))
}

/// Reads Namespace `kube-system` with the kubeconfig at `path`: the API's answer.
async fn read_kube_system(path: &std::path::Path) -> Result<Result<Namespace, kube::Error>> {
    let config = Kubeconfig::read_from(path)?;
    let config =
        kube::Config::from_custom_kubeconfig(config, &KubeConfigOptions::default()).await?;
    let client = kube::Client::try_from(config)?;
    Ok(Api::<Namespace>::all(client).get("kube-system").await)
}
