//! `konnector policy new`: a policy project for one role, from the repository's templates
//! (`templates/<role>`, cargo-generate style: `{{project-name}}` and `{{source}}`
//! placeholders). The project gets the konnector's own WIT (`wit/policy.wit`), so it depends
//! on nothing of the kbind repository, and `.cargo/config.toml` building for wasm32-wasip2;
//! the module it builds carries its metadata (name, version, role, source) for `inspect`.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail, ensure};

use crate::policy::PolicyRole;

/// The WIT the konnector implements, written into every new project.
const WIT: &str = include_str!("../../../wit/policy.wit");

/// The template files of `role`: (path in the project, text).
fn files(role: PolicyRole) -> [(&'static str, &'static str); 2] {
    macro_rules! template {
        ($dir:literal) => {
            [
                (
                    "Cargo.toml",
                    include_str!(concat!("../../../templates/", $dir, "/Cargo.toml")),
                ),
                (
                    "src/lib.rs",
                    include_str!(concat!("../../../templates/", $dir, "/src/lib.rs")),
                ),
            ]
        };
    }
    match role {
        PolicyRole::SchemaSynthesis => template!("schema"),
        PolicyRole::ConflictPolicy => template!("conflict"),
        PolicyRole::RelatedSelection => template!("related"),
        PolicyRole::Placement => template!("placement"),
    }
}

/// Whether `name` can be a Cargo package name (and so a module name).
fn valid_name(name: &str) -> bool {
    name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Writes a new `role` project named `name` into `dir` (which must not exist, or be empty);
/// returns the files written.
pub fn new_project(
    role: PolicyRole,
    name: &str,
    source: &str,
    dir: &Path,
) -> anyhow::Result<Vec<PathBuf>> {
    ensure!(
        valid_name(name),
        "{name:?} is not a package name: start with a letter, then letters, digits, - or _"
    );
    ensure!(
        !source.contains('"') && !source.contains('\\'),
        "the source URL may not contain quotes or backslashes"
    );
    if dir.exists()
        && std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .next()
            .is_some()
    {
        bail!("{} exists and is not empty", dir.display());
    }
    let render = |text: &str| {
        text.replace("{{project-name}}", name)
            .replace("{{source}}", source)
    };
    let mut written = Vec::new();
    let mut write = |path: &str, text: String| -> anyhow::Result<()> {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
        Ok(())
    };
    for (path, text) in files(role) {
        write(path, render(text))?;
    }
    write("wit/policy.wit", WIT.to_owned())?;
    write(
        ".cargo/config.toml",
        "[build]\ntarget = \"wasm32-wasip2\"\n".to_owned(),
    )?;
    write(".gitignore", "/target\n".to_owned())?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_role_has_a_template_naming_its_world() {
        for role in PolicyRole::ALL {
            let [(_, cargo), (_, lib)] = files(role);
            assert!(cargo.contains("name = \"{{project-name}}\""), "{role}");
            let world = role
                .world()
                .rsplit('/')
                .next()
                .and_then(|w| w.split('@').next())
                .unwrap_or_default();
            assert!(
                lib.contains(&format!("world: \"{world}\"")),
                "{role}: the template does not implement {world}"
            );
            assert!(
                lib.contains(&format!("\"role\":\"{}\"", role.name())),
                "{role}"
            );
        }
    }

    #[test]
    fn every_template_is_a_workspace_of_its_own() {
        for role in PolicyRole::ALL {
            let [(_, cargo), _] = files(role);
            let own = cargo
                .lines()
                .map(str::trim)
                .position(|l| l == "[workspace]");
            let next = own.and_then(|at| cargo.lines().nth(at + 1)).map(str::trim);
            assert!(
                own.is_some() && next.is_none_or(|l| l.is_empty() || l.starts_with('[')),
                "{role}: the template needs an empty [workspace] table to build inside another workspace"
            );
        }
    }

    #[test]
    fn a_project_is_not_written_over_files_or_under_a_bad_name() -> anyhow::Result<()> {
        let dir = std::env::temp_dir().join(format!("kbind-template-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let refused = new_project(PolicyRole::ConflictPolicy, "1bad", "", &dir);
        assert!(refused.is_err());
        let written = new_project(
            PolicyRole::ConflictPolicy,
            "my-conflict",
            "https://git.example/p",
            &dir,
        )?;
        assert!(written.iter().any(|p| p.ends_with("wit/policy.wit")));
        let cargo = std::fs::read_to_string(dir.join("Cargo.toml"))?;
        assert!(
            cargo.contains("name = \"my-conflict\"") && cargo.contains("https://git.example/p")
        );
        let again = new_project(PolicyRole::ConflictPolicy, "my-conflict", "", &dir);
        assert!(
            matches!(&again, Err(e) if e.to_string().contains("not empty")),
            "{again:?}"
        );
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
