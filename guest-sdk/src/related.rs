//! The `related-selection` world: which Secrets/ConfigMaps a binding's `relatedResources`
//! entry copies, skips and deletes.
//!
//! Implement [`Guest`] and export it with [`export_related_selection!`](crate::export_related_selection).
//! [`LabelSelector::compile`] turns the WIT selector into a [`Selector`](crate::selector::Selector).

#[doc(hidden)]
#[allow(unsafe_code, missing_docs, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "related-selection",
        path: "wit",
        pub_export_macro: true,
        export_macro_name: "__export_related_selection",
        default_bindings_module: "kbind_policy_sdk::related::bindings",
        runtime_path: "kbind_policy_sdk::__wit_bindgen::rt",
        additional_derives: [PartialEq, Eq],
    });
}

pub use bindings::exports::kbind::policy::related::{
    BindingScope, Direction, Guest, Label, LabelSelector, LabelSelectorRequirement, ObjectRef,
    PlanKey, RelatedInput, RelatedPlan, RelatedSelector, ResourceKind, SkipReason, Skipped,
    SourceObject, TargetObject,
};

use crate::selector::{Selector, SelectorError};

impl LabelSelector {
    /// Validates this selector with Kubernetes' rules and compiles it for matching.
    pub fn compile(&self) -> Result<Selector, SelectorError> {
        Selector::new(
            self.match_labels
                .iter()
                .map(|l| (l.key.as_str(), l.value.as_str())),
            self.match_expressions
                .iter()
                .map(|r| (r.key.as_str(), r.operator.as_str(), r.values.as_slice())),
        )
    }
}

impl SourceObject {
    /// The value of one of the source's labels.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|l| l.key == key)
            .map(|l| l.value.as_str())
    }
}

/// Exports a [`Guest`] implementation as the component's `kbind:policy/related` interface.
///
/// Use it once, in the policy crate's root: `kbind_policy_sdk::export_related_selection!(MyPolicy);`
#[macro_export]
macro_rules! export_related_selection {
    ($ty:ident) => {
        #[cfg(target_arch = "wasm32")]
        #[allow(unsafe_code)]
        const _: () = {
    $crate::related::bindings::__export_related_selection!($ty with_types_in $crate::related::bindings);
        };
    };
}
