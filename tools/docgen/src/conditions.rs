//! The conditions reference, from the two enums in `host/src/api/conditions.rs`: every
//! condition type with the Event action it reports under, and every reason with its meaning
//! (the variant's doc comment) and what `kubectl kbind` tells an operator to do about it.
//!
//! Variant names and docs are read from the enum's source (doc comments do not exist at run
//! time); each is then checked against the compiled vocabulary, so a page can only name
//! strings the konnector really writes.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use konnector::api::ConditionType;

use crate::{GENERATED, cell};

/// One enum variant: its name and its doc comment.
#[derive(Debug, PartialEq, Eq)]
pub struct Variant {
    pub name: String,
    pub doc: String,
}

/// The variants of `pub enum <name>` in `source`, with their `///` comments.
pub fn variants(source: &str, name: &str) -> Vec<Variant> {
    let mut out = Vec::new();
    let mut inside = false;
    let mut doc = Vec::new();
    for line in source.lines() {
        let line = line.trim();
        if !inside {
            inside = line.starts_with(&format!("pub enum {name} "));
            continue;
        }
        if line == "}" {
            break;
        }
        if let Some(text) = line.strip_prefix("///") {
            doc.push(text.trim().to_string());
        } else if let Some(variant) = line.strip_suffix(',') {
            out.push(Variant {
                name: variant.to_string(),
                doc: doc.join(" "),
            });
            doc.clear();
        } else if !line.starts_with("#[") {
            doc.clear();
        }
    }
    out
}

/// The page, from the enum source at `path`.
pub fn page(path: &Path) -> anyhow::Result<String> {
    let source =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let types = variants(&source, "ConditionType");
    let reasons = variants(&source, "Reason");
    anyhow::ensure!(
        types.len() == ConditionType::ALL.len(),
        "read {} condition types from {}, the konnector has {}",
        types.len(),
        path.display(),
        ConditionType::ALL.len()
    );
    let mut out = format!(
        "{GENERATED}\n\n# Conditions and reasons\n\nEvery condition the konnector writes on \
         Connections, Bindings, ClusterBindings and bound instances, and every reason it gives. \
         A Warning Event is published when a condition enters a failure reason (its action is \
         the one listed here), not on every reconcile. See \
         [Conditions and Events](../operations/conditions-and-events.md) for how to read them.\n\n\
         ## Condition types\n\n| type | Event action | meaning |\n|---|---|---|\n"
    );
    for variant in &types {
        let parsed = ConditionType::parse(&variant.name).with_context(|| {
            format!(
                "{} is not a condition type the konnector writes",
                variant.name
            )
        })?;
        let _ = writeln!(
            out,
            "| `{}` | `{}` | {} |",
            parsed.as_str(),
            parsed.action(),
            cell(&variant.doc)
        );
    }
    out.push_str("\n## Reasons\n\n| reason | meaning | what to do (as `kubectl kbind` says it) |\n|---|---|---|\n");
    for variant in &reasons {
        let known = kubectl_kbind::hints::parse(&variant.name)
            .with_context(|| format!("{} is not a reason kubectl kbind knows", variant.name))?;
        let _ = writeln!(
            out,
            "| `{}` | {} | {} |",
            known.as_str(),
            cell(&variant.doc),
            cell(kubectl_kbind::hints::what_to_do(known.as_str()))
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_carry_their_doc_comments_and_skip_attributes() {
        let source = "pub enum Reason {\n    /// First line\n    /// second.\n    A,\n    #[allow(x)]\n    /// B's.\n    B,\n}\n";
        assert_eq!(
            variants(source, "Reason"),
            vec![
                Variant {
                    name: "A".into(),
                    doc: "First line second.".into()
                },
                Variant {
                    name: "B".into(),
                    doc: "B's.".into()
                },
            ]
        );
    }

    #[test]
    fn the_page_lists_every_condition_type_and_the_reasons_operators_meet() -> anyhow::Result<()> {
        let page = page(&crate::repository_root().join("host/src/api/conditions.rs"))?;
        for type_ in ConditionType::ALL {
            assert!(page.contains(&format!("| `{}` |", type_.as_str())));
        }
        for reason in ["SecretNotFound", "OwnedByAnother", "APIReleased"] {
            assert!(page.contains(&format!("| `{reason}` |")), "no {reason}");
        }
        Ok(())
    }
}
