//! Swapping policy modules through ConfigMaps.

use super::*;

#[test]
fn a_policy_config_map_mounts_the_module_and_sets_the_flag() -> Result<()> {
    let rendered =
        render("policies: {conflict: {configMap: my-conflict-policy, key: conflict.wasm}}")?;
    // Only the role that was set is swapped, and its flag points at the mounted key.
    let args = format!("args: {CHART_ARGS} --conflict-policy=/policies/conflict/policy.wasm");
    rendered.expect(&(args
        + r#"
container:
  volumeMounts: [{name: tmp}, {name: policy-conflict, mountPath: /policies/conflict, readOnly: true}]
pod:
  volumes:
    - name: tmp
    - {name: policy-conflict, configMap: {name: my-conflict-policy, items: [{key: conflict.wasm, path: policy.wasm}]}}
"#))
}

#[test]
fn a_placement_config_map_mounts_the_module_and_sets_the_placement_flag() -> Result<()> {
    let rendered = render("policies: {placement: {configMap: my-placement, key: placement.wasm}}")?;
    let args = format!("args: {CHART_ARGS} --placement-policy=/policies/placement/policy.wasm");
    rendered.expect(&(args
        + r#"
container:
  volumeMounts: [{name: tmp}, {name: policy-placement, mountPath: /policies/placement, readOnly: true}]
pod:
  volumes:
    - name: tmp
    - {name: policy-placement, configMap: {name: my-placement, items: [{key: placement.wasm, path: policy.wasm}]}}
"#))
}

#[test]
fn every_policy_role_can_be_swapped() -> Result<()> {
    let rendered = render(
        r#"
policies:
  schema: {configMap: schema-cm, key: policy.wasm}
  conflict: {configMap: conflict-cm, key: policy.wasm}
  related: {configMap: related-cm, key: policy.wasm}
  placement: {configMap: placement-cm, key: policy.wasm}
"#,
    )?;
    // Each role gets its own file.
    let flags = ["schema", "conflict", "related", "placement"]
        .map(|role| format!("--{role}-policy=/policies/{role}/policy.wasm"));
    rendered.expect(&format!(
        r#"
args: {CHART_ARGS} {}
pod:
  volumes:
    - name: tmp
    - configMap: {{name: schema-cm}}
    - configMap: {{name: conflict-cm}}
    - configMap: {{name: related-cm}}
    - configMap: {{name: placement-cm}}
"#,
        flags.join(" ")
    ))
}

#[test]
fn no_policy_config_map_means_the_built_in_modules() -> Result<()> {
    render("")?.expect(&format!(
        "{{args: {CHART_ARGS}, pod: {{volumes: [{{name: tmp, configMap: null}}]}}}}"
    ))
}
