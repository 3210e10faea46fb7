//! The konnector images, checked by reading their Dockerfiles (`make image-check` builds and
//! runs the real thing; these tests need no container engine). `Dockerfile`: pinned base
//! images and the binary as the only thing copied into the runtime image. `Dockerfile.static`
//! (the registry-free build): scratch holding the prebuilt static binary and the CA bundle the
//! TLS stack is pointed at. Both: a numeric non-root user the chart's `runAsNonRoot` can
//! verify, the konnector as PID 1 running `run`, the same ports and labels.

use anyhow::{Context as _, Result};

/// An instruction: its keyword in upper case and its arguments.
type Instruction = (String, String);

/// Every stage's base image, and the instructions of the last (runtime) stage, with comments
/// dropped and `\` continuations joined.
fn parse(file: &str) -> Result<(Vec<String>, Vec<Instruction>)> {
    let path = format!("{}/../{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
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

fn dockerfile() -> Result<(Vec<String>, Vec<Instruction>)> {
    parse("Dockerfile")
}

/// The arguments of a file's runtime-stage instructions of one kind.
fn runtime_of(file: &str, keyword: &str) -> Result<Vec<String>> {
    let (_, runtime) = parse(file)?;
    let matching = runtime.into_iter().filter(|(k, _)| k == keyword);
    Ok(matching.map(|(_, args)| args).collect())
}

fn runtime(keyword: &str) -> Result<Vec<String>> {
    runtime_of("Dockerfile", keyword)
}

const IMAGES: [&str; 2] = ["Dockerfile", "Dockerfile.static"];

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
fn static_image_is_scratch_with_the_binary_and_the_ca_bundle() -> Result<()> {
    let file = "Dockerfile.static";
    let (bases, _) = parse(file)?;
    assert_eq!(bases, ["scratch"], "one stage, nothing pulled");
    assert!(runtime_of(file, "RUN")?.is_empty() && runtime_of(file, "ADD")?.is_empty());
    let copies = runtime_of(file, "COPY")?;
    let pairs: Vec<Vec<&str>> = copies
        .iter()
        .map(|c| c.split_whitespace().collect())
        .collect();
    let bundle = "/etc/ssl/certs/ca-certificates.crt";
    assert_eq!(
        pairs,
        [
            vec!["ca-certificates.crt", bundle],
            vec!["konnector", "/konnector"]
        ],
        "the CA bundle and the prebuilt binary from scripts/image.sh's context"
    );
    // rustls-native-certs reads only SSL_CERT_FILE when it is set: it must name the bundle.
    let env = runtime_of(file, "ENV")?;
    assert_eq!(env, [format!("SSL_CERT_FILE={bundle}")]);
    Ok(())
}

#[test]
fn runtime_user_is_numeric_and_not_root() -> Result<()> {
    for file in IMAGES {
        let users = runtime_of(file, "USER")?;
        let user = users.last().with_context(|| format!("{file}: no USER"))?;
        let uid: u32 = user.split(':').next().unwrap_or_default().parse()?;
        assert_ne!(uid, 0, "{file}: the konnector runs as root");
    }
    Ok(())
}

#[test]
fn entrypoint_is_the_konnector_running_run() -> Result<()> {
    for file in IMAGES {
        // Exec form: the konnector is PID 1 and receives SIGTERM directly. The chart's args
        // (`run` and its flags) replace CMD, so ENTRYPOINT must stay the bare binary.
        assert_eq!(
            runtime_of(file, "ENTRYPOINT")?,
            [r#"["/konnector"]"#],
            "{file}"
        );
        assert_eq!(runtime_of(file, "CMD")?, [r#"["run"]"#], "{file}");
    }
    Ok(())
}

#[test]
fn both_images_agree_on_user_ports_and_labels() -> Result<()> {
    for keyword in ["USER", "EXPOSE", "LABEL"] {
        let (full, fallback) = (runtime(keyword)?, runtime_of("Dockerfile.static", keyword)?);
        assert_eq!(full, fallback, "{keyword} differs between the two images");
    }
    assert_eq!(runtime("EXPOSE")?, ["8085 8081"], "metrics and probes");
    Ok(())
}
