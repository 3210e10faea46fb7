//! Hostile modules: each misbehaviour gives its own clear error, the process stays up, and
//! the same `Policies` answers the next call correctly.
//!
//! The modules themselves are in [`modules`].

mod modules;

use std::path::Path;
use std::time::{Duration, Instant};

use konnector::api::ConflictPolicy;
use konnector::policy::{
    ConflictDecision, ConflictInput, MAX_MEMORIES, MAX_TABLES, OwnershipMarkers, Policies,
    PolicyError, PolicyLimits, PolicyRole, RelatedInput, SandboxResource,
};
use modules::*;

const LIMITS: PolicyLimits = PolicyLimits {
    timeout: Duration::from_millis(500),
    memory_bytes: 16 * 1024 * 1024,
    ..PolicyLimits::DEFAULT
};

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

/// The same `Policies` still answers: its other roles, and the built-in conflict policy.
async fn assert_still_answers(policies: &Policies) {
    let plan = policies.select_related(&related_input()).await;
    assert!(
        plan.is_ok_and(|p| p.copy.len() == 1),
        "related selection after a hostile call"
    );
    let decision = builtin()
        .decide_conflict(&input(ConflictPolicy::Fail, None))
        .await;
    assert!(
        matches!(decision, Ok(ConflictDecision::Create)),
        "{decision:?}"
    );
}

#[tokio::test]
async fn trapping_module_is_a_trap_error() {
    let policies = hostile(
        PolicyRole::ConflictPolicy,
        &conflict_module(TRAP),
        "trap.wasm",
    );
    let err = policies
        .decide_conflict(&input(ConflictPolicy::Fail, None))
        .await;
    let Err(PolicyError::PolicyTrap {
        role,
        origin,
        message,
        ..
    }) = &err
    else {
        panic!("expected a trap, got {err:?}");
    };
    assert_eq!(
        (*role, origin.as_str()),
        (PolicyRole::ConflictPolicy, "trap.wasm")
    );
    assert!(message.contains("unreachable"), "{message}");
    let text = err.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        text.starts_with("the conflict-policy policy trap.wasm trapped"),
        "{text}"
    );
    assert_still_answers(&policies).await;
}

#[tokio::test]
async fn trapped_instance_does_not_poison_the_next_call() {
    let policies = hostile(
        PolicyRole::ConflictPolicy,
        &conflict_module(TRAP_ON_ADOPT),
        "m",
    );
    let trapped = policies
        .decide_conflict(&input(ConflictPolicy::Adopt, None))
        .await;
    assert!(
        matches!(trapped, Err(PolicyError::PolicyTrap { .. })),
        "{trapped:?}"
    );
    let answered = policies
        .decide_conflict(&input(ConflictPolicy::Fail, None))
        .await;
    assert!(
        matches!(answered, Ok(ConflictDecision::Create)),
        "{answered:?}"
    );
}

#[tokio::test]
async fn looping_module_times_out() {
    let policies = hostile(
        PolicyRole::ConflictPolicy,
        &conflict_module(LOOP),
        "loop.wasm",
    );
    let err = policies
        .decide_conflict(&input(ConflictPolicy::Fail, None))
        .await;
    let Err(PolicyError::PolicyTimeout { limit, .. }) = &err else {
        panic!("expected a timeout, got {err:?}");
    };
    assert_eq!(*limit, LIMITS.timeout);
    let text = err.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        text.contains("loop.wasm did not finish within 500ms"),
        "{text}"
    );
    assert_still_answers(&policies).await;
}

#[tokio::test]
async fn module_allocating_past_the_cap_hits_the_memory_limit() {
    let policies = hostile(
        PolicyRole::ConflictPolicy,
        &conflict_module(HOG),
        "hog.wasm",
    );
    let err = policies
        .decide_conflict(&input(ConflictPolicy::Fail, None))
        .await;
    let Err(PolicyError::PolicyMemoryLimit { limit_bytes, .. }) = &err else {
        panic!("expected a memory limit error, got {err:?}");
    };
    assert_eq!(*limit_bytes, LIMITS.memory_bytes);
    let text = err.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        text.contains("exceeded its memory limit of 16777216 bytes"),
        "{text}"
    );
    assert_still_answers(&policies).await;
}

#[tokio::test]
async fn module_for_another_world_is_refused_at_load() {
    let err = builtin().with_module(
        PolicyRole::SchemaSynthesis,
        &conflict_module(TRAP),
        "conflict.wasm",
    );
    let Err(e @ PolicyError::WrongWorld { .. }) = err else {
        panic!("expected a world mismatch, got {err:?}");
    };
    let text = e.to_string();
    assert!(
        text.contains("the schema-synthesis module conflict.wasm does not implement the world kbind:policy/schema-synthesis@0.1.0"),
        "{text}"
    );
    assert!(
        text.contains("kbind:policy/schema@0.1.0"),
        "names the missing export: {text}"
    );
}

#[tokio::test]
async fn bytes_that_are_not_wasm_are_refused_at_load() {
    let err = builtin().with_module(
        PolicyRole::ConflictPolicy,
        b"#!/bin/sh\necho hi\n",
        "script.sh",
    );
    let Err(e @ PolicyError::CompileModule { .. }) = err else {
        panic!("expected a compile error, got {err:?}");
    };
    assert!(
        e.to_string().starts_with(
            "the conflict-policy module script.sh is not a valid WebAssembly component"
        ),
        "{e}"
    );
}

#[tokio::test]
async fn core_module_is_not_a_component() {
    let core = wat::parse_str("(module)").unwrap_or_else(|e| panic!("{e}"));
    let err = builtin().with_module(PolicyRole::ConflictPolicy, &core, "core.wasm");
    assert!(
        matches!(err, Err(PolicyError::CompileModule { .. })),
        "{err:?}"
    );
}

#[tokio::test]
async fn invalid_crd_is_invalid_output() {
    let policies = hostile(
        PolicyRole::SchemaSynthesis,
        &invalid_crd_module(),
        "bad-crd.wasm",
    );
    let input = serde_json::from_value(serde_json::json!({
        "group": "example.org", "resource": "widgets", "kind": "Widget", "scope": "Namespaced",
        "versions": [{"name": "v1", "served": true, "storage": true, "openapi": {}}]
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    let err = policies.synthesize_schema(&input).await;
    let Err(e @ PolicyError::InvalidOutput { .. }) = err else {
        panic!("expected invalid output, got {err:?}");
    };
    assert!(
        e.to_string()
            .contains("expected an apiextensions.k8s.io/v1 CustomResourceDefinition"),
        "{e}"
    );
    assert_still_answers(&policies).await;
}

#[tokio::test]
async fn undecodable_answer_is_invalid_output() {
    let policies = hostile(
        PolicyRole::ConflictPolicy,
        &conflict_module(BAD_DISCRIMINANT),
        "m",
    );
    let err = policies
        .decide_conflict(&input(ConflictPolicy::Fail, None))
        .await;
    assert!(
        matches!(err, Err(PolicyError::InvalidOutput { .. })),
        "{err:?}"
    );
    assert_still_answers(&policies).await;
}

#[tokio::test]
async fn impossible_decision_is_invalid_output() {
    // This module always answers Create, even when the provider object exists.
    let policies = hostile(
        PolicyRole::ConflictPolicy,
        &conflict_module("(i32.const 16)"),
        "m",
    );
    let target = Some(OwnershipMarkers::default());
    let err = policies
        .decide_conflict(&input(ConflictPolicy::Fail, target))
        .await;
    let Err(e @ PolicyError::InvalidOutput { .. }) = err else {
        panic!("expected invalid output, got {err:?}");
    };
    assert!(
        e.to_string()
            .contains("decided Create, but a provider object already exists"),
        "{e}"
    );
}

#[tokio::test]
async fn missing_module_file_is_a_read_error() {
    let err = builtin().with_module_file(
        PolicyRole::RelatedSelection,
        Path::new("/nonexistent/x.wasm"),
    );
    let Err(e @ PolicyError::ReadModule { .. }) = err else {
        panic!("expected a read error, got {err:?}");
    };
    assert!(
        e.to_string()
            .starts_with("reading the related-selection module /nonexistent/x.wasm"),
        "{e}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn looping_module_does_not_block_other_calls_on_the_same_thread() {
    let looping = hostile(
        PolicyRole::ConflictPolicy,
        &conflict_module(LOOP),
        "loop.wasm",
    )
    .with_limits(PolicyLimits {
        timeout: Duration::from_millis(1500),
        ..LIMITS
    });
    let stuck = tokio::spawn(async move {
        looping
            .decide_conflict(&input(ConflictPolicy::Fail, None))
            .await
    });
    tokio::task::yield_now().await;
    let policies = builtin();
    for _ in 0..5 {
        let d = policies
            .decide_conflict(&input(ConflictPolicy::Adopt, None))
            .await;
        assert!(matches!(d, Ok(ConflictDecision::Create)), "{d:?}");
    }
    assert!(
        !stuck.is_finished(),
        "the looping call is still running while others completed"
    );
    let outcome = stuck.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        matches!(outcome, Err(PolicyError::PolicyTimeout { .. })),
        "{outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_share_one_policies() {
    let policies = builtin();
    let mut tasks = Vec::new();
    for i in 0..32 {
        let p = policies.clone();
        tasks.push(tokio::spawn(async move {
            let policy = if i % 2 == 0 {
                ConflictPolicy::Adopt
            } else {
                ConflictPolicy::Fail
            };
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
async fn module_sleeping_in_wasi_times_out_at_the_limit() {
    let policies = hostile(
        PolicyRole::ConflictPolicy,
        &sleeping_conflict_module(),
        "sleeper.wasm",
    );
    for _ in 0..2 {
        let started = Instant::now();
        let err = policies
            .decide_conflict(&input(ConflictPolicy::Fail, None))
            .await;
        let took = started.elapsed();
        let Err(PolicyError::PolicyTimeout { limit, .. }) = &err else {
            panic!("expected a timeout, got {err:?}");
        };
        assert_eq!(*limit, LIMITS.timeout);
        assert!(
            took >= LIMITS.timeout && took < LIMITS.timeout + Duration::from_secs(2),
            "cut off at the limit, not after the minute the module asked for: {took:?}"
        );
        let text = err.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            text.contains("sleeper.wasm did not finish within 500ms"),
            "{text}"
        );
    }
    assert_still_answers(&policies).await;
}

#[tokio::test]
async fn several_memories_share_one_memory_cap() {
    // Two extra memories of 10 MiB: each is under the 16 MiB cap, together they are not.
    let policies = hostile(
        PolicyRole::ConflictPolicy,
        &many_memories_module(2, 160),
        "memories.wasm",
    );
    let err = policies
        .decide_conflict(&input(ConflictPolicy::Fail, None))
        .await;
    let Err(e @ PolicyError::PolicyMemoryLimit { limit_bytes, .. }) = &err else {
        panic!("expected a memory limit error, got {err:?}");
    };
    assert_eq!(*limit_bytes, LIMITS.memory_bytes);
    assert!(
        e.to_string()
            .contains("memories.wasm exceeded its memory limit of 16777216 bytes"),
        "{e}"
    );
    assert_still_answers(&policies).await;
}

#[tokio::test]
async fn module_with_too_many_memories_is_refused() {
    let policies = hostile(
        PolicyRole::ConflictPolicy,
        &many_memories_module(MAX_MEMORIES, 1),
        "memories.wasm",
    );
    let err = policies
        .decide_conflict(&input(ConflictPolicy::Fail, None))
        .await;
    let Err(
        e @ PolicyError::PolicyResourceLimit {
            resource: SandboxResource::Memories,
            ..
        },
    ) = &err
    else {
        panic!("expected the memory count limit, got {err:?}");
    };
    assert_eq!(
        e.to_string(),
        format!(
            "the conflict-policy policy memories.wasm exceeded the sandbox's limit of {MAX_MEMORIES} linear memories"
        )
    );
    assert_still_answers(&policies).await;
}

#[tokio::test]
async fn module_with_too_many_tables_is_refused() {
    let policies = hostile(
        PolicyRole::ConflictPolicy,
        &many_tables_module(MAX_TABLES + 1),
        "tables.wasm",
    );
    let err = policies
        .decide_conflict(&input(ConflictPolicy::Fail, None))
        .await;
    assert!(
        matches!(
            err,
            Err(PolicyError::PolicyResourceLimit {
                resource: SandboxResource::Tables,
                ..
            })
        ),
        "{err:?}"
    );
    assert_still_answers(&policies).await;
}

#[tokio::test]
async fn oversized_answer_is_refused() {
    let limits = PolicyLimits {
        max_output_bytes: 1024 * 1024,
        ..LIMITS
    };
    let policies = hostile(
        PolicyRole::ConflictPolicy,
        &oversized_answer_module(2 * 1024 * 1024),
        "chatty.wasm",
    )
    .with_limits(limits);
    let err = policies
        .decide_conflict(&input(
            ConflictPolicy::Fail,
            Some(OwnershipMarkers::default()),
        ))
        .await;
    let Err(e @ PolicyError::OutputTooLarge { limit_bytes, .. }) = &err else {
        panic!("expected OutputTooLarge, got {err:?}");
    };
    assert_eq!(*limit_bytes, 1024 * 1024);
    assert!(
        e.to_string().starts_with(
            "the conflict-policy policy chatty.wasm handed the host more than 1048576 bytes"
        ),
        "{e}"
    );
    // The same module within the bound is answered as usual.
    let small = hostile(
        PolicyRole::ConflictPolicy,
        &oversized_answer_module(1000),
        "chatty.wasm",
    )
    .with_limits(limits);
    let answer = small
        .decide_conflict(&input(
            ConflictPolicy::Fail,
            Some(OwnershipMarkers::default()),
        ))
        .await;
    assert!(
        matches!(&answer, Ok(ConflictDecision::Conflict { message, .. }) if message.len() == 1000),
        "{answer:?}"
    );
    assert_still_answers(&policies).await;
}

#[tokio::test]
async fn answer_repeating_one_string_is_bounded_by_what_the_host_copies() {
    // 4 000 entries naming one 1 MiB string twice: 8 GB once copied, 80 KB in the module.
    let policies = hostile(
        PolicyRole::RelatedSelection,
        &amplifying_related_module(4000, 1024 * 1024),
        "amplifier.wasm",
    );
    let err = policies.select_related(&related_input()).await;
    assert!(
        matches!(err, Err(PolicyError::OutputTooLarge { .. })),
        "{err:?}"
    );
    let decision = policies
        .decide_conflict(&input(ConflictPolicy::Fail, None))
        .await;
    assert!(
        matches!(decision, Ok(ConflictDecision::Create)),
        "{decision:?}"
    );
}

#[tokio::test]
async fn input_over_the_bound_is_refused_without_calling_the_module() {
    // The looping module would time out if it were called.
    let policies = hostile(
        PolicyRole::ConflictPolicy,
        &conflict_module(LOOP),
        "loop.wasm",
    )
    .with_limits(PolicyLimits {
        max_input_bytes: 64,
        ..LIMITS
    });
    let mut big = input(ConflictPolicy::Fail, None);
    big.consumer_object_uid = "x".repeat(100);
    let started = Instant::now();
    let err = policies.decide_conflict(&big).await;
    assert!(
        matches!(
            err,
            Err(PolicyError::InputTooLarge {
                limit_bytes: 64,
                ..
            })
        ),
        "{err:?}"
    );
    assert!(started.elapsed() < LIMITS.timeout, "the module was not run");
}

/// A conflict module that counts its calls in a global and traps on call `trap_at` of one
/// instance; otherwise it answers `ok(create)`.
fn counting_conflict_module(trap_at: u32) -> Vec<u8> {
    component(
        "conflict-policy",
        &format!(
            r#"(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))
  (global $calls (mut i32) (i32.const 0))
  {REALLOC}
  {DECIDE}
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (if (i32.eq (global.get $calls) (i32.const {trap_at})) (then unreachable))
    (i32.const 16)))"#
        ),
    )
}

#[tokio::test]
async fn warm_instance_that_traps_is_retried_on_a_fresh_one() {
    let policies = hostile(
        PolicyRole::ConflictPolicy,
        &counting_conflict_module(3),
        "counting.wasm",
    );
    for call in 1..=6 {
        let answered = policies
            .decide_conflict(&input(ConflictPolicy::Fail, None))
            .await;
        assert!(
            matches!(answered, Ok(ConflictDecision::Create)),
            "call {call}: {answered:?}"
        );
    }
}

/// A conflict module that answers `ok(create)` on the first call of an instance and an
/// undecodable variant on every later one: its answer depends on what the instance kept.
fn forgetful_conflict_module() -> Vec<u8> {
    component(
        "conflict-policy",
        &format!(
            r#"(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))
  (global $calls (mut i32) (i32.const 0))
  {REALLOC}
  {DECIDE}
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (if (i32.gt_u (global.get $calls) (i32.const 1))
      (then (i32.store8 (i32.const 20) (i32.const 9))))
    (i32.const 16)))"#
        ),
    )
}

#[tokio::test]
async fn fresh_instance_per_call_never_sees_earlier_calls() {
    let policies = hostile(
        PolicyRole::ConflictPolicy,
        &forgetful_conflict_module(),
        "forgetful.wasm",
    )
    .with_instance_reuse(1);
    for call in 1..=4 {
        let answered = policies
            .decide_conflict(&input(ConflictPolicy::Fail, None))
            .await;
        assert!(
            matches!(answered, Ok(ConflictDecision::Create)),
            "call {call}: {answered:?}"
        );
    }
}

#[tokio::test]
async fn instance_with_an_invalid_answer_is_replaced() {
    let policies = hostile(
        PolicyRole::ConflictPolicy,
        &forgetful_conflict_module(),
        "forgetful.wasm",
    );
    let fail = input(ConflictPolicy::Fail, None);
    let ask = || policies.decide_conflict(&fail);
    let first = ask().await;
    assert!(matches!(first, Ok(ConflictDecision::Create)), "{first:?}");
    let reused = ask().await;
    assert!(
        matches!(reused, Err(PolicyError::InvalidOutput { .. })),
        "a warm instance keeps its state between calls: {reused:?}"
    );
    let replaced = ask().await;
    assert!(
        matches!(replaced, Ok(ConflictDecision::Create)),
        "the failed instance is dropped and the next call starts clean: {replaced:?}"
    );
}
