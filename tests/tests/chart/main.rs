//! The Helm chart (`charts/konnector`), checked with a real `helm`: `helm lint` and
//! `helm template` with default and non-default values, asserting on the rendered objects
//! against the konnector spec ("Chart configuration", "Consumer permissions", "Manage CRDs
//! outside Helm").
//!
//! helm is built from its Go module by `scripts/helm.sh` (once per machine, cached), the
//! same way users get it through `make tools`. Rendering needs no cluster.
//!
//! One test binary, four files: the Deployment and values, policy modules, RBAC and notes,
//! the Grafana dashboard.

mod dashboard;
mod deployment;
mod policies;
mod rbac;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context as _, Result, bail, ensure};
use serde_yaml::Value;

const RELEASE: &str = "kbind";
const NAMESPACE: &str = "kbind-system";
/// `konnector.fullname` for release `kbind`.
const FULLNAME: &str = "kbind-konnector";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn chart_dir() -> PathBuf {
    repo_root().join("charts/konnector")
}

/// Path of the helm binary, built by the project's script once per test binary run.
fn helm() -> Result<&'static Path> {
    static HELM: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = HELM.get_or_init(|| {
        let script = repo_root().join("scripts/helm.sh");
        let output = Command::new(&script)
            .output()
            .map_err(|e| format!("running {}: {e}", script.display()))?;
        if !output.status.success() {
            return Err(format!(
                "{} failed ({}): {}",
                script.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        let path = String::from_utf8_lossy(&output.stdout).trim().to_string();
        if path.is_empty() {
            return Err(format!("{} printed no path", script.display()));
        }
        Ok(PathBuf::from(path))
    });
    match built {
        Ok(path) => Ok(path.as_path()),
        Err(e) => bail!("getting helm: {e}"),
    }
}

/// Runs helm with its state directories inside the target dir, so that tests never read or
/// write the user's helm configuration. Returns stdout; fails with stderr.
fn run_helm(args: &[&str]) -> Result<String> {
    let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("helm-home");
    let output = Command::new(helm()?)
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .context("running helm")?;
    let stdout = String::from_utf8(output.stdout).context("helm stdout is not UTF-8")?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    ensure!(
        output.status.success(),
        "helm {} failed ({}):\n{stdout}\n{stderr}",
        args.join(" "),
        output.status
    );
    Ok(stdout)
}

/// Writes a values file for one test (tests run in parallel, so each gets its own name).
fn values_file(name: &str, yaml: &str) -> Result<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("chart-values");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// One rendered manifest: the template it came from, its text and its parsed value.
#[derive(Debug)]
struct Doc {
    source: String,
    text: String,
    value: Value,
}

/// The output of `helm template`, split into its documents.
#[derive(Debug)]
struct Rendered {
    docs: Vec<Doc>,
}

/// `helm template kbind charts/konnector -n kbind-system <extra>`.
fn render(extra: &[&str]) -> Result<Rendered> {
    let chart = chart_dir();
    let chart = chart.to_str().context("chart path is not UTF-8")?;
    let mut args = vec!["template", RELEASE, chart, "--namespace", NAMESPACE];
    args.extend_from_slice(extra);
    Rendered::parse(&run_helm(&args)?)
}

fn render_with_values(name: &str, yaml: &str) -> Result<Rendered> {
    let file = values_file(name, yaml)?;
    render(&["-f", file.to_str().context("values path is not UTF-8")?])
}

impl Rendered {
    /// Splits a multi-document stream on `---` lines; each document starts with helm's
    /// `# Source: <template>` line, which is kept apart from the document text.
    fn parse(stream: &str) -> Result<Self> {
        let mut docs = Vec::new();
        for chunk in split_documents(stream) {
            let (source, text) = match chunk.split_once('\n') {
                Some((first, rest)) if first.starts_with("# Source: ") => {
                    (first.trim_start_matches("# Source: ").to_string(), rest)
                }
                _ => (String::new(), chunk.as_str()),
            };
            let value: Value = serde_yaml::from_str(text)
                .with_context(|| format!("parsing rendered {source}:\n{text}"))?;
            if value.is_null() {
                continue;
            }
            docs.push(Doc {
                source,
                text: text.to_string(),
                value,
            });
        }
        Ok(Self { docs })
    }

    fn of_kind(&self, kind: &str) -> Vec<&Doc> {
        self.docs
            .iter()
            .filter(|d| d.value["kind"].as_str() == Some(kind))
            .collect()
    }

    fn find(&self, kind: &str, name: &str) -> Option<&Value> {
        self.of_kind(kind)
            .into_iter()
            .map(|d| &d.value)
            .find(|v| v["metadata"]["name"].as_str() == Some(name))
    }

    fn get(&self, kind: &str, name: &str) -> Result<&Value> {
        self.find(kind, name)
            .with_context(|| format!("no {kind} {name} rendered; got {:?}", self.summary()))
    }

    fn summary(&self) -> Vec<String> {
        self.docs
            .iter()
            .map(|d| {
                format!(
                    "{}/{}",
                    d.value["kind"].as_str().unwrap_or("?"),
                    d.value["metadata"]["name"].as_str().unwrap_or("?")
                )
            })
            .collect()
    }

    fn deployment(&self) -> Result<&Value> {
        self.get("Deployment", FULLNAME)
    }

    fn pod_spec(&self) -> Result<&Value> {
        Ok(&self.deployment()?["spec"]["template"]["spec"])
    }

    fn container(&self) -> Result<&Value> {
        let containers = self.pod_spec()?["containers"]
            .as_sequence()
            .context("no containers")?;
        ensure!(containers.len() == 1, "expected one container");
        containers
            .iter()
            .find(|c| c["name"].as_str() == Some("konnector"))
            .context("no konnector container")
    }

    fn args(&self) -> Result<Vec<String>> {
        strings(&self.container()?["args"])
    }

    fn cluster_role_rules(&self) -> Result<Vec<Rule>> {
        let role = self.get("ClusterRole", FULLNAME)?;
        role["rules"]
            .as_sequence()
            .context("ClusterRole has no rules")?
            .iter()
            .map(Rule::from_value)
            .collect()
    }
}

fn split_documents(stream: &str) -> Vec<String> {
    let mut docs = vec![String::new()];
    for line in stream.lines() {
        if line == "---" {
            docs.push(String::new());
        } else if let Some(doc) = docs.last_mut() {
            doc.push_str(line);
            doc.push('\n');
        }
    }
    docs.into_iter().filter(|d| !d.trim().is_empty()).collect()
}

/// A sequence of strings; an absent value is an empty list.
fn strings(value: &Value) -> Result<Vec<String>> {
    if value.is_null() {
        return Ok(Vec::new());
    }
    value
        .as_sequence()
        .with_context(|| format!("expected a list, got {value:?}"))?
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .with_context(|| format!("expected a string, got {v:?}"))
        })
        .collect()
}

/// One RBAC policy rule.
#[derive(Debug, Clone, PartialEq)]
struct Rule {
    api_groups: Vec<String>,
    resources: Vec<String>,
    verbs: Vec<String>,
}

impl Rule {
    fn from_value(value: &Value) -> Result<Self> {
        Ok(Self {
            api_groups: strings(&value["apiGroups"])?,
            resources: strings(&value["resources"])?,
            verbs: strings(&value["verbs"])?,
        })
    }

    fn covers(&self, group: &str, resource: &str) -> bool {
        self.api_groups.iter().any(|g| g == group || g == "*")
            && self.resources.iter().any(|r| r == resource || r == "*")
    }

    fn allows(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb || v == "*")
    }
}

/// The only rule naming `resources: ["*"]`: the one `rbac.boundResourceGroups` configures.
fn configurable_rule(rules: &[Rule]) -> Result<&Rule> {
    let wildcard: Vec<&Rule> = rules
        .iter()
        .filter(|r| r.resources.iter().any(|x| x == "*"))
        .collect();
    ensure!(
        wildcard.len() == 1,
        "expected exactly one rule over resources [*], got {wildcard:?}"
    );
    Ok(wildcard[0])
}

fn fixed_rules(rules: &[Rule]) -> Vec<Rule> {
    rules
        .iter()
        .filter(|r| !r.resources.iter().any(|x| x == "*"))
        .cloned()
        .collect()
}

fn set_of(items: &[&str]) -> std::collections::BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn verb_set(rule: &Rule) -> std::collections::BTreeSet<String> {
    rule.verbs.iter().cloned().collect()
}

/// The only fixed rule covering `group`/`resource`.
fn fixed_rule_for<'a>(rules: &'a [Rule], group: &str, resource: &str) -> Result<&'a Rule> {
    let matching: Vec<&Rule> = rules
        .iter()
        .filter(|r| {
            !r.resources.iter().any(|x| x == "*")
                && !r.api_groups.iter().any(|g| g == "*")
                && r.covers(group, resource)
        })
        .collect();
    ensure!(
        matching.len() == 1,
        "expected one fixed rule for {group}/{resource}, got {matching:?}"
    );
    Ok(matching[0])
}

fn is_lease_role(doc: &Doc) -> bool {
    doc.value["rules"]
        .as_sequence()
        .is_some_and(|rules| rules.iter().any(|r| r["resources"][0] == "leases"))
}

/// The value of a `--flag=value` argument.
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let prefix = format!("{name}=");
    args.iter().find_map(|a| a.strip_prefix(&prefix))
}

/// The binding's only subject is the release's ServiceAccount.
fn assert_service_account_subject(binding: &Value) -> Result<()> {
    let subjects = binding["subjects"]
        .as_sequence()
        .context("binding has no subjects")?;
    assert_eq!(subjects.len(), 1);
    assert_eq!(subjects[0]["kind"].as_str(), Some("ServiceAccount"));
    assert_eq!(subjects[0]["name"].as_str(), Some(FULLNAME));
    assert_eq!(subjects[0]["namespace"].as_str(), Some(NAMESPACE));
    Ok(())
}
