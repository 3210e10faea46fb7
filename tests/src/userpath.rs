//! The user's path through the docs, run for real: the commands of the docs' marked code blocks
//! (```` ```sh docs-test ````) run by `bash` with `kubectl`, `kubectl kbind` and `helm` on
//! `PATH`, against a cluster pair, and the konnector run the way the chart's Deployment would
//! run it. `make demo` walks the quick start this way; `tests/tests/docs.rs` walks every page.
//!
//! ```text
//! docs/src/**/*.md ─▶ blocks(marker, id, substituted) ─▶ Walk::run
//!                                                         ├─ bash -euo pipefail (Shell)
//!                                                         ├─ after `install-chart`: konnector as deployed
//!                                                         └─ `substituted` blocks: their stand-in
//! ```
//!
//! The test environment has no kubelet, so the chart's Pod never runs: [`run_as_deployed`]
//! starts the konnector binary with the installed Deployment's arguments and environment,
//! authenticated as its ServiceAccount, the metrics and probe ports moved to free ones (many
//! run on one machine).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;

use crate::faults::process::KonnectorProcess;
use crate::fixtures::free_port;
use crate::testenv::{ClusterPair, kube_binary};

/// The marker a fenced block's info string carries after its language to be run.
pub const MARKER: &str = "docs-test";

/// The block after which the konnector runs as the chart's Deployment would.
pub const INSTALL_CHART: &str = "install-chart";

/// One marked code block of a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The page it is on, relative to the repository root.
    pub page: String,
    /// Its line in the page (of the opening fence).
    pub line: usize,
    /// Its `id=` attribute.
    pub id: Option<String>,
    /// Whether it is marked `substituted`: the test does something else in its place.
    pub substituted: bool,
    /// The commands.
    pub script: String,
}

/// The marked blocks of a Markdown page, in order. A block is marked when its fence's info
/// string has the language `sh` and the word [`MARKER`]; `id=NAME` and `substituted` may
/// follow.
pub fn blocks(page: &str, markdown: &str) -> anyhow::Result<Vec<Block>> {
    let mut out = Vec::new();
    let mut open: Option<(String, Block)> = None;
    for (number, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some((fence, block)) = &mut open {
            if trimmed.starts_with(fence.as_str()) && trimmed.trim_end() == fence.as_str() {
                if let Some((_, block)) = open.take() {
                    out.extend(Some(block).filter(|b| b.line > 0));
                }
            } else {
                block.script.push_str(line);
                block.script.push('\n');
            }
            continue;
        }
        let fence: String = trimmed.chars().take_while(|c| *c == '`').collect();
        if fence.len() < 3 {
            continue;
        }
        let info: Vec<&str> = trimmed[fence.len()..].split_whitespace().collect();
        let marked = info.first() == Some(&"sh") && info.contains(&MARKER);
        let mut block = Block {
            page: page.to_string(),
            // Unmarked blocks are read past (their content may hold fences) and dropped.
            line: if marked { number + 1 } else { 0 },
            id: None,
            substituted: false,
            script: String::new(),
        };
        for word in info.iter().skip(1).filter(|w| **w != MARKER) {
            match word.split_once('=') {
                Some(("id", id)) => block.id = Some(id.to_string()),
                None if *word == "substituted" => block.substituted = true,
                _ if marked => bail!("{page}:{}: unknown attribute {word:?}", number + 1),
                _ => {}
            }
        }
        open = Some((fence, block));
    }
    ensure!(open.is_none(), "{page}: a code block is not closed");
    Ok(out)
}

/// Where a walk runs: a scratch directory with the repository's `examples/` and `charts/`
/// linked in, a `bin/` of the tools the docs call, and the variables the docs use.
#[derive(Debug)]
pub struct Shell {
    /// The working directory of every command.
    pub dir: PathBuf,
    env: Vec<(String, String)>,
}

/// The repository root.
pub fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

impl Shell {
    /// Prepares `dir` for `pair`, with `kubectl-kbind` the plugin binary.
    pub fn new(pair: &ClusterPair, dir: &Path, kubectl_kbind: &Path) -> anyhow::Result<Self> {
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin)?;
        std::fs::create_dir_all(dir.join("home"))?;
        let root = repository();
        for linked in ["examples", "charts"] {
            let link = dir.join(linked);
            if !link.exists() {
                std::os::unix::fs::symlink(root.join(linked), &link)?;
            }
        }
        let kube = kube_binary()?;
        // kubectl of the test environment (a multi-call binary, which does not look plugins up
        // itself): `kubectl kbind ...` runs the plugin from PATH as kubectl would, and flags
        // before a plugin's name are refused as kubectl refuses them.
        let kubectl = format!(
            "#!/usr/bin/env bash\n\
             if [ \"${{1-}}\" = kbind ]; then shift; exec kubectl-kbind \"$@\"; fi\n\
             if [[ \"${{1-}}\" == -* && \" $* \" =~ \\ kbind\\ (connect|bind|status|unbind|disconnect|provider-rbac|provider-setup)\\  ]]; then\n\
             \x20 echo \"error: flags cannot be placed before plugin name: $1\" >&2; exit 1\n\
             fi\n\
             exec {} kubectl \"$@\"\n",
            kube.display()
        );
        write_executable(&bin.join("kubectl"), &kubectl)?;
        replace_link(kubectl_kbind, &bin.join("kubectl-kbind"))?;
        let helm = std::process::Command::new(root.join("scripts/helm.sh"))
            .stderr(Stdio::inherit())
            .output()
            .context("running scripts/helm.sh")?;
        ensure!(helm.status.success(), "scripts/helm.sh failed");
        let helm = String::from_utf8(helm.stdout)?;
        replace_link(Path::new(helm.trim()), &bin.join("helm"))?;
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let home = dir.join("home");
        let text = |p: &Path| p.display().to_string();
        let env = vec![
            ("PATH".to_string(), path),
            ("HOME".to_string(), text(&home)),
            (
                "HELM_CACHE_HOME".to_string(),
                text(&home.join("helm/cache")),
            ),
            (
                "HELM_CONFIG_HOME".to_string(),
                text(&home.join("helm/config")),
            ),
            ("HELM_DATA_HOME".to_string(), text(&home.join("helm/data"))),
            (
                "PROVIDER_KUBECONFIG".to_string(),
                text(pair.provider.admin().kubeconfig_path()),
            ),
            (
                "CONSUMER_KUBECONFIG".to_string(),
                text(pair.consumer.admin().kubeconfig_path()),
            ),
            // The image the chart's Deployment names; nothing pulls it here.
            (
                "IMAGE_REPOSITORY".to_string(),
                "kbind-local/konnector".to_string(),
            ),
            ("IMAGE_TAG".to_string(), "docs-test".to_string()),
            ("NO_COLOR".to_string(), "1".to_string()),
        ];
        Ok(Self {
            dir: dir.to_path_buf(),
            env,
        })
    }

    /// The variables the commands get, for a person to set in their own shell.
    pub fn env(&self) -> &[(String, String)] {
        &self.env
    }

    /// Runs `script` with `bash -euo pipefail`; fails with both streams unless it exits 0.
    /// With `echo`, the commands are printed as written, after a `$ ` prompt, and their output
    /// shown as it comes.
    pub async fn run(&self, script: &str, echo: bool) -> anyhow::Result<String> {
        if echo {
            for command in commands(script) {
                println!("\n$ {command}");
                let status = self.bash(&command).status().await.context("running bash")?;
                ensure!(
                    status.success(),
                    "the command failed ({status}):\n{command}"
                );
            }
            return Ok(String::new());
        }
        let output = self.bash(script).output().await.context("running bash")?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr);
        ensure!(
            output.status.success(),
            "the commands failed ({}):\n{script}--- stdout\n{stdout}--- stderr\n{stderr}",
            output.status
        );
        Ok(stdout)
    }

    fn bash(&self, script: &str) -> tokio::process::Command {
        let mut command = tokio::process::Command::new("bash");
        command
            .args(["-euo", "pipefail", "-c", script])
            .current_dir(&self.dir)
            .env_remove("KUBECONFIG")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        command
    }
}

/// The commands of a script, one per logical line (lines ending in `\` continue).
fn commands(script: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in script.lines() {
        if !current.is_empty() {
            current.push('\n');
        }
        current.push_str(line);
        if !line.ends_with('\\') {
            if !current.trim().is_empty() {
                out.push(std::mem::take(&mut current));
            }
            current.clear();
        }
    }
    if !current.trim().is_empty() {
        out.push(current);
    }
    out
}

fn write_executable(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

fn replace_link(target: &Path, link: &Path) -> anyhow::Result<()> {
    if link.symlink_metadata().is_ok() {
        std::fs::remove_file(link)?;
    }
    std::os::unix::fs::symlink(target, link)
        .with_context(|| format!("linking {} to {}", link.display(), target.display()))
}

/// Starts the konnector binary the way the Deployment `namespace/name` on the consumer would
/// run it: its container's arguments and environment (the downward-API fields filled in as a
/// Pod `<name>-0` would get them), as its ServiceAccount (a TokenRequest token in
/// `KUBECONFIG`, where a Pod has its projected token), with the metrics and probe addresses
/// on free loopback ports.
pub async fn run_as_deployed(
    pair: &ClusterPair,
    namespace: &str,
    name: &str,
    konnector: &Path,
    log: &Path,
) -> anyhow::Result<KonnectorProcess> {
    let consumer = pair.consumer.client().await?;
    let deployment = Api::<Deployment>::namespaced(consumer, namespace)
        .get(name)
        .await
        .with_context(|| format!("reading Deployment {namespace}/{name}"))?;
    let pod = deployment.spec.template.spec;
    let pod = pod.context("the Deployment has no pod spec")?;
    let [container] = pod.containers.as_slice() else {
        bail!("expected one container, got {}", pod.containers.len());
    };
    ensure!(container.command.is_none(), "{:?}", container.command);
    let (metrics, health) = (free_port()?, free_port()?);
    let mut args = Vec::new();
    for arg in container.args.iter().flatten() {
        args.push(match arg.split_once('=') {
            Some(("--metrics-bind-address", _)) => {
                format!("--metrics-bind-address=127.0.0.1:{metrics}")
            }
            Some(("--health-probe-bind-address", _)) => {
                format!("--health-probe-bind-address=127.0.0.1:{health}")
            }
            _ => arg.clone(),
        });
    }
    let mut env = Vec::new();
    for var in container.env.iter().flatten() {
        let field = var.value_from.as_ref().and_then(|f| f.field_ref.as_ref());
        let value = match (&var.value, field.map(|f| f.field_path.as_str())) {
            (Some(value), None) => value.clone(),
            (None, Some("metadata.name")) => format!("{name}-0"),
            (None, Some("metadata.namespace")) => namespace.to_string(),
            _ => bail!(
                "env {} is neither a value nor a Pod name or namespace",
                var.name
            ),
        };
        env.push((var.name.clone(), value));
    }
    let account = pod.service_account_name.as_deref();
    let account = account.context("the pod spec names no ServiceAccount")?;
    let identity = pair
        .consumer
        .mint_service_account(namespace, account)
        .await?;
    let kubeconfig = identity.kubeconfig_path().to_str().context("not UTF-8")?;
    env.push(("KUBECONFIG".to_string(), kubeconfig.to_string()));
    KonnectorProcess::exec(konnector, &args, &env, log, (metrics, health))
}

/// A walk through marked blocks: runs each, starts the konnector after the chart's install,
/// and stands in for the blocks that cannot run here.
pub struct Walk<'a> {
    /// The clusters.
    pub pair: &'a ClusterPair,
    /// Where the commands run.
    pub shell: Shell,
    /// The konnector binary.
    pub konnector: PathBuf,
    /// Its log.
    pub log: PathBuf,
    /// Print each command and its output as it runs.
    pub echo: bool,
    /// The konnector, once the chart is installed.
    pub process: Option<KonnectorProcess>,
}

/// Release and namespace the docs install the chart as (Deployment `konnector`).
pub const RELEASE: (&str, &str) = ("kbind-system", "konnector");

/// The blocks a walk stands in for, by id, and what it does instead.
pub const SUBSTITUTES: &[(&str, &str)] = &[(
    "konnector-rollout",
    "no kubelet runs the Pod: the konnector runs as the Deployment would, and its /readyz is awaited",
)];

impl Walk<'_> {
    /// Runs one block (or its stand-in).
    pub async fn step(&mut self, block: &Block) -> anyhow::Result<String> {
        let at = format!("{}:{}", block.page, block.line);
        if block.substituted {
            return match block.id.as_deref() {
                Some("konnector-rollout") => {
                    let process = self.process.as_ref();
                    let process = process
                        .context("the konnector is not running: no chart installed before")?;
                    process.wait_ready(Duration::from_secs(90)).await?;
                    Ok(String::new())
                }
                other => bail!("{at}: no substitute for the substituted block {other:?}"),
            };
        }
        let out = self
            .shell
            .run(&block.script, self.echo)
            .await
            .with_context(|| format!("{at}: a marked block failed"))?;
        if block.id.as_deref() == Some(INSTALL_CHART) {
            let (namespace, name) = RELEASE;
            let process =
                run_as_deployed(self.pair, namespace, name, &self.konnector, &self.log).await?;
            process.wait_ready(Duration::from_secs(90)).await?;
            self.process = Some(process);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_marked_sh_blocks_are_read_with_their_attributes() -> anyhow::Result<()> {
        let page = "text\n```sh\nnot marked\n```\n````md\n```sh docs-test\ninside a fence\n```\n````\n\
                    ```sh docs-test id=one\na\nb\n```\n```sh docs-test substituted id=two\nc\n```\n";
        let found = blocks("p.md", page)?;
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].id.as_deref(), Some("one"));
        assert_eq!(found[0].script, "a\nb\n");
        assert_eq!(found[0].line, 10);
        assert!(found[1].substituted);
        Ok(())
    }

    #[test]
    fn continued_lines_make_one_command() {
        let script = "kubectl a \\\n  --b\nkubectl c\n";
        assert_eq!(commands(script), vec!["kubectl a \\\n  --b", "kubectl c"]);
    }

    #[test]
    fn an_unknown_attribute_on_a_marked_block_is_an_error() {
        assert!(blocks("p.md", "```sh docs-test skip\nx\n```\n").is_err());
    }
}
