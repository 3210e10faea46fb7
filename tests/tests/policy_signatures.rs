//! Policy modules verified before they run: with verification configured, a registry module
//! runs only when a Sigstore bundle attached to it (cosign v3's layout, in a real registry
//! built from distribution's Go module) verifies against a configured key, or against a
//! keyless identity under a trust root. Keys are made in the test with `konnector policy
//! generate-key`, modules signed with `konnector policy sign`; keyless bundles come from a
//! Sigstore made in the test (`kbind-keyless`: a CA, a CT log and a Rekor log of its own).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, ensure};
use kbind_keyless::{Identity, Sigstore};
use kbind_tests::faults::process::{
    ConflictRefs, KonnectorProcess, log_says, process_module_info, start_with_policy_refs,
};
use kbind_tests::registry::Registry;
use kbind_tests::testenv::{fresh_dir, shared_pair};
use konnector::artifact::sign::KeyPair;
use konnector::artifact::{
    FetchError, FetchedFrom, Fetcher, FetcherConfig, OciRef, PolicyRef, PushMeta, Verification,
};
use konnector::policy::{PolicyRole, builtin};

/// A fresh scratch directory of this test process.
fn scratch(name: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir()
        .join("kbind-policy-signatures")
        .join(format!("{}-{name}", std::process::id()));
    fresh_dir(&dir)?;
    Ok(dir)
}

/// A fetcher for the test registry, verifying as `verification` says, caching in `cache`.
fn fetcher(
    registry: &Registry,
    verification: Verification,
    cache: Option<&Path>,
) -> anyhow::Result<Fetcher> {
    Ok(Fetcher::new(FetcherConfig {
        cache_dir: cache.map(Path::to_owned),
        plain_http: vec![registry.host().to_owned()],
        verification,
        ..FetcherConfig::default()
    })?)
}

fn reference(registry: &Registry, repository_tag: &str) -> anyhow::Result<OciRef> {
    let text = format!("oci://{}/{repository_tag}", registry.host());
    match text.parse::<PolicyRef>()? {
        PolicyRef::Oci(oci) => Ok(oci),
        other => bail!("{text} parsed as {other:?}"),
    }
}

/// Pushes the built-in conflict module as `repository:tag` with `version` (another version,
/// another manifest); returns the manifest digest.
async fn push(fetcher: &Fetcher, target: &OciRef, version: &str) -> anyhow::Result<String> {
    let meta = PushMeta {
        world: Some(PolicyRole::ConflictPolicy.world().to_owned()),
        annotations: [(
            "org.opencontainers.image.version".to_owned(),
            version.to_owned(),
        )]
        .into(),
    };
    Ok(fetcher
        .push(target, builtin::CONFLICT_POLICY, &meta)
        .await?)
}

fn trusting(key: &KeyPair) -> anyhow::Result<Verification> {
    Ok(Verification::default().with_key("trusted.pub", key.public_pem()?.as_bytes())?)
}

#[tokio::test]
async fn a_module_signed_by_the_configured_key_is_fetched_and_others_are_refused()
-> anyhow::Result<()> {
    let work = scratch("fetch")?;
    let registry = Registry::start(&work.join("registry")).await?;
    let trusted = KeyPair::generate()?;
    let stranger = KeyPair::generate()?;
    let plain = fetcher(&registry, Verification::default(), None)?;
    let verifying = fetcher(&registry, trusting(&trusted)?, Some(&work.join("cache")))?;

    let signed = reference(&registry, "policies/conflict:signed")?;
    let digest = push(&plain, &signed, "1.0.0").await?;
    let pinned = plain.sign(&signed, &trusted).await?;
    assert_eq!(pinned.digest.as_deref(), Some(digest.as_str()));
    let fetched = verifying.fetch(&signed).await?;
    assert_eq!(fetched.digest, digest);
    assert_eq!(fetched.module, builtin::CONFLICT_POLICY);

    let unsigned = reference(&registry, "policies/conflict:unsigned")?;
    push(&plain, &unsigned, "2.0.0").await?;
    let refused = verifying.fetch(&unsigned).await;
    assert!(
        matches!(&refused, Err(e @ FetchError::Unsigned { .. }) if e.to_string().contains("is not signed")),
        "{refused:?}"
    );

    let wrongly = reference(&registry, "policies/conflict:wrongly")?;
    push(&plain, &wrongly, "3.0.0").await?;
    plain.sign(&wrongly, &stranger).await?;
    let refused = verifying.fetch(&wrongly).await;
    assert!(
        matches!(&refused, Err(e @ FetchError::Unverified { .. }) if e.to_string().contains("no signature verifies")),
        "{refused:?}"
    );

    // A second signature by the trusted key makes the same module acceptable.
    plain.sign(&wrongly, &trusted).await?;
    verifying.fetch(&wrongly).await?;
    Ok(())
}

#[tokio::test]
async fn the_registry_down_a_cached_module_is_verified_again_from_its_cached_signature()
-> anyhow::Result<()> {
    let work = scratch("cached")?;
    let registry = Registry::start(&work.join("registry")).await?;
    let trusted = KeyPair::generate()?;
    let plain = fetcher(&registry, Verification::default(), None)?;
    let target = reference(&registry, "policies/conflict:v1")?;
    push(&plain, &target, "1.0.0").await?;
    plain.sign(&target, &trusted).await?;
    let cache = work.join("cache");
    fetcher(&registry, trusting(&trusted)?, Some(&cache))?
        .fetch(&target)
        .await?;
    let host = registry.host().to_owned();
    drop(registry);

    let registry_gone = Fetcher::new(FetcherConfig {
        cache_dir: Some(cache.clone()),
        plain_http: vec![host.clone()],
        verification: trusting(&trusted)?,
        ..FetcherConfig::default()
    })?;
    let fetched = registry_gone.fetch(&target).await?;
    assert_eq!(fetched.from, FetchedFrom::Cache);

    // Another trusted key: the cached signature does not verify, nothing runs.
    let other = Fetcher::new(FetcherConfig {
        cache_dir: Some(cache),
        plain_http: vec![host],
        verification: trusting(&KeyPair::generate()?)?,
        ..FetcherConfig::default()
    })?;
    let refused = other.fetch(&target).await;
    assert!(
        matches!(&refused, Err(FetchError::Unverified { .. })),
        "{refused:?}"
    );
    Ok(())
}

/// The module-info sample of the conflict module `oci://HOST/acme/conflict:TAG` running at the
/// digest `pinned` (a reference pinned by `@sha256:…`) names.
fn running(host: &str, tag: &str, pinned: &str) -> String {
    let digest = pinned.rsplit_once('@').map(|(_, d)| d).unwrap_or_default();
    process_module_info(
        "conflict",
        &format!("oci://{host}/acme/conflict:{tag}"),
        digest,
    )
}

/// Runs `konnector policy <args>`; its stdout, or an error with its stderr.
fn konnector_policy(args: &[&str]) -> anyhow::Result<String> {
    kbind_tests::faults::process::konnector_policy(&kbind_tests::konnector_binary!(), args)
}

/// The docs' flow, command for command: build (the built-in module stands in) → push → sign
/// → reference → verify → swap; an unsigned or wrongly signed module is refused on a swap
/// and the signed one keeps running.
#[tokio::test]
async fn with_verification_on_a_signed_module_runs_and_an_unsigned_or_wrongly_signed_one_is_refused_keeping_the_old()
-> anyhow::Result<()> {
    let pair = shared_pair()?;
    let work = pair.root().join("policy-signatures-live");
    pair.diagnose(async {
        fresh_dir(&work)?;
        let registry = Registry::start(&work.join("registry")).await?;
        let host = registry.host().to_owned();
        let plain = format!("--plain-http-registry={host}");
        let module = work.join("conflict.wasm");
        std::fs::write(&module, builtin::CONFLICT_POLICY)?;
        let module = module.display().to_string();
        let signing = work.join("signing").display().to_string();
        let stranger = work.join("stranger").display().to_string();
        konnector_policy(&["generate-key", "--output-key-prefix", &signing])?;
        konnector_policy(&["generate-key", "--output-key-prefix", &stranger])?;
        let (key, public) = (format!("{signing}.key"), format!("{signing}.pub"));

        let push_tag = |tag: &str, version: &str| {
            konnector_policy(&[
                "push",
                "--role",
                "conflict",
                &module,
                &format!("oci://{host}/acme/conflict:{tag}"),
                &plain,
                "--version",
                version,
            ])
            .map(|pinned| pinned.trim().to_owned())
        };
        let v1 = push_tag("v1", "1.0.0")?;
        let signed = konnector_policy(&[
            "sign",
            &format!("oci://{host}/acme/conflict:v1"),
            "--key",
            &key,
            &plain,
        ])?;
        ensure!(signed.trim() == v1, "signed {signed}, pushed {v1}");
        let verified = konnector_policy(&[
            "verify",
            &format!("oci://{host}/acme/conflict:v1"),
            "--key",
            &public,
            &plain,
        ])?;
        ensure!(verified.trim() == v1, "verified {verified}");
        let unsigned = push_tag("v2", "2.0.0")?;
        let wrongly = push_tag("v3", "3.0.0")?;
        konnector_policy(&[
            "sign",
            &format!("oci://{host}/acme/conflict:v3"),
            "--key",
            &format!("{stranger}.key"),
            &plain,
        ])?;
        let refused = konnector_policy(&[
            "verify",
            &format!("oci://{host}/acme/conflict:v3"),
            "--key",
            &public,
            &plain,
        ]);
        ensure!(
            matches!(&refused, Err(e) if e.to_string().contains("no signature verifies")),
            "{refused:?}"
        );

        let refs = ConflictRefs::new(&work, &format!("{host}/acme/conflict"));
        refs.point_at("v1")?;
        let binary = kbind_tests::konnector_binary!();
        let kubeconfig = pair.consumer.admin().kubeconfig_path();
        let verify = [format!("--policy-verify-key={public}")];
        let (mut process, log) =
            start_with_policy_refs(&binary, kubeconfig, &work, refs.path(), &host, &verify).await?;
        let info = |tag: &str, pinned: &str| running(&host, tag, pinned);
        process.wait_for_metric(&info("v1", &v1)).await?;

        refs.point_at("v2")?;
        process
            .wait_for_metric("kbind_policy_swaps_total{role=\"conflict\",result=\"failed\"} 1")
            .await?;
        log_says(&log, &format!("{unsigned} is not signed"))?;
        refs.point_at("v3")?;
        process
            .wait_for_metric("kbind_policy_swaps_total{role=\"conflict\",result=\"failed\"} 2")
            .await?;
        log_says(&log, &format!("{wrongly}: no signature verifies"))?;
        let metrics = process.metrics().await?;
        ensure!(
            metrics.contains(&info("v1", &v1)),
            "v1 no longer runs:\n{metrics}"
        );

        // Signed by the trusted key: swapped in.
        let v4 = push_tag("v4", "4.0.0")?;
        konnector_policy(&[
            "sign",
            &format!("oci://{host}/acme/conflict:v4"),
            "--key",
            &key,
            &plain,
        ])?;
        refs.point_at("v4")?;
        process.wait_for_metric(&info("v4", &v4)).await?;
        process
            .wait_for_metric("kbind_policy_swaps_total{role=\"conflict\",result=\"swapped\"} 1")
            .await?;
        process.terminate(Duration::from_secs(10)).await?;
        Ok::<_, anyhow::Error>(())
    })
    .await
}

#[tokio::test]
async fn with_verification_on_an_unsigned_module_stops_the_start() -> anyhow::Result<()> {
    let pair = shared_pair()?;
    let work = pair.root().join("policy-signatures-start");
    pair.diagnose(async {
        fresh_dir(&work)?;
        let registry = Registry::start(&work.join("registry")).await?;
        let host = registry.host().to_owned();
        let plain = fetcher(&registry, Verification::default(), None)?;
        let target = reference(&registry, "acme/conflict:v1")?;
        push(&plain, &target, "1.0.0").await?;
        let public = work.join("trusted.pub");
        std::fs::write(&public, KeyPair::generate()?.public_pem()?)?;
        let flags = [
            format!("--conflict-policy=oci://{host}/acme/conflict:v1"),
            format!("--policy-plain-http-registry={host}"),
            format!("--policy-verify-key={}", public.display()),
        ];
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let log = work.join("konnector.log");
        let binary = kbind_tests::konnector_binary!();
        let kubeconfig = pair.consumer.admin().kubeconfig_path();
        let mut process = KonnectorProcess::start(&binary, kubeconfig, &log, &flags)?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = process.exited()? {
                break status;
            }
            ensure!(
                tokio::time::Instant::now() < deadline,
                "still running after 60s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        ensure!(
            !status.success(),
            "the konnector started an unsigned module: {status}"
        );
        log_says(&log, "is not signed")?;
        Ok::<_, anyhow::Error>(())
    })
    .await
}

/// Keyless: the konnector trusts an OIDC issuer and subject under a `trusted_root.json` made in
/// the test. A module signed for that identity runs; one signed for another subject (by the
/// same CA, logged the same way) is refused on a swap with the subject it carries, the old one
/// keeps running; a module signed for the identity again is swapped in.
#[tokio::test]
async fn with_keyless_verification_a_module_signed_for_the_identity_runs_and_one_for_another_subject_is_refused_keeping_the_old()
-> anyhow::Result<()> {
    const ISSUER: &str = "https://issuer.kbind.test";
    const SUBJECT: &str = "release@acme.test";
    let pair = shared_pair()?;
    let work = pair.root().join("policy-signatures-keyless");
    pair.diagnose(async {
        fresh_dir(&work)?;
        let registry = Registry::start(&work.join("registry")).await?;
        let host = registry.host().to_owned();
        let sigstore = Sigstore::new("kbind-e2e")?;
        let trust_root = work.join("trusted_root.json");
        std::fs::write(&trust_root, sigstore.trusted_root()?)?;
        let plain = fetcher(&registry, Verification::default(), None)?;
        let push_signed =
            async |tag: &str, version: &str, subject: &str| -> anyhow::Result<String> {
                let target = reference(&registry, &format!("acme/conflict:{tag}"))?;
                push(&plain, &target, version).await?;
                let identity = Identity::new(ISSUER, subject);
                let pinned = plain
                    .sign_with(&target, |manifest| {
                        sigstore
                            .sign(&identity, manifest)
                            .map_err(|e| e.to_string())
                    })
                    .await?;
                Ok(pinned.to_string())
            };
        let v1 = push_signed("v1", "1.0.0", SUBJECT).await?;
        let stranger = push_signed("v2", "2.0.0", "intern@acme.test").await?;

        let refs = ConflictRefs::new(&work, &format!("{host}/acme/conflict"));
        refs.point_at("v1")?;
        let binary = kbind_tests::konnector_binary!();
        let kubeconfig = pair.consumer.admin().kubeconfig_path();
        let verify = [
            format!("--policy-verify-issuer={ISSUER}"),
            format!("--policy-verify-subject={SUBJECT}"),
            format!("--policy-trust-root={}", trust_root.display()),
        ];
        let (mut process, log) =
            start_with_policy_refs(&binary, kubeconfig, &work, refs.path(), &host, &verify).await?;
        let info = |tag: &str, pinned: &str| running(&host, tag, pinned);
        process.wait_for_metric(&info("v1", &v1)).await?;

        refs.point_at("v2")?;
        process
            .wait_for_metric("kbind_policy_swaps_total{role=\"conflict\",result=\"failed\"} 1")
            .await?;
        log_says(
            &log,
            &format!("{stranger}: no signature verifies (identity {SUBJECT} issued by {ISSUER}"),
        )?;
        log_says(&log, "SubjectAltName does not match (got intern@acme.test")?;
        let metrics = process.metrics().await?;
        ensure!(
            metrics.contains(&info("v1", &v1)),
            "v1 no longer runs:\n{metrics}"
        );

        let v3 = push_signed("v3", "3.0.0", SUBJECT).await?;
        refs.point_at("v3")?;
        process.wait_for_metric(&info("v3", &v3)).await?;
        process
            .wait_for_metric("kbind_policy_swaps_total{role=\"conflict\",result=\"swapped\"} 1")
            .await?;
        process.terminate(Duration::from_secs(10)).await?;
        Ok::<_, anyhow::Error>(())
    })
    .await
}
