//! The Helm chart (`charts/konnector`), checked with a real `helm`: `helm lint` and
//! `helm template` with default and non-default values, asserting on the rendered objects
//! against the konnector spec ("Chart configuration", "Consumer permissions", "Manage CRDs
//! outside Helm").
//!
//! helm is built from its Go module by `scripts/helm.sh` (once per machine, cached), the
//! same way users get it through `make tools`. Rendering needs no cluster.

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

// ---------------------------------------------------------------------------------------
// lint and values

#[test]
fn chart_lints_clean_with_default_and_non_default_values() -> Result<()> {
    let chart = chart_dir();
    let chart = chart.to_str().context("chart path is not UTF-8")?;
    let out = run_helm(&["lint", "--strict", chart])?;
    assert!(out.contains("0 chart(s) failed"), "{out}");

    let values = values_file(
        "lint-non-default",
        r#"
image: {repository: registry.example.com/kbind/konnector, tag: v9.9.9}
installCRDs: false
replicaCount: 3
leaderElectionID: other-lease
rbac: {boundResourceGroups: [example.org]}
metrics: {port: 9090}
healthProbe: {port: 9091}
extraArgs: [--log-format=json]
imagePullSecrets: [{name: regcred}]
secretNamespace: credentials
policies:
  schema: {configMap: schema-policy, key: schema.wasm}
  conflict: {configMap: conflict-policy, key: policy.wasm}
  related: {configMap: related-policy, key: related.wasm}
"#,
    )?;
    let values = values.to_str().context("values path is not UTF-8")?;
    let out = run_helm(&["lint", "--strict", chart, "-f", values])?;
    assert!(out.contains("0 chart(s) failed"), "{out}");
    Ok(())
}

#[test]
fn values_schema_rejects_a_mistyped_value() -> Result<()> {
    let chart = chart_dir();
    let chart = chart.to_str().context("chart path is not UTF-8")?;
    let err = run_helm(&["template", RELEASE, chart, "--set", "replicaCount=two"])
        .expect_err("a string replicaCount must fail the values schema");
    assert!(err.to_string().contains("replicaCount"), "{err:#}");
    let err = run_helm(&[
        "template",
        RELEASE,
        chart,
        "--set",
        "policies.conflcit.configMap=x",
    ])
    .expect_err("a misspelt policy role must fail the values schema");
    assert!(err.to_string().contains("conflcit"), "{err:#}");
    Ok(())
}

#[test]
fn default_values_are_the_spec_table() -> Result<()> {
    let path = chart_dir().join("values.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let values: Value = serde_yaml::from_str(&text)?;
    assert_eq!(values["installCRDs"], Value::Bool(true));
    assert_eq!(values["replicaCount"].as_u64(), Some(1));
    assert_eq!(values["leaderElect"], Value::Bool(false));
    assert_eq!(
        values["leaderElectionID"].as_str(),
        Some("konnector.kbind.io")
    );
    assert_eq!(strings(&values["rbac"]["boundResourceGroups"])?, ["*"]);
    assert_eq!(values["metrics"]["port"].as_u64(), Some(8085));
    assert_eq!(values["healthProbe"]["port"].as_u64(), Some(8081));
    assert_eq!(strings(&values["extraArgs"])?, Vec::<String>::new());
    assert_eq!(strings(&values["imagePullSecrets"])?, Vec::<String>::new());
    assert_eq!(values["secretNamespace"].as_str(), Some("kbind"));
    assert!(
        values["image"]["repository"]
            .as_str()
            .is_some_and(|r| !r.is_empty())
    );
    // The tag is a placeholder: empty means the chart's appVersion.
    assert_eq!(values["image"]["tag"].as_str(), Some(""));
    for role in ["schema", "conflict", "related"] {
        assert_eq!(
            values["policies"][role]["configMap"].as_str(),
            Some(""),
            "{role}"
        );
        assert_eq!(
            values["policies"][role]["key"].as_str(),
            Some("policy.wasm"),
            "{role}"
        );
    }

    let chart: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart_dir().join("Chart.yaml"))?)?;
    assert_eq!(chart["apiVersion"].as_str(), Some("v2"));
    assert_eq!(chart["name"].as_str(), Some("konnector"));
    assert_eq!(chart["version"].as_str(), Some("0.1.0"));
    assert_eq!(chart["appVersion"].as_str(), Some("0.1.0"));
    Ok(())
}

// ---------------------------------------------------------------------------------------
// CRDs

#[test]
fn default_render_contains_the_committed_crds_verbatim() -> Result<()> {
    let rendered = render(&[])?;
    let crds = rendered.of_kind("CustomResourceDefinition");
    assert_eq!(crds.len(), 3, "{:?}", rendered.summary());

    let dir = chart_dir().join("files/crds");
    let mut files = 0;
    for plural in ["connections", "bindings", "clusterbindings"] {
        let path = dir.join(format!("core.kbind.io_{plural}.yaml"));
        let committed = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let name = format!("{plural}.core.kbind.io");
        let doc = crds
            .iter()
            .find(|d| d.value["metadata"]["name"].as_str() == Some(name.as_str()))
            .with_context(|| format!("CRD {name} not rendered"))?;
        assert_eq!(doc.source, "konnector/templates/crds.yaml");
        // Byte for byte (helm only separates documents with blank lines).
        assert_eq!(doc.text.trim_end(), committed.trim_end(), "{name} differs");
        let parsed: Value = serde_yaml::from_str(&committed)?;
        assert_eq!(doc.value, parsed, "{name}");
        files += 1;
    }
    let on_disk = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "yaml"))
        .count();
    assert_eq!(on_disk, files, "every committed CRD file is rendered");
    Ok(())
}

#[test]
fn install_crds_false_renders_no_crds() -> Result<()> {
    let rendered = render(&["--set", "installCRDs=false"])?;
    assert!(
        rendered.of_kind("CustomResourceDefinition").is_empty(),
        "{:?}",
        rendered.summary()
    );
    // Everything else is still there.
    rendered.deployment()?;
    rendered.get("ClusterRole", FULLNAME)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Deployment

#[test]
fn default_deployment_runs_one_konnector_without_leader_election() -> Result<()> {
    let rendered = render(&[])?;
    let deployment = rendered.deployment()?;
    assert_eq!(deployment["spec"]["replicas"].as_u64(), Some(1));
    // A single konnector without election must never overlap its successor.
    assert_eq!(
        deployment["spec"]["strategy"]["rollingUpdate"]["maxSurge"].as_u64(),
        Some(0)
    );
    assert_eq!(
        rendered.args()?,
        [
            "run",
            "--metrics-bind-address=:8085",
            "--health-probe-bind-address=:8081",
            "--secret-namespace=kbind",
        ]
    );
    assert!(
        !rendered.of_kind("Role").iter().any(|d| is_lease_role(d)),
        "no lease Role without election"
    );
    assert!(rendered.of_kind("RoleBinding").is_empty());
    Ok(())
}

#[test]
fn replicas_above_one_force_leader_election() -> Result<()> {
    let rendered = render(&["--set", "replicaCount=2"])?;
    assert_eq!(rendered.deployment()?["spec"]["replicas"].as_u64(), Some(2));
    let args = rendered.args()?;
    assert!(args.iter().any(|a| a == "--leader-elect"), "{args:?}");
    assert_eq!(
        flag(&args, "--leader-election-id"),
        Some("konnector.kbind.io")
    );
    assert_eq!(flag(&args, "--leader-election-namespace"), Some(NAMESPACE));

    let role_name = format!("{FULLNAME}-leader-election");
    let role = rendered.get("Role", &role_name)?;
    assert_eq!(role["metadata"]["namespace"].as_str(), Some(NAMESPACE));
    let rules = role["rules"].as_sequence().context("Role has no rules")?;
    assert_eq!(rules.len(), 1);
    let rule = Rule::from_value(&rules[0])?;
    assert_eq!(rule.api_groups, ["coordination.k8s.io"]);
    assert_eq!(rule.resources, ["leases"]);
    for verb in ["get", "list", "watch", "create", "update"] {
        assert!(rule.allows(verb), "lease verb {verb} missing: {rule:?}");
    }
    assert!(!rule.allows("delete"), "{rule:?}");

    let binding = rendered.get("RoleBinding", &role_name)?;
    assert_eq!(binding["metadata"]["namespace"].as_str(), Some(NAMESPACE));
    assert_eq!(binding["roleRef"]["kind"].as_str(), Some("Role"));
    assert_eq!(
        binding["roleRef"]["name"].as_str(),
        Some(role_name.as_str())
    );
    assert_service_account_subject(binding)?;
    Ok(())
}

#[test]
fn leader_elect_value_turns_election_on_for_one_replica() -> Result<()> {
    let rendered = render(&[
        "--set",
        "leaderElect=true",
        "--set",
        "leaderElectionID=team-a-konnector",
    ])?;
    assert_eq!(rendered.deployment()?["spec"]["replicas"].as_u64(), Some(1));
    let args = rendered.args()?;
    assert!(args.iter().any(|a| a == "--leader-elect"), "{args:?}");
    assert_eq!(
        flag(&args, "--leader-election-id"),
        Some("team-a-konnector")
    );
    rendered.get("Role", &format!("{FULLNAME}-leader-election"))?;
    rendered.get("RoleBinding", &format!("{FULLNAME}-leader-election"))?;
    Ok(())
}

#[test]
fn image_repository_and_tag_are_used() -> Result<()> {
    let default = render(&[])?;
    // The placeholder tag defaults to the chart's appVersion.
    assert_eq!(
        default.container()?["image"].as_str(),
        Some("ghcr.io/kbind/konnector:0.1.0")
    );
    let rendered = render(&[
        "--set",
        "image.repository=kbind-local/konnector",
        "--set-string",
        "image.tag=git-0123456789ab",
    ])?;
    assert_eq!(
        rendered.container()?["image"].as_str(),
        Some("kbind-local/konnector:git-0123456789ab")
    );
    Ok(())
}

#[test]
fn image_pull_secrets_are_rendered() -> Result<()> {
    assert!(render(&[])?.pod_spec()?["imagePullSecrets"].is_null());
    let rendered = render_with_values(
        "pull-secrets",
        "imagePullSecrets: [{name: regcred}, {name: mirror}]\n",
    )?;
    let names: Vec<&str> = rendered.pod_spec()?["imagePullSecrets"]
        .as_sequence()
        .context("no imagePullSecrets")?
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(names, ["regcred", "mirror"]);
    Ok(())
}

#[test]
fn extra_args_are_appended_after_the_chart_flags() -> Result<()> {
    let rendered = render_with_values(
        "extra-args",
        "replicaCount: 2\nextraArgs: [--log-level=debug, --log-format=json]\n",
    )?;
    let args = rendered.args()?;
    assert_eq!(args.first().map(String::as_str), Some("run"));
    assert_eq!(
        args[args.len() - 2..],
        ["--log-level=debug", "--log-format=json"]
    );
    assert!(args.iter().any(|a| a == "--leader-elect"));
    Ok(())
}

#[test]
fn secret_namespace_is_passed_as_a_flag() -> Result<()> {
    let rendered = render(&["--set", "secretNamespace=credentials"])?;
    assert_eq!(
        flag(&rendered.args()?, "--secret-namespace"),
        Some("credentials")
    );
    Ok(())
}

#[test]
fn metrics_and_health_ports_flow_into_flags_container_ports_probes_and_service() -> Result<()> {
    for (metrics, health) in [(8085, 8081), (9090, 9091)] {
        let rendered = render(&[
            "--set",
            &format!("metrics.port={metrics}"),
            "--set",
            &format!("healthProbe.port={health}"),
        ])?;
        let args = rendered.args()?;
        let metrics_flag = format!(":{metrics}");
        let health_flag = format!(":{health}");
        assert_eq!(
            flag(&args, "--metrics-bind-address"),
            Some(metrics_flag.as_str())
        );
        assert_eq!(
            flag(&args, "--health-probe-bind-address"),
            Some(health_flag.as_str())
        );

        let container = rendered.container()?;
        let port = |name: &str| {
            container["ports"].as_sequence().and_then(|ports| {
                ports
                    .iter()
                    .find(|p| p["name"].as_str() == Some(name))
                    .and_then(|p| p["containerPort"].as_u64())
            })
        };
        assert_eq!(port("metrics"), Some(metrics));
        assert_eq!(port("health"), Some(health));

        // Liveness /healthz and readiness /readyz, on the named health port.
        for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
            let get = &container[probe]["httpGet"];
            assert_eq!(get["path"].as_str(), Some(path), "{probe}");
            assert_eq!(get["port"].as_str(), Some("health"), "{probe}");
        }

        let service = rendered.get("Service", &format!("{FULLNAME}-metrics"))?;
        let service_port = &service["spec"]["ports"][0];
        assert_eq!(service_port["port"].as_u64(), Some(metrics));
        assert_eq!(service_port["targetPort"].as_str(), Some("metrics"));
        assert_eq!(
            service["metadata"]["annotations"]["prometheus.io/port"].as_str(),
            Some(metrics.to_string().as_str())
        );
        assert_eq!(
            service["spec"]["selector"],
            rendered.deployment()?["spec"]["selector"]["matchLabels"],
            "the metrics Service selects the konnector Pods"
        );
    }
    Ok(())
}

#[test]
fn pod_identity_comes_from_the_downward_api() -> Result<()> {
    let rendered = render(&[])?;
    let env = rendered.container()?["env"]
        .as_sequence()
        .context("no env")?
        .clone();
    for (name, field) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        let var = env
            .iter()
            .find(|e| e["name"].as_str() == Some(name))
            .with_context(|| format!("{name} not set"))?;
        assert_eq!(
            var["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
            Some(field)
        );
    }
    assert_eq!(
        rendered.pod_spec()?["serviceAccountName"].as_str(),
        Some(FULLNAME)
    );
    rendered.get("ServiceAccount", FULLNAME)?;
    Ok(())
}

#[test]
fn pods_run_non_root_read_only_without_capabilities() -> Result<()> {
    let rendered = render(&[])?;
    let pod = &rendered.pod_spec()?["securityContext"];
    assert_eq!(pod["runAsNonRoot"], Value::Bool(true));
    assert_eq!(pod["runAsUser"].as_u64(), Some(65532));
    assert_eq!(
        pod["seccompProfile"]["type"].as_str(),
        Some("RuntimeDefault")
    );
    let container = &rendered.container()?["securityContext"];
    assert_eq!(container["readOnlyRootFilesystem"], Value::Bool(true));
    assert_eq!(container["allowPrivilegeEscalation"], Value::Bool(false));
    assert_eq!(container["runAsNonRoot"], Value::Bool(true));
    assert_eq!(strings(&container["capabilities"]["drop"])?, ["ALL"]);
    assert_eq!(
        container["seccompProfile"]["type"].as_str(),
        Some("RuntimeDefault")
    );
    Ok(())
}

#[test]
fn scheduling_values_reach_the_pod() -> Result<()> {
    let rendered = render_with_values(
        "scheduling",
        r#"
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: dedicated, operator: Equal, value: kbind, effect: NoSchedule}]
affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [system]}]}]}}}
resources: {requests: {cpu: 10m}, limits: {memory: 1Gi}}
"#,
    )?;
    let pod = rendered.pod_spec()?;
    assert_eq!(
        pod["nodeSelector"]["kubernetes.io/os"].as_str(),
        Some("linux")
    );
    assert_eq!(pod["tolerations"][0]["value"].as_str(), Some("kbind"));
    assert!(pod["affinity"]["nodeAffinity"].is_mapping());
    let resources = &rendered.container()?["resources"];
    assert_eq!(resources["limits"]["memory"].as_str(), Some("1Gi"));
    assert_eq!(resources["requests"]["cpu"].as_str(), Some("10m"));
    Ok(())
}

#[test]
fn namespaced_objects_land_in_the_release_namespace() -> Result<()> {
    let rendered = render(&["--set", "replicaCount=2"])?;
    for kind in [
        "ServiceAccount",
        "Deployment",
        "Service",
        "Role",
        "RoleBinding",
    ] {
        let docs = rendered.of_kind(kind);
        assert!(!docs.is_empty(), "no {kind} rendered");
        for doc in docs {
            assert_eq!(
                doc.value["metadata"]["namespace"].as_str(),
                Some(NAMESPACE),
                "{kind} from {}",
                doc.source
            );
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Policy modules

#[test]
fn a_policy_config_map_mounts_the_module_and_sets_the_flag() -> Result<()> {
    let rendered = render(&[
        "--set",
        "policies.conflict.configMap=my-conflict-policy",
        "--set",
        "policies.conflict.key=conflict.wasm",
    ])?;
    let args = rendered.args()?;
    let path = flag(&args, "--conflict-policy").context("no --conflict-policy flag")?;
    assert!(path.starts_with("/policies/"), "{path}");
    // Only the role that was set is swapped.
    assert_eq!(flag(&args, "--schema-policy"), None);
    assert_eq!(flag(&args, "--related-policy"), None);

    let pod = rendered.pod_spec()?;
    let volume = pod["volumes"]
        .as_sequence()
        .context("no volumes")?
        .iter()
        .find(|v| v["configMap"]["name"].as_str() == Some("my-conflict-policy"))
        .context("no volume for the ConfigMap")?;
    let item = &volume["configMap"]["items"][0];
    assert_eq!(item["key"].as_str(), Some("conflict.wasm"));

    let mount = rendered.container()?["volumeMounts"]
        .as_sequence()
        .context("no volumeMounts")?
        .iter()
        .find(|m| m["name"] == volume["name"])
        .context("the policy volume is not mounted")?;
    assert_eq!(mount["readOnly"], Value::Bool(true));
    // The flag points at the mounted key.
    let mounted = format!(
        "{}/{}",
        mount["mountPath"].as_str().context("no mountPath")?,
        item["path"].as_str().context("no item path")?
    );
    assert_eq!(path, mounted);
    Ok(())
}

#[test]
fn every_policy_role_can_be_swapped() -> Result<()> {
    let rendered = render_with_values(
        "all-policies",
        r#"
policies:
  schema: {configMap: schema-cm, key: policy.wasm}
  conflict: {configMap: conflict-cm, key: policy.wasm}
  related: {configMap: related-cm, key: policy.wasm}
"#,
    )?;
    let args = rendered.args()?;
    let mut paths = Vec::new();
    for role in ["schema", "conflict", "related"] {
        let path = flag(&args, &format!("--{role}-policy"))
            .with_context(|| format!("no --{role}-policy flag in {args:?}"))?;
        paths.push(path.to_string());
    }
    paths.sort();
    paths.dedup();
    assert_eq!(paths.len(), 3, "each role gets its own file: {paths:?}");

    let volumes = rendered.pod_spec()?["volumes"]
        .as_sequence()
        .context("no volumes")?
        .clone();
    for cm in ["schema-cm", "conflict-cm", "related-cm"] {
        assert!(
            volumes
                .iter()
                .any(|v| v["configMap"]["name"].as_str() == Some(cm)),
            "{cm} not mounted"
        );
    }
    Ok(())
}

#[test]
fn no_policy_config_map_means_the_built_in_modules() -> Result<()> {
    let rendered = render(&[])?;
    let args = rendered.args()?;
    assert!(!args.iter().any(|a| a.contains("-policy")), "{args:?}");
    let volumes = rendered.pod_spec()?["volumes"]
        .as_sequence()
        .context("no volumes")?
        .clone();
    assert!(
        !volumes.iter().any(|v| v["configMap"].is_mapping()),
        "{volumes:?}"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// RBAC

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

#[test]
fn consumer_rbac_has_the_fixed_rules_of_the_spec() -> Result<()> {
    let rendered = render(&[])?;
    let rules = rendered.cluster_role_rules()?;
    let fixed = fixed_rules(&rules);
    let crud = set_of(&[
        "get", "list", "watch", "create", "update", "patch", "delete",
    ]);

    for kind in ["connections", "bindings", "clusterbindings"] {
        let rule = fixed_rule_for(&fixed, "core.kbind.io", kind)?;
        assert_eq!(verb_set(rule), crud, "{kind}");
        for sub in ["status", "finalizers"] {
            let rule = fixed_rule_for(&fixed, "core.kbind.io", &format!("{kind}/{sub}"))?;
            assert!(rule.allows("update"), "{kind}/{sub}: {rule:?}");
        }
    }
    let crds = fixed_rule_for(&fixed, "apiextensions.k8s.io", "customresourcedefinitions")?;
    assert_eq!(verb_set(crds), crud);
    let namespaces = fixed_rule_for(&fixed, "", "namespaces")?;
    assert_eq!(
        verb_set(namespaces),
        set_of(&["get", "list", "watch", "create"])
    );
    for group in ["", "events.k8s.io"] {
        let events = fixed_rule_for(&fixed, group, "events")?;
        assert_eq!(
            verb_set(events),
            set_of(&["create", "patch", "update"]),
            "events in {group:?}"
        );
    }
    // No fixed ConfigMap rule; leases only through the leader-election Role.
    assert!(
        !fixed.iter().any(|r| r.covers("", "configmaps")),
        "{fixed:?}"
    );
    assert!(
        !fixed
            .iter()
            .any(|r| r.covers("coordination.k8s.io", "leases")),
        "{fixed:?}"
    );
    // Every fixed rule names its groups: the wildcard only appears in the configurable rule.
    assert!(
        fixed.iter().all(|r| !r.api_groups.iter().any(|g| g == "*")),
        "{fixed:?}"
    );
    assert_eq!(fixed.len(), 6, "{fixed:?}");

    let binding = rendered.get("ClusterRoleBinding", FULLNAME)?;
    assert_eq!(binding["roleRef"]["kind"].as_str(), Some("ClusterRole"));
    assert_eq!(binding["roleRef"]["name"].as_str(), Some(FULLNAME));
    assert_service_account_subject(binding)?;
    Ok(())
}

#[test]
fn fixed_secret_rule_reads_and_updates_but_never_creates_or_deletes() -> Result<()> {
    let rules = render(&[])?.cluster_role_rules()?;
    let fixed = fixed_rules(&rules);
    let secrets = fixed_rule_for(&fixed, "", "secrets")?;
    assert_eq!(
        verb_set(secrets),
        set_of(&["get", "list", "watch", "update", "patch"])
    );
    for verb in ["create", "delete", "deletecollection"] {
        assert!(!secrets.allows(verb), "{verb}: {secrets:?}");
    }
    Ok(())
}

#[test]
fn default_bound_resource_groups_grant_crud_on_every_group() -> Result<()> {
    let rules = render(&[])?.cluster_role_rules()?;
    let rule = configurable_rule(&rules)?;
    assert_eq!(rule.api_groups, ["*"]);
    assert_eq!(rule.resources, ["*"]);
    assert_eq!(
        verb_set(rule),
        set_of(&[
            "get", "list", "watch", "create", "update", "patch", "delete"
        ])
    );
    Ok(())
}

#[test]
fn bound_resource_groups_narrow_only_the_configurable_rule() -> Result<()> {
    let default = render(&[])?.cluster_role_rules()?;
    // The spec's example, passed with -f as the spec says.
    let narrowed = render_with_values(
        "narrow",
        "rbac:\n  boundResourceGroups:\n    - example.org\n",
    )?
    .cluster_role_rules()?;

    let before = configurable_rule(&default)?;
    let after = configurable_rule(&narrowed)?;
    assert_eq!(after.api_groups, ["example.org"]);
    assert_eq!(after.resources, before.resources);
    assert_eq!(after.verbs, before.verbs);
    // The fixed rules (core kbind objects, CRDs, Secrets, namespaces, Events) are untouched.
    assert_eq!(fixed_rules(&narrowed), fixed_rules(&default));
    assert_eq!(narrowed.len(), default.len());

    let several = render(&["--set", "rbac.boundResourceGroups={example.org,widgets.io}"])?
        .cluster_role_rules()?;
    assert_eq!(
        configurable_rule(&several)?.api_groups,
        ["example.org", "widgets.io"]
    );
    Ok(())
}

#[test]
fn empty_bound_resource_groups_drop_the_configurable_rule() -> Result<()> {
    let default = render(&[])?.cluster_role_rules()?;
    let rules = render_with_values("no-groups", "rbac: {boundResourceGroups: []}\n")?
        .cluster_role_rules()?;
    assert!(
        !rules.iter().any(|r| r.resources.iter().any(|x| x == "*")),
        "{rules:?}"
    );
    assert_eq!(rules, fixed_rules(&default));
    Ok(())
}

// ---------------------------------------------------------------------------------------
// NOTES

#[test]
fn notes_give_the_teardown_order_and_say_probes_are_process_checks() -> Result<()> {
    let chart = chart_dir();
    let chart = chart.to_str().context("chart path is not UTF-8")?;
    let out = run_helm(&[
        "install",
        RELEASE,
        chart,
        "--namespace",
        NAMESPACE,
        "--dry-run=client",
    ])?;
    let notes = out
        .split_once("NOTES:")
        .map(|(_, notes)| notes)
        .context("helm printed no NOTES")?;
    assert!(notes.contains("process checks"), "{notes}");
    let position = |needle: &str| {
        notes
            .find(needle)
            .with_context(|| format!("NOTES do not mention {needle:?}:\n{notes}"))
    };
    let bindings = position("Delete Bindings and ClusterBindings")?;
    let connections = position("Delete Connections")?;
    let secrets = position("Delete the credential Secrets")?;
    let uninstall = position("uninstall the release")?;
    assert!(
        bindings < connections && connections < secrets && secrets < uninstall,
        "teardown order is bindings, Connection, Secret, then the release:\n{notes}"
    );
    assert!(notes.contains("DrainingBindings"), "{notes}");
    Ok(())
}
