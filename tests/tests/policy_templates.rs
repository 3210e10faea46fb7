//! A policy project per role from `konnector policy new`: it depends on nothing of the kbind
//! repository (the konnector writes its WIT into the project), builds with `cargo build
//! --release` for wasm32-wasip2, implements its role's world as the konnector checks it, and
//! carries its metadata (name, version, role, source) for `konnector policy inspect`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, ensure};
use konnector::api::ConflictPolicy;
use konnector::artifact::ModuleMetadata;
use konnector::policy::{ConflictDecision, ConflictInput, Policies, PolicyRole};

/// Runs `konnector policy <args>`; its stdout, or an error with its stderr.
fn konnector_policy(args: &[&str]) -> anyhow::Result<String> {
    kbind_tests::faults::process::konnector_policy(&kbind_tests::konnector_binary!(), args)
}

/// `cargo build --release` in `project`, as an author runs it (the outer build's flags and
/// target directory cleared; the four projects share one target directory, so the bindings
/// generator is built once); the built component.
fn build(project: &Path, target_dir: &Path, package: &str) -> anyhow::Result<Vec<u8>> {
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()));
    cargo
        .current_dir(project)
        .args(["build", "--release", "--quiet"])
        .env("CARGO_TARGET_DIR", target_dir);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_BUILD_")
            || key.starts_with("CARGO_ENCODED_")
            || key == "RUSTFLAGS"
            || key == "RUSTC_WRAPPER"
        {
            cargo.env_remove(&*key);
        }
    }
    let output = cargo.output().context("running cargo")?;
    ensure!(
        output.status.success(),
        "cargo build in {} failed: {}",
        project.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let file = target_dir
        .join("wasm32-wasip2/release")
        .join(format!("{}.wasm", package.replace('-', "_")));
    std::fs::read(&file).with_context(|| format!("reading {}", file.display()))
}

#[tokio::test]
async fn a_new_project_per_role_builds_for_wasm32_wasip2_and_implements_its_world()
-> anyhow::Result<()> {
    // The projects live outside this repository (inside it, Cargo would take them for
    // members of its workspace); their shared target directory stays in ours, kept warm.
    let work = std::env::temp_dir().join(format!("kbind-policy-templates-{}", std::process::id()));
    let target_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("policy-templates");
    for role in PolicyRole::ALL {
        let name = format!("my-{}", role.name());
        let project = work.join(&name);
        if project.exists() {
            std::fs::remove_dir_all(&project)?;
        }
        let project_text = project.display().to_string();
        let cli_role = match role {
            PolicyRole::SchemaSynthesis => "schema",
            PolicyRole::ConflictPolicy => "conflict",
            PolicyRole::RelatedSelection => "related",
            PolicyRole::Placement => "placement",
        };
        konnector_policy(&[
            "new",
            "--role",
            cli_role,
            "--name",
            &name,
            "--source",
            "https://git.example.com/acme/policies",
            &project_text,
        ])?;
        let manifest = std::fs::read_to_string(project.join("Cargo.toml"))?;
        ensure!(
            !manifest.contains("path ="),
            "the project depends on a path:\n{manifest}"
        );

        let module = build(&project, &target_dir, &name)?;
        let policies = Policies::builtin()?
            .with_module(role, &module, &name)
            .with_context(|| format!("the {role} template's module"))?;
        assert_eq!(
            konnector::artifact::metadata::read(&module),
            Some(ModuleMetadata {
                name: name.clone(),
                version: "0.1.0".into(),
                role: role.name().into(),
                source: "https://git.example.com/acme/policies".into(),
            }),
            "{role}"
        );
        if role == PolicyRole::ConflictPolicy {
            let decision = policies
                .decide_conflict(&ConflictInput {
                    consumer_cluster_uid: "consumer".into(),
                    consumer_object_uid: "object".into(),
                    conflict_policy: ConflictPolicy::Fail,
                    target: None,
                })
                .await?;
            ensure!(matches!(decision, ConflictDecision::Create), "{decision:?}");
        }
    }
    std::fs::remove_dir_all(&work)?;
    Ok(())
}

#[tokio::test]
async fn a_new_project_generated_inside_another_workspace_builds_alone() -> anyhow::Result<()> {
    // A parent directory holding a Cargo workspace that does not list the project, as a
    // platform team's monorepo would: Cargo finds that workspace above the project and refuses
    // to build it unless the project is a workspace of its own.
    let work = std::env::temp_dir().join(format!(
        "kbind-policy-template-in-workspace-{}",
        std::process::id()
    ));
    if work.exists() {
        std::fs::remove_dir_all(&work)?;
    }
    std::fs::create_dir_all(&work)?;
    std::fs::write(
        work.join("Cargo.toml"),
        "[workspace]\nresolver = \"3\"\nmembers = []\n",
    )?;
    let target_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("policy-templates");
    let name = "nested-conflict";
    let project = work.join("policies").join(name);
    let project_text = project.display().to_string();
    konnector_policy(&["new", "--role", "conflict", "--name", name, &project_text])?;
    let module = build(&project, &target_dir, name)?;
    Policies::builtin()?
        .with_module(PolicyRole::ConflictPolicy, &module, name)
        .context("the module built inside another workspace")?;
    std::fs::remove_dir_all(&work)?;
    Ok(())
}
