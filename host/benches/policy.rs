//! `make bench`: per-call latency of each built-in policy (median and p99) with its input
//! size, and what the first call costs compared with warm calls.
//!
//! "compile" is turning the embedded component into machine code and checking it against
//! its world (once per process); "first call" is the first evaluation after that; "fresh"
//! calls each get a new store and instance from the cached pre-instantiated component
//! (`--policy-instance-calls 1`); "warm" calls reuse an instance the way the controllers'
//! calls do by default, and "mean" is the amortized cost of one warm call, recycling
//! included.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use konnector::policy::{
    ConflictInput, PlacementInput, Policies, PolicyArgs, PolicyLimits, PolicyRole, RelatedInput,
    SchemaInput, builtin,
};

/// Warm calls per row under `cargo bench`; `cargo test --all-targets` runs this file as a
/// smoke test with a handful.
const WARM_CALLS: usize = 200;
const SMOKE_CALLS: usize = 3;
/// Conflict decisions and placements are the per-object calls: measured with more calls.
const CONFLICT_FACTOR: usize = 25;

fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; `cargo test` runs bench targets without it.
    let calls = if std::env::args().any(|a| a == "--bench") {
        WARM_CALLS
    } else {
        SMOKE_CALLS
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let started = Instant::now();
    let policies = Policies::load(&PolicyArgs::default())?.with_limits(PolicyLimits {
        timeout: Duration::from_secs(10),
        memory_bytes: 512 * 1024 * 1024,
        ..PolicyLimits::DEFAULT
    });
    let load_all = started.elapsed();

    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let read =
        |path: &str| -> anyhow::Result<String> { Ok(std::fs::read_to_string(root.join(path))?) };
    let conflict: ConflictInput = serde_json::from_str(&read(
        "policies/conflict-policy/fixtures/another-consumer-cluster-is-owned-by-another.input.json",
    )?)?;
    let placement: PlacementInput = serde_json::from_str(&read(
        "policies/placement-policy/fixtures/a-long-prefixed-name-is-shortened-by-hash.input.json",
    )?)?;
    let related_small: RelatedInput = serde_json::from_str(&read(
        "policies/related-selection/fixtures/own-copies-no-longer-selected-are-deleted.input.json",
    )?)?;
    let related_large = large_related_input(2000);
    let widgets: SchemaInput = serde_json::from_str(&read(
        "policies/schema-synthesis/fixtures/widgets-from-a-served-crd.input.json",
    )?)?;
    let jobs = jobs_input(&read(
        "policies/schema-synthesis/testdata/openapi/batch-v1.json",
    )?)?;

    println!(
        "policy runtime benchmark ({calls} calls per column; conflict and placement rows {} calls)",
        calls * CONFLICT_FACTOR
    );
    println!(
        "loading the four built-in modules (compile + world check): {}",
        ms(load_all)
    );
    println!();
    println!(
        "{:<18} {:<30} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "policy", "input", "size", "compile", "first", "fresh p50", "warm p50", "warm p99", "mean"
    );
    let conflict_size = serde_json::to_vec(&conflict)?.len();
    row(
        &rt,
        &policies,
        calls * CONFLICT_FACTOR,
        PolicyRole::ConflictPolicy,
        "one target, foreign markers",
        conflict_size,
        |p| {
            let i = conflict.clone();
            async move { p.decide_conflict(&i).await.map(|_| ()) }
        },
    )?;
    // Placement is asked once per consumer object, before its first write: a per-object call
    // like the conflict decision.
    let placement_size = serde_json::to_vec(&placement)?.len();
    row(
        &rt,
        &policies,
        calls * CONFLICT_FACTOR,
        PolicyRole::Placement,
        "Prefixed, 251-char name hashed",
        placement_size,
        |p| {
            let i = placement.clone();
            async move { p.place(&i).await.map(|_| ()) }
        },
    )?;
    for (label, input) in [
        ("5 targets, 2 sources", &related_small),
        ("2000 sources, 2000 targets", &related_large),
    ] {
        let size = serde_json::to_vec(input)?.len();
        row(
            &rt,
            &policies,
            calls,
            PolicyRole::RelatedSelection,
            label,
            size,
            |p| {
                let i = input.clone();
                async move { p.select_related(&i).await.map(|_| ()) }
            },
        )?;
    }
    for (label, input) in [
        ("Widget CRD doc, 2 versions", &widgets),
        ("batch/v1 Job (pod template)", &jobs),
    ] {
        let size = serde_json::to_vec(input)?.len();
        row(
            &rt,
            &policies,
            calls,
            PolicyRole::SchemaSynthesis,
            label,
            size,
            |p| {
                let i = input.clone();
                async move { p.synthesize_schema(&i).await.map(|_| ()) }
            },
        )?;
    }
    Ok(())
}

/// Measures one role on one input: compile a fresh copy of the module, make the first call
/// on that copy, then the calls with a fresh instance each and the warm calls.
fn row<F, Fut>(
    rt: &tokio::runtime::Runtime,
    policies: &Policies,
    calls: usize,
    role: PolicyRole,
    label: &str,
    size: usize,
    call: F,
) -> anyhow::Result<()>
where
    F: Fn(Policies) -> Fut,
    Fut: std::future::Future<Output = Result<(), konnector::policy::PolicyError>>,
{
    let started = Instant::now();
    let fresh = policies.with_module(role, builtin::component(role), "bench")?;
    let compile = started.elapsed();
    let first = {
        let started = Instant::now();
        rt.block_on(call(fresh.clone()))?;
        started.elapsed()
    };
    let (fresh_samples, _) = measure(rt, &fresh.with_instance_reuse(1), calls, &call)?;
    let (warm_samples, warm_total) = measure(rt, &fresh, calls, &call)?;
    let mean = warm_total / u32::try_from(calls.max(1)).unwrap_or(u32::MAX);
    println!(
        "{:<18} {:<30} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        role.name(),
        label,
        bytes(size),
        ms(compile),
        ms(first),
        ms(percentile(&fresh_samples, 50)),
        ms(percentile(&warm_samples, 50)),
        ms(percentile(&warm_samples, 99)),
        us(mean)
    );
    Ok(())
}

/// Runs `calls` calls on one task, timing each and the whole run.
fn measure<F, Fut>(
    rt: &tokio::runtime::Runtime,
    policies: &Policies,
    calls: usize,
    call: &F,
) -> anyhow::Result<(Vec<Duration>, Duration)>
where
    F: Fn(Policies) -> Fut,
    Fut: std::future::Future<Output = Result<(), konnector::policy::PolicyError>>,
{
    rt.block_on(async {
        let mut samples = Vec::with_capacity(calls);
        let all = Instant::now();
        for _ in 0..calls {
            let started = Instant::now();
            call(policies.clone()).await?;
            samples.push(started.elapsed());
        }
        let total = all.elapsed();
        samples.sort();
        Ok((samples, total))
    })
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

fn bytes(n: usize) -> String {
    if n >= 1024 * 1024 {
        format!("{:.1} MiB", n as f64 / (1024.0 * 1024.0))
    } else if n >= 1024 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{n} B")
    }
}

fn large_related_input(n: usize) -> RelatedInput {
    let sources: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            serde_json::json!({"namespace": format!("ns-{}", i % 20), "name": format!("secret-{i}"),
                "labels": {"widgets.example.org/related": if i % 3 == 0 { "true" } else { "false" }, "app": "bench"}})
        })
        .collect();
    let targets: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            serde_json::json!({"namespace": format!("ns-{}", i % 20), "name": format!("secret-{}", i + n / 2),
                "relatedBinding": if i % 2 == 0 { "bench-binding" } else { "another" }})
        })
        .collect();
    let input = serde_json::json!({
        "bindingUid": "bench-binding",
        "entry": {"group": "", "resource": "secrets", "direction": "FromProvider",
            "selector": {"labelSelector": {"matchLabels": {"widgets.example.org/related": "true"},
                "matchExpressions": [{"key": "app", "operator": "In", "values": ["bench", "other"]}]}}},
        "sources": sources,
        "targets": targets,
    });
    serde_json::from_value(input).unwrap_or_else(|e| panic!("bench input: {e}"))
}

/// The built-in `batch/v1` document standing in for an aggregated API server serving the
/// same types under a CRD-compatible group.
fn jobs_input(doc: &str) -> anyhow::Result<SchemaInput> {
    let doc = doc.replace("\"group\":\"batch\"", "\"group\":\"batch.example.org\"");
    let openapi: serde_json::Value = serde_json::from_str(&doc)?;
    Ok(serde_json::from_value(serde_json::json!({
        "group": "batch.example.org", "resource": "jobs", "kind": "Job", "singular": "job",
        "categories": ["all"], "scope": "Namespaced",
        "versions": [{"name": "v1", "served": true, "storage": true, "subresources": ["status"], "openapi": openapi}]
    }))?)
}
