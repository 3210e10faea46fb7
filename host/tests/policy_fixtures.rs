//! The built-in policies pass their own fixture folders (`policies/<name>/fixtures`), run
//! through the same runner as `konnector policy test`.

use std::path::PathBuf;

use konnector::cli::policy::{Passes, run_fixtures};
use konnector::policy::{Policies, PolicyRole};

async fn assert_fixtures_pass(role: PolicyRole, folder: &str, at_least: usize) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../policies")
        .join(folder)
        .join("fixtures");
    let policies = Policies::builtin().unwrap_or_else(|e| panic!("{e}"));
    let report = run_fixtures(&policies, role, &dir, Passes::Reused)
        .await
        .unwrap_or_else(|e| panic!("running {}: {e:#}", dir.display()));
    let failures: Vec<String> = report
        .cases
        .iter()
        .filter_map(|c| c.failure.as_ref().map(|f| format!("{}: {f}", c.name)))
        .collect();
    assert!(
        failures.is_empty(),
        "failing fixtures:\n{}",
        failures.join("\n")
    );
    assert!(
        report.passed() >= at_least,
        "only {} cases ran",
        report.passed()
    );
}

#[tokio::test]
async fn conflict_policy_fixtures_pass() {
    assert_fixtures_pass(PolicyRole::ConflictPolicy, "conflict-policy", 11).await;
}

#[tokio::test]
async fn related_selection_fixtures_pass() {
    assert_fixtures_pass(PolicyRole::RelatedSelection, "related-selection", 13).await;
}

#[tokio::test]
async fn placement_policy_fixtures_pass() {
    assert_fixtures_pass(PolicyRole::Placement, "placement-policy", 12).await;
}

#[tokio::test]
async fn schema_synthesis_fixtures_pass() {
    assert_fixtures_pass(PolicyRole::SchemaSynthesis, "schema-synthesis", 3).await;
}

#[tokio::test]
async fn a_failing_fixture_is_reported_as_failed() {
    let dir = std::env::temp_dir().join(format!("kbind-fixture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let input = r#"{"consumerClusterUid":"c","consumerObjectUid":"o","conflictPolicy":"Fail"}"#;
    std::fs::write(dir.join("wrong.input.json"), input).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.join("wrong.expected.json"), r#"{"decision":"Adopt"}"#)
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.join("right.input.json"), input).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.join("right.expected.json"), r#"{"decision":"Create"}"#)
        .unwrap_or_else(|e| panic!("{e}"));
    let policies = Policies::builtin().unwrap_or_else(|e| panic!("{e}"));
    let report = run_fixtures(&policies, PolicyRole::ConflictPolicy, &dir, Passes::Fresh)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!((report.passed(), report.failed()), (1, 1));
    let wrong = report
        .cases
        .iter()
        .find(|c| c.name == "wrong")
        .and_then(|c| c.failure.clone());
    assert!(wrong.is_some_and(|f| f.contains("output differs from expected")));
}

#[tokio::test]
async fn an_empty_fixture_folder_is_an_error() {
    let policies = Policies::builtin().unwrap_or_else(|e| panic!("{e}"));
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let err = run_fixtures(&policies, PolicyRole::ConflictPolicy, &dir, Passes::Fresh)
        .await
        .err();
    assert!(err.is_some_and(|e| e.to_string().contains("no fixture cases")));
}

#[test]
fn policy_test_command_reports_cases_and_fails_on_a_failing_case() {
    let bin = env!("CARGO_BIN_EXE_konnector");
    let fixtures =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../policies/conflict-policy/fixtures");
    let ok = std::process::Command::new(bin)
        .args(["policy", "test", "--role", "conflict"])
        .arg(&fixtures)
        .output()
        .unwrap_or_else(|e| panic!("running {bin}: {e}"));
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(ok.status.success(), "{stdout}");
    assert!(
        stdout.contains("PASS partial-markers-cluster-only-count-as-foreign"),
        "{stdout}"
    );
    assert!(
        stdout.lines().any(|l| l == "11 passed, 0 failed"),
        "{stdout}"
    );

    // The conflict fixtures run against the related-selection role: every case fails.
    let failing = std::process::Command::new(bin)
        .args(["policy", "test", "--role", "related"])
        .arg(&fixtures)
        .output()
        .unwrap_or_else(|e| panic!("running {bin}: {e}"));
    let stdout = String::from_utf8_lossy(&failing.stdout);
    assert!(!failing.status.success());
    assert!(
        stdout.lines().any(|l| l == "0 passed, 11 failed"),
        "{stdout}"
    );
}

/// `konnector policy eval --role ROLE --input <fixture>` on a built-in fixture, its answer.
fn eval(role: &str, fixture: &str) -> serde_json::Value {
    let bin = env!("CARGO_BIN_EXE_konnector");
    let input = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../policies")
        .join(fixture);
    let out = std::process::Command::new(bin)
        .args(["policy", "eval", "--role", role, "--input"])
        .arg(&input)
        .output()
        .unwrap_or_else(|e| panic!("running {bin}: {e}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn policy_eval_command_prints_the_decision() {
    let decision = eval(
        "conflict",
        "conflict-policy/fixtures/adopt-with-both-markers-absent-adopts.input.json",
    );
    assert_eq!(decision, serde_json::json!({"decision": "Adopt"}));
}

#[test]
fn swapping_in_a_module_for_another_role_refuses_to_load() {
    let bin = env!("CARGO_BIN_EXE_konnector");
    // The built-in related-selection component, offered as the conflict policy.
    let dir = std::env::temp_dir().join(format!("kbind-swap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let module = dir.join("related.wasm");
    std::fs::write(&module, konnector::policy::builtin::RELATED_SELECTION)
        .unwrap_or_else(|e| panic!("{e}"));
    let out = std::process::Command::new(bin)
        .args([
            "policy",
            "eval",
            "--role",
            "conflict",
            "--input",
            "-",
            "--conflict-policy",
        ])
        .arg(&module)
        .output()
        .unwrap_or_else(|e| panic!("running {bin}: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("does not implement the world kbind:policy/conflict-policy@0.2.0"),
        "{stderr}"
    );
}

#[test]
fn policy_eval_command_places_an_object() {
    let placement = eval(
        "placement",
        "placement-policy/fixtures/namespaced-prefixes-the-namespace-and-keeps-the-name.input.json",
    );
    assert_eq!(
        placement,
        serde_json::json!({"namespace": "east-team-a", "name": "w1"})
    );
}

#[test]
fn policy_test_command_runs_the_placement_fixtures() {
    let bin = env!("CARGO_BIN_EXE_konnector");
    let fixtures =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../policies/placement-policy/fixtures");
    // The folder's name is the role's alias, as `make image-check` passes it.
    let out = std::process::Command::new(bin)
        .args(["policy", "test", "--reused", "--role", "placement-policy"])
        .arg(&fixtures)
        .output()
        .unwrap_or_else(|e| panic!("running {bin}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("PASS another-long-name-with-the-same-start-is-placed-apart"),
        "{stdout}"
    );
    assert!(
        stdout.lines().any(|l| l == "12 passed, 0 failed"),
        "{stdout}"
    );
}
