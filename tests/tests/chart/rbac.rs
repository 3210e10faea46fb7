//! Consumer RBAC as "Consumer permissions" describes it, and the install notes.

use super::*;

/// The ClusterRole's fixed rules, in the chart's order: core kbind objects with their
/// status and finalizers, CRDs, credential Secrets, namespaces and Events. No ConfigMap
/// rule, no lease rule (leases come only with the leader-election Role), no wildcard group.
const FIXED_RULES: &str = r#"
- apiGroups: [core.kbind.io]
  resources: [connections, bindings, clusterbindings]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [core.kbind.io]
  resources: [connections/status, bindings/status, clusterbindings/status, connections/finalizers, bindings/finalizers, clusterbindings/finalizers]
  verbs: [get, update, patch]
- {apiGroups: [apiextensions.k8s.io], resources: [customresourcedefinitions], verbs: [get, list, watch, create, update, patch, delete]}
- {apiGroups: [""], resources: [secrets], verbs: [get, list, watch, update, patch]}
- {apiGroups: [""], resources: [namespaces], verbs: [get, list, watch, create]}
- {apiGroups: ["", events.k8s.io], resources: [events], verbs: [create, patch, update]}
"#;

fn fixed_rules() -> Result<Vec<Value>> {
    Ok(serde_yaml::from_value(yaml(FIXED_RULES)?)?)
}

/// The configurable rule: ordinary CRUD/watch on every resource of `groups` (a YAML list).
fn bound_rule(groups: &str) -> Result<Value> {
    yaml(&format!(
        "{{apiGroups: {groups}, resources: ['*'], verbs: [get, list, watch, create, update, patch, delete]}}"
    ))
}

#[test]
fn consumer_rbac_has_the_fixed_rules_of_the_spec() -> Result<()> {
    let rendered = render("")?;
    let rules = rendered.cluster_role_rules()?;
    let (_, fixed) = rules.split_last().context("the ClusterRole has no rules")?;
    assert_eq!(fixed, fixed_rules()?);
    rendered.expect(
        r#"
ClusterRoleBinding/kbind-konnector:
  roleRef: {kind: ClusterRole, name: kbind-konnector}
  subjects: [{kind: ServiceAccount, name: kbind-konnector, namespace: kbind-system}]
"#,
    )
}

#[test]
fn fixed_secret_rule_reads_and_updates_but_never_creates_or_deletes() -> Result<()> {
    let rules = render("")?.cluster_role_rules()?;
    let secrets: Vec<&Value> = rules
        .iter()
        .filter(|r| {
            r["resources"]
                .as_sequence()
                .is_some_and(|s| s.contains(&"secrets".into()))
        })
        .collect();
    let expected =
        yaml("{apiGroups: [''], resources: [secrets], verbs: [get, list, watch, update, patch]}")?;
    assert_eq!(secrets, [&expected]);
    Ok(())
}

#[test]
fn default_bound_resource_groups_grant_crud_on_every_group() -> Result<()> {
    let rules = render("")?.cluster_role_rules()?;
    assert_eq!(rules.last(), Some(&bound_rule("['*']")?));
    Ok(())
}

#[test]
fn bound_resource_groups_narrow_only_the_configurable_rule() -> Result<()> {
    // The spec's example, passed as a values file.
    let narrowed = render("rbac:\n  boundResourceGroups:\n    - example.org\n")?;
    let mut expected = fixed_rules()?;
    expected.push(bound_rule("[example.org]")?);
    assert_eq!(narrowed.cluster_role_rules()?, expected);

    let several = render("rbac: {boundResourceGroups: [example.org, widgets.io]}")?;
    let rules = several.cluster_role_rules()?;
    assert_eq!(
        rules.last(),
        Some(&bound_rule("[example.org, widgets.io]")?)
    );
    Ok(())
}

#[test]
fn empty_bound_resource_groups_drop_the_configurable_rule() -> Result<()> {
    let rules = render("rbac: {boundResourceGroups: []}")?.cluster_role_rules()?;
    assert_eq!(rules, fixed_rules()?);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// NOTES

#[test]
fn notes_give_the_teardown_order_and_say_probes_are_process_checks() -> Result<()> {
    let out = run_helm(&[
        "install",
        RELEASE,
        CHART,
        "--namespace",
        NAMESPACE,
        "--dry-run=client",
    ])?;
    let (_, notes) = out.split_once("NOTES:").context("helm printed no NOTES")?;
    assert!(notes.contains("process checks"), "{notes}");
    assert!(notes.contains("DrainingBindings"), "{notes}");
    let positions = [
        "Delete Bindings and ClusterBindings",
        "Delete Connections",
        "Delete the credential Secrets",
        "uninstall the release",
    ]
    .map(|step| {
        notes
            .find(step)
            .with_context(|| format!("NOTES lack {step:?}:\n{notes}"))
    });
    let positions = positions.into_iter().collect::<Result<Vec<_>>>()?;
    assert!(
        positions.is_sorted(),
        "teardown order is bindings, Connection, Secret, then the release:\n{notes}"
    );
    Ok(())
}
