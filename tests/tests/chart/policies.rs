//! Swapping policy modules through ConfigMaps.

use super::*;

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
