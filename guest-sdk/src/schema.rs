//! The `schema-synthesis` world: discovery facts + OpenAPI v3 document → CRD JSON.
//!
//! Implement [`Guest`] and export it with [`export_schema_synthesis!`](crate::export_schema_synthesis).
//! The [`openapi`](crate::openapi) module walks the document and resolves `$ref`s.

#[doc(hidden)]
#[allow(unsafe_code, missing_docs, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "schema-synthesis",
        path: "wit",
        pub_export_macro: true,
        export_macro_name: "__export_schema_synthesis",
        default_bindings_module: "kbind_policy_sdk::schema::bindings",
        runtime_path: "kbind_policy_sdk::__wit_bindgen::rt",
        additional_derives: [PartialEq, Eq],
    });
}

pub use bindings::exports::kbind::policy::schema::{
    Guest, ResourceScope, SchemaInput, SynthesisError, VersionFacts,
};

impl SynthesisError {
    /// An error at `path` (a JSON pointer into the OpenAPI document, or an input field).
    pub fn at(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl From<crate::openapi::OpenApiError> for SynthesisError {
    fn from(e: crate::openapi::OpenApiError) -> Self {
        Self {
            path: e.path,
            message: e.message,
        }
    }
}

/// Exports a [`Guest`] implementation as the component's `kbind:policy/schema` interface.
///
/// Use it once, in the policy crate's root: `kbind_policy_sdk::export_schema_synthesis!(MyPolicy);`
#[macro_export]
macro_rules! export_schema_synthesis {
    ($ty:ident) => {
        #[cfg(target_arch = "wasm32")]
        #[allow(unsafe_code)]
        const _: () = {
    $crate::schema::bindings::__export_schema_synthesis!($ty with_types_in $crate::schema::bindings);
        };
    };
}
