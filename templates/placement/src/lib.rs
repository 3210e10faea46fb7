//! {{project-name}}: a kbind placement-policy module. `place` says where on the provider a
//! consumer object's copy lives, once, before its first write. This starting point keeps
//! the consumer's namespace and name, with the Connection's prefix on the namespace when
//! its strategy isolates by namespace.

wit_bindgen::generate!({ world: "placement-policy", path: "wit" });

use exports::kbind::policy::placement::{Guest, Location, PlacementInput, Strategy};

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

    fn place(input: PlacementInput) -> Result<Location, String> {
        let prefix = &input.isolation.prefix;
        Ok(match input.isolation.strategy {
            Strategy::None => Location {
                namespace: input.namespace,
                name: input.name,
            },
            Strategy::Namespaced => match input.namespace {
                Some(namespace) => Location {
                    namespace: Some(format!("{prefix}-{namespace}")),
                    name: input.name,
                },
                None => Location {
                    namespace: None,
                    name: format!("{prefix}-{}", input.name),
                },
            },
            Strategy::Prefixed => Location {
                namespace: input.namespace,
                name: format!("{prefix}-{}", input.name),
            },
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
    r#"","role":"placement-policy","source":""#,
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
