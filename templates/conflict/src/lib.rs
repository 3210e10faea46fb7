//! {{project-name}}: a kbind conflict-policy module. `decide` answers whether the konnector
//! may write the provider object at a consumer object's namespace/name. This starting point
//! is the built-in table: create when absent, update what carries this object's markers,
//! adopt an unmarked one only under `Adopt`, refuse anything else.

wit_bindgen::generate!({ world: "conflict-policy", path: "wit" });

use exports::kbind::policy::conflict::{
    Conflict, ConflictInput, ConflictPolicy, ConflictReason, Decision, Guest,
};

struct Policy;

impl Guest for Policy {
    /// The settings document an operator gives beside this module's reference (`settings:` in
    /// the chart's `policies.<role>` or a Connection's `spec.policies`), once at load time.
    /// This module takes none: an empty document passes, anything else is refused, and the
    /// message is shown on the Connection. To take settings, parse them here (serde_json) and
    /// keep them in a `static` (`std::sync::OnceLock`).
    fn configure(settings: String) -> Result<(), String> {
        match settings.trim() {
            "" | "{}" | "null" => Ok(()),
            other => Err(format!("this module takes no settings, but got {other}")),
        }
    }

    fn decide(input: ConflictInput) -> Result<Decision, String> {
        let Some(target) = input.target else {
            return Ok(Decision::Create);
        };
        let ours = target.cluster_uid.as_deref() == Some(input.consumer_cluster_uid.as_str())
            && target.object_uid.as_deref() == Some(input.consumer_object_uid.as_str());
        let unmarked = target.cluster_uid.is_none() && target.object_uid.is_none();
        Ok(if ours {
            Decision::UpdateOwned
        } else if unmarked && matches!(input.policy, ConflictPolicy::Adopt) {
            Decision::Adopt
        } else if unmarked {
            Decision::Conflict(Conflict {
                reason: ConflictReason::ForeignObjectExists,
                message: "the provider object exists without ownership markers; set conflictPolicy: Adopt to take it over".to_owned(),
            })
        } else {
            Decision::Conflict(Conflict {
                reason: ConflictReason::OwnedByAnother,
                message: "the provider object belongs to another consumer object".to_owned(),
            })
        })
    }
}

export!(Policy);

// The module's metadata (name, version, role, source), a custom section that
// `konnector policy inspect` and `push` read; taken from Cargo.toml when the module is built.
const METADATA: &str = concat!(
    r#"{"name":""#,
    env!("CARGO_PKG_NAME"),
    r#"","version":""#,
    env!("CARGO_PKG_VERSION"),
    r#"","role":"conflict-policy","source":""#,
    env!("CARGO_PKG_REPOSITORY"),
    r#""}"#
);

#[cfg_attr(target_arch = "wasm32", unsafe(link_section = "kbind.policy.metadata"))]
#[used]
static METADATA_SECTION: [u8; METADATA.len()] = bytes(METADATA);

const fn bytes<const N: usize>(text: &str) -> [u8; N] {
    let mut out = [0u8; N];
    let text = text.as_bytes();
    let mut i = 0;
    while i < N {
        out[i] = text[i];
        i += 1;
    }
    out
}
