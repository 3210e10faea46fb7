//! Consumer RBAC as "Consumer permissions" describes it, and the install notes.

use super::*;

/// The ClusterRole's fixed rules, in the chart's order: core kbind objects with their
/// status and finalizers, CRDs, credential Secrets (read and update, never create or delete),
/// namespaces and Events. No ConfigMap rule, no lease rule (leases come only with the
/// leader-election Role), no wildcard group.
const FIXED_RULES: &str = r#"
    - {apiGroups: [core.kbind.io], resources: [connections, bindings, clusterbindings], verbs: [get, list, watch, create, update, patch, delete]}
    - apiGroups: [core.kbind.io]
      resources: [connections/status, bindings/status, clusterbindings/status, connections/finalizers, bindings/finalizers, clusterbindings/finalizers]
      verbs: [get, update, patch]
    - {apiGroups: [apiextensions.k8s.io], resources: [customresourcedefinitions], verbs: [get, list, watch, create, update, patch, delete]}
    - {apiGroups: [""], resources: [secrets], verbs: [get, list, watch, update, patch]}
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

#[test]
fn default_consumer_rbac_is_the_fixed_rules_and_crud_on_every_group() -> Result<()> {
    let binding = r#"
ClusterRoleBinding/kbind-konnector:
  roleRef: {kind: ClusterRole, name: kbind-konnector}
  subjects: [{kind: ServiceAccount, name: kbind-konnector, namespace: kbind-system}]
"#;
    render("")?.expect(&format!("{}{binding}", cluster_role("['*']")))
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
fn notes_give_the_teardown_order_and_say_probes_are_process_checks() -> Result<()> {
    let install = [
        "install",
        RELEASE,
        CHART,
        "-n",
        NAMESPACE,
        "--dry-run=client",
    ];
    let out = run_helm(&install, "")?;
    let (_, notes) = out.split_once("NOTES:").context("helm printed no NOTES")?;
    assert!(notes.contains("process checks"), "{notes}");
    assert!(notes.contains("DrainingBindings"), "{notes}");
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
