//! The Helm chart (`charts/konnector`), checked with a real `helm`: `helm lint` and
//! `helm template` with default and non-default values, asserting on the rendered objects
//! against the konnector spec ("Chart configuration", "Consumer permissions", "Manage CRDs
//! outside Helm").
//!
//! helm is built from its Go module by `scripts/helm.sh` (once per machine, cached), the
//! same way users get it through `make tools`. Rendering needs no cluster.

mod dashboard;
mod deployment;
mod docs;
mod installed;
mod monitoring;
mod policies;
mod rbac;
mod registry;
mod reinstall;
mod sharding;
mod values_schema;

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use serde_json::Value;

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/konnector");
const RELEASE: &str = "kbind";
const NAMESPACE: &str = "kbind-system";
/// `konnector.fullname` for release `kbind`.
const FULLNAME: &str = "kbind-konnector";
/// The konnector's arguments with default values, before any optional flag.
const CHART_ARGS: &str = "run --metrics-bind-address=:8085 --health-probe-bind-address=:8081 --secret-namespace=kbind --provider-grace-period=60s --log-level=info --log-format=text";

/// Runs a command with `stdin` as its input, returning its stdout; fails with its stderr.
fn output(command: &mut Command, stdin: &str) -> Result<String> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {command:?}"))?;
    let mut input = child.stdin.take().context("no stdin")?;
    input.write_all(stdin.as_bytes())?;
    drop(input); // end of input
    let output = child.wait_with_output()?;
    let (status, stdout) = (output.status, String::from_utf8(output.stdout)?);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let failed = format!("{command:?} failed ({status}):\n{stdout}\n{stderr}");
    ensure!(status.success(), failed);
    Ok(stdout)
}

/// Runs helm (built by the project's script once per test binary run) with its state
/// directories inside the target dir, so that tests never read or write the user's helm
/// configuration. `values` is a values file's YAML, read with `-f -`.
/// Fails unless `helm lint --strict` passes the chart with `values` (schema included).
fn assert_lints_clean(values: &str) -> Result<()> {
    let out = run_helm(&["lint", "--strict", CHART, "-f", "-"], values)?;
    assert!(out.contains("0 chart(s) failed"), "{out}");
    Ok(())
}

fn run_helm(args: &[&str], values: &str) -> Result<String> {
    static HELM: OnceLock<Result<String, String>> = OnceLock::new();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/helm.sh");
    let built = HELM.get_or_init(|| {
        let path = output(&mut Command::new(script), "").map_err(|e| format!("{e:#}"))?;
        Ok(path.trim().to_string())
    });
    let home = concat!(env!("CARGO_TARGET_TMPDIR"), "/helm-home");
    let mut helm = Command::new(built.as_deref().map_err(|e| anyhow!("getting helm: {e}"))?);
    helm.args(args)
        .env("HELM_CACHE_HOME", format!("{home}/cache"))
        .env("HELM_CONFIG_HOME", format!("{home}/config"))
        .env("HELM_DATA_HOME", format!("{home}/data"));
    output(&mut helm, values)
}

/// Each values document is refused by the chart's values schema, with an error naming the
/// field it gets wrong.
fn assert_schema_rejects(cases: &[(&str, &str)]) -> Result<()> {
    for (values, field) in cases {
        let Err(err) = render(values) else {
            bail!("{values:?} passed the values schema");
        };
        assert!(err.to_string().contains(field), "{values}: {err:#}");
    }
    Ok(())
}

/// The chart rendered with `values` (a values file's YAML; empty for the defaults) by
/// `helm template kbind charts/konnector -n kbind-system -f <values>`.
fn render(values: &str) -> Result<Rendered> {
    let template = ["template", RELEASE, CHART, "-n", NAMESPACE, "-f", "-"];
    Rendered::parse(&run_helm(&template, values)?)
}

fn yaml(text: &str) -> Result<Value> {
    serde_saphyr::from_str(text).with_context(|| format!("parsing {text}"))
}

/// Compares only the fields `expected` names, so a test states just the fields its
/// behaviour is about; sequences must match element for element and in length.
fn assert_fields(actual: &Value, expected: &Value) -> Result<()> {
    fn mismatch(actual: &Value, expected: &Value, path: &str) -> Option<String> {
        match (actual, expected) {
            (_, Value::Object(fields)) => fields.iter().find_map(|(key, want)| {
                let path = format!("{path}.{}", key.as_str());
                mismatch(actual.get(key).unwrap_or(&Value::Null), want, &path)
            }),
            (Value::Array(got), Value::Array(want)) if got.len() == want.len() => {
                let mut pairs = got.iter().zip(want).enumerate();
                pairs.find_map(|(i, (got, want))| mismatch(got, want, &format!("{path}[{i}]")))
            }
            _ => (actual != expected).then(|| format!("{path}: want {expected:?}, got {actual:?}")),
        }
    }
    match mismatch(actual, expected, "") {
        Some(difference) => bail!("{difference}\nin {}", serde_saphyr::to_string(actual)?),
        None => Ok(()),
    }
}

/// One rendered manifest: the template it came `from`, its text and its parsed value.
struct Doc {
    from: String,
    text: String,
    value: Value,
}

/// The output of `helm template`, split into its documents.
struct Rendered(Vec<Doc>);

impl Rendered {
    /// Splits a multi-document stream on `---` lines; each document starts with helm's
    /// `# Source: <template>` line, which is kept apart from the document text.
    fn parse(stream: &str) -> Result<Self> {
        let (mut docs, marker) = (Vec::new(), "# Source: ");
        for chunk in format!("\n{stream}").split("\n---\n") {
            let (from, text) = match chunk.split_once('\n') {
                Some((first, rest)) if first.starts_with(marker) => (&first[marker.len()..], rest),
                _ => ("", chunk),
            };
            let value = yaml(text).with_context(|| format!("rendered by {from}"))?;
            let (from, text) = (from.to_string(), text.to_string());
            docs.extend((!value.is_null()).then_some(Doc { from, text, value }));
        }
        Ok(Self(docs))
    }

    fn of_kind(&self, kind: &str) -> Vec<&Doc> {
        self.0.iter().filter(|d| d.value["kind"] == kind).collect()
    }

    fn get(&self, kind: &str, name: &str) -> Result<&Value> {
        let mut values = self.0.iter().map(|d| &d.value);
        let found = values.find(|v| v["kind"] == kind && v["metadata"]["name"] == name);
        found.with_context(|| format!("no {kind} {name} rendered; got {:?}", self.summary()))
    }

    /// The object `namespace/name` of `kind`, for names rendered in several namespaces.
    fn get_in(&self, kind: &str, namespace: &str, name: &str) -> Result<&Value> {
        let mut values = self.0.iter().map(|d| &d.value);
        let at =
            |v: &Value| v["metadata"]["namespace"] == namespace && v["metadata"]["name"] == name;
        let found = values.find(|v| v["kind"] == kind && at(v));
        let missing = || format!("no {kind} {namespace}/{name}; got {:?}", self.summary());
        found.with_context(missing)
    }

    /// Kind and name of every document, for failure messages.
    fn summary(&self) -> Vec<(&Value, &Value)> {
        let docs = self.0.iter().map(|d| &d.value);
        docs.map(|v| (&v["kind"], &v["metadata"]["name"])).collect()
    }

    fn pod_spec(&self) -> Result<&Value> {
        Ok(&self.get("Deployment", FULLNAME)?["spec"]["template"]["spec"])
    }

    /// The Pod's only container, the konnector.
    fn container(&self) -> Result<&Value> {
        let containers = self.pod_spec()?["containers"].as_array();
        match containers.map(Vec::as_slice).unwrap_or_default() {
            [only] if only["name"] == "konnector" => Ok(only),
            other => bail!("expected only the konnector container, got {other:?}"),
        }
    }

    /// Compares the objects `expected` (YAML) names with the fields it gives for each: keys
    /// are `Kind/name` (or `Kind/namespace/name`), `pod` and `container` for the konnector's
    /// pod spec and container, or `args` for its arguments joined by spaces.
    fn expect(&self, expected: &str) -> Result<()> {
        let objects: serde_json::Map<String, Value> = serde_saphyr::from_str(expected)?;
        for (key, fields) in &objects {
            let actual = match (key.as_str(), key.split_once('/')) {
                (_, Some((kind, path))) => match path.split_once('/') {
                    Some((namespace, name)) => self.get_in(kind, namespace, name)?.clone(),
                    None => self.get(kind, path)?.clone(),
                },
                ("pod", None) => self.pod_spec()?.clone(),
                ("container", None) => self.container()?.clone(),
                ("args", None) => {
                    let args: Vec<String> =
                        serde_json::from_value(self.container()?["args"].clone())?;
                    args.join(" ").into()
                }
                _ => bail!("no object {key:?}"),
            };
            assert_fields(&actual, fields).with_context(|| format!("{key:?}"))?;
        }
        Ok(())
    }
}
