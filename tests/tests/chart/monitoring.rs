//! What the chart renders for operations: the PodDisruptionBudget, the ServiceMonitor, the
//! PrometheusRule (whose expressions may only name metrics the konnector really exports) and
//! the `helm test` Pod (which may only look for metrics the konnector really serves).

use std::collections::BTreeSet;

use konnector::telemetry::metrics;
use promql_parser::parser::{Expr, parse};
use promql_parser::util::{ExprVisitor, walk_expr};

use super::*;

/// Records one sample in every metric family of the konnector's registry, through the same
/// public fields the konnector records into: a family without samples renders nothing.
fn record_a_sample_in_every_family() {
    metrics().declare_every_family();
}

/// Every sample name the konnector's metrics registry exposes, read from the sample lines of
/// its own exposition once every family has a sample.
fn exported_sample_names() -> BTreeSet<String> {
    record_a_sample_in_every_family();
    let exposition = metrics().encode();
    let samples = exposition.lines().filter(|l| !l.starts_with('#'));
    let names = samples.filter_map(|sample| sample.split(['{', ' ']).next());
    names.filter(|n| !n.is_empty()).map(String::from).collect()
}

/// The metric names an expression selects (by name or by a `__name__` matcher).
fn selected_metrics(expr: &str) -> Result<BTreeSet<String>> {
    struct Names(BTreeSet<String>);
    impl ExprVisitor for Names {
        type Error = std::convert::Infallible;
        fn pre_visit(&mut self, expr: &Expr) -> Result<bool, Self::Error> {
            let selector = match expr {
                Expr::VectorSelector(selector) => selector,
                Expr::MatrixSelector(matrix) => &matrix.vs,
                _ => return Ok(true),
            };
            self.0.extend(selector.name.clone());
            let by_name = selector.matchers.matchers.iter();
            self.0.extend(
                by_name
                    .filter(|m| m.name == "__name__")
                    .map(|m| m.value.clone()),
            );
            Ok(true)
        }
    }
    let parsed = parse(expr).map_err(|e| anyhow!("{expr}: {e}"))?;
    let mut names = Names(BTreeSet::new());
    let _ = walk_expr(&mut names, &parsed);
    Ok(names.0)
}

#[test]
fn the_metrics_reader_finds_selected_names_and_the_registry_names() -> Result<()> {
    // The two readers the alert check below relies on, on known input: a check whose readers
    // found nothing would pass anything.
    let names = selected_metrics(
        r#"sum by (a) (rate(x_total[5m])) / on () group_left y > 0 or {__name__="z", b="c"}"#,
    )?;
    let expected: BTreeSet<String> = ["x_total", "y", "z"].map(String::from).into();
    assert_eq!(names, expected);
    let exported = exported_sample_names();
    for name in [
        "kbind_reconciles_total",
        "kbind_reconcile_duration_seconds_bucket",
        "kbind_engaged_connections",
    ] {
        assert!(exported.contains(name), "{name} not in {exported:?}");
    }
    assert!(!exported.contains("kbind_reconciles"), "{exported:?}");
    assert!(exported.contains("kbind_watch_lists_total"), "{exported:?}");
    Ok(())
}

#[test]
fn alert_expressions_name_only_metrics_the_konnector_exports() -> Result<()> {
    let values = "metrics: {prometheusRule: {enabled: true, alertLabels: {team: platform}}}";
    let rendered = render(values)?;
    let rule = rendered.get("PrometheusRule", FULLNAME)?;
    let rules = rule["spec"]["groups"][0]["rules"].as_array();
    let rules = rules.context("no rules rendered")?;
    let exported = exported_sample_names();
    let mut alerts = BTreeSet::new();
    for rule in rules {
        let alert = rule["alert"]
            .as_str()
            .context("a rule without alert name")?;
        let expr = rule["expr"]
            .as_str()
            .with_context(|| format!("{alert}: no expr"))?;
        let names = selected_metrics(expr).with_context(|| alert.to_string())?;
        ensure!(!names.is_empty(), "{alert} selects no metric: {expr}");
        let unknown: Vec<_> = names.difference(&exported).collect();
        ensure!(
            unknown.is_empty(),
            "{alert} uses {unknown:?}, which the konnector does not export; it exports {exported:?}"
        );
        assert_fields(
            rule,
            &yaml("{labels: {severity: warning, team: platform}}")?,
        )?;
        alerts.insert(alert.to_string());
    }
    // One alert per failure an operator pages on.
    for wanted in [
        "KbindReconcileErrors",
        "KbindNoEngagedConnection",
        "KbindRelistStorm",
        "KbindPolicyFailures",
        "KbindShardFlapping",
        "KbindInstanceConflicts",
        "KbindInstancesFailing",
        "KbindRelatedCopiesFailing",
    ] {
        ensure!(alerts.contains(wanted), "no {wanted} in {alerts:?}");
    }
    Ok(())
}

#[test]
fn service_monitor_and_prometheus_rule_are_rendered_only_when_enabled() -> Result<()> {
    let off = render("")?;
    for kind in ["ServiceMonitor", "PrometheusRule"] {
        assert!(off.of_kind(kind).is_empty(), "{kind} rendered by default");
    }
    let values = "metrics: {port: 9090, serviceMonitor: {enabled: true, interval: 1m, \
                  scrapeTimeout: 10s, labels: {release: prometheus}}, \
                  prometheusRule: {enabled: true, labels: {release: prometheus}}}";
    render(values)?.expect(
        r#"
ServiceMonitor/kbind-konnector:
  apiVersion: monitoring.coreos.com/v1
  metadata: {namespace: kbind-system, labels: {release: prometheus, app.kubernetes.io/name: konnector}}
  spec:
    selector: {matchLabels: {app.kubernetes.io/name: konnector, app.kubernetes.io/instance: kbind}}
    namespaceSelector: {matchNames: [kbind-system]}
    endpoints: [{port: metrics, path: /metrics, interval: 1m, scrapeTimeout: 10s}]
PrometheusRule/kbind-konnector:
  apiVersion: monitoring.coreos.com/v1
  metadata: {namespace: kbind-system, labels: {release: prometheus}}
Service/kbind-konnector-metrics:
  spec: {ports: [{name: metrics, port: 9090}]}
"#,
    )
}

#[test]
fn pod_disruption_budget_covers_the_pods_only_with_more_than_one_replica() -> Result<()> {
    for values in ["", "replicaCount: 1"] {
        let rendered = render(values)?;
        let budgets = rendered.of_kind("PodDisruptionBudget");
        assert!(budgets.is_empty(), "{values:?}: {:?}", rendered.summary());
    }
    render("replicaCount: 2")?.expect(
        r#"
PodDisruptionBudget/kbind-konnector:
  apiVersion: policy/v1
  metadata: {namespace: kbind-system}
  spec:
    maxUnavailable: 1
    selector: {matchLabels: {app.kubernetes.io/name: konnector, app.kubernetes.io/instance: kbind}}
"#,
    )?;
    let values =
        "{replicaCount: 3, sharding: {enabled: true}, podDisruptionBudget: {maxUnavailable: 34%}}";
    render(values)?.expect("PodDisruptionBudget/kbind-konnector: {spec: {maxUnavailable: 34%}}")
}

#[test]
fn helm_test_pod_reads_the_metrics_service_for_families_the_konnector_serves() -> Result<()> {
    let rendered = render("metrics: {port: 9090}")?;
    let name = "kbind-konnector-test-metrics";
    rendered.expect(&format!(
        r#"
Pod/{name}:
  metadata:
    namespace: kbind-system
    annotations: {{helm.sh/hook: test, helm.sh/hook-delete-policy: "before-hook-creation,hook-succeeded"}}
  spec:
    restartPolicy: Never
    securityContext: {{runAsNonRoot: true}}
    containers: [{{name: metrics, image: "docker.io/library/busybox:1.37"}}]
"#
    ))?;
    let pod = rendered.get("Pod", name)?;
    let script = pod["spec"]["containers"][0]["command"][2].as_str();
    let script = script.context("no test script")?;
    // It reads the metrics Service the chart renders, on its port.
    let service = rendered.get("Service", "kbind-konnector-metrics")?;
    assert_eq!(service["spec"]["ports"][0]["port"], 9090);
    let url = "http://kbind-konnector-metrics.kbind-system.svc:9090/metrics";
    ensure!(script.contains(url), "not {url}: {script}");
    // It looks for lines of the exposition (the installed tests check them against a
    // running konnector's /metrics).
    let lines = helm_test_lines(pod)?;
    ensure!(!lines.is_empty(), "the test looks for nothing: {pod:?}");
    // Off: no test Pod.
    let off = render("tests: {enabled: false}")?;
    ensure!(off.of_kind("Pod").is_empty(), "{:?}", off.summary());
    Ok(())
}

/// The exposition lines (their beginnings) the `helm test` Pod's script looks for, from its
/// `grep -q '^...'` commands.
pub(crate) fn helm_test_lines(pod: &Value) -> Result<Vec<String>> {
    let script = pod["spec"]["containers"][0]["command"][2].as_str();
    let script = script.context("no test script")?;
    let mut lines = Vec::new();
    for pattern in script.split("grep -q '").skip(1) {
        let pattern = pattern.split('\'').next().unwrap_or_default();
        let line = pattern.strip_prefix('^').context("an unanchored pattern")?;
        lines.push(line.to_string());
    }
    Ok(lines)
}

#[test]
fn log_values_and_extra_env_reach_the_konnector_container() -> Result<()> {
    let values = r#"
logLevel: konnector=debug,kube=info
logFormat: json
extraEnv: [{name: HTTPS_PROXY, value: "http://proxy.example:3128"}]
"#;
    let args = CHART_ARGS.replace(
        "--log-level=info --log-format=text",
        "--log-level=konnector=debug,kube=info --log-format=json",
    );
    render(values)?.expect(&format!(
        r#"
args: {args}
container:
  env:
    - {{name: POD_NAME}}
    - {{name: POD_NAMESPACE}}
    - {{name: MALLOC_ARENA_MAX}}
    - {{name: HTTPS_PROXY, value: "http://proxy.example:3128"}}
"#
    ))
}
