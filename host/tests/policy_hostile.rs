//! Hostile modules: each misbehaviour gives its own clear error, the process stays up, and
//! the same `Policies` answers the next call correctly.
//!
//! The modules are written as core WebAssembly text implementing the canonical ABI of the
//! role's export by hand, then wrapped into components for the role's world with
//! `wit-component` (the same step `cargo build --target wasm32-wasip2` performs).

use std::path::Path;
use std::time::Duration;

use konnector::api::ConflictPolicy;
use std::time::Instant;

use konnector::policy::{
    ConflictDecision, ConflictInput, MAX_MEMORIES, MAX_TABLES, OwnershipMarkers, Policies,
    PolicyError, PolicyLimits, PolicyRole, RelatedInput, SandboxResource,
};

const LIMITS: PolicyLimits = PolicyLimits {
    timeout: Duration::from_millis(500),
    memory_bytes: 16 * 1024 * 1024,
    ..PolicyLimits::DEFAULT
};

/// Wraps a core module (WAT) into a component for `world` of `wit/`.
fn component(world: &str, core_wat: &str) -> Vec<u8> {
    let mut resolve = wit_parser::Resolve::default();
    let pkg = push_policy_wit(&mut resolve);
    encode(&resolve, pkg, world, core_wat)
}

/// Adds the repository's `kbind:policy` package to `resolve`.
fn push_policy_wit(resolve: &mut wit_parser::Resolve) -> wit_parser::PackageId {
    let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
    resolve
        .push_dir(&wit)
        .unwrap_or_else(|e| panic!("parsing {}: {e:#}", wit.display()))
        .0
}

/// The parts of WASI 0.2 a sleeping module imports, as a policy author's toolchain would
/// declare them: a monotonic-clock timer and `poll`.
const WASI_IO: &str = r#"package wasi:io@0.2.0;
interface poll {
  resource pollable {
    block: func();
  }
  poll: func(in: list<borrow<pollable>>) -> list<u32>;
}
"#;
const WASI_CLOCKS: &str = r#"package wasi:clocks@0.2.0;
interface monotonic-clock {
  use wasi:io/poll@0.2.0.{pollable};
  type duration = u64;
  subscribe-duration: func(when: duration) -> pollable;
}
"#;
const SLEEPER_WORLD: &str = r#"package test:hostile;
world sleeping-conflict-policy {
  import wasi:io/poll@0.2.0;
  import wasi:clocks/monotonic-clock@0.2.0;
  export kbind:policy/conflict@0.1.0;
}
"#;

/// Encodes a core module (WAT) as a component of `world` in package `pkg`.
fn encode(
    resolve: &wit_parser::Resolve,
    pkg: wit_parser::PackageId,
    world: &str,
    core_wat: &str,
) -> Vec<u8> {
    let world = resolve
        .select_world(&[pkg], Some(world))
        .unwrap_or_else(|e| panic!("{e:#}"));
    let mut module = wat::parse_str(core_wat).unwrap_or_else(|e| panic!("{e}"));
    wit_component::embed_component_metadata(
        &mut module,
        resolve,
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

/// The conflict module's allocator and `decide` header, for modules that need more than a
/// body (imports, several memories).
const REALLOC: &str = r#"(func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $p i32)
    (local.set $p (i32.and (i32.add (global.get $heap) (i32.sub (local.get 2) (i32.const 1)))
                           (i32.sub (i32.const 0) (local.get 2))))
    (global.set $heap (i32.add (local.get $p) (local.get 3)))
    (local.get $p))"#;
const DECIDE: &str = r#"(func (export "kbind:policy/conflict@0.1.0#decide")
    (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)"#;

/// A conflict module that sleeps a minute in WASI: `poll` on a `subscribe-duration`
/// pollable, then answers `ok(create)`. Wasm does not run while it waits, so only a
/// wall-clock deadline can cut it off.
fn sleeping_conflict_module() -> Vec<u8> {
    let mut resolve = wit_parser::Resolve::default();
    for (path, text) in [("wasi-io.wit", WASI_IO), ("wasi-clocks.wit", WASI_CLOCKS)] {
        resolve
            .push_str(path, text)
            .unwrap_or_else(|e| panic!("{path}: {e:#}"));
    }
    push_policy_wit(&mut resolve);
    let pkg = resolve
        .push_str("sleeper.wit", SLEEPER_WORLD)
        .unwrap_or_else(|e| panic!("{e:#}"));
    encode(
        &resolve,
        pkg,
        "sleeping-conflict-policy",
        &format!(
            r#"(module
  (import "wasi:clocks/monotonic-clock@0.2.0" "subscribe-duration" (func $sleep (param i64) (result i32)))
  (import "wasi:io/poll@0.2.0" "poll" (func $poll (param i32 i32 i32)))
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))
  {REALLOC}
  {DECIDE}
    (i32.store (i32.const 100) (call $sleep (i64.const 60000000000)))
    (call $poll (i32.const 100) (i32.const 1) (i32.const 200))
    (i32.const 16)))"#
        ),
    )
}

/// A conflict module that declares `extra` linear memories of `pages` 64 KiB pages each
/// beside its exported one, and answers `ok(create)`.
fn many_memories_module(extra: usize, pages: u32) -> Vec<u8> {
    let memories: String = (0..extra)
        .map(|i| format!("(memory $m{i} {pages})\n  "))
        .collect();
    component(
        "conflict-policy",
        &format!(
            r#"(module
  (memory (export "memory") 1)
  {memories}(global $heap (mut i32) (i32.const 1024))
  {REALLOC}
  {DECIDE}
    (i32.const 16)))"#
        ),
    )
}

/// A conflict module that declares `count` tables and answers `ok(create)`.
fn many_tables_module(count: usize) -> Vec<u8> {
    let tables: String = (0..count)
        .map(|i| format!("(table $t{i} 1 funcref)\n  "))
        .collect();
    component(
        "conflict-policy",
        &format!(
            r#"(module
  (memory (export "memory") 1)
  {tables}(global $heap (mut i32) (i32.const 1024))
  {REALLOC}
  {DECIDE}
    (i32.const 16)))"#
        ),
    )
}

/// A conflict module answering `ok(conflict(foreign-object-exists, M))` where M is `len`
/// bytes of its (zeroed) memory: `result` at 16, `decision` case 3 at 20, the `conflict`
/// record at 24 (reason at 24, message pointer and length at 28 and 32).
fn oversized_answer_module(len: usize) -> Vec<u8> {
    let pages = len / 65536 + 2;
    component(
        "conflict-policy",
        &format!(
            r#"(module
  (memory (export "memory") {pages})
  (global $heap (mut i32) (i32.const 1024))
  {REALLOC}
  {DECIDE}
    (i32.store8 (i32.const 20) (i32.const 3))
    (i32.store (i32.const 28) (i32.const 65536))
    (i32.store (i32.const 32) (i32.const {len}))
    (i32.const 16)))"#
        ),
    )
}

/// A related-selection module whose answer is small in its own memory but huge once copied:
/// `copy` lists `entries` object refs whose namespace and name all point at one `len`-byte
/// string. `select` takes the 18 flattened values of `related-input` (more than 16, so it
/// gets one pointer) and returns a pointer to
/// `result<related-plan, string>`: discriminant at 16, then the plan at 20 (binding-uid
/// 20/24, resource 28, direction 29, copy 32/36, skip 40/44, delete 48/52).
fn amplifying_related_module(entries: usize, len: usize) -> Vec<u8> {
    let pages = (len + 65536 * 2) / 65536 + 1;
    component(
        "related-selection",
        &format!(
            r#"(module
  (memory (export "memory") {pages})
  (global $heap (mut i32) (i32.const 1024))
  {REALLOC}
  (func (export "kbind:policy/related@0.1.0#select") (param i32) (result i32)
    (local $i i32)
    (local $at i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (i32.const {entries})))
        (local.set $at (i32.add (i32.const 4096) (i32.mul (local.get $i) (i32.const 16))))
        (i32.store (local.get $at) (i32.const 131072))
        (i32.store (i32.add (local.get $at) (i32.const 4)) (i32.const {len}))
        (i32.store (i32.add (local.get $at) (i32.const 8)) (i32.const 131072))
        (i32.store (i32.add (local.get $at) (i32.const 12)) (i32.const {len}))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i32.store (i32.const 32) (i32.const 4096))
    (i32.store (i32.const 36) (i32.const {entries}))
    (i32.const 16)))"#
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
