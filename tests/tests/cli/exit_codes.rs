//! The exit codes scripts rely on: 1 with the reason and what to do when the konnector
//! refuses a Connection or cannot finish a binding's teardown, 1 for missing objects, 2 for
//! usage errors.

use anyhow::{Result, ensure};
use kbind_tests::syncenv::wait_for;
use konnector::api::{Binding, Connection};
use konnector::k8s::ApiErrorExt as _;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use super::least_privilege::apply_all;
use super::{
    TIMEOUT, WAIT, bind, connect, diagnose, disconnect, kbind, konnector_service_account, path_str,
    service_account_rbac, setup, write_file,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_provider_kubeconfig_fails_connect_with_the_reason_and_what_to_do() -> Result<()>
{
    let pair = setup().await?;
    diagnose(pair, async {
        let insecure = write_file(
            pair,
            "insecure.kubeconfig",
            "apiVersion: v1\nkind: Config\ncurrent-context: p\nclusters:\n- name: p\n  cluster: {server: \"https://127.0.0.1:1\", insecure-skip-tls-verify: true}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: p\n  context: {cluster: p, user: u}\n",
        )?;
        let run = kbind(pair, &["connect", "insecure", "--provider-kubeconfig", path_str(&insecure)?, "--timeout", TIMEOUT])
            .await?
            .expect(1)?;
        ensure!(run.stderr.contains("KubeconfigUnusable"), "{run:?}");
        ensure!(run.stderr.contains("what to do: embed credentials"), "{run:?}");
        disconnect(pair, "insecure", &[]).await?;
        let consumer = pair.consumer.client().await?;
        ensure!(Api::<Connection>::all(consumer).get_opt("insecure").await?.is_none(), "Connection left");
        anyhow::Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_errors_exit_2_and_missing_objects_exit_1() -> Result<()> {
    let pair = setup().await?;
    diagnose(pair, async {
        kbind(pair, &["bind", "widgets", "--connection", "p"])
            .await?
            .expect(2)?;
        kbind(
            pair,
            &["bind", "w.x", "--connection", "p", "-n", "a", "--cluster"],
        )
        .await?
        .expect(2)?;
        kbind(
            pair,
            &[
                "provider-rbac",
                "--subject-kind",
                "ServiceAccount",
                "--subject",
                "k",
                "--api",
                "w.x",
            ],
        )
        .await?
        .expect(2)?;
        kbind(pair, &["status", "--no-such-flag"])
            .await?
            .expect(2)?;
        kbind(
            pair,
            &["bind", "w.x", "--connection", "does-not-exist", "-n", "a"],
        )
        .await?
        .expect(1)?;
        kbind(pair, &["unbind", "does-not-exist", "-n", "a"])
            .await?
            .expect(1)?;
        kbind(
            pair,
            &["unbind", "does-not-exist", "-n", "a", "--ignore-not-found"],
        )
        .await?
        .expect(0)?;
        anyhow::Ok(())
    })
    .await
}

/// `provider-rbac` output with `delete` taken off the rules of API group `group`: everything
/// but deleting provider copies.
fn without_delete(yaml: &str, group: &str) -> Result<String> {
    let mut out = String::new();
    for document in serde_yaml::Deserializer::from_str(yaml) {
        let mut doc: Value = serde::Deserialize::deserialize(document)?;
        if doc.is_null() {
            continue;
        }
        if let Some(rules) = doc["rules"].as_array_mut() {
            for rule in rules
                .iter_mut()
                .filter(|r| r["apiGroups"] == json!([group]))
            {
                if let Some(verbs) = rule["verbs"].as_array_mut() {
                    verbs.retain(|v| v != "delete");
                }
            }
        }
        out += "---\n";
        out += &serde_yaml::to_string(&doc)?;
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbind_blocked_by_provider_rbac_names_the_failed_step_and_what_to_do() -> Result<()> {
    let pair = setup().await?;
    let group = "blocked.e2e.kbind.io";
    let api = format!("widgets.{group}");
    let ns = "blk-ns";
    diagnose(pair, async {
        let (provider, identity) = konnector_service_account(pair, group, "blk-system").await?;
        let rbac = service_account_rbac(pair, "blk-system", &api, &[], "kbind-blk").await?;
        apply_all(&provider, &without_delete(&rbac.stdout, group)?).await?;
        let kubeconfig = write_file(pair, "blk-sa.kubeconfig", &identity.kubeconfig_yaml()?)?;
        connect(pair, "blk", &kubeconfig, &["--schema-source", "CRD"]).await?;
        bind(pair, &api, "blk", &["-n", ns]).await?;
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", "Widget"));
        let consumer = pair.consumer.client().await?;
        let widget: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{group}/v1"), "kind": "Widget",
            "metadata": {"name": "w", "namespace": ns}, "spec": {"size": 1},
        }))?;
        Api::<DynamicObject>::namespaced_with(consumer.clone(), ns, &ar)
            .create(&PostParams::default(), &widget)
            .await?;
        let copies = Api::<DynamicObject>::namespaced_with(provider.clone(), ns, &ar);
        wait_for("the provider copy", WAIT, || async {
            Ok(copies.get_opt("w").await?)
        })
        .await?;

        // The provider refuses the copy's delete: unbind gives up after --timeout and says
        // which step failed and what to do, from the binding's TeardownFailed condition.
        let blocked = kbind(pair, &["unbind", "widgets", "-n", ns, "--timeout", "30s"])
            .await?
            .expect(1)?;
        ensure!(
            blocked.stderr.contains(
                "TeardownFailed=True reason Forbidden: teardown blocked: deleting provider copy w"
            ),
            "{blocked:?}"
        );
        ensure!(
            blocked.stderr.contains(&format!(
                "what to do: {}",
                kubectl_kbind::hints::what_to_do("Forbidden")
            )),
            "{blocked:?}"
        );
        ensure!(!blocked.stderr.contains("konnector log"), "{blocked:?}");

        // Granted again, the same unbind finishes, and so does the disconnect. The konnector
        // backs a failing teardown off (up to minutes after many attempts); a change to the
        // binding has it retry at once.
        apply_all(&provider, &rbac.stdout).await?;
        let nudged = Api::<Binding>::namespaced(consumer.clone(), ns)
            .patch(
                "widgets",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"kbind.test/retry": "now"}}})),
            )
            .await;
        match nudged {
            Err(e) if !e.is_not_found() => return Err(e.into()),
            _ => {}
        }
        // The retry may finish before the command starts: then there is nothing to follow.
        kbind(
            pair,
            &[
                "unbind",
                "widgets",
                "-n",
                ns,
                "--ignore-not-found",
                "--timeout",
                TIMEOUT,
            ],
        )
        .await?
        .expect(0)?;
        ensure!(
            Api::<Binding>::namespaced(consumer.clone(), ns)
                .get_opt("widgets")
                .await?
                .is_none(),
            "Binding left"
        );
        wait_for("the provider copy gone", WAIT, || async {
            Ok(copies.get_opt("w").await?.is_none().then_some(()))
        })
        .await?;
        disconnect(pair, "blk", &[]).await?;
        ensure!(
            Api::<Connection>::all(consumer)
                .get_opt("blk")
                .await?
                .is_none(),
            "Connection left"
        );
        anyhow::Ok(())
    })
    .await
}
