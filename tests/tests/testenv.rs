//! The test environment itself: its clusters behave like real ones where the konnector leans
//! on them (namespace deletion, ownerReference garbage collection, token authentication), and
//! no kube process outlives the cluster handle or the process that started it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use kbind_tests::access::expect_refused;
use kbind_tests::eventually;
use kbind_tests::fixtures::{ensure_namespace, private_cluster};
use kbind_tests::syncenv::related::put_configmap;
use kbind_tests::syncenv::remains::{Left::Gone, delete_gone, kind, wait_left};
use kbind_tests::testenv::{ADMIN_TOKEN_USER, Credential, shared_pair};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

#[tokio::test]
async fn controllers_delete_namespaces_and_collect_garbage() -> anyhow::Result<()> {
    let pair = shared_pair()?;
    pair.diagnose(async {
        let client = pair.consumer.client().await?;
        let ns = "controllers";
        let owner = put_configmap(&client, ns, "owner", &[], &[]).await?;
        put_configmap(&client, ns, "leftover", &[], &[]).await?;
        let uid = owner.uid();
        let owner_ref =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid});
        let dependent = json!({"metadata": {"name": "dependent", "ownerReferences": [owner_ref]}});
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        maps.create(&PostParams::default(), &serde_json::from_value(dependent)?)
            .await?;
        // The garbage collector removes the dependent of a deleted owner.
        maps.delete("owner", &DeleteParams::background()).await?;
        let dependent = (&client, kind::<ConfigMap>(), "controllers/dependent", Gone);
        wait_left(&[dependent]).await?;
        // The namespace controller empties and removes a deleted namespace.
        delete_gone(&client, kind::<Namespace>(), ns).await
    })
    .await
}

#[tokio::test]
async fn token_identities_authenticate_and_service_account_tokens_revoke() -> anyhow::Result<()> {
    let pair = shared_pair()?;
    pair.diagnose(async {
        let cluster = &pair.consumer;
        // The static token file's admin.
        let admin_token = cluster.admin_token();
        assert_eq!(admin_token.credential(), Credential::Token);
        let (user, groups) = whoami(&admin_token.client().await?).await?;
        assert_eq!(user, ADMIN_TOKEN_USER);
        assert!(groups.iter().any(|g| g == "system:masters"), "{groups:?}");

        // A service-account token: authenticated, authorized for nothing, revocable.
        let ns = "tokens";
        let admin = cluster.client().await?;
        ensure_namespace(&admin, ns).await?;
        let robot = cluster.mint_service_account(ns, "robot").await?;
        assert_eq!(robot.credential(), Credential::Token);
        let as_robot = robot.client().await?;
        let (user, _) = whoami(&as_robot).await?;
        assert_eq!(user, "system:serviceaccount:tokens:robot");
        let secrets: Api<Secret> = Api::namespaced(as_robot.clone(), ns);
        let refused = (403, "Forbidden");
        expect_refused(secrets.list(&ListParams::default()).await, refused, &user)?;

        delete_gone(&admin, kind::<ServiceAccount>(), "tokens/robot").await?;
        eventually(Duration::from_secs(30), || async {
            expect_refused(whoami(&as_robot).await, (401, "Unauthorized"), "")
        })
        .await
    })
    .await
}

#[test]
fn a_dropped_cluster_leaves_no_kube_process() -> anyhow::Result<()> {
    let cluster = private_cluster("single")?;
    let dir = cluster.dir().to_path_buf();
    ensure!(cluster.is_running());
    // etcd, apiserver and controller manager, each under its watchdog wrapper.
    let running = processes_mentioning(&dir);
    ensure!(running.len() >= 3, "expected kube processes: {running:?}");
    drop(cluster);
    let left = processes_mentioning(&dir);
    ensure!(left.is_empty(), "left behind: {left:?}");
    Ok(std::fs::remove_dir_all(&dir)?)
}

#[test]
fn a_killed_test_process_leaves_no_kube_process() -> anyhow::Result<()> {
    let root =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("testenv-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    // `testenv run` holds a supervised pair, like a test binary with a shared pair does.
    let mut run = Command::new(env!("CARGO_BIN_EXE_testenv"))
        .arg("run")
        .arg(&root)
        .stdout(Stdio::piped())
        .spawn()?;
    // Read up to its last line ("try: ..."), keeping the pipe open: a closed pipe would make
    // its next print fail and end it early.
    let mut lines = BufReader::new(run.stdout.take().context("no stdout")?).lines();
    let printed: Vec<String> = lines
        .by_ref()
        .map_while(Result::ok)
        .inspect(|line| eprintln!("testenv run: {line}"))
        .take_while(|line| !line.starts_with("try:"))
        .collect();
    let ready = printed.iter().any(|line| line.contains("ready in"));
    ensure!(ready, "testenv run ended before the pair was ready");
    let running = processes_mentioning(&root);
    ensure!(running.len() >= 6, "expected kube processes: {running:?}");

    // SIGKILL: no destructor runs; only the watchdog pipe can clean up.
    run.kill()?;
    run.wait()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_mentioning(&root).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = processes_mentioning(&root);
    ensure!(left.is_empty(), "left behind: {left:?}");
    drop(lines);
    Ok(std::fs::remove_dir_all(&root)?)
}

/// The user and groups the apiserver authenticated `client` as.
async fn whoami(client: &Client) -> Result<(String, Vec<String>), kube::Error> {
    let review = Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await?;
    let info = review.status.and_then(|s| s.user_info).unwrap_or_default();
    let user = info.username.unwrap_or_default();
    Ok((user, info.groups.unwrap_or_default()))
}

/// Live processes whose command line mentions `dir` (kube processes and their wrappers).
fn processes_mentioning(dir: &Path) -> Vec<(u32, String)> {
    let needle = dir.display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline
                .contains(&needle)
                .then(|| (pid, cmdline.chars().take(120).collect()))
        })
        .collect()
}
