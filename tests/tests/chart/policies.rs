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

#[test]
fn a_policy_reference_is_mounted_as_a_references_file_beside_the_digest_cache() -> Result<()> {
    let rendered = render(
        r#"
policies: {placement: {ref: "oci://ghcr.io/acme/placement:v1.2.3"}}
policyRegistry: {pullSecret: policy-pull, plainHTTP: [registry.lab:5000], cache: {sizeLimit: 64Mi}}
"#,
    )?;
    // The reference goes through a mounted file the konnector reads again, so that a changed
    // reference (helm upgrade) is swapped in without a Pod restart.
    let args = format!(
        "args: {CHART_ARGS} --policy-refs-file=/etc/kbind/policy-refs/refs.yaml \
         --policy-cache-dir=/var/cache/kbind/policies --policy-pull-secret=policy-pull \
         --policy-plain-http-registry=registry.lab:5000"
    );
    rendered.expect(
        &(args
            + r#"
container:
  volumeMounts:
    - {name: tmp}
    - {name: policy-cache, mountPath: /var/cache/kbind/policies}
    - {name: policy-refs, mountPath: /etc/kbind/policy-refs, readOnly: true}
pod:
  volumes:
    - name: tmp
    - {name: policy-cache, emptyDir: {sizeLimit: 64Mi}}
    - {name: policy-refs, configMap: {name: kbind-konnector-policy-refs}}
ConfigMap/kbind-system/kbind-konnector-policy-refs:
  data: {refs.yaml: "placement: \"oci://ghcr.io/acme/placement:v1.2.3\"\n"}
"#),
    )
}

#[test]
fn a_role_with_both_a_reference_and_a_config_map_is_refused() -> Result<()> {
    let refused = render(
        "policies: {conflict: {ref: \"oci://ghcr.io/acme/conflict:v1\", configMap: cm, key: policy.wasm}}",
    );
    let Err(error) = refused else {
        anyhow::bail!("a role with two modules rendered");
    };
    assert!(
        error
            .to_string()
            .contains("policies.conflict: set ref or configMap, not both"),
        "{error:#}"
    );
    Ok(())
}

#[test]
fn a_malformed_policy_reference_is_refused_by_the_values_schema() -> Result<()> {
    for values in [
        "policies: {conflict: {ref: \"ghcr.io/acme/conflict:v1\", configMap: \"\", key: policy.wasm}}",
        "policies: {conflict: {ref: \"oci://ghcr.io/acme/conflict@sha256:abc\", configMap: \"\", key: policy.wasm}}",
    ] {
        let Err(error) = render(values) else {
            anyhow::bail!("{values} passed the values schema");
        };
        assert!(error.to_string().contains("ref"), "{values}: {error:#}");
    }
    Ok(())
}

#[test]
fn policy_settings_go_beside_the_reference_or_into_the_settings_flag() -> Result<()> {
    let rendered = render(
        r#"
policies:
  placement: {ref: "oci://ghcr.io/acme/placement:v2", settings: {zone: eu-1}}
  conflict: {settings: {strict: true}}
"#,
    )?;
    // With a reference, the settings travel in the references file (swapped live with it);
    // for the built-in or a ConfigMap module, in the role's settings flag.
    let args = format!(
        "args: {CHART_ARGS} --conflict-policy-settings={{\"strict\":true}} \
         --policy-refs-file=/etc/kbind/policy-refs/refs.yaml \
         --policy-cache-dir=/var/cache/kbind/policies"
    );
    rendered.expect(
        &(args
            + r#"
ConfigMap/kbind-system/kbind-konnector-policy-refs:
  data: {refs.yaml: "placement: {\"module\":\"oci://ghcr.io/acme/placement:v2\",\"settings\":{\"zone\":\"eu-1\"}}\n"}
"#),
    )
}

#[test]
fn policy_verification_mounts_the_trusted_keys_and_sets_the_verification_flags() -> Result<()> {
    let rendered = render(
        r#"
policies: {conflict: {ref: "oci://ghcr.io/acme/conflict:v1"}}
policyRegistry:
  verification:
    publicKeys: ["-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n"]
    keyless: {issuer: "https://token.actions.githubusercontent.com", subject: "ci@acme.example", trustedRoot: "{}"}
"#,
    )?;
    let args = format!(
        "args: {CHART_ARGS} --policy-refs-file=/etc/kbind/policy-refs/refs.yaml \
         --policy-cache-dir=/var/cache/kbind/policies \
         --policy-verify-key=/etc/kbind/policy-verification/key-0.pub \
         --policy-verify-issuer=https://token.actions.githubusercontent.com \
         --policy-verify-subject=ci@acme.example \
         --policy-trust-root=/etc/kbind/policy-verification/trusted_root.json"
    );
    rendered.expect(
        &(args
            + r#"
container:
  volumeMounts:
    - {name: tmp}
    - {name: policy-cache, mountPath: /var/cache/kbind/policies}
    - {name: policy-refs, mountPath: /etc/kbind/policy-refs, readOnly: true}
    - {name: policy-verification, mountPath: /etc/kbind/policy-verification, readOnly: true}
pod:
  volumes:
    - name: tmp
    - {name: policy-cache, emptyDir: {sizeLimit: 256Mi}}
    - {name: policy-refs, configMap: {name: kbind-konnector-policy-refs}}
    - {name: policy-verification, configMap: {name: kbind-konnector-policy-verification}}
ConfigMap/kbind-system/kbind-konnector-policy-verification:
  data:
    key-0.pub: "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n"
    trusted_root.json: "{}"
"#),
    )
}

#[test]
fn a_keyless_identity_without_its_trust_root_is_refused() -> Result<()> {
    let refused = render(
        r#"
policies: {conflict: {ref: "oci://ghcr.io/acme/conflict:v1"}}
policyRegistry: {verification: {keyless: {issuer: "https://issuer.example", subject: "ci@acme.example"}}}
"#,
    );
    let Err(error) = refused else {
        anyhow::bail!("a keyless identity without a trust root rendered");
    };
    assert!(
        error
            .to_string()
            .contains("set issuer, subject and trustedRoot together"),
        "{error:#}"
    );
    Ok(())
}
