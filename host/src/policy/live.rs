//! Process-wide modules swapped while the konnector runs: `--policy-refs-file` names a file
//! (the chart mounts it from a ConfigMap, which the kubelet keeps current) holding a reference
//! per role. The file, and any module file a reference names, is read again every few
//! seconds; a changed reference is resolved, pulled, checked, compiled and checked against its
//! world, then swapped in ([`Policies::swap`]): calls in flight finish on the old module, new
//! calls use the new one, nothing restarts or re-lists. A registry is asked only when a
//! reference (or its settings) changes, never on a timer. A module that fails any step, or
//! refuses its settings, leaves the old one
//! running; the log and `kbind_policy_swaps_total{result="failed"}` say why.
//!
//! ```text
//! refs file ──(changed)──▶ role's reference changed? ──▶ pull + verify + compile + world
//!                                                         │ ok            │ failed
//!                                                         ▼               ▼
//!                                         Policies::swap (atomic)   old module keeps running
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::artifact::{Fetcher, PolicyRef, sha256_digest};
use crate::telemetry::{PolicySwapLabels, metrics};

use super::{
    Policies, PolicyArgs, PolicyError, PolicyRole, PolicySettings, load::read_file, role_label,
};

/// How often the references file (and module files) are read again.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);

/// The references file: a reference per role (a role left out keeps its flag), alone or with
/// the module's settings (`conflict: {module: oci://..., settings: {...}}`).
#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct RefsFile {
    schema: Option<RefEntry>,
    conflict: Option<RefEntry>,
    related: Option<RefEntry>,
    placement: Option<RefEntry>,
}

/// One role's entry of the references file.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(untagged)]
enum RefEntry {
    /// The reference alone.
    Reference(String),
    /// The reference and the module's settings.
    WithSettings {
        /// The reference.
        module: String,
        /// The settings document.
        #[serde(default)]
        settings: Option<serde_json::Value>,
    },
}

/// Why the references file is not usable.
#[derive(Debug, thiserror::Error)]
pub enum RefsFileError {
    /// Not readable.
    #[error("reading the policy references file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not YAML of the expected shape, or a reference that does not parse.
    #[error("parsing the policy references file {}: {message} (expected `conflict: oci://REGISTRY/REPOSITORY:TAG` lines for schema, conflict, related, placement)", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// `args` with the references in the file at `path` (roles it names override the flags).
pub fn with_refs_file(args: &PolicyArgs, path: &Path) -> Result<PolicyArgs, RefsFileError> {
    let bytes = read_file(path).map_err(|source| RefsFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    merged(args, path, &bytes)
}

fn merged(args: &PolicyArgs, path: &Path, bytes: &[u8]) -> Result<PolicyArgs, RefsFileError> {
    let parse_error = |message: String| RefsFileError::Parse {
        path: path.to_owned(),
        message,
    };
    let file: RefsFile = if bytes.iter().all(u8::is_ascii_whitespace) {
        RefsFile::default()
    } else {
        serde_saphyr::from_slice(bytes).map_err(|e| parse_error(e.to_string()))?
    };
    let mut args = args.clone();
    for (role, entry) in [
        (PolicyRole::SchemaSynthesis, file.schema),
        (PolicyRole::ConflictPolicy, file.conflict),
        (PolicyRole::RelatedSelection, file.related),
        (PolicyRole::Placement, file.placement),
    ] {
        let (text, settings) = match entry {
            None => continue,
            Some(RefEntry::Reference(text)) => (text, None),
            Some(RefEntry::WithSettings { module, settings }) => (module, settings),
        };
        if text.trim().is_empty() {
            continue;
        }
        let reference: PolicyRef = text
            .parse()
            .map_err(|e: crate::artifact::ReferenceError| parse_error(e.to_string()))?;
        args.set_module(role, Some(reference));
        if let Some(value) = settings {
            let settings = PolicySettings::from_value(&value)
                .map_err(|e| parse_error(format!("{role} settings: {e}")))?;
            args.set_settings(role, Some(settings));
        }
    }
    Ok(args)
}

/// What a role runs, as the watcher last saw it: its reference, and for a module file the
/// digest of its content (a ConfigMap update changes the content under the same path).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    reference: Option<PolicyRef>,
    settings: PolicySettings,
    file_digest: Option<String>,
}

fn seen(reference: Option<&PolicyRef>, settings: PolicySettings) -> Seen {
    let file_digest = match reference {
        Some(PolicyRef::File(path)) => read_file(path).ok().map(|b| sha256_digest(&b)),
        _ => None,
    };
    Seen {
        reference: reference.cloned(),
        settings,
        file_digest,
    }
}

/// Watches the references file at `path` (and module files) every `interval` until `stop`,
/// swapping each role whose module changed. `args` are the flags the process started with.
pub async fn watch(
    policies: Policies,
    args: PolicyArgs,
    fetcher: Fetcher,
    path: PathBuf,
    interval: Duration,
    stop: CancellationToken,
) {
    let initial = with_refs_file(&args, &path).unwrap_or_else(|_| args.clone());
    let mut last: BTreeMap<PolicyRole, Seen> = PolicyRole::ALL
        .into_iter()
        .map(|role| (role, seen(initial.module(role), initial.settings(role))))
        .collect();
    let mut last_error = None;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
        let wanted = match with_refs_file(&args, &path) {
            Ok(wanted) => wanted,
            Err(e) => {
                let message = e.to_string();
                if last_error.as_ref() != Some(&message) {
                    error!(error = %message, "policy references file unusable; the running modules stay");
                    last_error = Some(message);
                }
                continue;
            }
        };
        last_error = None;
        for role in PolicyRole::ALL {
            let now = seen(wanted.module(role), wanted.settings(role));
            if last.get(&role) == Some(&now) {
                continue;
            }
            // Tried once per change: a failing module is not pulled again until the file
            // or the module file changes again.
            last.insert(role, now);
            swap_role(&policies, &wanted, &fetcher, role).await;
        }
    }
}

/// Loads `role`'s module as `wanted` names it and swaps it in; on failure, says why and
/// leaves the running one.
pub async fn swap_role(
    policies: &Policies,
    wanted: &PolicyArgs,
    fetcher: &Fetcher,
    role: PolicyRole,
) {
    let before = policies.digest(role);
    let result = match replacement(wanted, fetcher, role).await {
        Ok(replacement) => {
            policies.swap(role, &replacement);
            Ok(())
        }
        Err(e) => Err(e),
    };
    let outcome = match &result {
        Ok(()) => "swapped",
        Err(_) => "failed",
    };
    metrics()
        .policy_swaps
        .get_or_create(&PolicySwapLabels {
            role: role_label(role),
            result: outcome,
        })
        .inc();
    match result {
        Ok(()) => {
            policies.publish_module_info();
            let after = policies.digest(role);
            info!(%role, origin = %policies.origin(role), "policy module swapped: digest {before} → {after}");
        }
        Err(e) => error!(%role, error = %e, running = %policies.origin(role),
            "policy module not swapped; the running module stays"),
    }
}

/// The new module for `role`, pulled (a registry reference), read (a file) or built in, then
/// compiled and checked against the role's world, under the same limits.
async fn replacement(
    wanted: &PolicyArgs,
    fetcher: &Fetcher,
    role: PolicyRole,
) -> Result<Policies, PolicyError> {
    let mut only = PolicyArgs::default();
    only.set_module(role, wanted.module(role).cloned());
    only.set_settings(role, Some(wanted.settings(role)));
    let loaded = match wanted.module(role) {
        Some(PolicyRef::Oci(_)) => Policies::resolve(&only, fetcher).await?,
        _ => Policies::load(&only)?,
    };
    loaded.check_role(role).await?;
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_references_file_overrides_the_flags_it_names() -> Result<(), RefsFileError> {
        let mut args = PolicyArgs::default();
        args.set_module(PolicyRole::Placement, Some(PolicyRef::Builtin));
        let merged = merged(
            &args,
            Path::new("refs.yaml"),
            b"conflict: oci://r.example/acme/conflict:v1\n",
        )?;
        assert!(matches!(
            merged.module(PolicyRole::ConflictPolicy),
            Some(PolicyRef::Oci(r)) if r.tag.as_deref() == Some("v1")
        ));
        assert_eq!(
            merged.module(PolicyRole::Placement),
            Some(&PolicyRef::Builtin)
        );
        assert_eq!(merged.module(PolicyRole::SchemaSynthesis), None);
        Ok(())
    }

    #[test]
    fn the_references_file_takes_settings_beside_a_reference() -> Result<(), RefsFileError> {
        let merged = merged(
            &PolicyArgs::default(),
            Path::new("refs.yaml"),
            b"placement: {module: built-in, settings: {zone: eu-1}}\nconflict: built-in\n",
        )?;
        assert_eq!(
            merged.module(PolicyRole::Placement),
            Some(&PolicyRef::Builtin)
        );
        assert_eq!(
            merged.settings(PolicyRole::Placement).as_str(),
            r#"{"zone":"eu-1"}"#
        );
        assert!(merged.settings(PolicyRole::ConflictPolicy).is_empty());
        let too_large = format!(
            "placement: {{module: built-in, settings: {{x: {}}}}}\n",
            "a".repeat(super::super::MAX_SETTINGS_BYTES)
        );
        let refused = merged_bytes(too_large.as_bytes());
        assert!(
            matches!(&refused, Err(e @ RefsFileError::Parse { .. }) if e.to_string().contains("at most")),
            "{refused:?}"
        );
        Ok(())
    }

    fn merged_bytes(bytes: &[u8]) -> Result<PolicyArgs, RefsFileError> {
        merged(&PolicyArgs::default(), Path::new("refs.yaml"), bytes)
    }

    #[test]
    fn a_malformed_references_file_is_refused_naming_it() {
        for bytes in [
            &b"conflcit: built-in\n"[..],
            b"conflict: oci://r.example/acme/conflict\n",
        ] {
            let refused = merged(&PolicyArgs::default(), Path::new("refs.yaml"), bytes);
            assert!(
                matches!(&refused, Err(e @ RefsFileError::Parse { .. }) if e.to_string().contains("refs.yaml")),
                "{refused:?}"
            );
        }
        assert!(merged(&PolicyArgs::default(), Path::new("refs.yaml"), b"").is_ok());
    }

    #[tokio::test]
    async fn a_swap_serves_new_calls_while_a_clone_taken_before_sees_it_too()
    -> Result<(), PolicyError> {
        let policies = Policies::builtin()?;
        let clone = policies.clone();
        let before = clone.digest(PolicyRole::ConflictPolicy);
        // The placement component does not implement the conflict world: refused, nothing swapped.
        let wrong = Policies::builtin()?.with_module(
            PolicyRole::ConflictPolicy,
            super::super::builtin::PLACEMENT_POLICY,
            "placement.wasm",
        );
        assert!(
            matches!(wrong, Err(PolicyError::WrongWorld { .. })),
            "{wrong:?}"
        );
        // A module with other bytes (the same component with a custom section) is swapped in.
        let stamped = crate::artifact::metadata::embed(
            super::super::builtin::CONFLICT_POLICY,
            &crate::artifact::ModuleMetadata::default(),
        )
        .map_err(|e| PolicyError::EncodeInput {
            role: PolicyRole::ConflictPolicy,
            message: e.to_string(),
        })?;
        let replacement = Policies::builtin()?.with_module(
            PolicyRole::ConflictPolicy,
            &stamped,
            "stamped.wasm",
        )?;
        policies.swap(PolicyRole::ConflictPolicy, &replacement);
        assert_ne!(clone.digest(PolicyRole::ConflictPolicy), before);
        assert_eq!(&*clone.origin(PolicyRole::ConflictPolicy), "stamped.wasm");
        assert_eq!(
            clone.digest(PolicyRole::Placement),
            policies.digest(PolicyRole::Placement)
        );
        Ok(())
    }
}
