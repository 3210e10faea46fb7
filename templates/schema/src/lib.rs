//! {{project-name}}: a kbind schema-synthesis module. `synthesize` turns what discovery
//! says about a provider API into the CustomResourceDefinition installed on the consumer.
//! This starting point refuses every API, saying so: fill in `synthesize` with your rule.

wit_bindgen::generate!({ world: "schema-synthesis", path: "wit" });

use exports::kbind::policy::schema::{Guest, SchemaInput, SynthesisError};

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

    fn synthesize(input: SchemaInput) -> Result<String, SynthesisError> {
        Err(SynthesisError {
            path: "versions".to_owned(),
            message: format!(
                "{{project-name}} does not synthesise {}.{} yet",
                input.resource, input.group
            ),
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
    r#"","role":"schema-synthesis","source":""#,
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
