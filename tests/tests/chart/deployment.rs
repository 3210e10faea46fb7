//! Lint, the values table, CRDs, the Deployment and its arguments, ports and pod settings.

use super::*;

/// The arguments that turn leader election on, for Lease `id` in the release namespace.
fn election_args(id: &str) -> String {
    let namespace = format!("--leader-election-namespace={NAMESPACE}");
    format!("{CHART_ARGS} --leader-elect --leader-election-id={id} {namespace}")
}

/// The leader-election Role and its binding to the release's ServiceAccount.
const LEASE_RBAC: &str = r#"
Role/kbind-konnector-leader-election:
  metadata: {namespace: kbind-system}
  rules:
    - {apiGroups: [coordination.k8s.io], resources: [leases], verbs: [get, list, watch, create, update, patch]}
RoleBinding/kbind-konnector-leader-election:
  metadata: {namespace: kbind-system}
  roleRef: {kind: Role, name: kbind-konnector-leader-election}
  subjects: [{kind: ServiceAccount, name: kbind-konnector, namespace: kbind-system}]
"#;

#[test]
fn chart_lints_clean_with_default_and_non_default_values() -> Result<()> {
    let non_default = r#"
image: {repository: registry.example.com/kbind/konnector, tag: v9.9.9}
installCRDs: false
replicaCount: 3
leaderElectionID: other-lease
rbac:
  boundResourceGroups: [example.org]
  related: [{resource: secrets, direction: FromProvider, namespaces: [team-a]}, {resource: configmaps, direction: FromConsumer}]
metrics: {port: 9090}
healthProbe: {port: 9091}
extraArgs: [--log-format=json]
imagePullSecrets: [{name: regcred}]
secretNamespace: credentials
createSecretNamespace: false
allowInsecureProvider: true
policies:
  schema: {configMap: schema-policy, key: schema.wasm}
  conflict: {configMap: conflict-policy, key: policy.wasm}
  related: {configMap: related-policy, key: related.wasm}
  placement: {configMap: placement-policy, key: placement.wasm}
"#;
    for values in ["", non_default] {
        assert_lints_clean(values)?;
    }
    Ok(())
}

#[test]
fn values_schema_rejects_a_mistyped_value() -> Result<()> {
    assert_schema_rejects(&[
        ("replicaCount: two", "replicaCount"),
        ("policies: {conflcit: {configMap: x}}", "conflcit"),
        ("allowInsecureProvider: 'yes'", "allowInsecureProvider"),
        ("rbac: {relatd: []}", "relatd"),
        ("createSecretNamespace: 'no'", "createSecretNamespace"),
    ])
}

#[test]
fn default_values_are_the_spec_table() -> Result<()> {
    let read = |file: &str| yaml(&std::fs::read_to_string(format!("{CHART}/{file}"))?);
    // The tag is a placeholder: empty means the chart's appVersion.
    let values = yaml(
        r#"
image: {repository: ghcr.io/kbind/konnector, tag: ""}
installCRDs: true
crds: {keep: true}
replicaCount: 1
leaderElect: false
leaderElectionID: konnector.kbind.io
rbac: {boundResourceGroups: ["*"], related: []}
metrics: {port: 8085}
healthProbe: {port: 8081}
logLevel: info
logFormat: text
extraArgs: []
extraEnv: []
imagePullSecrets: []
secretNamespace: kbind
createSecretNamespace: true
allowInsecureProvider: false
policies:
  schema: {configMap: "", key: policy.wasm}
  conflict: {configMap: "", key: policy.wasm}
  related: {configMap: "", key: policy.wasm}
  placement: {configMap: "", key: policy.wasm}
"#,
    )?;
    assert_fields(&read("values.yaml")?, &values)?;
    let chart = "{apiVersion: v2, name: konnector, version: 0.1.0, appVersion: 0.1.0, \
                 kubeVersion: '>=1.29.0-0'}";
    let chart = yaml(chart)?;
    assert_fields(&read("Chart.yaml")?, &chart)
}

/// The annotation that makes Helm leave an object in place on uninstall.
const KEEP: &str = "  annotations:\n    helm.sh/resource-policy: keep\n";

/// Each committed CRD is rendered as committed, with `extra` as the first lines of its
/// top-level metadata.
fn assert_committed_crds_rendered(values: &str, extra: &str) -> Result<()> {
    let rendered = render(values)?;
    let crds = rendered.of_kind("CustomResourceDefinition");
    assert_eq!(crds.len(), 3, "{:?}", rendered.summary());
    for plural in ["connections", "bindings", "clusterbindings"] {
        let path = format!("{CHART}/files/crds/core.kbind.io_{plural}.yaml");
        let committed = std::fs::read_to_string(&path).context(path)?;
        let expected = committed.replacen("\nmetadata:\n", &format!("\nmetadata:\n{extra}"), 1);
        let name = format!("{plural}.core.kbind.io");
        let doc = crds.iter().find(|d| d.value["metadata"]["name"] == name);
        let doc = doc.with_context(|| format!("CRD {name} not rendered"))?;
        assert_eq!(doc.from, "konnector/templates/crds.yaml");
        // Byte for byte (helm only separates documents with blank lines).
        assert_eq!(doc.text.trim_end(), expected.trim_end(), "{name} differs");
    }
    let on_disk = std::fs::read_dir(format!("{CHART}/files/crds"))?.count();
    assert_eq!(on_disk, 3, "every committed CRD file is rendered");
    Ok(())
}

#[test]
fn default_render_contains_the_committed_crds_kept_on_uninstall() -> Result<()> {
    assert_committed_crds_rendered("", KEEP)
}

#[test]
fn crds_keep_false_renders_the_committed_crds_verbatim() -> Result<()> {
    assert_committed_crds_rendered("crds: {keep: false}", "")
}

#[test]
fn install_crds_false_renders_no_crds() -> Result<()> {
    let rendered = render("installCRDs: false")?;
    let crds = rendered.of_kind("CustomResourceDefinition");
    assert!(crds.is_empty(), "{:?}", rendered.summary());
    // Everything else is still there.
    rendered.expect("{Deployment/kbind-konnector: {}, ClusterRole/kbind-konnector: {}}")
}

#[test]
fn default_deployment_runs_one_konnector_without_leader_election() -> Result<()> {
    let rendered = render("")?;
    // A single konnector without election must never overlap its successor.
    let spec = "spec: {replicas: 1, strategy: {rollingUpdate: {maxSurge: 0}}}";
    let expected = format!("Deployment/kbind-konnector: {{{spec}}}\nargs: {CHART_ARGS}");
    rendered.expect(&expected)?;
    let roles = [rendered.of_kind("Role"), rendered.of_kind("RoleBinding")];
    let lease = roles
        .iter()
        .flatten()
        .filter(|d| d.from.ends_with("leader-election-rbac.yaml"));
    assert_eq!(lease.count(), 0, "no lease Role");
    Ok(())
}

#[test]
fn several_replicas_or_the_leader_elect_value_turn_leader_election_on() -> Result<()> {
    for (values, replicas, lease) in [
        ("replicaCount: 2", 2, "konnector.kbind.io"),
        ("{leaderElect: true, leaderElectionID: team-a}", 1, "team-a"),
    ] {
        let args = election_args(lease);
        render(values)?.expect(&format!(
            "Deployment/kbind-konnector: {{spec: {{replicas: {replicas}}}}}\nargs: {args}{LEASE_RBAC}"
        ))?;
    }
    Ok(())
}

#[test]
fn image_repository_and_tag_are_used() -> Result<()> {
    // The placeholder tag defaults to the chart's appVersion.
    render("")?.expect("container: {image: 'ghcr.io/kbind/konnector:0.1.0'}")?;
    let local = render("image: {repository: local/konnector, tag: git-0123abcd}")?;
    local.expect("container: {image: 'local/konnector:git-0123abcd'}")
}

#[test]
fn image_pull_secrets_are_rendered() -> Result<()> {
    render("")?.expect("pod: {imagePullSecrets: null}")?;
    let secrets = "imagePullSecrets: [{name: regcred}, {name: mirror}]";
    render(secrets)?.expect(&format!("pod: {{{secrets}}}"))
}

#[test]
fn extra_args_are_appended_after_the_chart_flags() -> Result<()> {
    let rendered = render("{replicaCount: 2, extraArgs: [--log-level=debug, --log-format=json]}")?;
    let chart_args = election_args("konnector.kbind.io");
    rendered.expect(&format!(
        "args: {chart_args} --log-level=debug --log-format=json"
    ))
}

#[test]
fn secret_namespace_is_passed_as_a_flag() -> Result<()> {
    let args = CHART_ARGS.replace("=kbind", "=credentials");
    render("secretNamespace: credentials")?.expect(&format!("args: {args}"))
}

#[test]
fn insecure_providers_are_allowed_only_when_the_value_says_so() -> Result<()> {
    render("")?.expect(&format!("args: {CHART_ARGS}"))?;
    let opted_in = render("allowInsecureProvider: true")?;
    opted_in.expect(&format!("args: {CHART_ARGS} --allow-insecure-provider"))
}

#[test]
fn metrics_and_health_ports_flow_into_flags_container_ports_probes_and_service() -> Result<()> {
    for (metrics, health) in [(8085, 8081), (9090, 9091)] {
        let values = format!("{{metrics: {{port: {metrics}}}, healthProbe: {{port: {health}}}}}");
        let rendered = render(&values)?;
        // Liveness /healthz and readiness /readyz, on the named health port.
        rendered.expect(&format!(
            r#"
args: run --metrics-bind-address=:{metrics} --health-probe-bind-address=:{health} --secret-namespace=kbind --provider-grace-period=60s --log-level=info --log-format=text
container:
  ports: [{{name: metrics, containerPort: {metrics}}}, {{name: health, containerPort: {health}}}]
  livenessProbe: {{httpGet: {{path: /healthz, port: health}}}}
  readinessProbe: {{httpGet: {{path: /readyz, port: health}}}}
Service/kbind-konnector-metrics:
  metadata: {{annotations: {{prometheus.io/port: "{metrics}"}}}}
  spec: {{ports: [{{port: {metrics}, targetPort: metrics}}]}}
"#
        ))?;
        let service = &rendered.get("Service", &format!("{FULLNAME}-metrics"))?["spec"]["selector"];
        let pods = &rendered.get("Deployment", FULLNAME)?["spec"]["selector"]["matchLabels"];
        assert_eq!(service, pods, "the Service selects the Pods");
    }
    Ok(())
}

/// The whole environment: the Pod's identity from the downward API, and two glibc malloc arenas.
#[test]
fn pod_identity_comes_from_the_downward_api() -> Result<()> {
    render("")?.expect(
        r#"
container:
  env:
    - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    - {name: POD_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
    - {name: MALLOC_ARENA_MAX, value: "2"}
pod: {serviceAccountName: kbind-konnector}
ServiceAccount/kbind-konnector: {}
"#,
    )
}

#[test]
fn pods_run_non_root_read_only_without_capabilities() -> Result<()> {
    render("")?.expect(
        r#"
pod:
  securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
container:
  securityContext:
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    runAsNonRoot: true
    capabilities: {drop: [ALL]}
    seccompProfile: {type: RuntimeDefault}
"#,
    )
}

#[test]
fn scheduling_values_reach_the_pod() -> Result<()> {
    let scheduling = r#"
  nodeSelector: {kubernetes.io/os: linux}
  tolerations: [{key: dedicated, operator: Equal, value: kbind, effect: NoSchedule}]
  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [system]}]}]}}}
"#;
    let resources = "resources: {requests: {cpu: 10m}, limits: {memory: 1Gi}}";
    let rendered = render(&format!("{scheduling}  {resources}"))?;
    rendered.expect(&format!("pod: {scheduling}container: {{{resources}}}"))
}

#[test]
fn namespaced_objects_land_in_the_release_namespace() -> Result<()> {
    let rendered = render("replicaCount: 2")?;
    for kind in "ServiceAccount Deployment Service Role RoleBinding".split(' ') {
        let docs = rendered.of_kind(kind);
        assert!(!docs.is_empty(), "no {kind} rendered");
        // The credential Role and its binding live in secretNamespace (see rbac.rs).
        let docs = docs
            .into_iter()
            .filter(|d| !d.from.ends_with("secret-namespace.yaml"));
        for doc in docs {
            let namespace = &doc.value["metadata"]["namespace"];
            assert_eq!(namespace, NAMESPACE, "{kind} from {}", doc.from);
        }
    }
    Ok(())
}
