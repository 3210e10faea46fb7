//! What a module says about itself: name, version, role and source, in a custom section
//! (`kbind.policy.metadata`, JSON) of the component, embedded by `konnector policy push` and
//! mirrored in the OCI manifest's annotations, so that a module pulled, copied or mounted
//! still tells `konnector policy inspect` what it is.
//!
//! A component is a header and a sequence of sections; a custom section (id 0) carries a
//! name and bytes the runtime ignores, so embedding one changes nothing the module does.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The custom section's name.
pub const SECTION: &str = "kbind.policy.metadata";

/// Manifest annotation of the module's role.
pub const ROLE_ANNOTATION: &str = "io.kbind.policy.role";
/// Manifest annotation of the module's name (the OCI image title).
pub const NAME_ANNOTATION: &str = "org.opencontainers.image.title";
/// Manifest annotation of the module's version.
pub const VERSION_ANNOTATION: &str = "org.opencontainers.image.version";
/// Manifest annotation of the module's source (a repository URL).
pub const SOURCE_ANNOTATION: &str = "org.opencontainers.image.source";

/// A module's description of itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleMetadata {
    /// The module's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Its version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// The role it plays (`conflict-policy`, `placement-policy`, ...).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub role: String,
    /// Where its source lives.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
}

impl ModuleMetadata {
    /// The manifest annotations that mirror this metadata.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        [
            (NAME_ANNOTATION, &self.name),
            (VERSION_ANNOTATION, &self.version),
            (ROLE_ANNOTATION, &self.role),
            (SOURCE_ANNOTATION, &self.source),
        ]
        .into_iter()
        .filter(|(_, value)| !value.is_empty())
        .map(|(key, value)| (key.to_owned(), value.clone()))
        .collect()
    }
}

/// The metadata embedded in `module` (the last such section wins), if any: at the
/// component's top level (`policy push`), or in a core module inside it (a module built from
/// a `konnector policy new` project, whose metadata the compiler put in its core module).
pub fn read(module: &[u8]) -> Option<ModuleMetadata> {
    read_in(module, 0)
}

/// A component's section id of a nested core module.
const CORE_MODULE_SECTION: u8 = 1;

fn read_in(module: &[u8], depth: u8) -> Option<ModuleMetadata> {
    let mut found = None;
    let is_component = module.get(4..8) == Some(&[0x0d, 0x00, 0x01, 0x00][..]);
    let mut at = module.get(8..)?;
    while let Some((&id, rest)) = at.split_first() {
        let (size, rest) = leb128(rest)?;
        let body = rest.get(..size)?;
        at = rest.get(size..)?;
        if is_component && id == CORE_MODULE_SECTION && depth == 0 {
            if let Some(inner) = read_in(body, depth + 1) {
                found = Some(inner);
            }
            continue;
        }
        if id != 0 {
            continue;
        }
        let (name_len, body) = leb128(body)?;
        if body.get(..name_len) == Some(SECTION.as_bytes()) {
            found = serde_json::from_slice(body.get(name_len..)?).ok();
        }
    }
    found
}

/// `module` with `metadata` embedded as a trailing custom section.
pub fn embed(module: &[u8], metadata: &ModuleMetadata) -> Result<Vec<u8>, serde_json::Error> {
    let payload = serde_json::to_vec(metadata)?;
    let mut body = Vec::with_capacity(SECTION.len() + payload.len() + 5);
    write_leb128(&mut body, SECTION.len());
    body.extend_from_slice(SECTION.as_bytes());
    body.extend_from_slice(&payload);
    let mut out = Vec::with_capacity(module.len() + body.len() + 6);
    out.extend_from_slice(module);
    out.push(0);
    write_leb128(&mut out, body.len());
    out.extend_from_slice(&body);
    Ok(out)
}

/// An unsigned LEB128 number and the bytes after it.
fn leb128(bytes: &[u8]) -> Option<(usize, &[u8])> {
    let mut value: usize = 0;
    for (i, byte) in bytes.iter().enumerate().take(5) {
        value |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, bytes.get(i + 1..)?));
        }
    }
    None
}

fn write_leb128(out: &mut Vec<u8>, mut value: usize) {
    loop {
        let byte = u8::try_from(value & 0x7f).unwrap_or(0);
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest component: its header only.
    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\x00\x01\x00";

    fn metadata() -> ModuleMetadata {
        ModuleMetadata {
            name: "acme-conflict".into(),
            version: "1.2.0".into(),
            role: "conflict-policy".into(),
            source: "https://git.example.com/acme/policies".into(),
        }
    }

    #[test]
    fn embedded_metadata_reads_back() -> Result<(), serde_json::Error> {
        let module = embed(EMPTY_COMPONENT, &metadata())?;
        assert_eq!(read(&module), Some(metadata()));
        assert_eq!(read(EMPTY_COMPONENT), None);
        Ok(())
    }

    #[test]
    fn the_last_embedded_metadata_wins() -> Result<(), serde_json::Error> {
        let first = embed(EMPTY_COMPONENT, &metadata())?;
        let newer = ModuleMetadata {
            version: "1.3.0".into(),
            ..metadata()
        };
        assert_eq!(read(&embed(&first, &newer)?), Some(newer));
        Ok(())
    }

    #[test]
    fn metadata_is_mirrored_in_annotations() {
        let annotations = metadata().annotations();
        assert_eq!(annotations[ROLE_ANNOTATION], "conflict-policy");
        assert_eq!(annotations[VERSION_ANNOTATION], "1.2.0");
        let partial = ModuleMetadata {
            name: "x".into(),
            ..ModuleMetadata::default()
        };
        assert_eq!(partial.annotations().len(), 1);
    }

    #[test]
    fn a_large_section_size_round_trips_through_leb128() {
        let mut out = Vec::new();
        write_leb128(&mut out, 624_485);
        assert_eq!(out, [0xe5, 0x8e, 0x26]);
        assert_eq!(leb128(&out).map(|(v, _)| v), Some(624_485));
    }
}
