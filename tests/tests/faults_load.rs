//! Load: the konnector's work is proportional to what changed, and one failure does not stop
//! the rest. Related-resource passes list both sides metadata-only and read a payload only to
//! copy it; a failing copy is counted while the others are copied; a target created or
//! replaced between the list and the write is never taken over; policy calls in flight are
//! bounded. Each check counts (reads, bytes, copies, calls), none measures time.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Secret;
use kbind_tests::faults::policy::poisoned_conflict_policy;
use kbind_tests::syncenv::related::{
    QUIET, entry, listed_bytes, put_plain_secret, put_secret, put_typed_secret, related_marker,
    secret_reads, secret_value, skipped_from_provider, wait_secret,
};
use kbind_tests::syncenv::{BINDING, Scenario, condition, ensure_namespace, stays, wait_for};
use konnector::api::names::RELATED_BINDING_ANNOTATION;
use konnector::api::{RelatedDirection::FromProvider, RelatedResourceKind::Secrets};
use konnector::policy::{ConflictInput, Policies, PolicyRole};
use konnector::registry::Engagement;
use konnector::related::RelatedGuard;
use konnector::related::{self, PassReport, RelatedScope};
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};

/// Unrelated Secrets in the scope of the load test's entry.
const UNRELATED: usize = 2_000;
/// Payload of each unrelated Secret: what a list carrying data would have to move.
const UNRELATED_BYTES: usize = 4 * 1024;
/// Binding passes the load test watches after the copy settled (2 s each in tests).
const WATCHED: Duration = Duration::from_secs(8);

/// Creates `n` Secrets named `{prefix}-{i}` of `bytes` bytes each in `namespace`.
async fn many_secrets(
    client: &kube::Client,
    namespace: &str,
    prefix: &str,
    n: usize,
    bytes: usize,
) -> anyhow::Result<()> {
    let api = Api::<Secret>::namespaced(client.clone(), namespace);
    let value = "x".repeat(bytes);
    stream::iter(0..n)
        .map(|i| {
            let (api, value) = (api.clone(), value.clone());
            async move {
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(format!("{prefix}-{i}")),
                        ..ObjectMeta::default()
                    },
                    string_data: Some([("k".to_string(), value)].into()),
                    ..Secret::default()
                };
                match api.create(&PostParams::default(), &secret).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(()),
                    Err(e) => Err(anyhow::Error::from(e)),
                }
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

#[test]
fn related_entry_lists_targets_without_their_data() -> anyhow::Result<()> {
    let entries = vec![entry(Secrets, FromProvider, &["wanted"], &[])];
    Scenario::bound("load-related").related(entries).run(async |s| {
        let ns = s.ns();
        // 2 000 unrelated Secrets of 4 KiB on the target side, in the entry's scope.
        many_secrets(&s.consumer, ns, "unrelated", UNRELATED, UNRELATED_BYTES).await?;
        put_plain_secret(&s.provider, ns, "wanted", &[]).await?;
        wait_secret(&s.consumer, ns, "wanted").await?;
        // Let a pass that raced the copy finish, then count what further passes read.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (lists, full, bytes) = (
            secret_reads("list-metadata"),
            secret_reads("get-full"),
            listed_bytes(&s.consumer, "secrets").await?,
        );
        tokio::time::sleep(WATCHED).await;
        let passes = secret_reads("list-metadata") - lists;
        let full_reads = secret_reads("get-full") - full;
        let bytes = listed_bytes(&s.consumer, "secrets").await? - bytes;
        // Passes ran (each lists both sides, metadata-only) and read no payload at all: the
        // copy is up to date, the unrelated Secrets are only names to the konnector.
        anyhow::ensure!(passes >= 4, "only {passes} metadata-only list pages in {WATCHED:?}");
        assert_eq!(full_reads, 0, "payload reads across {passes} list pages");
        // What the consumer's API server answered to every Secret list in the window is less
        // than one list carrying the unrelated payloads would be, let alone one per pass.
        let one_full_list = (UNRELATED * UNRELATED_BYTES) as f64;
        anyhow::ensure!(
            bytes < one_full_list,
            "{bytes} bytes of Secret lists over {passes} list pages; one with data is {one_full_list}"
        );
        Ok(())
    })
}

#[test]
fn one_failing_related_copy_does_not_stop_the_others() -> anyhow::Result<()> {
    let names = ["a-first", "b-retyped", "c-last"];
    let entries = vec![entry(Secrets, FromProvider, &names, &[])];
    Scenario::bound("load-onefails").related(entries).run(async |s| {
        let ns = s.ns();
        // A copy of ours whose source was replaced by a Secret of another type: a Secret's type
        // cannot change, so writing it is refused (422) on every pass. It is put there
        // unmarked (left alone), its source added, and then marked as ours.
        let consumer = Api::<Secret>::namespaced(s.consumer.clone(), ns);
        ensure_namespace(&s.consumer, ns).await?;
        let mut stale = Secret {
            metadata: ObjectMeta {
                name: Some("b-retyped".into()),
                ..ObjectMeta::default()
            },
            string_data: Some([("k".to_string(), "old".to_string())].into()),
            ..Secret::default()
        };
        stale.type_ = Some("Opaque".into());
        consumer.create(&PostParams::default(), &stale).await?;
        let tls = [("tls.crt", "c"), ("tls.key", "k")];
        put_typed_secret(&s.provider, ns, "b-retyped", "kubernetes.io/tls", &[], &tls, None)
            .await?;
        let uid = s.bindings().get(BINDING).await?.uid().unwrap_or_default();
        let marked = serde_json::json!({ "metadata": { "annotations": { RELATED_BINDING_ANNOTATION: uid } } });
        consumer
            .patch("b-retyped", &PatchParams::default(), &Patch::Merge(&marked))
            .await?;
        put_plain_secret(&s.provider, ns, "a-first", &[]).await?;
        put_plain_secret(&s.provider, ns, "c-last", &[]).await?;
        // The others are copied, before and after the failing one.
        wait_secret(&s.consumer, ns, "a-first").await?;
        wait_secret(&s.consumer, ns, "c-last").await?;
        let counted = wait_for("the failure counted in the condition", QUIET * 6, || async {
            let status = s.binding_status().await?;
            Ok(status.and_then(|st| {
                condition(&st, "RelatedResourcesSynced")
                    .filter(|c| c.status == "False" && c.reason == "CopyFailed")
                    .map(|c| c.message.clone())
            }))
        })
        .await?;
        assert!(
            counted.starts_with("1 related cop(y/ies) failed") && counted.contains("b-retyped"),
            "{counted}"
        );
        let kept = consumer.get("b-retyped").await?;
        assert_eq!(kept.type_.as_deref(), Some("Opaque"), "the refused write changed nothing");
        Ok(())
    })
}

#[test]
fn related_copy_never_takes_an_object_created_meanwhile() -> anyhow::Result<()> {
    // The binding itself declares no entry: the test runs one related pass itself, with its
    // race placed between the pass's lists and its writes.
    Scenario::bound("load-race").run(async |s| {
        let ns = s.ns();
        put_secret(&s.provider, ns, "raced", &[], &[("k", "source")], None).await?;
        put_secret(&s.provider, ns, "replaced", &[], &[("k", "source")], None).await?;
        let entries = vec![entry(Secrets, FromProvider, &["raced", "replaced"], &[])];
        let guard = RelatedGuard::new("kbind", None);
        let scope = RelatedScope {
            binding_uid: "race-binding",
            namespace: Some(ns),
            entries: &entries,
            guard: &guard,
        };
        let engagement = Engagement {
            connection: s.name.clone(),
            provider: s.provider.clone(),
            provider_uid: String::new(),
            consumer_uid: String::new(),
            exported: Vec::new(),
            schema_revisions: Default::default(),
            isolation: Default::default(),
            heartbeat_namespace: String::new(),
            credentials_digest: String::new(),
            epoch: 0,
        };
        let policies = Policies::builtin()?;
        let consumer = Api::<Secret>::namespaced(s.consumer.clone(), ns);
        // A first pass copies `replaced`: a copy of ours exists.
        let mut first = PassReport::default();
        related::sync_entry(
            &scope,
            &entries[0],
            &s.consumer,
            &engagement,
            &policies,
            &mut first,
            async || {},
        )
        .await;
        assert_eq!(first.failed, 0, "{:?}", first.first);
        consumer
            .delete("raced", &DeleteParams::default())
            .await
            .ok();
        let copy = consumer.get("replaced").await?;
        assert_eq!(related_marker(&copy).as_deref(), Some("race-binding"));
        // The source of `replaced` changes, so the pass under test has its copy to refresh.
        put_secret(&s.provider, ns, "replaced", &[], &[("k", "source2")], None).await?;
        // The pass under test lists (`raced` absent, `replaced` ours); then, before it writes,
        // someone creates an unmarked `raced` and replaces `replaced` by an unmarked object.
        let foreign_before = skipped_from_provider("foreign-target");
        let mut outcome = PassReport::default();
        let theirs = |name: &str| {
            let mut secret = Secret::default();
            secret.metadata.name = Some(name.to_string());
            secret.string_data = Some([("k".to_string(), "theirs".to_string())].into());
            secret
        };
        related::sync_entry(
            &scope,
            &entries[0],
            &s.consumer,
            &engagement,
            &policies,
            &mut outcome,
            async || {
                let params = PostParams::default();
                let _ = consumer.create(&params, &theirs("raced")).await;
                let _ = consumer.delete("replaced", &DeleteParams::default()).await;
                let _ = consumer.create(&params, &theirs("replaced")).await;
            },
        )
        .await;
        assert_eq!(
            outcome.failed, 0,
            "never taking an object is not a failure: {:?}",
            outcome.first
        );
        assert!(skipped_from_provider("foreign-target") > foreign_before);
        for name in ["raced", "replaced"] {
            let left = consumer.get(name).await?;
            assert_eq!(
                secret_value(&left, "k").as_deref(),
                Some("theirs"),
                "{name} was written"
            );
            assert_eq!(related_marker(&left), None, "{name} was marked");
        }
        // Later passes leave them alone too: an unmarked target is never taken.
        stays(
            "the raced objects untouched",
            Duration::from_secs(2),
            || async {
                let mut again = PassReport::default();
                related::sync_entry(
                    &scope,
                    &entries[0],
                    &s.consumer,
                    &engagement,
                    &policies,
                    &mut again,
                    async || {},
                )
                .await;
                let raced = consumer.get("raced").await?;
                Ok(related_marker(&raced).is_none() && again.failed == 0)
            },
        )
        .await?;
        Ok(())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_calls_in_flight_are_bounded() -> anyhow::Result<()> {
    // A conflict policy that loops on one object: each call runs until its deadline, so
    // simultaneous calls overlap for the whole of it.
    const BOUND: usize = 2;
    let module = poisoned_conflict_policy("trap-nobody", "loops")?;
    let policies =
        Policies::builtin()?.with_module(PolicyRole::ConflictPolicy, &module, "loop.wasm")?;
    let mut limits = policies.limits();
    limits.timeout = Duration::from_millis(300);
    let input = ConflictInput {
        consumer_cluster_uid: "consumer".into(),
        consumer_object_uid: "loops".into(),
        conflict_policy: konnector::api::ConflictPolicy::Fail,
        target: None,
    };
    for (bound, expected_peak) in [(BOUND, BOUND), (BOUND + 1, BOUND + 1)] {
        let bounded = policies
            .with_limits(limits)
            .with_max_concurrent_calls(bound);
        let calls = (0..=BOUND).map(|_| bounded.decide_conflict(&input));
        let answers = futures::future::join_all(calls).await;
        assert!(
            answers.iter().all(Result::is_err),
            "each call ran into its deadline"
        );
        assert_eq!(
            bounded.peak_concurrent_calls(),
            expected_peak,
            "bound {bound}, {} calls",
            BOUND + 1
        );
    }
    Ok(())
}
