//! Consumer RBAC as "Consumer permissions" describes it, and the install notes.

use super::*;

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
    // Narrowing to one API group through a values file passed with -f.
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
