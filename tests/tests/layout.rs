//! The source tree as the contributor docs describe it: every folder of `host/src` is a row of
//! the layout table (and every row names something that exists), and no module of `host` or
//! `kubectl-kbind` reaches a sibling that reaches back (read from the `use` lines and paths of
//! production code, tests left out: a test module may call through the dispatcher above it).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

/// The repository root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The page holding the layout table.
const LAYOUT_PAGE: &str = "docs/src/contributing/layout.md";

/// The first-column entries of the `host/src` layout table: the table right after the line
/// that starts "`host/src`".
fn layout_rows() -> anyhow::Result<Vec<String>> {
    let page = fs::read_to_string(root().join(LAYOUT_PAGE)).context("reading the layout page")?;
    let mut lines = page.lines().skip_while(|l| !l.starts_with("`host/src`"));
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in lines.by_ref() {
        if line.starts_with('|') {
            in_table = true;
            let first = line.split('|').nth(1).unwrap_or_default();
            rows.extend(
                first
                    .split('`')
                    .skip(1)
                    .step_by(2)
                    .filter(|entry| *entry != "folder")
                    .map(str::to_string),
            );
        } else if in_table {
            break;
        }
    }
    if rows.is_empty() {
        bail!("no host/src layout table found in {LAYOUT_PAGE}");
    }
    Ok(rows)
}

/// Every folder below `dir`, as `a/b/`.
fn folders(dir: &Path, prefix: &str, into: &mut BTreeSet<String>) -> anyhow::Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            let name = format!("{prefix}{}/", entry.file_name().to_string_lossy());
            folders(&entry.path(), &name, into)?;
            into.insert(name);
        }
    }
    Ok(())
}

#[test]
fn every_host_folder_is_a_row_of_the_layout_and_every_row_exists() -> anyhow::Result<()> {
    let src = root().join("host/src");
    let mut tree = BTreeSet::new();
    folders(&src, "", &mut tree)?;
    let rows = layout_rows()?;
    let listed: BTreeSet<String> = rows.iter().filter(|r| r.ends_with('/')).cloned().collect();
    let missing: Vec<_> = tree.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "folders of host/src not in the layout table: {missing:?}"
    );
    let gone: Vec<_> = rows.iter().filter(|row| !src.join(row).exists()).collect();
    assert!(
        gone.is_empty(),
        "layout rows naming nothing in host/src: {gone:?}"
    );
    Ok(())
}

/// A module path inside one crate, e.g. `["binding", "status", "publish"]`.
type ModPath = Vec<String>;

/// Every module of the crate under `src` with its production code (up to its first
/// `#[cfg(test)]`, comments dropped).
fn modules(src: &Path) -> anyhow::Result<BTreeMap<ModPath, String>> {
    fn walk(dir: &Path, at: &ModPath, out: &mut BTreeMap<ModPath, String>) -> anyhow::Result<()> {
        for entry in fs::read_dir(dir)? {
            let path = entry?.path();
            let stem = path
                .file_stem()
                .map(|s| s.to_string_lossy().to_string())
                .unwrap_or_default();
            if path.is_dir() {
                let mut next = at.clone();
                next.push(stem);
                walk(&path, &next, out)?;
            } else if path.extension().is_some_and(|e| e == "rs") {
                if stem == "main" || (stem == "tests" && !at.is_empty()) {
                    continue;
                }
                let mut module = at.clone();
                if !matches!(stem.as_str(), "mod" | "lib") {
                    module.push(stem);
                }
                let text = fs::read_to_string(&path)?;
                let production = text.split("#[cfg(test)]").next().unwrap_or_default();
                let code: String = production
                    .lines()
                    .filter(|l| !l.trim_start().starts_with("//"))
                    .collect::<Vec<_>>()
                    .join("\n");
                out.entry(module).or_default().push_str(&code);
            }
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    walk(src, &Vec::new(), &mut out)?;
    Ok(out)
}

/// The paths a module's code names: every `crate::…`, `super::…` and `self::…` path, with
/// `use` groups (`a::{b, c::d}`) expanded, resolved to paths from the crate root.
fn references(module: &ModPath, code: &str) -> Vec<ModPath> {
    let mut out = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0
            || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_' || chars[i - 1] == ':');
        if starts_word {
            for head in ["crate::", "super::", "self::"] {
                let len = head.chars().count();
                if chars[i..].iter().take(len).copied().eq(head.chars()) {
                    let (paths, end) = parse_tree(&chars, i);
                    for path in paths {
                        if let Some(resolved) = resolve(module, &path) {
                            out.push(resolved);
                        }
                    }
                    i = end;
                    break;
                }
            }
        }
        i += 1;
    }
    out
}

/// Parses a path tree starting at `at` (`a::b::{c, d::e}`) into its leaf paths.
fn parse_tree(chars: &[char], at: usize) -> (Vec<Vec<String>>, usize) {
    let mut prefix = Vec::new();
    let mut i = at;
    loop {
        let start = i;
        while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
            i += 1;
        }
        if i > start {
            prefix.push(chars[start..i].iter().collect::<String>());
        }
        if chars[i..].starts_with(&[':', ':']) {
            i += 2;
            if chars.get(i) == Some(&'{') {
                let mut leaves = Vec::new();
                i += 1;
                loop {
                    while chars.get(i).is_some_and(|c| c.is_whitespace() || *c == ',') {
                        i += 1;
                    }
                    if chars.get(i).is_none_or(|c| *c == '}') {
                        break;
                    }
                    let (inner, end) = parse_tree(chars, i);
                    for mut leaf in inner {
                        let mut full = prefix.clone();
                        full.append(&mut leaf);
                        leaves.push(full);
                    }
                    i = end;
                    // Skip an `as name` rename up to the next separator.
                    while chars.get(i).is_some_and(|c| *c != ',' && *c != '}') {
                        i += 1;
                    }
                }
                return (leaves, i + 1);
            }
            continue;
        }
        return (vec![prefix], i);
    }
}

/// `path` as named in `module`, from the crate root; `None` for paths outside the crate.
fn resolve(module: &ModPath, path: &[String]) -> Option<ModPath> {
    let (mut base, rest): (ModPath, &[String]) = match path.first().map(String::as_str) {
        Some("crate") => (Vec::new(), &path[1..]),
        Some("self") => (module.clone(), &path[1..]),
        Some("super") => {
            // A module's path is its file's (`a/b.rs`) or its folder's (`a/b/mod.rs`): either
            // way `super` is that path minus its last part.
            let mut base = module.clone();
            let mut parts = path;
            while parts.first().map(String::as_str) == Some("super") {
                base.pop();
                parts = &parts[1..];
            }
            (base, parts)
        }
        _ => return None,
    };
    base.extend(rest.iter().cloned());
    Some(base)
}

/// Sibling edges: for a reference from module `from` to path `to`, the two children of their
/// deepest common module on either side, when both exist and differ.
fn sibling_edges(
    known: &BTreeSet<ModPath>,
    modules: &BTreeMap<ModPath, String>,
) -> BTreeMap<ModPath, BTreeSet<(String, String)>> {
    let mut edges: BTreeMap<ModPath, BTreeSet<(String, String)>> = BTreeMap::new();
    for (from, code) in modules {
        for to in references(from, code) {
            // The longest prefix of the named path that is a module of the crate.
            let Some(target) = (1..=to.len())
                .rev()
                .map(|n| to[..n].to_vec())
                .find(|p| known.contains(p))
            else {
                continue;
            };
            let common = from.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if let (Some(a), Some(b)) = (from.get(common), target.get(common))
                && a != b
            {
                edges
                    .entry(from[..common].to_vec())
                    .or_default()
                    .insert((a.clone(), b.clone()));
            }
        }
    }
    edges
}

/// A cycle in `edges`, if there is one.
fn cycle(edges: &BTreeSet<(String, String)>) -> Option<Vec<String>> {
    let mut graph: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges {
        graph.entry(a).or_default().push(b);
    }
    fn visit<'a>(
        node: &'a str,
        graph: &BTreeMap<&'a str, Vec<&'a str>>,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| *n == node) {
            let mut found: Vec<String> = stack[at..].iter().map(|s| s.to_string()).collect();
            found.push(node.to_string());
            return Some(found);
        }
        if !done.insert(node) {
            return None;
        }
        stack.push(node);
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, stack, done) {
                return Some(found);
            }
        }
        stack.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|start| visit(start, &graph, &mut Vec::new(), &mut done))
}

/// The module cycles among siblings in the crate under `src`, as `parent: a -> b -> a`.
fn sibling_cycles(src: &Path) -> anyhow::Result<Vec<String>> {
    let modules = modules(src)?;
    let mut known: BTreeSet<ModPath> = modules.keys().cloned().collect();
    // Every folder is a module too, even where its code is only in its children.
    for path in modules.keys() {
        for n in 1..path.len() {
            known.insert(path[..n].to_vec());
        }
    }
    let edges = sibling_edges(&known, &modules);
    Ok(edges
        .iter()
        .filter_map(|(parent, edges)| {
            cycle(edges).map(|c| format!("{}: {}", parent.join("::"), c.join(" -> ")))
        })
        .collect())
}

#[test]
fn no_module_of_the_konnector_reaches_a_sibling_that_reaches_back() -> anyhow::Result<()> {
    let cycles = sibling_cycles(&root().join("host/src"))?;
    assert!(
        cycles.is_empty(),
        "module cycles among siblings: {cycles:#?}"
    );
    Ok(())
}

#[test]
fn no_module_of_the_cli_reaches_a_sibling_that_reaches_back() -> anyhow::Result<()> {
    let cycles = sibling_cycles(&root().join("kubectl-kbind/src"))?;
    assert!(
        cycles.is_empty(),
        "module cycles among siblings: {cycles:#?}"
    );
    Ok(())
}

#[test]
fn the_cycle_check_finds_a_cycle_through_use_groups_and_super() -> anyhow::Result<()> {
    // Two siblings naming each other, one through a use group, one through `super`.
    let dir = std::env::temp_dir().join(format!("kbind-layout-{}", std::process::id()));
    fs::create_dir_all(dir.join("outer"))?;
    fs::write(dir.join("lib.rs"), "pub mod outer;\n")?;
    fs::write(dir.join("outer/mod.rs"), "mod a;\nmod b;\n")?;
    fs::write(
        dir.join("outer/a.rs"),
        "use crate::outer::{b::thing, other};\n",
    )?;
    fs::write(
        dir.join("outer/b.rs"),
        "pub fn thing() { super::a::x(); }\n",
    )?;
    let found = sibling_cycles(&dir);
    fs::remove_dir_all(&dir)?;
    let found = found?;
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("outer: "), "{found:?}");
    Ok(())
}
