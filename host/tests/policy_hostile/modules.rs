//! The hostile modules, as core WebAssembly text implementing the canonical ABI of the role's
//! export by hand, wrapped into components for the role's world with `wit-component` (the
//! same step `cargo build --target wasm32-wasip2` performs).

use std::path::Path;

/// Wraps a core module (WAT) into a component for `world` of `kbind:policy@0.1.0` (the
/// fixture copy of that WIT): hand-written modules that predate settings, which the host keeps
/// loading unchanged.
pub fn component(world: &str, core_wat: &str) -> Vec<u8> {
    let mut resolve = wit_parser::Resolve::default();
    let pkg = push_policy_wit(&mut resolve);
    encode(&resolve, pkg, world, core_wat)
}

/// Adds `kbind:policy@0.1.0` (the fixture copy of that WIT) to `resolve`.
pub fn push_policy_wit(resolve: &mut wit_parser::Resolve) -> wit_parser::PackageId {
    let wit =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/policy-0.1.0/policy.wit");
    resolve
        .push_file(&wit)
        .unwrap_or_else(|e| panic!("parsing {}: {e:#}", wit.display()))
}

/// The parts of WASI 0.2 a sleeping module imports, as a policy author's toolchain would
/// declare them: a monotonic-clock timer and `poll`.
pub const WASI_IO: &str = r#"package wasi:io@0.2.0;
interface poll {
  resource pollable {
    block: func();
  }
  poll: func(in: list<borrow<pollable>>) -> list<u32>;
}
"#;
pub const WASI_CLOCKS: &str = r#"package wasi:clocks@0.2.0;
interface monotonic-clock {
  use wasi:io/poll@0.2.0.{pollable};
  type duration = u64;
  subscribe-duration: func(when: duration) -> pollable;
}
"#;
pub const SLEEPER_WORLD: &str = r#"package test:hostile;
world sleeping-conflict-policy {
  import wasi:io/poll@0.2.0;
  import wasi:clocks/monotonic-clock@0.2.0;
  export kbind:policy/conflict@0.1.0;
}
"#;

/// Encodes a core module (WAT) as a component of `world` in package `pkg`.
pub fn encode(
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
pub fn conflict_module(body: &str) -> Vec<u8> {
    conflict_module_with(1, "", body)
}

/// [`conflict_module`] with `pages` 64 KiB pages of exported memory and `declarations`
/// (more memories, tables, globals) beside it.
pub fn conflict_module_with(pages: usize, declarations: &str, body: &str) -> Vec<u8> {
    component(
        "conflict-policy",
        &format!(
            r#"(module
  (memory (export "memory") {pages})
  {declarations}
  (global $heap (mut i32) (i32.const 1024))
  {REALLOC}
  {DECIDE}
    {body}))"#
        ),
    )
}

/// The conflict module's allocator and `decide` header, for modules that need more than a
/// body and declarations (imports, another world).
pub const REALLOC: &str = r#"(func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $p i32)
    (local.set $p (i32.and (i32.add (global.get $heap) (i32.sub (local.get 2) (i32.const 1)))
                           (i32.sub (i32.const 0) (local.get 2))))
    (global.set $heap (i32.add (local.get $p) (local.get 3)))
    (local.get $p))"#;
pub const DECIDE: &str = r#"(func (export "kbind:policy/conflict@0.1.0#decide")
    (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)"#;

/// A conflict module that sleeps a minute in WASI: `poll` on a `subscribe-duration`
/// pollable, then answers `ok(create)`. Wasm does not run while it waits, so only a
/// wall-clock deadline can cut it off.
pub fn sleeping_conflict_module() -> Vec<u8> {
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
pub fn many_memories_module(extra: usize, pages: u32) -> Vec<u8> {
    let memories: String = (0..extra)
        .map(|i| format!("(memory $m{i} {pages})\n  "))
        .collect();
    conflict_module_with(1, &memories, CREATE)
}

/// A conflict module that declares `count` tables and answers `ok(create)`.
pub fn many_tables_module(count: usize) -> Vec<u8> {
    let tables: String = (0..count)
        .map(|i| format!("(table $t{i} 1 funcref)\n  "))
        .collect();
    conflict_module_with(1, &tables, CREATE)
}

/// A conflict module answering `ok(conflict(foreign-object-exists, M))` where M is `len`
/// bytes of its (zeroed) memory: `result` at 16, `decision` case 3 at 20, the `conflict`
/// record at 24 (reason at 24, message pointer and length at 28 and 32).
pub fn oversized_answer_module(len: usize) -> Vec<u8> {
    let body = format!(
        r#"(i32.store8 (i32.const 20) (i32.const 3))
    (i32.store (i32.const 28) (i32.const 65536))
    (i32.store (i32.const 32) (i32.const {len}))
    (i32.const 16)"#
    );
    conflict_module_with(len / 65536 + 2, "", &body)
}

/// A conflict module that counts its calls in a global and traps on call `trap_at` of one
/// instance; otherwise it answers `ok(create)`.
pub fn counting_conflict_module(trap_at: u32) -> Vec<u8> {
    let body = format!(
        r#"(global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (if (i32.eq (global.get $calls) (i32.const {trap_at})) (then unreachable))
    (i32.const 16)"#
    );
    conflict_module_with(1, CALLS, &body)
}

/// A conflict module that answers `ok(create)` on the first call of an instance and an
/// undecodable variant on every later one: its answer depends on what the instance kept.
pub fn forgetful_conflict_module() -> Vec<u8> {
    let body = r#"(global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (if (i32.gt_u (global.get $calls) (i32.const 1))
      (then (i32.store8 (i32.const 20) (i32.const 9))))
    (i32.const 16)"#;
    conflict_module_with(1, CALLS, body)
}

/// The call counter of the modules whose answer depends on what an instance kept.
const CALLS: &str = "(global $calls (mut i32) (i32.const 0))";

/// A related-selection module whose answer is small in its own memory but huge once copied:
/// `copy` lists `entries` object refs whose namespace and name all point at one `len`-byte
/// string. `select` takes the 18 flattened values of `related-input` (more than 16, so it
/// gets one pointer) and returns a pointer to
/// `result<related-plan, string>`: discriminant at 16, then the plan at 20 (binding-uid
/// 20/24, resource 28, direction 29, copy 32/36, skip 40/44, delete 48/52).
pub fn amplifying_related_module(entries: usize, len: usize) -> Vec<u8> {
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

/// A core module exporting the placement interface's `place` with `body`. `place` takes a
/// pointer to the `placement-input` record (19 flattened values, more than 16) and returns a
/// pointer to `result<location, string>`: discriminant at 16, then the location at 20 (the
/// namespace option at 20, its string at 24/28; the name at 32/36). Zeroed memory reads as
/// `ok({namespace: none, name: ""})`; `data` are segments the body points at.
pub fn placement_module_with(data: &str, body: &str) -> Vec<u8> {
    component(
        "placement-policy",
        &format!(
            r#"(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))
  {data}
  {REALLOC}
  (func (export "kbind:policy/placement@0.1.0#place") (param i32) (result i32)
    {body}
    (i32.const 16)))"#
        ),
    )
}

/// [`placement_module_with`] without data segments.
pub fn placement_module(body: &str) -> Vec<u8> {
    placement_module_with("", body)
}

/// A placement module answering `ok({namespace, name})` whatever the input: the namespace
/// string at 256, the name at 512 (both below the heap the host's input is copied to).
pub fn placement_answering(namespace: Option<&str>, name: &str) -> Vec<u8> {
    assert!(name.len() <= 512, "the name must fit below the heap");
    let ns = namespace.unwrap_or_default();
    let data = format!(r#"(data (i32.const 256) "{ns}") (data (i32.const 512) "{name}")"#);
    let body = format!(
        r#"(i32.store8 (i32.const 20) (i32.const {some}))
    (i32.store (i32.const 24) (i32.const 256))
    (i32.store (i32.const 28) (i32.const {ns_len}))
    (i32.store (i32.const 32) (i32.const 512))
    (i32.store (i32.const 36) (i32.const {name_len}))"#,
        some = u8::from(namespace.is_some()),
        ns_len = ns.len(),
        name_len = name.len(),
    );
    placement_module_with(&data, &body)
}

/// Answers `ok(create)`, whatever the input.
pub const CREATE: &str = "(i32.const 16)";
/// Traps with `unreachable`.
pub const TRAP: &str = "unreachable";
/// Never returns.
pub const LOOP: &str = "(loop $forever (br $forever)) unreachable";
/// Grows memory by 1 MiB until refused, then traps.
pub const HOG: &str = r#"(loop $grow (br_if $grow (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
    unreachable"#;
/// Traps under Adopt, answers `create` under Fail.
pub const TRAP_ON_ADOPT: &str = r#"(if (i32.eq (local.get 4) (i32.const 1)) (then unreachable))
    (i32.const 16)"#;
/// Answers with a variant case that does not exist.
pub const BAD_DISCRIMINANT: &str = r#"(i32.store8 (i32.const 20) (i32.const 9)) (i32.const 16)"#;

/// A schema-synthesis module (`synthesize` takes the 15 flattened i32s of `schema-input`)
/// answering `ok("{\"kind\":\"NotACrd\"}")`.
pub fn invalid_crd_module() -> Vec<u8> {
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
  {REALLOC}
  (func (export "kbind:policy/schema@0.1.0#synthesize")
    (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
    (i32.const 16)))"#,
            escaped = text.replace('"', "\\\""),
        ),
    )
}
