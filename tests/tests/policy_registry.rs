//! Policy modules shipped through an OCI registry: a real registry (distribution's, built from
//! its Go module) holds modules pushed by the Wasm artifact conventions; the konnector resolves
//! a tag to a digest, pulls by tag or by digest, refuses bytes that do not match their digest,
//! and, restarted while the registry is down, starts from its cache or fails closed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kbind_tests::faults::process::{
    ConflictRefs, KonnectorProcess, log_says, process_module_info, start_with_policy_refs,
};
use kbind_tests::registry::Registry;
use kbind_tests::testenv::{fresh_dir, shared_pair};
use konnector::artifact::{
    FetchError, Fetched, FetchedFrom, Fetcher, FetcherConfig, OciRef, PolicyRef, PushMeta,
};
use konnector::policy::{
    ConflictDecision, ConflictInput, Policies, PolicyArgs, PolicyError, PolicyRole, builtin,
};

/// A fresh scratch directory of this test process.
fn scratch(name: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir()
        .join("kbind-policy-registry")
        .join(format!("{}-{name}", std::process::id()));
    fresh_dir(&dir)?;
    Ok(dir)
}

/// A fetcher for the test registry (plain HTTP), caching in `cache` when given.
fn fetcher(registry: &Registry, cache: Option<&Path>) -> anyhow::Result<Fetcher> {
    Ok(Fetcher::new(FetcherConfig {
        cache_dir: cache.map(Path::to_owned),
        plain_http: vec![registry.host().to_owned()],
        ..FetcherConfig::default()
    })?)
}

/// `oci://<registry>/<repository>` with `suffix` (`:tag` or `@digest`).
fn reference(registry: &Registry, repository: &str, suffix: &str) -> anyhow::Result<OciRef> {
    let text = format!("oci://{}/{repository}{suffix}", registry.host());
    match text.parse::<PolicyRef>()? {
        PolicyRef::Oci(oci) => Ok(oci),
        other => bail!("{text} parsed as {other:?}"),
    }
}

/// Pushes the built-in conflict module as `repository:tag`, with `version` as its version
/// annotation (a different version makes a different manifest); returns the manifest digest.
async fn push_conflict(
    fetcher: &Fetcher,
    registry: &Registry,
    repository: &str,
    tag: &str,
    version: &str,
) -> anyhow::Result<String> {
    let meta = PushMeta {
        world: Some(PolicyRole::ConflictPolicy.world().to_owned()),
        annotations: [(
            "org.opencontainers.image.version".to_owned(),
            version.to_owned(),
        )]
        .into(),
    };
    let target = reference(registry, repository, &format!(":{tag}"))?;
    Ok(fetcher
        .push(&target, builtin::CONFLICT_POLICY, &meta)
        .await?)
}

/// The built-in conflict module's answer for an absent target, asked through `policies`.
async fn creates(policies: &Policies) -> anyhow::Result<()> {
    let decision = policies
        .decide_conflict(&ConflictInput {
            consumer_cluster_uid: "consumer".into(),
            consumer_object_uid: "object".into(),
            conflict_policy: konnector::api::ConflictPolicy::Fail,
            target: None,
        })
        .await?;
    ensure!(matches!(decision, ConflictDecision::Create), "{decision:?}");
    Ok(())
}

fn module_layer_digest(fetched: &Fetched) -> &str {
    &fetched.module_digest
}

#[tokio::test]
async fn a_module_is_pulled_by_tag_and_by_digest_and_runs() -> anyhow::Result<()> {
    let work = scratch("by-tag-and-digest")?;
    let registry = Registry::start(&work.join("registry")).await?;
    let cached = fetcher(&registry, Some(&work.join("cache")))?;
    let pushed = push_conflict(&cached, &registry, "policies/conflict", "v1", "1.0.0").await?;

    let by_tag = cached
        .fetch(&reference(&registry, "policies/conflict", ":v1")?)
        .await?;
    assert_eq!(
        by_tag.digest, pushed,
        "the tag resolves to the pushed manifest"
    );
    assert_eq!(by_tag.module, builtin::CONFLICT_POLICY);
    assert_eq!(by_tag.from, FetchedFrom::Registry);
    assert_eq!(
        by_tag.annotations.get("org.opencontainers.image.version"),
        Some(&"1.0.0".to_owned())
    );

    // By digest, through a fetcher with no cache: straight from the registry.
    let uncached = fetcher(&registry, None)?;
    let pinned = reference(&registry, "policies/conflict", &format!("@{pushed}"))?;
    let by_digest = uncached.fetch(&pinned).await?;
    assert_eq!(by_digest.digest, pushed);
    assert_eq!(by_digest.module, builtin::CONFLICT_POLICY);
    assert_eq!(
        module_layer_digest(&by_digest),
        module_layer_digest(&by_tag)
    );

    // The konnector's loader: the role runs the pulled module and names it by digest.
    let mut args = PolicyArgs::default();
    args.set_module(
        PolicyRole::ConflictPolicy,
        Some(PolicyRef::Oci(reference(
            &registry,
            "policies/conflict",
            ":v1",
        )?)),
    );
    let policies = Policies::resolve(&args, &cached).await?;
    creates(&policies).await?;
    assert_eq!(
        &*policies.digest(PolicyRole::ConflictPolicy),
        pushed.as_str()
    );
    assert_eq!(
        policies.origin(PolicyRole::ConflictPolicy).to_string(),
        format!("oci://{}/policies/conflict:v1@{pushed}", registry.host())
    );
    assert_eq!(
        policies.reference(PolicyRole::ConflictPolicy),
        format!("oci://{}/policies/conflict:v1", registry.host())
    );
    // Loading without pulling never puts the built-in module in the registry one's place.
    let unfetched = Policies::load(&args);
    assert!(
        matches!(unfetched, Err(PolicyError::NotFetched { .. })),
        "{unfetched:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_moved_tag_resolves_to_its_new_digest_and_says_from_which() -> anyhow::Result<()> {
    let work = scratch("moved-tag")?;
    let registry = Registry::start(&work.join("registry")).await?;
    let fetcher = fetcher(&registry, Some(&work.join("cache")))?;
    let tag = reference(&registry, "policies/moving", ":stable")?;
    let first = push_conflict(&fetcher, &registry, "policies/moving", "stable", "1.0.0").await?;
    let resolved = fetcher.fetch(&tag).await?;
    assert_eq!(
        (
            resolved.digest.as_str(),
            resolved.previous_digest.as_deref()
        ),
        (first.as_str(), None)
    );
    let second = push_conflict(&fetcher, &registry, "policies/moving", "stable", "1.0.1").await?;
    assert_ne!(first, second);
    let moved = fetcher.fetch(&tag).await?;
    assert_eq!(moved.digest, second);
    assert_eq!(moved.previous_digest.as_deref(), Some(first.as_str()));
    Ok(())
}

#[tokio::test]
async fn a_tampered_blob_is_refused() -> anyhow::Result<()> {
    let work = scratch("tampered")?;
    let registry = Registry::start(&work.join("registry")).await?;
    let fetcher = fetcher(&registry, Some(&work.join("cache")))?;
    let pushed = push_conflict(&fetcher, &registry, "policies/tampered", "v1", "1.0.0").await?;
    let module_digest = konnector::artifact::sha256_digest(builtin::CONFLICT_POLICY);
    registry.tamper_blob(&module_digest)?;

    for asked in [":v1".to_owned(), format!("@{pushed}")] {
        let refused = fetcher
            .fetch(&reference(&registry, "policies/tampered", &asked)?)
            .await;
        match &refused {
            Err(e @ FetchError::DigestMismatch { what, expected, .. }) => {
                assert_eq!(what, "module");
                assert_eq!(*expected, module_digest);
                assert!(e.to_string().contains("is not run"), "{e}");
            }
            other => bail!("{asked}: expected a digest mismatch, got {other:?}"),
        }
    }
    // Nothing of it reached the cache: with the registry gone, there is nothing to start from.
    drop(registry);
    let fetcher = Fetcher::new(FetcherConfig {
        cache_dir: Some(work.join("cache")),
        ..FetcherConfig::default()
    })?;
    let pinned = OciRef {
        registry: "127.0.0.1:1".into(),
        repository: "policies/tampered".into(),
        tag: None,
        digest: Some(pushed),
    };
    let unavailable = fetcher.fetch(&pinned).await;
    assert!(
        matches!(unavailable, Err(FetchError::Unavailable { .. })),
        "{unavailable:?}"
    );
    Ok(())
}

/// The flags that make `konnector run` pull its conflict module from `conflict` through the
/// plain-HTTP registry `host`, caching in `cache`.
fn pull_flags(conflict: &str, host: &str, cache: &Path) -> Vec<String> {
    vec![
        format!("--conflict-policy={conflict}"),
        format!("--policy-plain-http-registry={host}"),
        format!("--policy-cache-dir={}", cache.display()),
    ]
}

/// Waits for `process` to exit; its status.
async fn exit_status(
    process: &mut KonnectorProcess,
    within: Duration,
) -> anyhow::Result<std::process::ExitStatus> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(status) = process.exited()? {
            return Ok(status);
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "still running after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_registry_down_at_restart_starts_from_the_cached_digest() -> anyhow::Result<()> {
    let pair = shared_pair()?;
    let work = pair.root().join("policy-registry-restart");
    pair.diagnose(async {
        let registry = Registry::start(&work.join("registry")).await?;
        let host = registry.host().to_owned();
        let pusher = fetcher(&registry, None)?;
        let pushed = push_conflict(&pusher, &registry, "policies/restart", "v1", "1.0.0").await?;
        let conflict = format!("oci://{host}/policies/restart:v1");
        let flags = pull_flags(&conflict, &host, &work.join("cache"));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let binary = kbind_tests::konnector_binary!();
        let kubeconfig = pair.consumer.admin().kubeconfig_path();
        let sample = format!(
            "kbind_policy_module_info{{role=\"conflict\",reference=\"{conflict}\",digest=\"{pushed}\",connection=\"\"}}"
        );

        let mut first = KonnectorProcess::start(&binary, kubeconfig, &work.join("first.log"), &flags)?;
        first.wait_ready(Duration::from_secs(60)).await?;
        let metrics = first.metrics().await?;
        ensure!(metrics.contains(&format!("{sample} 1")), "no {sample} in:\n{metrics}");
        first.terminate(Duration::from_secs(10)).await?;

        drop(registry);
        let log = work.join("second.log");
        let mut second = KonnectorProcess::start(&binary, kubeconfig, &log, &flags)?;
        second
            .wait_ready(Duration::from_secs(60))
            .await
            .with_context(|| std::fs::read_to_string(&log).unwrap_or_default())?;
        let metrics = second.metrics().await?;
        ensure!(metrics.contains(&format!("{sample} 1")), "no {sample} in:\n{metrics}");
        log_says(&log, "registry unreachable: using the cached module")?;
        second.terminate(Duration::from_secs(10)).await?;
        Ok::<_, anyhow::Error>(())
    })
    .await
}

#[tokio::test]
async fn the_registry_down_at_restart_without_a_cached_digest_fails_closed() -> anyhow::Result<()> {
    let pair = shared_pair()?;
    let work = pair.root().join("policy-registry-closed");
    pair.diagnose(async {
        let registry = Registry::start(&work.join("registry")).await?;
        let host = registry.host().to_owned();
        let pusher = fetcher(&registry, None)?;
        push_conflict(&pusher, &registry, "policies/closed", "v1", "1.0.0").await?;
        drop(registry);

        let conflict = format!("oci://{host}/policies/closed:v1");
        let flags = pull_flags(&conflict, &host, &work.join("empty-cache"));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let log = work.join("konnector.log");
        let binary = kbind_tests::konnector_binary!();
        let kubeconfig = pair.consumer.admin().kubeconfig_path();
        let mut process = KonnectorProcess::start(&binary, kubeconfig, &log, &flags)?;
        let status = exit_status(&mut process, Duration::from_secs(60)).await?;
        ensure!(
            !status.success(),
            "the konnector started without its module: {status}"
        );
        for expected in [
            "fetching the conflict-policy module",
            "the registry did not answer",
            "no cached copy of",
        ] {
            log_says(&log, expected)?;
        }
        Ok::<_, anyhow::Error>(())
    })
    .await
}

/// Runs `konnector policy <args>`; its stdout, or an error with its stderr.
fn konnector_policy(args: &[&str]) -> anyhow::Result<String> {
    kbind_tests::faults::process::konnector_policy(&kbind_tests::konnector_binary!(), args)
}

#[tokio::test]
async fn policy_push_pull_inspect_and_test_speak_the_registry_with_the_module_s_metadata()
-> anyhow::Result<()> {
    let work = scratch("cli")?;
    let registry = Registry::start(&work.join("registry")).await?;
    let host = registry.host().to_owned();
    let module = work.join("conflict.wasm");
    std::fs::write(&module, builtin::CONFLICT_POLICY)?;
    let module = module.display().to_string();
    let tag = format!("oci://{host}/acme/conflict:v1.2.0");
    let plain = format!("--plain-http-registry={host}");

    // A module pushed for a role whose world it does not implement is refused, nothing sent.
    let wrong = konnector_policy(&["push", "--role", "placement", &module, &tag, &plain]);
    let Err(refused) = wrong else {
        bail!("a conflict module was pushed as a placement module");
    };
    ensure!(
        refused
            .to_string()
            .contains("does not implement the world kbind:policy/placement-policy"),
        "{refused:#}"
    );

    let pinned = konnector_policy(&[
        "push",
        "--role",
        "conflict",
        &module,
        &tag,
        &plain,
        "--name",
        "acme-conflict",
        "--version",
        "1.2.0",
        "--source",
        "https://git.example.com/acme/policies",
    ])?;
    let pinned = pinned.trim();
    ensure!(pinned.starts_with(&format!("{tag}@sha256:")), "{pinned}");

    let inspected: serde_json::Value =
        serde_json::from_str(&konnector_policy(&["inspect", &tag, &plain])?)?;
    let digest = pinned.rsplit_once('@').map(|(_, d)| d);
    assert_eq!(inspected["digest"].as_str(), digest);
    assert_eq!(
        inspected["metadata"],
        serde_json::json!({
            "name": "acme-conflict", "version": "1.2.0", "role": "conflict-policy",
            "source": "https://git.example.com/acme/policies",
        })
    );
    assert_eq!(
        inspected["annotations"]["io.kbind.policy.role"],
        "conflict-policy"
    );
    assert_eq!(
        inspected["annotations"]["org.opencontainers.image.version"],
        "1.2.0"
    );
    assert_eq!(inspected["role"]["implemented"], true);
    assert_eq!(
        inspected["config"]["component"]["exports"][0],
        PolicyRole::ConflictPolicy.world()
    );

    let pulled = work.join("pulled.wasm");
    let pulled_ref =
        konnector_policy(&["pull", pinned, "-o", &pulled.display().to_string(), &plain])?;
    assert_eq!(pulled_ref.trim(), pinned);
    let bytes = std::fs::read(&pulled)?;
    assert_eq!(
        konnector::artifact::metadata::read(&bytes).map(|m| m.name),
        Some("acme-conflict".to_owned())
    );

    // The author's fixture loop runs on the module as the registry serves it.
    let fixtures = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../policies/conflict-policy/fixtures"
    );
    let report = konnector_policy(&[
        "test",
        "--role",
        "conflict",
        "--module",
        &tag,
        &format!("--policy-plain-http-registry={host}"),
        fixtures,
    ])?;
    ensure!(report.contains(" passed, 0 failed"), "{report}");
    Ok(())
}

#[tokio::test]
async fn a_changed_reference_is_swapped_live_and_a_failing_one_leaves_the_old_module()
-> anyhow::Result<()> {
    let pair = shared_pair()?;
    let work = pair.root().join("policy-registry-live");
    pair.diagnose(async {
        let registry = Registry::start(&work.join("registry")).await?;
        let host = registry.host().to_owned();
        let pusher = fetcher(&registry, None)?;
        let v1 = push_conflict(&pusher, &registry, "policies/live", "v1", "1.0.0").await?;
        let v2 = push_conflict(&pusher, &registry, "policies/live", "v2", "2.0.0").await?;
        let refs = ConflictRefs::new(&work, &format!("{host}/policies/live"));
        refs.point_at("v1")?;
        let binary = kbind_tests::konnector_binary!();
        let kubeconfig = pair.consumer.admin().kubeconfig_path();
        let (mut process, log) =
            start_with_policy_refs(&binary, kubeconfig, &work, refs.path(), &host, &[]).await?;
        let pid = process.pid();
        let info = |tag: &str, digest: &str| {
            process_module_info(
                "conflict",
                &format!("oci://{host}/policies/live:{tag}"),
                digest,
            )
        };
        process.wait_for_metric(&info("v1", &v1)).await?;

        // The reference moves to v2: pulled, checked and swapped in the running process.
        refs.point_at("v2")?;
        process.wait_for_metric(&info("v2", &v2)).await?;
        process
            .wait_for_metric("kbind_policy_swaps_total{role=\"conflict\",result=\"swapped\"} 1")
            .await?;
        log_says(&log, &format!("policy module swapped: digest {v1} → {v2}"))?;

        // A reference that cannot be pulled: the failure is counted, v2 keeps running.
        refs.point_at("missing")?;
        process
            .wait_for_metric("kbind_policy_swaps_total{role=\"conflict\",result=\"failed\"} 1")
            .await?;
        let metrics = process.metrics().await?;
        ensure!(
            metrics.contains(&info("v2", &v2)),
            "v2 no longer runs:\n{metrics}"
        );
        ensure!(
            process.exited()?.is_none() && process.pid() == pid,
            "the konnector restarted"
        );
        log_says(&log, "policy module not swapped; the running module stays")?;
        process.terminate(Duration::from_secs(10)).await?;
        Ok::<_, anyhow::Error>(())
    })
    .await
}

#[tokio::test]
async fn a_call_in_flight_finishes_on_the_module_it_started_with() -> anyhow::Result<()> {
    // A conflict module that loops on one object: its call runs until the deadline.
    let looping = kbind_tests::faults::policy::poisoned_conflict_policy("never", "slow-object")?;
    let policies = Policies::builtin()?
        .with_limits(konnector::policy::PolicyLimits {
            timeout: Duration::from_millis(1500),
            ..konnector::policy::PolicyLimits::DEFAULT
        })
        .with_module(PolicyRole::ConflictPolicy, &looping, "looping.wasm")?;
    let ask = |uid: &str| ConflictInput {
        consumer_cluster_uid: "consumer".into(),
        consumer_object_uid: uid.into(),
        conflict_policy: konnector::api::ConflictPolicy::Fail,
        target: None,
    };
    let in_flight = tokio::spawn({
        let policies = policies.clone();
        let question = ask("slow-object");
        async move { policies.decide_conflict(&question).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(!in_flight.is_finished(), "the looping call ended early");

    // The built-in module swapped in while that call runs: new calls get it at once.
    policies.swap(PolicyRole::ConflictPolicy, &Policies::builtin()?);
    let started = std::time::Instant::now();
    creates(&policies).await?;
    ensure!(
        started.elapsed() < Duration::from_millis(1000),
        "a new call waited for the old one"
    );
    let decision = policies.decide_conflict(&ask("slow-object")).await?;
    ensure!(matches!(decision, ConflictDecision::Create), "{decision:?}");

    // The call in flight finished on the module it started with (its error names it).
    let finished = in_flight.await?;
    assert!(
        matches!(&finished, Err(PolicyError::PolicyTimeout { origin, .. }) if origin == "looping.wasm"),
        "{finished:?}"
    );
    Ok(())
}

#[tokio::test]
async fn the_pull_secret_is_read_from_the_credential_namespace() -> anyhow::Result<()> {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    let pair = shared_pair()?;
    let work = pair.root().join("policy-registry-pull-secret");
    pair.diagnose(async {
        let registry = Registry::start(&work.join("registry")).await?;
        let host = registry.host().to_owned();
        let pusher = fetcher(&registry, None)?;
        let pushed = push_conflict(&pusher, &registry, "policies/private", "v1", "1.0.0").await?;
        let consumer = pair.consumer.client().await?;
        kbind_tests::syncenv::ensure_namespace(&consumer, kbind_tests::fixtures::SECRET_NAMESPACE)
            .await?;
        let secrets: kube::Api<Secret> =
            kube::Api::namespaced(consumer, kbind_tests::fixtures::SECRET_NAMESPACE);
        let secret = |name: &str, kind: &str, key: &str| -> anyhow::Result<Secret> {
            let config = serde_json::json!({"auths": {host.as_str(): {"username": "robot", "password": "s3cret"}}});
            Ok(serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "type": kind,
                "data": {key: ByteString(serde_json::to_vec(&config)?)},
            }))?)
        };
        let pp = kube::api::PostParams::default();
        secrets.create(&pp, &secret("policy-pull-wrong", "Opaque", "config.json")?).await?;
        secrets.create(&pp, &secret("policy-pull", "kubernetes.io/dockerconfigjson", ".dockerconfigjson")?).await?;

        let conflict = format!("oci://{host}/policies/private:v1");
        let binary = kbind_tests::konnector_binary!();
        let kubeconfig = pair.consumer.admin().kubeconfig_path();
        let run = |secret: &str, log: &Path| {
            let mut flags = pull_flags(&conflict, &host, &work.join(format!("cache-{secret}")));
            flags.push(format!("--policy-pull-secret={secret}"));
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            KonnectorProcess::start(&binary, kubeconfig, log, &flags)
        };

        // A Secret without the docker config key: the start stops and says what to do.
        let log = work.join("wrong.log");
        let mut wrong = run("policy-pull-wrong", &log)?;
        let status = exit_status(&mut wrong, Duration::from_secs(60)).await?;
        ensure!(!status.success(), "started with an unusable pull Secret");
        log_says(&log, "the policy pull Secret kbind/policy-pull-wrong has no .dockerconfigjson key")?;

        // The pull Secret as `kubectl create secret docker-registry` writes it.
        let mut right = run("policy-pull", &work.join("right.log"))?;
        right.wait_ready(Duration::from_secs(60)).await?;
        right.wait_for_metric(&process_module_info("conflict", &conflict, &pushed)).await?;
        right.terminate(Duration::from_secs(10)).await?;
        Ok::<_, anyhow::Error>(())
    })
    .await
}
