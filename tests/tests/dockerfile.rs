//! The konnector image, checked by reading the `Dockerfile` (these machines have no container
//! engine): pinned base images, the binary as the only thing copied into the runtime image, a
//! numeric non-root user the chart's `runAsNonRoot` can verify, and the konnector as PID 1.

use anyhow::{Context as _, Result};

/// An instruction: its keyword in upper case and its arguments.
type Instruction = (String, String);

/// Every stage's base image, and the instructions of the last (runtime) stage, with comments
/// dropped and `\` continuations joined.
fn dockerfile() -> Result<(Vec<String>, Vec<Instruction>)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../Dockerfile");
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    let code = |line: &&str| !line.trim_start().starts_with('#');
    let lines: Vec<&str> = text.lines().filter(code).collect();
    let (mut bases, mut runtime) = (Vec::new(), Vec::new());
    for line in lines.join("\n").replace("\\\n", " ").lines() {
        let Some((keyword, args)) = line.trim().split_once(char::is_whitespace) else {
            continue;
        };
        if keyword.eq_ignore_ascii_case("FROM") {
            let image = args.split_whitespace().find(|w| !w.starts_with("--"));
            bases.push(image.unwrap_or_default().to_string());
            runtime.clear();
        } else {
            runtime.push((keyword.to_ascii_uppercase(), args.trim().to_string()));
        }
    }
    Ok((bases, runtime))
}

/// The arguments of the runtime stage's instructions of one kind.
fn runtime(keyword: &str) -> Result<Vec<String>> {
    let (_, runtime) = dockerfile()?;
    let matching = runtime.into_iter().filter(|(k, _)| k == keyword);
    Ok(matching.map(|(_, args)| args).collect())
}

#[test]
fn base_images_are_pinned() -> Result<()> {
    let (bases, _) = dockerfile()?;
    assert!(bases.len() >= 2, "a builder and a runtime stage: {bases:?}");
    for base in &bases {
        let tag = base.rsplit_once(':').map_or("", |(_, tag)| tag);
        let pinned = !tag.is_empty() && tag != "latest" && !tag.contains('/');
        assert!(pinned, "{base} is not pinned");
    }
    Ok(())
}

#[test]
fn runtime_image_holds_only_the_konnector_binary() -> Result<()> {
    assert!(runtime("RUN")?.is_empty() && runtime("ADD")?.is_empty());
    let copies = runtime("COPY")?;
    let copy: Vec<&str> = copies.iter().flat_map(|c| c.split_whitespace()).collect();
    assert_eq!(copies.len(), 1, "only the binary is copied: {copies:?}");
    assert!(copy.contains(&"--from=builder"), "{copy:?}");
    assert_eq!(copy.last(), Some(&"/konnector"));
    Ok(())
}

#[test]
fn runtime_user_is_numeric_and_not_root() -> Result<()> {
    let users = runtime("USER")?;
    let user = users.last().context("no USER in the runtime stage")?;
    let uid: u32 = user.split(':').next().unwrap_or_default().parse()?;
    assert_ne!(uid, 0, "the konnector runs as root");
    Ok(())
}

#[test]
fn entrypoint_is_the_konnector_running_run() -> Result<()> {
    // Exec form: the konnector is PID 1 and receives SIGTERM directly.
    assert_eq!(runtime("ENTRYPOINT")?, [r#"["/konnector"]"#]);
    assert_eq!(runtime("CMD")?, [r#"["run"]"#]);
    Ok(())
}
