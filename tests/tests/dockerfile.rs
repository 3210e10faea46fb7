//! The konnector image, checked by reading the `Dockerfile`: these machines have no container
//! engine, so `make image` cannot run here. The properties are the ones the chart relies on
//! (non-root user 65532, `/konnector run` as the process, nothing else in the image) and the
//! ones the build needs (the wasm32-wasip2 target for the embedded policy modules).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, ensure};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> Result<String> {
    let path = repo_root().join(path);
    std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}

/// One instruction: its keyword (upper case) and its arguments, continuation lines joined.
#[derive(Debug)]
struct Instruction {
    keyword: String,
    args: String,
}

/// A build stage: its `FROM` arguments and the instructions after it.
#[derive(Debug)]
struct Stage {
    from: String,
    instructions: Vec<Instruction>,
}

impl Stage {
    fn all(&self, keyword: &str) -> Vec<&str> {
        self.instructions
            .iter()
            .filter(|i| i.keyword == keyword)
            .map(|i| i.args.as_str())
            .collect()
    }

    /// The last instruction of a kind: the one that takes effect.
    fn last(&self, keyword: &str) -> Option<&str> {
        self.all(keyword).last().copied()
    }

    /// The stage's name (`FROM image AS name`).
    fn name(&self) -> Option<&str> {
        let words: Vec<&str> = self.from.split_whitespace().collect();
        match words.as_slice() {
            [.., as_, name] if as_.eq_ignore_ascii_case("as") => Some(name),
            _ => None,
        }
    }

    /// The base image (`FROM [--platform=..] image [AS name]`).
    fn image(&self) -> &str {
        self.from
            .split_whitespace()
            .find(|w| !w.starts_with("--"))
            .unwrap_or_default()
    }
}

/// Parses a Dockerfile into stages: comments and blank lines dropped, `\` continuations joined.
fn parse(text: &str) -> Result<Vec<Stage>> {
    let mut logical = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        if !current.is_empty() && trimmed.starts_with('#') {
            // A comment inside a continued instruction is ignored by Docker as well.
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head.trim_end());
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                logical.push(std::mem::take(&mut current));
            }
        }
    }
    ensure!(
        current.is_empty(),
        "the Dockerfile ends inside a continued line"
    );

    let mut stages: Vec<Stage> = Vec::new();
    for line in logical {
        let (keyword, args) = line.split_once(char::is_whitespace).unwrap_or((&line, ""));
        let keyword = keyword.to_ascii_uppercase();
        let args = args.trim().to_string();
        if keyword == "FROM" {
            stages.push(Stage {
                from: args,
                instructions: Vec::new(),
            });
        } else {
            let stage = stages
                .last_mut()
                .with_context(|| format!("{keyword} before the first FROM"))?;
            stage.instructions.push(Instruction { keyword, args });
        }
    }
    Ok(stages)
}

fn stages() -> Result<Vec<Stage>> {
    parse(&read("Dockerfile")?)
}

#[test]
fn image_is_built_in_a_separate_builder_stage() -> Result<()> {
    let stages = stages()?;
    ensure!(stages.len() >= 2, "not multi-stage: {stages:?}");
    let builder = &stages[0];
    assert_eq!(builder.name(), Some("builder"));
    assert!(builder.image().contains("rust:"), "{}", builder.image());

    let runs = builder.all("RUN").join("\n");
    assert!(
        runs.contains("rustup target add wasm32-wasip2"),
        "the built-in policies are compiled for wasm32-wasip2: {runs}"
    );
    let build = builder
        .all("RUN")
        .into_iter()
        .find(|r| r.contains("cargo build"))
        .context("no cargo build in the builder")?;
    for part in ["--release", "--locked", "-p konnector"] {
        assert!(build.contains(part), "{part} missing from: {build}");
    }
    Ok(())
}

#[test]
fn builder_rust_is_at_least_the_workspace_rust_version() -> Result<()> {
    let stages = stages()?;
    let image = stages[0].image();
    let tag = image
        .split_once("rust:")
        .map(|(_, tag)| tag)
        .context("builder is not a rust image")?;
    let version: Vec<u32> = tag
        .split('-')
        .next()
        .unwrap_or_default()
        .split('.')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .with_context(|| format!("builder tag {tag} has no numeric version"))?;

    let manifest = read("Cargo.toml")?;
    let required = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("rust-version = "))
        .context("no workspace rust-version")?
        .trim_matches('"');
    let required: Vec<u32> = required
        .split('.')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    assert!(
        version[..2] >= required[..2],
        "builder rust {version:?} is older than rust-version {required:?}"
    );
    Ok(())
}

#[test]
fn final_image_holds_only_the_binary_and_runs_as_non_root() -> Result<()> {
    let stages = stages()?;
    let last = stages.last().context("no stages")?;
    assert!(
        last.image().starts_with("gcr.io/distroless/static")
            || last.image().starts_with("gcr.io/distroless/cc"),
        "final stage is not distroless: {}",
        last.image()
    );
    // Nothing is built or installed in the runtime image: it has no shell.
    assert!(last.all("RUN").is_empty(), "{:?}", last.all("RUN"));
    assert!(last.all("ADD").is_empty(), "{:?}", last.all("ADD"));
    let copies = last.all("COPY");
    assert_eq!(copies.len(), 1, "only the binary is copied: {copies:?}");
    let copy: Vec<&str> = copies[0].split_whitespace().collect();
    assert!(copy.contains(&"--from=builder"), "{copy:?}");
    assert_eq!(copy.last(), Some(&"/konnector"));

    let user = last.last("USER").context("no USER in the final stage")?;
    let uid = user.split(':').next().unwrap_or_default();
    assert_eq!(
        uid, "65532",
        "numeric non-root user, so runAsNonRoot can verify it"
    );
    Ok(())
}

#[test]
fn entrypoint_is_the_konnector_and_run_the_default_command() -> Result<()> {
    let stages = stages()?;
    let last = stages.last().context("no stages")?;
    // Exec form: the konnector is PID 1 and receives SIGTERM directly.
    assert_eq!(last.last("ENTRYPOINT"), Some(r#"["/konnector"]"#));
    assert_eq!(last.last("CMD"), Some(r#"["run"]"#));
    Ok(())
}

#[test]
fn builder_and_runtime_share_a_debian_release() -> Result<()> {
    // The binary links the builder's glibc; the distroless cc image must carry the same one.
    let stages = stages()?;
    let builder = stages[0].image();
    let runtime = stages.last().context("no stages")?.image();
    if runtime.starts_with("gcr.io/distroless/static") {
        return Ok(());
    }
    let pairs = [("bookworm", "debian12"), ("trixie", "debian13")];
    let matched = pairs
        .iter()
        .any(|(codename, release)| builder.contains(codename) && runtime.contains(release));
    assert!(matched, "{builder} and {runtime} differ in Debian release");
    Ok(())
}

#[test]
fn build_context_leaves_out_build_output_and_test_state() -> Result<()> {
    let ignore = read(".dockerignore")?;
    let entries: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for entry in ["target/", ".cache/", ".testenv/"] {
        assert!(entries.contains(&entry), "{entry} missing: {entries:?}");
    }
    // The sources the build needs stay in.
    for needed in ["Cargo.toml", "Cargo.lock", "host", "tests", "charts"] {
        assert!(
            !entries
                .iter()
                .any(|e| e.trim_end_matches('/') == needed || *e == "*"),
            "{needed} must stay in the build context: {entries:?}"
        );
    }
    Ok(())
}

#[test]
fn make_image_without_a_container_engine_fails_with_a_clear_message() -> Result<()> {
    let output = Command::new("make")
        .args([
            "-s",
            "image",
            "IMAGE=kbind-local/konnector:test",
            "CONTAINER_ENGINE=/nonexistent/container-engine",
        ])
        .current_dir(repo_root())
        .output()
        .context("running make")?;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no container engine is reachable"),
        "{stderr}"
    );
    Ok(())
}

#[test]
fn parser_joins_continuations_and_splits_stages() -> Result<()> {
    let stages = parse("# c\nFROM a AS one\nRUN x \\\n  # inner\n  && y\nFROM b\nUSER 1\n")?;
    assert_eq!(stages.len(), 2);
    assert_eq!(stages[0].name(), Some("one"));
    assert_eq!(stages[0].all("RUN"), ["x && y"]);
    assert_eq!(stages[1].image(), "b");
    assert_eq!(stages[1].last("USER"), Some("1"));
    Ok(())
}
