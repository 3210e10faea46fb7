//! Consumer RBAC as "Consumer permissions" describes it (fixed rules, the bound groups, the
//! credential Role in secretNamespace, related grants per kind and direction), and the
//! install notes.

use super::*;

/// The ClusterRole's fixed rules, in the chart's order: core kbind objects with their
/// status and finalizers, CRDs, namespaces and Events. No Secret rule (credential Secrets are
/// a Role in secretNamespace), no ConfigMap rule, no lease rule (leases come only with the
/// leader-election Role), no wildcard group.
const FIXED_RULES: &str = r#"
    - {apiGroups: [core.kbind.io], resources: [connections, bindings, clusterbindings], verbs: [get, list, watch, create, update, patch, delete]}
    - apiGroups: [core.kbind.io]
      resources: [connections/status, bindings/status, clusterbindings/status, connections/finalizers, bindings/finalizers, clusterbindings/finalizers]
      verbs: [get, update, patch]
    - {apiGroups: [apiextensions.k8s.io], resources: [customresourcedefinitions], verbs: [get, list, watch, create, update, patch, delete]}
    - {apiGroups: [""], resources: [namespaces], verbs: [get, list, watch, create]}
    - {apiGroups: ["", events.k8s.io], resources: [events], verbs: [create, patch, update]}
"#;

/// The expected ClusterRole: the fixed rules, then the configurable rule (ordinary
/// CRUD/watch on every resource) over `groups`, a YAML list, unless it is empty.
fn cluster_role(groups: &str) -> String {
    let bound = format!(
        "    - {{apiGroups: {groups}, resources: ['*'], verbs: [get, list, watch, create, update, patch, delete]}}\n"
    );
    let bound = if groups == "[]" { "" } else { &bound };
    format!("ClusterRole/kbind-konnector:\n  rules:{FIXED_RULES}{bound}")
}

/// The credential Role and its binding in `namespace`: read, watch and finalize, never create
/// or delete.
fn credential_rbac(namespace: &str) -> String {
    format!(
        r#"
Role/kbind-konnector-credentials:
  metadata: {{namespace: {namespace}}}
  rules: [{{apiGroups: [""], resources: [secrets], verbs: [get, list, watch, update, patch]}}]
RoleBinding/kbind-konnector-credentials:
  metadata: {{namespace: {namespace}}}
  roleRef: {{kind: Role, name: kbind-konnector-credentials}}
  subjects: [{{kind: ServiceAccount, name: kbind-konnector, namespace: kbind-system}}]
"#
    )
}

/// The names of the rendered objects of `kind`.
fn names<'r>(rendered: &'r Rendered, kind: &str) -> Vec<&'r Value> {
    let docs = rendered.of_kind(kind).into_iter();
    docs.map(|d| &d.value["metadata"]["name"]).collect()
}

#[test]
fn default_consumer_rbac_is_the_fixed_rules_and_crud_on_every_group() -> Result<()> {
    let binding = r#"
ClusterRoleBinding/kbind-konnector:
  roleRef: {kind: ClusterRole, name: kbind-konnector}
  subjects: [{kind: ServiceAccount, name: kbind-konnector, namespace: kbind-system}]
"#;
    let rendered = render("")?;
    rendered.expect(&format!("{}{binding}", cluster_role("['*']")))?;
    // Nothing for related copies unless rbac.related asks.
    assert_eq!(names(&rendered, "ClusterRole"), ["kbind-konnector"]);
    Ok(())
}

#[test]
fn bound_resource_groups_narrow_only_the_configurable_rule() -> Result<()> {
    // The spec's example, passed as a values file.
    let narrowed = render("rbac:\n  boundResourceGroups:\n    - example.org\n")?;
    narrowed.expect(&cluster_role("[example.org]"))?;
    let several = render("rbac: {boundResourceGroups: [example.org, widgets.io]}")?;
    several.expect(&cluster_role("[example.org, widgets.io]"))
}

#[test]
fn empty_bound_resource_groups_drop_the_configurable_rule() -> Result<()> {
    render("rbac: {boundResourceGroups: []}")?.expect(&cluster_role("[]"))
}

#[test]
fn credential_secrets_are_readable_only_in_the_secret_namespace() -> Result<()> {
    render("")?.expect(&credential_rbac("kbind"))?;
    let elsewhere = render("secretNamespace: credentials")?;
    elsewhere.expect(&credential_rbac("credentials"))?;
    // No cluster-wide rule names Secrets.
    for role in elsewhere.of_kind("ClusterRole") {
        let rules = serde_saphyr::to_string(&role.value["rules"])?;
        assert!(!rules.contains("secrets"), "{}", role.text);
    }
    Ok(())
}

#[test]
fn the_secret_namespace_is_created_unless_turned_off_and_kept_on_uninstall() -> Result<()> {
    // helm template cannot look the namespace up, so it renders it; against a cluster the
    // lookup leaves an existing namespace alone (the installed tests run with it existing).
    let rendered = render("secretNamespace: credentials")?;
    rendered.expect(
        "Namespace/credentials: {metadata: {annotations: {helm.sh/resource-policy: keep}}}",
    )?;
    let off = render("{secretNamespace: credentials, createSecretNamespace: false}")?;
    assert!(off.of_kind("Namespace").is_empty(), "{:?}", off.summary());
    off.expect(&credential_rbac("credentials"))
}

#[test]
fn related_grants_are_exactly_the_kinds_directions_and_namespaces_asked_for() -> Result<()> {
    let rendered = render(
        r#"
rbac:
  related:
    - {resource: secrets, direction: FromProvider, namespaces: [team-a, team-b]}
    - {resource: configmaps, direction: FromConsumer}
"#,
    )?;
    let subjects = "[{kind: ServiceAccount, name: kbind-konnector, namespace: kbind-system}]";
    // FromProvider on the consumer: the copies, listed metadata-only, read, created, applied,
    // replaced and deleted; no watch. FromConsumer: the sources, listed and read.
    let copies = "[{apiGroups: [''], resources: [secrets], verbs: [get, list, create, update, patch, delete]}]";
    let sources = "[{apiGroups: [''], resources: [configmaps], verbs: [get, list]}]";
    let mut expected = String::new();
    for namespace in ["team-a", "team-b"] {
        let name = "kbind-konnector-related-secrets-fromprovider";
        expected += &format!("Role/{namespace}/{name}: {{rules: {copies}}}\n");
        expected += &format!(
            "RoleBinding/{namespace}/{name}: {{roleRef: {{kind: Role, name: {name}}}, subjects: {subjects}}}\n"
        );
    }
    let name = "kbind-konnector-related-configmaps-fromconsumer";
    expected += &format!("ClusterRole/{name}: {{rules: {sources}}}\n");
    expected += &format!(
        "ClusterRoleBinding/{name}: {{roleRef: {{kind: ClusterRole, name: {name}}}, subjects: {subjects}}}\n"
    );
    rendered.expect(&expected)?;
    // Nothing else: one Role per namespace asked for, one ClusterRole for the rest.
    let related = rendered
        .0
        .iter()
        .filter(|d| d.from.ends_with("related-rbac.yaml"));
    assert_eq!(related.count(), 6, "{:?}", rendered.summary());
    Ok(())
}

#[test]
fn related_grants_refuse_duplicates_protected_namespaces_and_unknown_kinds() -> Result<()> {
    for (values, says) in [
        (
            "rbac: {related: [{resource: secrets, direction: FromProvider}, {resource: secrets, direction: FromProvider, namespaces: [a]}]}",
            "listed twice",
        ),
        (
            "rbac: {related: [{resource: secrets, direction: FromProvider, namespaces: [kbind]}]}",
            "never copies secrets in namespace kbind",
        ),
        (
            "rbac: {related: [{resource: secrets, direction: FromConsumer, namespaces: [kbind-system]}]}",
            "never copies secrets in namespace kbind-system",
        ),
        (
            "rbac: {related: [{resource: pods, direction: FromProvider}]}",
            "resource",
        ),
        (
            "rbac: {related: [{resource: secrets, direction: Both}]}",
            "direction",
        ),
    ] {
        let Err(err) = render(values) else {
            bail!("{values:?} rendered");
        };
        assert!(format!("{err:#}").contains(says), "{values}: {err:#}");
    }
    Ok(())
}

/// What `helm install --dry-run=client` prints (NOTES included) with `values` as the values
/// file.
pub(super) fn dry_run_install(values: &str) -> Result<String> {
    let install = [
        "install",
        RELEASE,
        CHART,
        "-n",
        NAMESPACE,
        "--dry-run=client",
        "-f",
        "-",
    ];
    run_helm(&install, values)
}

#[test]
fn notes_give_the_teardown_order_and_say_probes_are_process_checks() -> Result<()> {
    let out = dry_run_install("")?;
    let (_, notes) = out.split_once("NOTES:").context("helm printed no NOTES")?;
    assert!(notes.contains("process checks"), "{notes}");
    assert!(notes.contains("DrainingBindings"), "{notes}");
    // What the release can and cannot sync.
    for says in [
        "Bound APIs: every API group",
        "Credential Secrets: in namespace kbind only",
        "rbac.boundResourceGroups includes \"*\"",
    ] {
        assert!(notes.contains(says), "{says:?} not in {notes}");
    }
    // In teardown order: bindings, Connections, credential Secrets, then the release.
    let mut rest = notes;
    for step in [
        "Delete Bindings and ClusterBindings",
        "Delete Connections",
        "Delete the credential Secrets",
        "uninstall the release",
    ] {
        let after = rest.split_once(step).map(|(_, after)| after);
        rest = after.with_context(|| format!("no {step:?} after the steps before:\n{notes}"))?;
    }
    Ok(())
}

#[test]
fn notes_say_what_a_narrowed_release_can_and_cannot_sync() -> Result<()> {
    let values = r#"
rbac:
  boundResourceGroups: [example.org]
  related: [{resource: secrets, direction: FromProvider, namespaces: [team-a]}]
"#;
    let out = dry_run_install(values)?;
    let (_, notes) = out.split_once("NOTES:").context("helm printed no NOTES")?;
    for says in [
        "Bound APIs: the API groups example.org only",
        "outside them reports PermissionDenied=True, reason Forbidden",
        "secrets FromProvider in namespace(s) team-a",
        "Any other kind, direction or namespace reports RelatedResourcesSynced=False",
    ] {
        assert!(notes.contains(says), "{says:?} not in {notes}");
    }
    assert!(!notes.contains("includes \"*\""), "{notes}");
    let none = dry_run_install("rbac: {boundResourceGroups: [example.org]}")?;
    let says = "none; a binding with relatedResources reports RelatedResourcesSynced=False";
    assert!(none.contains(says), "{none}");
    Ok(())
}
