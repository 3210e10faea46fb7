//! Where a policy module comes from, as an operator writes it in a flag, a chart value or a
//! Connection: `oci://REGISTRY/REPOSITORY:TAG`, `oci://...@sha256:DIGEST`, a file path, or
//! `built-in`. One parser for every policy setting, so they cannot disagree.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// How a reference names the module built into the konnector.
pub const BUILTIN: &str = "built-in";

/// The scheme of a reference to a module in an OCI registry.
pub const OCI_SCHEME: &str = "oci://";

/// A policy module reference.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PolicyRef {
    /// The module embedded in the konnector.
    Builtin,
    /// A component file on the konnector's filesystem (a mounted ConfigMap, for instance).
    File(PathBuf),
    /// A Wasm OCI artifact in a registry.
    Oci(OciRef),
}

/// A module in an OCI registry: by tag (resolved to a digest when read), by digest, or both
/// (the digest is what is pulled; the tag only says where it came from).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OciRef {
    /// `host[:port]`.
    pub registry: String,
    /// `path/of/repository`.
    pub repository: String,
    /// The tag, when named.
    pub tag: Option<String>,
    /// `sha256:<64 hex>`, when named.
    pub digest: Option<String>,
}

/// Why a reference does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    /// `oci://` with no registry or no repository.
    #[error(
        "parsing the policy reference {0:?}: write oci://REGISTRY/REPOSITORY:TAG or oci://REGISTRY/REPOSITORY@sha256:DIGEST"
    )]
    Incomplete(String),
    /// `oci://` with neither a tag nor a digest: refused rather than guessing `latest`.
    #[error(
        "parsing the policy reference {0:?}: name a tag (:v1.2.3) or a digest (@sha256:...); an implicit `latest` is not resolved"
    )]
    NoTagOrDigest(String),
    /// A registry, repository, tag or digest with characters the distribution spec forbids.
    #[error(
        "parsing the policy reference {reference:?}: the {part} {value:?} is not valid ({rule})"
    )]
    Invalid {
        /// The whole reference.
        reference: String,
        /// `registry`, `repository`, `tag` or `digest`.
        part: &'static str,
        /// The offending text.
        value: String,
        /// What it should look like.
        rule: &'static str,
    },
    /// An empty string.
    #[error("parsing the policy reference: it is empty; write built-in, a file path or oci://...")]
    Empty,
}

impl FromStr for PolicyRef {
    type Err = ReferenceError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        if text.is_empty() {
            return Err(ReferenceError::Empty);
        }
        if text == BUILTIN || text == "builtin" {
            return Ok(Self::Builtin);
        }
        match text.strip_prefix(OCI_SCHEME) {
            Some(rest) => parse_oci(text, rest).map(Self::Oci),
            None => Ok(Self::File(PathBuf::from(text))),
        }
    }
}

fn parse_oci(whole: &str, rest: &str) -> Result<OciRef, ReferenceError> {
    let incomplete = || ReferenceError::Incomplete(whole.to_owned());
    let (name, digest) = match rest.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (rest, None),
    };
    let (registry, path) = name.split_once('/').ok_or_else(incomplete)?;
    // A tag is after the last ':' of the path (a registry's port is before the first '/').
    let (repository, tag) = match path.rsplit_once(':') {
        Some((repository, tag)) => (repository, Some(tag)),
        None => (path, None),
    };
    if registry.is_empty() || repository.is_empty() {
        return Err(incomplete());
    }
    let invalid = |part, value: &str, rule| ReferenceError::Invalid {
        reference: whole.to_owned(),
        part,
        value: value.to_owned(),
        rule,
    };
    if !registry
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
    {
        return Err(invalid(
            "registry",
            registry,
            "a host name or address, with an optional :port",
        ));
    }
    if !repository.split('/').all(valid_path_component) {
        return Err(invalid(
            "repository",
            repository,
            "lowercase letters and digits, separated by '.', '_', '__', '-' or '/'",
        ));
    }
    if let Some(tag) = tag {
        let mut chars = tag.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if !first_ok
            || tag.len() > 128
            || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        {
            return Err(invalid(
                "tag",
                tag,
                "up to 128 letters, digits, '_', '.' or '-', not starting with '.' or '-'",
            ));
        }
    }
    if let Some(digest) = digest
        && !valid_digest(digest)
    {
        return Err(invalid(
            "digest",
            digest,
            "sha256: followed by 64 lowercase hex digits",
        ));
    }
    if tag.is_none() && digest.is_none() {
        return Err(ReferenceError::NoTagOrDigest(whole.to_owned()));
    }
    Ok(OciRef {
        registry: registry.to_owned(),
        repository: repository.to_owned(),
        tag: tag.map(str::to_owned),
        digest: digest.map(str::to_owned),
    })
}

/// One component of a repository path: `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`.
fn valid_path_component(component: &str) -> bool {
    let bytes = component.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if !bytes.first().is_some_and(alnum) || !bytes.last().is_some_and(alnum) {
        return false;
    }
    let mut separator = String::new();
    for b in bytes {
        if alnum(b) {
            let allowed = matches!(separator.as_str(), "" | "." | "_" | "__")
                || separator.bytes().all(|s| s == b'-');
            if !allowed {
                return false;
            }
            separator.clear();
        } else if matches!(b, b'.' | b'_' | b'-') {
            separator.push(char::from(*b));
        } else {
            return false;
        }
    }
    true
}

/// `sha256:` and 64 lowercase hex digits: the only digest algorithm accepted.
pub fn valid_digest(digest: &str) -> bool {
    digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

impl OciRef {
    /// The reference without its digest (`REGISTRY/REPOSITORY:TAG`): the key under which the
    /// cache remembers what a tag last resolved to.
    pub fn tagged(&self) -> Option<String> {
        let tag = self.tag.as_deref()?;
        Some(format!("{}/{}:{tag}", self.registry, self.repository))
    }

    /// The same module pinned to `digest`.
    pub fn pinned(&self, digest: &str) -> Self {
        Self {
            digest: Some(digest.to_owned()),
            ..self.clone()
        }
    }
}

impl fmt::Display for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{OCI_SCHEME}{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

impl fmt::Display for PolicyRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Builtin => f.write_str(BUILTIN),
            Self::File(path) => write!(f, "{}", path.display()),
            Self::Oci(oci) => oci.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn parse(text: &str) -> Result<PolicyRef, ReferenceError> {
        text.parse()
    }

    fn oci(text: &str) -> OciRef {
        match parse(text) {
            Ok(PolicyRef::Oci(oci)) => oci,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn a_tag_reference_names_registry_repository_and_tag() {
        let r = oci("oci://registry.example.com:5000/kbind/policies/placement:v1.2.3");
        assert_eq!(r.registry, "registry.example.com:5000");
        assert_eq!(r.repository, "kbind/policies/placement");
        assert_eq!(r.tag.as_deref(), Some("v1.2.3"));
        assert_eq!(r.digest, None);
        assert_eq!(
            r.tagged().as_deref(),
            Some("registry.example.com:5000/kbind/policies/placement:v1.2.3")
        );
    }

    #[test]
    fn a_digest_reference_pins_the_module() {
        let r = oci(&format!("oci://127.0.0.1:5000/conflict@{DIGEST}"));
        assert_eq!(r.tag, None);
        assert_eq!(r.digest.as_deref(), Some(DIGEST));
        let both = oci(&format!("oci://ghcr.io/acme/conflict:v2@{DIGEST}"));
        assert_eq!(both.tag.as_deref(), Some("v2"));
        assert_eq!(both.digest.as_deref(), Some(DIGEST));
    }

    #[test]
    fn references_print_as_they_parse() {
        for text in [
            "oci://ghcr.io/acme/conflict:v2",
            &format!("oci://ghcr.io/acme/conflict:v2@{DIGEST}"),
            &format!("oci://localhost:5000/a/b@{DIGEST}"),
            "built-in",
            "/policies/conflict/policy.wasm",
        ] {
            let parsed = parse(text).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(parsed.to_string(), text);
        }
    }

    #[test]
    fn built_in_and_file_paths_are_not_registry_references() {
        assert_eq!(parse("built-in"), Ok(PolicyRef::Builtin));
        assert_eq!(parse("builtin"), Ok(PolicyRef::Builtin));
        assert_eq!(
            parse("policies/conflict.wasm"),
            Ok(PolicyRef::File("policies/conflict.wasm".into()))
        );
    }

    #[test]
    fn a_reference_without_tag_or_digest_is_refused() {
        let refused = parse("oci://ghcr.io/acme/conflict");
        assert!(
            matches!(&refused, Err(e @ ReferenceError::NoTagOrDigest(_)) if e.to_string().contains("name a tag")),
            "{refused:?}"
        );
    }

    #[test]
    fn malformed_references_say_which_part_is_wrong() {
        for (text, part) in [
            ("oci://ghcr.io/Acme/conflict:v1", "repository"),
            ("oci://ghcr.io/acme//conflict:v1", "repository"),
            ("oci://ghcr.io/acme/conflict:-v1", "tag"),
            ("oci://ghcr.io/acme/conflict@sha256:abc", "digest"),
            ("oci://ghcr.io/acme/conflict@md5:0123", "digest"),
            ("oci://gh cr.io/acme/conflict:v1", "registry"),
        ] {
            let refused = parse(text);
            assert!(
                matches!(&refused, Err(ReferenceError::Invalid { part: p, .. }) if *p == part),
                "{text}: {refused:?}"
            );
        }
        assert!(matches!(
            parse("oci://ghcr.io"),
            Err(ReferenceError::Incomplete(_))
        ));
        assert!(matches!(
            parse("oci:///x:v1"),
            Err(ReferenceError::Incomplete(_))
        ));
        assert_eq!(parse("  "), Err(ReferenceError::Empty));
    }
}
