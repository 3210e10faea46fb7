//! `kubectl kbind status` run against the cluster: each role a Connection names, with its
//! reference and the digest running (or `unavailable`).

use anyhow::{Context as _, ensure};
use kbind_tests::fixtures::unique;
use konnector::api::{ConnectionPolicies, IsolationStrategy};
use konnector::policy::{PolicyRole, builtin};

use crate::{World, choice, connect_with, until, world};

/// `kubectl kbind status NAME` as the consumer's admin: its exit code and standard output.
async fn kbind_status(world: &World, name: &str) -> anyhow::Result<(Option<i32>, String)> {
    let mut command = std::process::Command::new(kbind_tests::kubectl_kbind_binary!());
    command
        .arg("--kubeconfig")
        .arg(world.pair.consumer.admin().kubeconfig_path())
        .args(["status", name])
        .env_remove("KUBECONFIG")
        .env("NO_COLOR", "1");
    let output = tokio::task::spawn_blocking(move || command.output()).await??;
    Ok((
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    ))
}

/// The `Connection NAME ...` line of a `status` output.
fn connection_line<'a>(output: &'a str, name: &str) -> anyhow::Result<&'a str> {
    let head = format!("Connection {name} ");
    output
        .lines()
        .find(|l| l.starts_with(&head))
        .with_context(|| format!("no line for Connection {name} in:\n{output}"))
}

#[tokio::test]
async fn kubectl_kbind_status_shows_each_role_a_connection_runs_with_its_reference_and_digest()
-> anyhow::Result<()> {
    let world = world().await?;
    world
        .pair
        .diagnose(async {
            let digest = world
                .push(
                    PolicyRole::ConflictPolicy,
                    builtin::CONFLICT_POLICY,
                    "policies/status",
                    "v1",
                    "1.0.0",
                )
                .await?;
            let conflict = world.reference("policies/status", "v1");
            let name = unique("status");
            let policies = ConnectionPolicies {
                conflict: Some(choice(&conflict, None)),
                placement: Some(choice("built-in", None)),
                ..ConnectionPolicies::default()
            };
            connect_with(world, &name, policies, IsolationStrategy::None).await?;
            until(world, &name, "Ready", "True", "AsExpected").await?;
            let (_, output) = kbind_status(world, &name).await?;
            let line = connection_line(&output, &name)?;
            let placement = builtin::digest(PolicyRole::Placement);
            let expected = format!(
                "policies: conflict={conflict} ({digest}), placement=built-in ({placement})"
            );
            ensure!(
                line.contains(&expected),
                "expected `{expected}` in `{line}`"
            );

            // A module that cannot be had: the role is listed as unavailable, and status fails.
            let missing = unique("status-missing");
            let never = world.reference("policies/status-never-pushed", "v1");
            let policies = ConnectionPolicies {
                conflict: Some(choice(&never, None)),
                ..ConnectionPolicies::default()
            };
            connect_with(world, &missing, policies, IsolationStrategy::None).await?;
            until(world, &missing, "Ready", "False", "PolicyUnavailable").await?;
            let (code, output) = kbind_status(world, &missing).await?;
            ensure!(code == Some(1), "status exited {code:?}:\n{output}");
            let line = connection_line(&output, &missing)?;
            let expected = format!("policies: conflict={never} (unavailable)");
            ensure!(
                line.contains(&expected),
                "expected `{expected}` in `{line}`"
            );
            Ok(())
        })
        .await
}
