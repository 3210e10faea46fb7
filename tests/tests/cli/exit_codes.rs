//! The exit codes scripts rely on: 1 with the reason and what to do when the konnector
//! refuses a Connection or cannot finish a binding's teardown, 1 for missing objects, 2 for
//! usage errors.

use anyhow::{Context as _, Result, ensure};
use kbind_tests::syncenv::gone;
use kbind_tests::syncenv::remains::{Left::Gone, expect_left, kind};
use konnector::api::{Binding, Connection};
use konnector::k8s::ApiErrorExt as _;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kubectl_kbind::hints::what_to_do;
use serde_json::json;

use super::{Cli, TIMEOUT};

/// A provider kubeconfig the konnector refuses: TLS verification off.
const INSECURE_KUBECONFIG: &str = "apiVersion: v1\nkind: Config\ncurrent-context: p\nclusters:\n- name: p\n  cluster: {server: \"https://127.0.0.1:1\", insecure-skip-tls-verify: true}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: p\n  context: {cluster: p, user: u}\n";

#[test]
fn an_unusable_provider_kubeconfig_fails_connect_with_the_reason_and_what_to_do() -> Result<()> {
    Cli::run("insecure", async |c| {
        let path = c.pair.root().join("insecure.kubeconfig");
        std::fs::write(&path, INSECURE_KUBECONFIG)?;
        let kubeconfig = path.to_str().context("path is not UTF-8")?;
        let connect = ["connect", "insecure", "--provider-kubeconfig", kubeconfig];
        let connect = [&connect[..], &["--timeout", TIMEOUT]].concat();
        let refused = c.kbind(&connect).await?;
        refused.expect(1, &["KubeconfigUnusable", "what to do: embed credentials"])?;
        c.ok(&["disconnect", "insecure"], &[]).await?;
        expect_left(&[(&c.consumer, kind::<Connection>(), "insecure", Gone)]).await
    })
}

#[test]
fn usage_errors_exit_2_and_missing_objects_exit_1() -> Result<()> {
    let cases = [
        ("bind widgets --connection p", 2),
        ("bind w.x --connection p -n a --cluster", 2),
        (
            "provider-rbac --subject-kind ServiceAccount --subject k --api w.x",
            2,
        ),
        ("status --no-such-flag", 2),
        ("bind w.x --connection does-not-exist -n a", 1),
        ("unbind does-not-exist -n a", 1),
        ("unbind does-not-exist -n a --ignore-not-found", 0),
    ];
    Cli::run("usage", async |c| {
        for (line, code) in cases {
            let run = c.kbind(&line.split(' ').collect::<Vec<_>>()).await?;
            run.expect(code, &[]).context(line)?;
        }
        Ok(())
    })
}

#[test]
fn an_unbind_blocked_by_provider_rbac_names_the_failed_step_and_what_to_do() -> Result<()> {
    Cli::run("blocked", async |c| {
        let (identity, rbac) = c.konnector_identity(&[]).await?;
        // Everything but deleting provider copies: `delete` off the rules of the API's group.
        let mut without_delete = rbac.clone();
        let rules = without_delete.iter_mut().flat_map(|d| d.get_mut("rules"));
        for rule in rules.flat_map(|r| r.as_array_mut()).flatten() {
            if rule["apiGroups"] == json!([c.api.group])
                && let Some(verbs) = rule["verbs"].as_array_mut()
            {
                verbs.retain(|v| v != "delete");
            }
        }
        c.apply_on_provider(&without_delete).await?;
        c.connect(&identity, &["--schema-source", "CRD"]).await?;
        c.bind(&["-n", "blocked"]).await?;
        c.create_synced("w", json!({"size": 1})).await?;

        // The provider refuses the copy's delete: unbind gives up after --timeout and says
        // which step failed and what to do, from the binding's TeardownFailed condition.
        let step =
            "TeardownFailed=True reason Forbidden: teardown blocked: deleting provider copy w";
        let hint = format!("what to do: {}", what_to_do("Forbidden"));
        let unbind = ["unbind", "widgets", "-n", "blocked", "--timeout", "30s"];
        let blocked = c.kbind(&unbind).await?.expect(1, &[step, &hint])?;
        ensure!(!blocked.stderr.contains("konnector log"), "{blocked:?}");

        // Granted again, the same unbind finishes, and so does the disconnect. The konnector
        // backs a failing teardown off (up to minutes after many attempts); a change to the
        // binding has it retry at once.
        c.apply_on_provider(&rbac).await?;
        let nudge = Patch::Merge(json!({"metadata": {"annotations": {"kbind.test/retry": "now"}}}));
        let bindings = Api::<Binding>::namespaced(c.consumer.clone(), "blocked");
        let params = PatchParams::default();
        let nudged = bindings.patch("widgets", &params, &nudge).await;
        // The retry may finish first: then there is nothing left to follow.
        let fine = nudged.as_ref().map_or_else(|e| e.is_not_found(), |_| true);
        ensure!(fine, "nudging the Binding: {nudged:?}");
        let unbind = ["unbind", "widgets", "-n", "blocked", "--ignore-not-found"];
        c.ok(&unbind, &[]).await?;
        gone(&c.copies, "w").await?;
        c.ok(&["disconnect", "blocked"], &[]).await?;
        expect_left(&[
            (&c.consumer, kind::<Binding>(), "blocked/widgets", Gone),
            (&c.consumer, kind::<Connection>(), "blocked", Gone),
        ])
        .await
    })
}
