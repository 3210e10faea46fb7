//! The exit codes scripts rely on: 1 with the reason and what to do when the konnector
//! refuses a Connection, 1 for missing objects, 2 for usage errors.

use anyhow::{Result, ensure};
use konnector::api::Connection;
use kube::Api;

use super::{TIMEOUT, diagnose, kbind, path_str, setup, write_file};

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
        kbind(pair, &["disconnect", "insecure", "--timeout", TIMEOUT]).await?.expect(0)?;
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
