//! Lint, the values table, CRDs, the Deployment and its arguments, ports and pod settings.

use super::*;

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
allowInsecureProvider: true
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
    assert_eq!(values["allowInsecureProvider"], Value::Bool(false));
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
fn insecure_providers_are_allowed_only_when_the_value_says_so() -> Result<()> {
    let opt_in = "--allow-insecure-provider";
    let default = render(&[])?.args()?;
    assert!(!default.iter().any(|a| a == opt_in), "{default:?}");
    let opted_in = render(&["--set", "allowInsecureProvider=true"])?.args()?;
    assert!(opted_in.iter().any(|a| a == opt_in), "{opted_in:?}");
    let err = run_helm(&[
        "template",
        RELEASE,
        chart_dir().to_str().context("chart path is not UTF-8")?,
        "--set-string",
        "allowInsecureProvider=yes",
    ])
    .expect_err("a string allowInsecureProvider must fail the values schema");
    assert!(err.to_string().contains("allowInsecureProvider"), "{err:#}");
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
