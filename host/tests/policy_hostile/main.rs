//! Hostile modules: each misbehaviour gives its own clear error, the process stays up, and
//! the same `Policies` answers the next call correctly.
//!
//! The modules themselves are in [`modules`]. Most tests are one frame: load a module, ask
//! it once, check the error with [`assert_fails!`], then [`assert_still_answers`].

mod modules;

use std::path::Path;
use std::time::{Duration, Instant};

use konnector::api::ConflictPolicy;
use konnector::cli::policy::{Passes, run_fixtures};
use konnector::policy::{
    ConflictDecision, ConflictInput, MAX_MEMORIES, MAX_TABLES, OwnershipMarkers, Placement,
    PlacementInput, Policies, PolicyError, PolicyLimits, PolicyRole, RelatedInput, SandboxResource,
};
use modules::*;

const LIMITS: PolicyLimits = PolicyLimits {
    timeout: Duration::from_millis(500),
    memory_bytes: 16 * 1024 * 1024,
    ..PolicyLimits::DEFAULT
};

/// Asserts that `outcome` is an error matching the pattern (its bindings are references)
/// and that its text, as operators see it, `says` exactly or `opens` with the given text;
/// gives the error back for further checks.
macro_rules! assert_fails {
    ($outcome:expr, $pattern:pat $(if $guard:expr)?, says $text:expr) => {
        assert_fails!(@check $outcome, $pattern $(if $guard)?, "be", |t: &str| t == $text, $text)
    };
    ($outcome:expr, $pattern:pat $(if $guard:expr)?, opens $text:expr) => {
        assert_fails!(@check $outcome, $pattern $(if $guard)?, "start with",
            |t: &str| t.starts_with($text), $text)
    };
    (@check $outcome:expr, $pattern:pat $(if $guard:expr)?, $how:literal, $text_ok:expr,
        $expected:expr) => {
        match $outcome {
            Err(e) if matches!(&e, $pattern $(if $guard)?) => {
                let text = e.to_string();
                assert!(($text_ok)(&text), "expected the message to {}\n  {}\ngot\n  {text}",
                    $how, $expected);
                e
            }
            other => panic!("expected {}, got {other:?}", stringify!($pattern $(if $guard)?)),
        }
    };
}

/// The frame of most tests: loads `module` as the conflict policy `name`, asks it under
/// Fail, checks the error as [`assert_fails!`] does, then [`assert_still_answers`].
macro_rules! assert_conflict_call_fails {
    ($module:expr, $name:expr, $($check:tt)+) => {{
        let policies = conflict_policy(&$module, $name);
        assert_fails!(decide(&policies).await, $($check)+);
        assert_still_answers(&policies).await;
    }};
}

fn input(policy: ConflictPolicy, target: Option<OwnershipMarkers>) -> ConflictInput {
    ConflictInput {
        consumer_cluster_uid: "cluster-1".into(),
        consumer_object_uid: "object-1".into(),
        conflict_policy: policy,
        target,
    }
}

fn related_input() -> RelatedInput {
    serde_json::from_value(serde_json::json!({
        "bindingUid": "b-1",
        "entry": {"group": "", "resource": "secrets", "direction": "FromProvider"},
        "sources": [{"namespace": "a", "name": "s1"}]
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

/// A placement question about Widget `team-a/w1` (or cluster-scoped `w1` when `namespaced` is
/// false) under the `Namespaced` strategy with prefix `east`.
fn placement_input(namespaced: bool) -> PlacementInput {
    serde_json::from_value(serde_json::json!({
        "consumerClusterUid": "cluster-1",
        "connection": "provider",
        "api": {"group": "example.org", "resource": "widgets", "kind": "Widget",
            "scope": if namespaced { "Namespaced" } else { "Cluster" }},
        "namespace": namespaced.then_some("team-a"),
        "name": "w1",
        "isolation": {"strategy": "Namespaced", "prefix": "east"}
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The frame of the placement tests: loads `module` as the placement policy `name`, asks it
/// about a namespaced (or cluster-scoped) object, checks the error as [`assert_fails!`] does,
/// then [`assert_still_answers`].
macro_rules! assert_placement_fails {
    ($module:expr, $name:expr, namespaced: $namespaced:expr, $($check:tt)+) => {{
        let policies = hostile(PolicyRole::Placement, &$module, $name);
        assert_fails!(policies.place(&placement_input($namespaced)).await, $($check)+);
        assert_still_answers(&policies).await;
    }};
}

fn builtin() -> Policies {
    Policies::builtin()
        .unwrap_or_else(|e| panic!("built-in policies: {e}"))
        .with_limits(LIMITS)
}

fn hostile(role: PolicyRole, bytes: &[u8], name: &str) -> Policies {
    builtin()
        .with_module(role, bytes, name)
        .unwrap_or_else(|e| panic!("loading {name}: {e}"))
}

/// `module` loaded as the conflict policy `name`.
fn conflict_policy(module: &[u8], name: &str) -> Policies {
    hostile(PolicyRole::ConflictPolicy, module, name)
}

/// Asks the conflict question under Fail, with no provider object.
async fn decide(policies: &Policies) -> Result<ConflictDecision, PolicyError> {
    policies
        .decide_conflict(&input(ConflictPolicy::Fail, None))
        .await
}

/// Asks the conflict question under Fail, with a provider object that carries no markers.
async fn decide_over_foreign(policies: &Policies) -> Result<ConflictDecision, PolicyError> {
    let target = Some(OwnershipMarkers::default());
    policies
        .decide_conflict(&input(ConflictPolicy::Fail, target))
        .await
}

/// Asks the conflict question `calls` times; each answer is `Create`.
async fn assert_creates(policies: &Policies, calls: u32) {
    for call in 1..=calls {
        let answered = decide(policies).await;
        assert!(
            matches!(answered, Ok(ConflictDecision::Create)),
            "call {call}: {answered:?}"
        );
    }
}

/// The text of `err` names `detail` somewhere.
fn assert_mentions(err: &PolicyError, detail: &str) {
    let text = err.to_string();
    assert!(text.contains(detail), "expected {detail:?} in: {text}");
}

/// The same `Policies` still answers with its built-in roles; a fresh built-in `Policies`
/// stands in for the role the hostile module took.
async fn assert_still_answers(policies: &Policies) {
    let fresh = builtin();
    let serving = |role| match &*policies.origin(role) {
        "built-in" => policies,
        _ => &fresh,
    };
    let plan = serving(PolicyRole::RelatedSelection)
        .select_related(&related_input())
        .await;
    assert!(
        plan.is_ok_and(|p| p.copy.len() == 1),
        "related selection after a hostile call"
    );
    assert_creates(serving(PolicyRole::ConflictPolicy), 1).await;
    let placed = serving(PolicyRole::Placement)
        .place(&placement_input(true))
        .await;
    let expected = Placement {
        namespace: Some("east-team-a".into()),
        name: "w1".into(),
    };
    assert_eq!(
        placed.ok(),
        Some(expected),
        "placement after a hostile call"
    );
}

#[tokio::test]
async fn trapping_module_is_a_trap_error() {
    assert_conflict_call_fails! {
        conflict_module(TRAP), "trap.wasm",
        PolicyError::PolicyTrap { role: PolicyRole::ConflictPolicy, origin, message, .. }
            if origin == "trap.wasm" && message.contains("unreachable"),
        opens "the conflict-policy policy trap.wasm trapped"
    }
}

#[tokio::test]
async fn trapped_instance_does_not_poison_the_next_call() {
    let policies = conflict_policy(&conflict_module(TRAP_ON_ADOPT), "trap-on-adopt.wasm");
    let adopt = input(ConflictPolicy::Adopt, None);
    assert_fails!(policies.decide_conflict(&adopt).await, PolicyError::PolicyTrap { .. },
        opens "the conflict-policy policy trap-on-adopt.wasm trapped");
    assert_creates(&policies, 1).await;
}

#[tokio::test]
async fn looping_module_times_out() {
    assert_conflict_call_fails! {
        conflict_module(LOOP), "loop.wasm",
        PolicyError::PolicyTimeout { limit, .. } if *limit == LIMITS.timeout,
        says "the conflict-policy policy loop.wasm did not finish within 500ms"
    }
}

#[tokio::test]
async fn module_allocating_past_the_cap_hits_the_memory_limit() {
    assert_conflict_call_fails! {
        conflict_module(HOG), "hog.wasm",
        PolicyError::PolicyMemoryLimit { limit_bytes, .. } if *limit_bytes == LIMITS.memory_bytes,
        says "the conflict-policy policy hog.wasm exceeded its memory limit of 16777216 bytes"
    }
}

#[tokio::test]
async fn module_for_another_world_is_refused_at_load() {
    let module = conflict_module(TRAP);
    let loaded = builtin().with_module(PolicyRole::SchemaSynthesis, &module, "conflict.wasm");
    let err = assert_fails!(loaded, PolicyError::WrongWorld { .. },
        opens "the schema-synthesis module conflict.wasm does not implement the world kbind:policy/schema-synthesis@0.2.0");
    assert_mentions(&err, "kbind:policy/schema@0.2.0");
}

#[tokio::test]
async fn bytes_that_are_not_wasm_are_refused_at_load() {
    let script = b"#!/bin/sh\necho hi\n";
    assert_fails!(builtin().with_module(PolicyRole::ConflictPolicy, script, "script.sh"),
        PolicyError::CompileModule { .. },
        opens "the conflict-policy module script.sh is not a valid WebAssembly component");
}

#[tokio::test]
async fn core_module_is_not_a_component() {
    let core = wat::parse_str("(module)").unwrap_or_else(|e| panic!("{e}"));
    assert_fails!(builtin().with_module(PolicyRole::ConflictPolicy, &core, "core.wasm"),
        PolicyError::CompileModule { .. },
        opens "the conflict-policy module core.wasm is not a valid WebAssembly component");
}

#[tokio::test]
async fn missing_module_file_is_a_read_error() {
    let path = Path::new("/nonexistent/x.wasm");
    assert_fails!(builtin().with_module_file(PolicyRole::RelatedSelection, path),
        PolicyError::ReadModule { .. },
        opens "reading the related-selection module /nonexistent/x.wasm");
}

#[tokio::test]
async fn invalid_crd_is_invalid_output() {
    let module = invalid_crd_module();
    let policies = hostile(PolicyRole::SchemaSynthesis, &module, "bad-crd.wasm");
    let input = serde_json::from_value(serde_json::json!({
        "group": "example.org", "resource": "widgets", "kind": "Widget", "scope": "Namespaced",
        "versions": [{"name": "v1", "served": true, "storage": true, "openapi": {}}]
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    let err = assert_fails!(policies.synthesize_schema(&input).await,
        PolicyError::InvalidOutput { .. },
        opens "the schema-synthesis policy bad-crd.wasm returned invalid output: ");
    assert_mentions(
        &err,
        "expected an apiextensions.k8s.io/v1 CustomResourceDefinition",
    );
    assert_still_answers(&policies).await;
}

#[tokio::test]
async fn undecodable_answer_is_invalid_output() {
    assert_conflict_call_fails! {
        conflict_module(BAD_DISCRIMINANT), "undecodable.wasm",
        PolicyError::InvalidOutput { .. },
        opens "the conflict-policy policy undecodable.wasm returned invalid output: "
    }
}

#[tokio::test]
async fn impossible_decision_is_invalid_output() {
    // This module always answers Create, even when the provider object exists.
    let policies = conflict_policy(&conflict_module(CREATE), "always-create.wasm");
    let err = assert_fails!(decide_over_foreign(&policies).await,
        PolicyError::InvalidOutput { .. },
        opens "the conflict-policy policy always-create.wasm returned invalid output: ");
    assert_mentions(&err, "decided Create, but a provider object already exists");
    assert_still_answers(&policies).await;
}

#[tokio::test]
async fn module_sleeping_in_wasi_times_out_at_the_limit() {
    let policies = conflict_policy(&sleeping_conflict_module(), "sleeper.wasm");
    for _ in 0..2 {
        let started = Instant::now();
        let outcome = decide(&policies).await;
        let took = started.elapsed();
        assert!(
            took >= LIMITS.timeout && took < LIMITS.timeout + Duration::from_secs(2),
            "cut off at the limit, not after the minute the module asked for: {took:?}"
        );
        assert_fails!(outcome,
            PolicyError::PolicyTimeout { limit, .. } if *limit == LIMITS.timeout,
            says "the conflict-policy policy sleeper.wasm did not finish within 500ms");
    }
    assert_still_answers(&policies).await;
}

#[tokio::test]
async fn several_memories_share_one_memory_cap() {
    // Two extra memories of 10 MiB: each is under the 16 MiB cap, together they are not.
    assert_conflict_call_fails! {
        many_memories_module(2, 160), "memories.wasm",
        PolicyError::PolicyMemoryLimit { limit_bytes, .. } if *limit_bytes == LIMITS.memory_bytes,
        says "the conflict-policy policy memories.wasm exceeded its memory limit of 16777216 bytes"
    }
}

#[tokio::test]
async fn module_with_too_many_memories_is_refused() {
    assert_conflict_call_fails! {
        many_memories_module(MAX_MEMORIES, 1), "memories.wasm",
        PolicyError::PolicyResourceLimit { resource: SandboxResource::Memories, .. },
        says format!("the conflict-policy policy memories.wasm exceeded the sandbox's limit of {MAX_MEMORIES} linear memories")
    }
}

#[tokio::test]
async fn module_with_too_many_tables_is_refused() {
    assert_conflict_call_fails! {
        many_tables_module(MAX_TABLES + 1), "tables.wasm",
        PolicyError::PolicyResourceLimit { resource: SandboxResource::Tables, .. },
        says format!("the conflict-policy policy tables.wasm exceeded the sandbox's limit of {MAX_TABLES} tables")
    }
}

#[tokio::test]
async fn oversized_answer_is_refused() {
    let limits = PolicyLimits {
        max_output_bytes: 1024 * 1024,
        ..LIMITS
    };
    let chatty =
        |len| conflict_policy(&oversized_answer_module(len), "chatty.wasm").with_limits(limits);
    let policies = chatty(2 * 1024 * 1024);
    assert_fails!(decide_over_foreign(&policies).await,
        PolicyError::OutputTooLarge { limit_bytes, .. } if *limit_bytes == limits.max_output_bytes,
        says "the conflict-policy policy chatty.wasm handed the host more than 1048576 bytes at once (its answer, or a WASI call's arguments)");
    // The same module within the bound is answered as usual.
    let answer = decide_over_foreign(&chatty(1000)).await;
    assert!(
        matches!(&answer, Ok(ConflictDecision::Conflict { message, .. }) if message.len() == 1000),
        "{answer:?}"
    );
    assert_still_answers(&policies).await;
}

#[tokio::test]
async fn answer_repeating_one_string_is_bounded_by_what_the_host_copies() {
    // 4 000 entries naming one 1 MiB string twice: 8 GB once copied, 80 KB in the module.
    let amplifier = amplifying_related_module(4000, 1024 * 1024);
    let policies = hostile(PolicyRole::RelatedSelection, &amplifier, "amplifier.wasm");
    assert_fails!(policies.select_related(&related_input()).await,
        PolicyError::OutputTooLarge { .. },
        opens "the related-selection policy amplifier.wasm handed the host more than");
    assert_still_answers(&policies).await;
}

#[tokio::test]
async fn input_over_the_bound_is_refused_without_calling_the_module() {
    // The looping module would time out if it were called.
    let policies = conflict_policy(&conflict_module(LOOP), "loop.wasm").with_limits(PolicyLimits {
        max_input_bytes: 64,
        ..LIMITS
    });
    let mut big = input(ConflictPolicy::Fail, None);
    big.consumer_object_uid = "x".repeat(100);
    let started = Instant::now();
    assert_fails!(policies.decide_conflict(&big).await,
        PolicyError::InputTooLarge { limit_bytes: 64, .. },
        opens "the input for the conflict-policy policy is larger than the limit of 64 bytes of JSON; nothing was asked");
    assert!(started.elapsed() < LIMITS.timeout, "the module was not run");
}

#[tokio::test(flavor = "current_thread")]
async fn looping_module_does_not_block_other_calls_on_the_same_thread() {
    // Loaded before the loop starts, and a bound with room for five calls on a loaded machine.
    let policies = builtin();
    let looping = conflict_policy(&conflict_module(LOOP), "loop.wasm").with_limits(PolicyLimits {
        timeout: Duration::from_secs(5),
        ..LIMITS
    });
    let stuck = tokio::spawn(async move { decide(&looping).await });
    tokio::task::yield_now().await;
    let adopt = input(ConflictPolicy::Adopt, None);
    for _ in 0..5 {
        let d = policies.decide_conflict(&adopt).await;
        assert!(matches!(d, Ok(ConflictDecision::Create)), "{d:?}");
    }
    assert!(
        !stuck.is_finished(),
        "the looping call is still running while others completed"
    );
    let outcome = stuck.await.unwrap_or_else(|e| panic!("{e}"));
    assert_fails!(outcome, PolicyError::PolicyTimeout { .. },
        says "the conflict-policy policy loop.wasm did not finish within 5s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_share_one_policies() {
    let policies = builtin();
    let mut tasks = Vec::new();
    for i in 0..32 {
        let p = policies.clone();
        tasks.push(tokio::spawn(async move {
            let policy = [ConflictPolicy::Adopt, ConflictPolicy::Fail][i % 2];
            let d = p
                .decide_conflict(&input(policy, Some(OwnershipMarkers::default())))
                .await;
            let plan = p.select_related(&related_input()).await;
            (policy, d, plan.map(|p| p.copy.len()))
        }));
    }
    for t in tasks {
        let (policy, d, plan) = t.await.unwrap_or_else(|e| panic!("{e}"));
        match policy {
            ConflictPolicy::Adopt => assert!(matches!(d, Ok(ConflictDecision::Adopt)), "{d:?}"),
            ConflictPolicy::Fail => {
                assert!(matches!(d, Ok(ConflictDecision::Conflict { .. })), "{d:?}")
            }
        }
        assert_eq!(plan.ok(), Some(1));
    }
}

#[tokio::test]
async fn warm_instance_that_traps_is_retried_on_a_fresh_one() {
    let policies = conflict_policy(&counting_conflict_module(3), "counting.wasm");
    assert_creates(&policies, 6).await;
}

#[tokio::test]
async fn fresh_instance_per_call_never_sees_earlier_calls() {
    let policies = conflict_policy(&forgetful_conflict_module(), "forgetful.wasm");
    assert_creates(&policies.with_instance_reuse(1), 4).await;
}

#[tokio::test]
async fn reused_fixture_run_shows_state_kept_between_calls() {
    let dir = std::env::temp_dir().join(format!("kbind-reused-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let input = r#"{"consumerClusterUid":"c","consumerObjectUid":"o","conflictPolicy":"Fail"}"#;
    for case in ["a", "b"] {
        std::fs::write(dir.join(format!("{case}.input.json")), input)
            .unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            dir.join(format!("{case}.expected.json")),
            r#"{"decision":"Create"}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    let policies = conflict_policy(&forgetful_conflict_module(), "forgetful.wasm");
    let role = PolicyRole::ConflictPolicy;
    let fresh = run_fixtures(&policies, role, &dir, Passes::Fresh).await;
    let reused = run_fixtures(&policies, role, &dir, Passes::Reused).await;
    let _ = std::fs::remove_dir_all(&dir);
    let fresh = fresh.unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!((fresh.passed(), fresh.failed()), (2, 0));
    let reused = reused.unwrap_or_else(|e| panic!("{e:#}"));
    // Each case passes on the instance's first call and fails once the instance has served
    // another: the first pass fails "b", the reverse pass "a".
    assert_eq!((reused.passed(), reused.failed()), (0, 2));
    for case in &reused.cases {
        let failure = case.failure.as_deref().unwrap_or_default();
        assert!(
            failure.starts_with("on a reused instance, after ")
                && failure.contains("returned invalid output"),
            "{}: {failure}",
            case.name
        );
    }
}

#[tokio::test]
async fn instance_with_an_invalid_answer_is_replaced() {
    let policies = conflict_policy(&forgetful_conflict_module(), "forgetful.wasm");
    assert_creates(&policies, 1).await;
    // A warm instance keeps its state between calls.
    assert_fails!(decide(&policies).await, PolicyError::InvalidOutput { .. },
        opens "the conflict-policy policy forgetful.wasm returned invalid output: ");
    // The failed instance is dropped and the next call starts clean.
    assert_creates(&policies, 1).await;
}

#[tokio::test]
async fn a_trapping_placement_module_is_a_trap_error() {
    assert_placement_fails! {
        placement_module(TRAP), "trap.wasm", namespaced: true,
        PolicyError::PolicyTrap { role: PolicyRole::Placement, origin, message, .. }
            if origin == "trap.wasm" && message.contains("unreachable"),
        opens "the placement-policy policy trap.wasm trapped"
    }
}

#[tokio::test]
async fn a_looping_placement_module_times_out() {
    assert_placement_fails! {
        placement_module(LOOP), "loop.wasm", namespaced: true,
        PolicyError::PolicyTimeout { role: PolicyRole::Placement, limit, .. }
            if *limit == LIMITS.timeout,
        says "the placement-policy policy loop.wasm did not finish within 500ms"
    }
}

#[tokio::test]
async fn a_placement_under_an_invalid_name_is_refused() {
    assert_placement_fails! {
        placement_answering(Some("east-team-a"), "Not_A_Name"), "bad-name.wasm", namespaced: true,
        PolicyError::InvalidOutput { role: PolicyRole::Placement, .. },
        says "the placement-policy policy bad-name.wasm returned invalid output: the name \"Not_A_Name\" is not a valid Kubernetes object name: contains 'N'; an object name has only lowercase letters, digits, '-' and '.'"
    }
}

#[tokio::test]
async fn a_placement_in_kube_system_is_refused() {
    assert_placement_fails! {
        placement_answering(Some("kube-system"), "w1"), "kube-system.wasm", namespaced: true,
        PolicyError::InvalidOutput { role: PolicyRole::Placement, .. },
        says "the placement-policy policy kube-system.wasm returned invalid output: the namespace \"kube-system\" is protected; copies are never placed in kube-system, kube-public, kube-node-lease"
    }
}

#[tokio::test]
async fn a_namespace_for_a_cluster_scoped_api_is_refused() {
    assert_placement_fails! {
        placement_answering(Some("team-a"), "w1"), "namespaced.wasm", namespaced: false,
        PolicyError::InvalidOutput { role: PolicyRole::Placement, .. },
        says "the placement-policy policy namespaced.wasm returned invalid output: placed in namespace \"team-a\", but widgets.example.org is cluster-scoped; a cluster-scoped copy has no namespace"
    }
}

#[tokio::test]
async fn a_placement_without_a_namespace_for_a_namespaced_api_is_refused() {
    // Zeroed memory answers `ok({namespace: none, name: ""})`.
    assert_placement_fails! {
        placement_module(""), "empty.wasm", namespaced: true,
        PolicyError::InvalidOutput { role: PolicyRole::Placement, .. },
        opens "the placement-policy policy empty.wasm returned invalid output: placed without a namespace, but widgets.example.org is namespaced"
    }
}

#[tokio::test]
async fn a_valid_placement_from_a_swapped_module_is_used() {
    let policies = hostile(
        PolicyRole::Placement,
        &placement_answering(None, "c1a2b3c4-w1"),
        "fixed.wasm",
    );
    let placed = policies.place(&placement_input(false)).await;
    let expected = Placement {
        namespace: None,
        name: "c1a2b3c4-w1".into(),
    };
    assert_eq!(placed.ok(), Some(expected));
    assert_eq!(&*policies.origin(PolicyRole::Placement), "fixed.wasm");
}

#[tokio::test]
async fn a_conflict_module_is_refused_as_the_placement_policy() {
    let module = conflict_module(CREATE);
    let loaded = builtin().with_module(PolicyRole::Placement, &module, "conflict.wasm");
    let err = assert_fails!(loaded, PolicyError::WrongWorld { .. },
        opens "the placement-policy module conflict.wasm does not implement the world kbind:policy/placement-policy@0.2.0");
    assert_mentions(&err, "kbind:policy/placement@0.2.0");
}
