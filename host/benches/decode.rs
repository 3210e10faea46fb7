//! `make bench`: what reading one watch event of a synced instance costs, as a `DynamicObject`
//! (every field, managedFields included) and as the syncers' watches read it (`Watched`:
//! managedFields skipped unparsed). Each syncer reads about six such events per object it
//! syncs (three writes, seen once by each watch), so the difference times six is what the
//! skipping saves per object.

use std::time::{Duration, Instant};

use konnector::sync::Watched;
use kube::api::{DynamicObject, WatchEvent};
use serde::de::DeserializeOwned;
use serde_json::json;

/// Events decoded per row under `cargo bench`; `cargo test --all-targets` runs a handful.
const EVENTS: u32 = 50_000;
const SMOKE_EVENTS: u32 = 10;

/// A managedFields entry as the apiserver writes it.
fn entry(
    manager: &str,
    operation: &str,
    subresource: Option<&str>,
    fields: serde_json::Value,
) -> serde_json::Value {
    let mut entry = json!({
        "manager": manager,
        "operation": operation,
        "apiVersion": "bench.kbind.io/v1",
        "time": "2026-12-05T10:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    });
    if let Some(subresource) = subresource {
        entry["subresource"] = json!(subresource);
    }
    entry
}

/// A consumer instance as its third watch event shows it: created by a client, given the
/// syncer's finalizer, its status written by the konnector.
fn event() -> String {
    let condition = json!({
        "type": "Synced", "status": "True", "reason": "InSync",
        "message": "the provider copy matches the spec",
        "lastTransitionTime": "2026-12-05T10:00:01Z", "observedGeneration": 1
    });
    let object = json!({
        "apiVersion": "bench.kbind.io/v1",
        "kind": "Widget",
        "metadata": {
            "name": "w-00042", "namespace": "bench", "uid": "0b7c5e0e-8c1f-4d1e-9a43-5f0e2f3b9a10",
            "resourceVersion": "123456", "generation": 1,
            "creationTimestamp": "2026-12-05T10:00:00Z",
            "finalizers": ["core.kbind.io/syncer"],
            "managedFields": [
                entry("bench", "Apply", None, json!({"f:spec": {"f:size": {}, "f:color": {}, "f:tags": {}, "f:owner": {}}})),
                entry("kbind-konnector", "Update", None, json!({"f:metadata": {"f:finalizers": {".": {}, "v:\"core.kbind.io/syncer\"": {}}}})),
                entry("kbind-konnector", "Apply", Some("status"), json!({"f:status": {"f:conditions": {"k:{\"type\":\"Synced\"}": {".": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:observedGeneration": {}, "f:reason": {}, "f:status": {}, "f:type": {}}}, "f:phase": {}}})),
            ],
        },
        "spec": {"size": 42, "color": "blue", "tags": ["a", "b", "c"], "owner": "team-a"},
        "status": {"phase": "Ready", "conditions": [condition]},
    });
    json!({"type": "MODIFIED", "object": object}).to_string()
}

/// The mean time to decode `text` as a watch event of `K`, over `events` decodes.
fn per_event<K: DeserializeOwned>(text: &str, events: u32) -> anyhow::Result<Duration> {
    let started = Instant::now();
    for _ in 0..events {
        let decoded: WatchEvent<K> = serde_json::from_str(text)?;
        std::hint::black_box(decoded);
    }
    Ok(started.elapsed() / events)
}

fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; `cargo test` runs bench targets without it.
    let events = if std::env::args().any(|a| a == "--bench") {
        EVENTS
    } else {
        SMOKE_EVENTS
    };
    let text = event();
    // Warm the allocator and caches the same for both.
    per_event::<DynamicObject>(&text, events / 10 + 1)?;
    per_event::<Watched>(&text, events / 10 + 1)?;
    let full = per_event::<DynamicObject>(&text, events)?;
    let watched = per_event::<Watched>(&text, events)?;
    println!(
        "watch event decoding: one synced instance, {} bytes, {events} events each",
        text.len()
    );
    println!("{:<44} {:>10}", "decoder", "per event");
    println!(
        "{:<44} {:>7.2} µs",
        "DynamicObject (managedFields parsed)",
        full.as_secs_f64() * 1e6
    );
    println!(
        "{:<44} {:>7.2} µs",
        "Watched (managedFields skipped)",
        watched.as_secs_f64() * 1e6
    );
    let saved = full.saturating_sub(watched).as_secs_f64() * 1e6;
    println!(
        "{:<44} {:>7.2} µs",
        "saved per object (six events)",
        saved * 6.0
    );
    Ok(())
}
