//! A schema-synthesis component that ignores its input and answers one fixed CRD: how the
//! e2e tests play a swapped, hostile schema module (conversion webhook, finalizers, owner
//! references, shortNames and categories that shadow other resources).
//!
//! Core WebAssembly text implementing the canonical ABI of `kbind:policy/schema#synthesize`
//! by hand: the 15 flattened `schema-input` parameters are ignored, and the returned pointer
//! addresses `result<string, synthesis-error>` = `ok(<the JSON>)`.

use super::policy::{REALLOC, component};

/// Linear memory pages (64 KiB each): room for the host to lower a large OpenAPI document.
const PAGES: u32 = 256;
/// Where the answer's JSON lives in linear memory.
const JSON_AT: usize = 1024;
/// Where the bump allocator for the host's input starts.
const HEAP_AT: usize = 65536;

/// A schema-synthesis component answering `crd_json` for every input.
pub fn fixed_schema_synthesis(crd_json: &str) -> anyhow::Result<Vec<u8>> {
    anyhow::ensure!(
        JSON_AT + crd_json.len() < HEAP_AT,
        "the fixed answer is too large ({} bytes)",
        crd_json.len()
    );
    let escaped: String = crd_json.bytes().map(|b| format!("\\{b:02x}")).collect();
    let params = vec!["i32"; 15].join(" ");
    let core = format!(
        r#"(module
  (memory (export "memory") {PAGES})
  (global $heap (mut i32) (i32.const {HEAP_AT}))
  (data (i32.const {JSON_AT}) "{escaped}")
  {REALLOC}
  (func (export "kbind:policy/schema@0.1.0#synthesize") (param {params}) (result i32)
    (i32.store8 (i32.const 16) (i32.const 0))
    (i32.store (i32.const 20) (i32.const {JSON_AT}))
    (i32.store (i32.const 24) (i32.const {len}))
    (i32.const 16)))"#,
        len = crd_json.len(),
    );
    component("schema-synthesis", &core)
}
