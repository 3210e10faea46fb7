//! Builds the four built-in policy components for `wasm32-wasip2` so the host can embed
//! them (`include_bytes!` in `src/policy/builtin.rs`).
//!
//! A nested `cargo build` on the outer build's target directory would wait forever for the
//! lock the outer build holds, so the policies get their own target directory beside it
//! (`<target>/policy-build`), shared by `cargo build`, `test` and `clippy` so each builds the
//! policies once. Variables that describe the outer build (wrappers such as clippy-driver,
//! flags, the target directory) are cleared so they do not leak into the wasm build.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// (package, environment variable naming the built file)
const POLICIES: &[(&str, &str)] = &[
    (
        "kbind-policy-schema-synthesis",
        "KBIND_POLICY_SCHEMA_SYNTHESIS_WASM",
    ),
    (
        "kbind-policy-conflict-policy",
        "KBIND_POLICY_CONFLICT_POLICY_WASM",
    ),
    (
        "kbind-policy-related-selection",
        "KBIND_POLICY_RELATED_SELECTION_WASM",
    ),
    (
        "kbind-policy-placement-policy",
        "KBIND_POLICY_PLACEMENT_POLICY_WASM",
    ),
];

const TARGET: &str = "wasm32-wasip2";
const PROFILE: &str = "policy";

fn main() {
    stamp_commit();
    if let Err(e) = run() {
        eprintln!("error: building the built-in policy modules failed: {e}");
        std::process::exit(1);
    }
}

/// Hands the commit the binary is built from to the crate as `KBIND_GIT_COMMIT`, for its
/// `--version`. `make release` sets the variable from git; any other build says `unknown`
/// rather than a commit that a cached build script may have read before the last commit.
fn stamp_commit() {
    println!("cargo:rerun-if-env-changed=KBIND_GIT_COMMIT");
    let commit = env::var("KBIND_GIT_COMMIT").unwrap_or_else(|_| "unknown".to_owned());
    println!("cargo:rustc-env=KBIND_GIT_COMMIT={commit}");
}

fn run() -> Result<(), String> {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").map_err(|e| e.to_string())?);
    let root = manifest_dir
        .parent()
        .ok_or("the host crate has no parent directory")?
        .to_path_buf();
    for path in [
        "wit",
        "guest-sdk/src",
        "guest-sdk/Cargo.toml",
        "Cargo.toml",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(path).display());
    }
    for (package, _) in POLICIES {
        let dir = root
            .join("policies")
            .join(package.trim_start_matches("kbind-policy-"));
        println!("cargo:rerun-if-changed={}", dir.join("src").display());
        println!(
            "cargo:rerun-if-changed={}",
            dir.join("Cargo.toml").display()
        );
    }
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");

    let out_dir = PathBuf::from(env::var("OUT_DIR").map_err(|e| e.to_string())?);
    let target_dir = policy_target_dir(&out_dir);
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());

    let mut cmd = Command::new(&cargo);
    cmd.arg("build")
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .arg("--target")
        .arg(TARGET)
        .arg("--profile")
        .arg(PROFILE)
        .arg("--target-dir")
        .arg(&target_dir);
    for (package, _) in POLICIES {
        cmd.arg("-p").arg(package);
    }
    for (key, _) in env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let outer_build = (key.starts_with("CARGO_")
            && !matches!(key, "CARGO_HOME" | "CARGO_MAKEFLAGS" | "CARGO_NET_OFFLINE"))
            || matches!(
                key,
                "RUSTFLAGS" | "RUSTDOCFLAGS" | "RUSTC_WRAPPER" | "RUSTC_WORKSPACE_WRAPPER"
            );
        if outer_build {
            cmd.env_remove(key);
        }
    }
    let status = cmd.status().map_err(|e| format!("running {cargo}: {e}"))?;
    if !status.success() {
        return Err(format!(
            "`cargo build --target {TARGET} --profile {PROFILE}` for the policies exited with {status}; \
             is the target installed (`rustup target add {TARGET}`, or `make tools`)?"
        ));
    }
    for (package, var) in POLICIES {
        let file = format!("{}.wasm", package.replace('-', "_"));
        let built = target_dir.join(TARGET).join(PROFILE).join(&file);
        let embedded = out_dir.join(&file);
        std::fs::copy(&built, &embedded)
            .map_err(|e| format!("copying {}: {e}", built.display()))?;
        println!("cargo:rustc-env={var}={}", embedded.display());
    }
    Ok(())
}

/// `<target>/policy-build`, where `<target>` is the outer build's target directory
/// (`OUT_DIR` is `<target>[/<triple>]/<profile>/build/<pkg>-<hash>/out`).
fn policy_target_dir(out_dir: &Path) -> PathBuf {
    if let Some(dir) = env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir).join("policy-build");
    }
    out_dir
        .ancestors()
        .nth(4)
        .map(|t| t.join("policy-build"))
        .unwrap_or_else(|| out_dir.join("policy-build"))
}
