//! Hostile conflict-policy components for the fault tests: one traps on one consumer object,
//! never returns on another, and answers like the built-in policy for every other object
//! (`create` without a target, `update-owned` with one; the tests have no foreign targets);
//! another answers `adopt` to everything; a placement policy answers one place for every object.
//!
//! Written as core WebAssembly text implementing the canonical ABI of
//! `kbind:policy/conflict#decide` by hand, then wrapped into a component for the
//! `conflict-policy` world with `wit-component`, like the host's hostile-module tests.

use std::path::Path;

use anyhow::Context as _;

/// The canonical ABI's `cabi_realloc`, as a bump allocator over the global `$heap`: what every
/// hand-written module exports so that the host can lower its input.
pub(crate) const REALLOC: &str = r#"
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $p i32)
    (local.set $p (i32.and (i32.add (global.get $heap) (i32.sub (local.get 2) (i32.const 1)))
                           (i32.sub (i32.const 0) (local.get 2))))
    (global.set $heap (i32.add (local.get $p) (local.get 3)))
    (local.get $p))"#;

/// A conflict-policy component that traps (`unreachable`) when the consumer object UID is
/// `trap_uid` and loops forever when it is `loop_uid`.
pub fn poisoned_conflict_policy(trap_uid: &str, loop_uid: &str) -> anyhow::Result<Vec<u8>> {
    for uid in [trap_uid, loop_uid] {
        anyhow::ensure!(
            uid.len() < 200 && uid.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "unexpected UID {uid:?}"
        );
    }
    // `decide` takes the flattened conflict-input: (cluster ptr, len), (object ptr, len),
    // policy, then target option discriminant and markers; it returns a pointer to the
    // result<decision, string>, whose decision discriminant is at +4. Memory at 16.. is zero,
    // which reads as ok(create).
    let core = format!(
        r#"(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))
  (data (i32.const 256) "{trap_uid}")
  (data (i32.const 512) "{loop_uid}")
  {REALLOC}
  (func $eq (param $p i32) (param $n i32) (param $q i32) (param $m i32) (result i32)
    (local $i i32)
    (if (i32.ne (local.get $n) (local.get $m)) (then (return (i32.const 0))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (if (i32.ne (i32.load8_u (i32.add (local.get $p) (local.get $i)))
                    (i32.load8_u (i32.add (local.get $q) (local.get $i))))
          (then (return (i32.const 0))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i32.const 1))
  (func (export "kbind:policy/conflict@0.1.0#decide")
    (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
    (if (call $eq (local.get 2) (local.get 3) (i32.const 256) (i32.const {trap_len}))
      (then unreachable))
    (if (call $eq (local.get 2) (local.get 3) (i32.const 512) (i32.const {loop_len}))
      (then (loop $forever (br $forever))))
    (if (i32.eq (local.get 5) (i32.const 1))
      (then (i32.store8 (i32.const 20) (i32.const 1))))
    (i32.const 16)))"#,
        trap_len = trap_uid.len(),
        loop_len = loop_uid.len(),
    );
    component("conflict-policy", &core)
}

/// A conflict-policy component that answers `adopt` to every question, whatever the target
/// and the binding's `conflictPolicy`: the swapped module the host must not obey.
pub fn always_adopt_conflict_policy() -> anyhow::Result<Vec<u8>> {
    // The result<decision, string> is at 16 (ok = 0); the decision discriminant at 20:
    // 0 create, 1 update-owned, 2 adopt, 3 conflict.
    let core = format!(
        r#"(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))
  {REALLOC}
  (func (export "kbind:policy/conflict@0.1.0#decide")
    (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
    (i32.store8 (i32.const 20) (i32.const 2))
    (i32.const 16)))"#
    );
    component("conflict-policy", &core)
}

/// Wraps a core module (WAT) into a component for `world` of `kbind:policy@0.1.0` (the
/// fixture copy of that WIT): these hand-written modules predate settings, and the konnector
/// keeps loading such modules unchanged.
pub(crate) fn component(world: &str, core_wat: &str) -> anyhow::Result<Vec<u8>> {
    let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/policy-0.1.0/policy.wit");
    let mut resolve = wit_parser::Resolve::default();
    let pkg = resolve
        .push_file(&wit)
        .with_context(|| format!("parsing {}", wit.display()))?;
    let world = resolve.select_world(&[pkg], Some(world))?;
    let mut module = wat::parse_str(core_wat)?;
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )?;
    wit_component::ComponentEncoder::default()
        .module(&module)
        .and_then(|e| e.validate(true).encode())
        .context("encoding the component")
}

/// A placement-policy component answering `ok({namespace, name})` for every object, whatever
/// its API, namespace or name: one place for everything, the answer the host must check.
pub fn constant_placement_policy(namespace: Option<&str>, name: &str) -> anyhow::Result<Vec<u8>> {
    let ns = namespace.unwrap_or_default();
    for text in [ns, name] {
        anyhow::ensure!(
            text.len() < 200 && !text.contains(['"', '\\']),
            "unexpected placement answer {text:?}"
        );
    }
    // `place` takes a pointer to the placement-input record and returns a pointer to the
    // result<location, string> at 16: ok = 0; the namespace option at 20 (some = 1), its
    // string at 24/28; the name at 32/36. The answer's strings live at 256 and 512.
    let core = format!(
        r#"(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))
  (data (i32.const 256) "{ns}")
  (data (i32.const 512) "{name}")
  {REALLOC}
  (func (export "kbind:policy/placement@0.1.0#place") (param i32) (result i32)
    (i32.store8 (i32.const 20) (i32.const {some}))
    (i32.store (i32.const 24) (i32.const 256))
    (i32.store (i32.const 28) (i32.const {ns_len}))
    (i32.store (i32.const 32) (i32.const 512))
    (i32.store (i32.const 36) (i32.const {name_len}))
    (i32.const 16)))"#,
        some = u8::from(namespace.is_some()),
        ns_len = ns.len(),
        name_len = name.len(),
    );
    component("placement-policy", &core)
}
