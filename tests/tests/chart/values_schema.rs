//! `values.schema.json` against the values the chart documents and against typos: helm itself
//! validates values against the schema on `helm lint`, `template` and `install`.

use super::docs::documented_values;
use super::*;

/// Sets `path` (dotted) to `value` in `root`, creating the objects on the way.
fn set_path(root: &mut serde_json::Value, path: &str, value: serde_json::Value) {
    let mut at = root;
    for key in path.split('.') {
        if !at.is_object() {
            *at = serde_json::json!({});
        }
        at = &mut at[key];
    }
    *at = value;
}

#[test]
fn every_documented_value_with_its_documented_default_passes_the_values_schema() -> Result<()> {
    // All of them at once, as a values file copied from the docs would (the schema's error
    // names the path of a refused one).
    let mut values = serde_json::json!({});
    for (key, default) in documented_values()? {
        set_path(&mut values, &key, default);
    }
    assert_lints_clean(&values.to_string())?;
    Ok(())
}

#[test]
fn every_value_set_to_something_else_passes_the_values_schema() -> Result<()> {
    let values = r#"
image: {repository: registry.example.com/kbind/konnector, tag: v9.9.9, pullPolicy: Always}
installCRDs: false
crds: {keep: false}
replicaCount: 3
leaderElect: true
leaderElectionID: other-lease
sharding: {enabled: true, leaseDuration: 30s, renewDeadline: 20s, retryPeriod: 5s}
podDisruptionBudget: {maxUnavailable: 50%}
rbac:
  boundResourceGroups: [example.org]
  related: [{resource: secrets, direction: FromProvider, namespaces: [team-a]}, {resource: configmaps, direction: FromConsumer}]
metrics:
  port: 9090
  serviceMonitor: {enabled: true, interval: 1m, scrapeTimeout: 10s, labels: {release: prometheus}}
  prometheusRule: {enabled: true, labels: {release: prometheus}, alertLabels: {team: platform}}
healthProbe: {port: 9091}
logLevel: konnector=debug,kube=info
logFormat: json
extraArgs: [--sync-concurrency=8]
extraEnv: [{name: HTTPS_PROXY, value: "http://proxy:3128"}, {name: FROM_FIELD, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]
imagePullSecrets: [{name: regcred}]
secretNamespace: credentials
createSecretNamespace: false
providerGracePeriod: 2m
allowInsecureProvider: true
policies:
  schema: {configMap: schema-policy, key: schema.wasm}
  conflict: {configMap: conflict-policy, key: policy.wasm}
  related: {configMap: related-policy, key: related.wasm}
  placement: {ref: "oci://ghcr.io/acme/placement:v1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", configMap: "", key: policy.wasm}
policyRegistry: {pullSecret: policy-pull, plainHTTP: ["registry.lab:5000"], cache: {sizeLimit: 1Gi}}
nameOverride: kon
fullnameOverride: kbind-kon
serviceAccount: {annotations: {eks.amazonaws.com/role-arn: "arn:aws:iam::1:role/x"}}
podAnnotations: {a: b}
podLabels: {c: d}
podSecurityContext: {runAsNonRoot: true, fsGroup: 65532}
securityContext: {runAsNonRoot: true, privileged: false}
resources: {limits: {memory: 1Gi}}
priorityClassName: system-cluster-critical
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: dedicated, operator: Exists}]
affinity: {podAntiAffinity: {}}
grafana: {dashboard: {enabled: true, labels: {grafana_dashboard: "1"}, namespace: monitoring, annotations: {grafana_folder: kbind}}}
tests: {enabled: false, image: {repository: registry.example.com/busybox, tag: "1.36"}}
"#;
    assert_lints_clean(values)?;
    Ok(())
}

#[test]
fn values_schema_refuses_unknown_keys_at_every_level_the_chart_owns() -> Result<()> {
    assert_schema_rejects(&[
        ("replicas: 3", "replicas"),
        ("crd: {keep: true}", "crd"),
        ("crds: {kep: false}", "kep"),
        ("image: {repo: x}", "repo"),
        ("sharding: {enable: true}", "enable"),
        ("podDisruptionBudget: {minAvailable: 1}", "minAvailable"),
        ("rbac: {relatd: []}", "relatd"),
        (
            "rbac: {related: [{resource: secrets, direction: FromProvider, namespace: [a]}]}",
            "namespace",
        ),
        ("metrics: {prot: 1}", "prot"),
        ("metrics: {serviceMonitor: {enable: true}}", "enable"),
        (
            "metrics: {prometheusRule: {enabled: true, rules: []}}",
            "rules",
        ),
        ("healthProbe: {prot: 1}", "prot"),
        ("policies: {conflcit: {configMap: x}}", "conflcit"),
        ("policyRegistry: {pullsecret: x}", "pullsecret"),
        ("policyRegistry: {cache: {size: 1Gi}}", "size"),
        (
            "policies: {conflict: {configmap: x, key: policy.wasm}}",
            "configmap",
        ),
        ("serviceAccount: {annotation: {}}", "annotation"),
        ("imagePullSecrets: [{nam: regcred}]", "nam"),
        ("grafana: {dashbaord: {enabled: true}}", "dashbaord"),
        (
            "grafana: {dashboard: {enabled: true, labels: {}, label: {}}}",
            "label",
        ),
        ("tests: {enable: false}", "enable"),
        ("tests: {enabled: true, image: {repo: x}}", "repo"),
        ("logLevl: debug", "logLevl"),
        ("extraEnvs: []", "extraEnvs"),
    ])
}

#[test]
fn values_schema_refuses_values_of_the_wrong_type_or_form() -> Result<()> {
    assert_schema_rejects(&[
        ("logFormat: yaml", "logFormat"),
        ("logLevel: ''", "logLevel"),
        ("crds: {keep: 'yes'}", "keep"),
        ("extraEnv: [{value: x}]", "extraEnv"),
        ("extraArgs: --log-level=debug", "extraArgs"),
        (
            "podDisruptionBudget: {maxUnavailable: half}",
            "maxUnavailable",
        ),
        (
            "metrics: {serviceMonitor: {enabled: true, interval: 30}}",
            "interval",
        ),
        (
            "metrics: {prometheusRule: {enabled: true, alertLabels: {team: 1}}}",
            "team",
        ),
        ("providerGracePeriod: 1 minute", "providerGracePeriod"),
        (
            "tests: {enabled: true, image: {repository: busybox, tag: 1.37}}",
            "tag",
        ),
    ])
}
