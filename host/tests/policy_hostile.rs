//! Hostile modules: each misbehaviour gives its own clear error, the process stays up, and
//! the same `Policies` answers the next call correctly.
//!
//! The modules are written as core WebAssembly text implementing the canonical ABI of the
//! role's export by hand, then wrapped into components for the role's world with
//! `wit-component` (the same step `cargo build --target wasm32-wasip2` performs).

use std::path::Path;
use std::time::Duration;

use konnector::api::ConflictPolicy;
use konnector::policy::{
    ConflictDecision, ConflictInput, OwnershipMarkers, Policies, PolicyError, PolicyLimits,
    PolicyRole, RelatedInput,
};

const LIMITS: PolicyLimits = PolicyLimits {
    timeout: Duration::from_millis(500),
    memory_bytes: 16 * 1024 * 1024,
};

/// Wraps a core module (WAT) into a component for `world` of `wit/`.
fn component(world: &str, core_wat: &str) -> Vec<u8> {
    let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
    let mut resolve = wit_parser::Resolve::default();
    let (pkg, _) = resolve
        .push_dir(&wit)
        .unwrap_or_else(|e| panic!("parsing {}: {e:#}", wit.display()));
    let world = resolve
        .select_world(&[pkg], Some(world))
        .unwrap_or_else(|e| panic!("{e:#}"));
    let mut module = wat::parse_str(core_wat).unwrap_or_else(|e| panic!("{e}"));
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    wit_component::ComponentEncoder::default()
        .module(&module)
        .and_then(|e| e.validate(true).encode())
        .unwrap_or_else(|e| panic!("encoding the component: {e:#}"))
}

/// A core module exporting the conflict interface's `decide` with `body`. `decide` takes
/// the flattened `conflict-input` (12 i32s; the 5th is the policy) and returns a pointer
/// to its result. Memory is zeroed at 16, which reads as `ok(create)`.
fn conflict_module(body: &str) -> Vec<u8> {
    component(
        "conflict-policy",
        &format!(
            r#"(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $p i32)
    (local.set $p (i32.and (i32.add (global.get $heap) (i32.sub (local.get 2) (i32.const 1)))
                           (i32.sub (i32.const 0) (local.get 2))))
    (global.set $heap (i32.add (local.get $p) (local.get 3)))
    (local.get $p))
  (func (export "kbind:policy/conflict@0.1.0#decide")
    (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
    {body}))"#
        ),
    )
}

/// Traps with `unreachable`.
const TRAP: &str = "unreachable";
/// Never returns.
const LOOP: &str = "(loop $forever (br $forever)) unreachable";
/// Grows memory by 1 MiB until refused, then traps.
const HOG: &str = r#"(loop $grow (br_if $grow (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
    unreachable"#;
/// Traps under Adopt, answers `create` under Fail.
const TRAP_ON_ADOPT: &str = r#"(if (i32.eq (local.get 4) (i32.const 1)) (then unreachable))
    (i32.const 16)"#;
/// Answers with a variant case that does not exist.
const BAD_DISCRIMINANT: &str = r#"(i32.store8 (i32.const 20) (i32.const 9)) (i32.const 16)"#;

/// A schema-synthesis module (`synthesize` takes the 15 flattened i32s of `schema-input`)
/// answering `ok("{\"kind\":\"NotACrd\"}")`.
fn invalid_crd_module() -> Vec<u8> {
    let text = r#"{"kind":"NotACrd"}"#;
    let len = format!("\\{:02x}", text.len());
    component(
        "schema-synthesis",
        &format!(
            r#"(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))
  (data (i32.const 16) "\00\00\00\00\40\00\00\00{len}\00\00\00")
  (data (i32.const 64) "{escaped}")
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $p i32)
    (local.set $p (i32.and (i32.add (global.get $heap) (i32.sub (local.get 2) (i32.const 1)))
                           (i32.sub (i32.const 0) (local.get 2))))
    (global.set $heap (i32.add (local.get $p) (local.get 3)))
    (local.get $p))
  (func (export "kbind:policy/schema@0.1.0#synthesize")
    (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
    (i32.const 16)))"#,
            escaped = text.replace('"', "\\\""),
        ),
    )
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
