//! What differs between the four roles, and only that: the generated `*Pre` of each world,
//! how the host's input becomes the world's record, which export is called, and how its
//! answer is checked ([`RoleModule`]). `call` and `load` are written once against this trait.

use std::future::Future;
use std::sync::OnceLock;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use wasmtime::Store;
use wasmtime::component::InstancePre;

use super::bindings::{self, conflict, placement, related, schema};
use super::role::PolicyRole;
use super::runtime::HostState;
use super::types::{
    ConflictDecision, ConflictInput, Placement, PlacementInput, RelatedInput, RelatedPlan,
    SchemaInput,
};
use super::validate;

/// Why a role's answer is not used: the module said no, or the host's check refused it.
pub(crate) enum Refusal {
    /// The module returned its error variant.
    Rejected(String),
    /// The answer breaks a rule the host enforces.
    Invalid(String),
}

/// A role's generated `*Pre` and how one call of it goes.
pub(crate) trait RoleModule: Clone + Send + Sync + 'static {
    /// The role.
    const ROLE: PolicyRole;
    /// The instantiated world.
    type Instance: Send + 'static;
    /// The host's input.
    type Input: Serialize + Sync;
    /// The input as the world's record.
    type WitInput: Send + Sync;
    /// What the export returns.
    type WitOutput: Send;
    /// The checked decision.
    type Output;

    /// Type-checks the instance-pre against the role's world.
    fn new(pre: InstancePre<HostState>) -> wasmtime::Result<Self>;
    /// The process-wide cache of the built-in module.
    fn builtin_cell() -> &'static OnceLock<Result<Self, String>>;
    /// Converts the input.
    fn wit_input(input: &Self::Input) -> Self::WitInput;
    /// Instantiates the module in a store.
    fn instantiate<'a>(
        &'a self,
        store: &'a mut Store<HostState>,
    ) -> impl Future<Output = wasmtime::Result<Self::Instance>> + Send + 'a;
    /// Calls the role's export.
    fn invoke<'a>(
        instance: &'a Self::Instance,
        store: &'a mut Store<HostState>,
        input: &'a Self::WitInput,
    ) -> impl Future<Output = wasmtime::Result<Self::WitOutput>> + Send + 'a;
    /// Checks the answer against the input.
    fn finish(output: Self::WitOutput, input: &Self::Input) -> Result<Self::Output, Refusal>;
}

/// How a role whose module answers `result<T, string>` finishes: the module's error is its
/// refusal; otherwise the answer, converted to the host's type, must pass the host's check.
fn converted_and_checked<W, O, I>(
    answer: Result<W, String>,
    input: &I,
    convert: impl FnOnce(W) -> O,
    check: impl FnOnce(&O, &I) -> Result<(), String>,
) -> Result<O, Refusal> {
    let output = convert(answer.map_err(Refusal::Rejected)?);
    check(&output, input).map_err(Refusal::Invalid)?;
    Ok(output)
}

/// Writes a role's [`RoleModule`] impl from what differs between roles: the generated `*Pre`,
/// the input conversion, the export and the check of its answer. The role, the world's
/// instance type and the input's WIT record are named as the host names them
/// (`PolicyRole::ConflictPolicy`, `conflict::ConflictPolicy`, `conflict::iface::ConflictInput`);
/// a role named otherwise than its world's instance type says `for <role> as <instance>`.
/// A role whose export answers `result<T, string>` finishes `checked by` a conversion and a
/// check ([`converted_and_checked`]); another says how it finishes.
macro_rules! role_module {
    ($world:ident::$pre:ident for $role:ident; $($rest:tt)+) => {
        role_module!($world::$pre for $role as $role; $($rest)+);
    };
    (
        $world:ident::$pre:ident for $role:ident as $instance:ident;
        $input:ident by $convert:path => $wit_output:ty => $output:ty;
        $interface:ident.$export:ident, $($finish:tt)+
    ) => {
        impl RoleModule for $world::$pre<HostState> {
            const ROLE: PolicyRole = PolicyRole::$role;
            type Instance = $world::$instance;
            type Input = $input;
            type WitInput = $world::iface::$input;
            type WitOutput = $wit_output;
            type Output = $output;

            fn new(pre: InstancePre<HostState>) -> wasmtime::Result<Self> {
                $world::$pre::new(pre)
            }
            fn builtin_cell() -> &'static OnceLock<Result<Self, String>> {
                static CELL: OnceLock<Result<$world::$pre<HostState>, String>> = OnceLock::new();
                &CELL
            }
            fn wit_input(input: &$input) -> Self::WitInput {
                $convert(input)
            }
            fn instantiate<'a>(
                &'a self,
                store: &'a mut Store<HostState>,
            ) -> impl Future<Output = wasmtime::Result<Self::Instance>> + Send + 'a {
                self.instantiate_async(store)
            }
            fn invoke<'a>(
                instance: &'a Self::Instance,
                store: &'a mut Store<HostState>,
                input: &'a Self::WitInput,
            ) -> impl Future<Output = wasmtime::Result<Self::WitOutput>> + Send + 'a {
                instance.$interface().$export(store, input)
            }
            role_module!(@finish $input => $output; $($finish)+);
        }
    };
    (@finish $input:ty => $output:ty; checked by $convert:path, $check:path;) => {
        fn finish(answer: Self::WitOutput, input: &$input) -> Result<$output, Refusal> {
            converted_and_checked(answer, input, $convert, $check)
        }
    };
    (@finish $input:ty => $output:ty; finish |$answer:ident, $checked:ident| $finish:block) => {
        fn finish($answer: Self::WitOutput, $checked: &$input) -> Result<$output, Refusal> $finish
    };
}

role_module! {
    conflict::ConflictPolicyPre for ConflictPolicy;
    ConflictInput by bindings::conflict_input => Result<conflict::iface::Decision, String> => ConflictDecision;
    kbind_policy_conflict.call_decide, checked by bindings::conflict_decision, validate::decision;
}

role_module! {
    schema::SchemaSynthesisPre for SchemaSynthesis;
    SchemaInput by bindings::schema_input => Result<String, schema::iface::SynthesisError> => CustomResourceDefinition;
    kbind_policy_schema.call_synthesize, finish |answer, input| {
        let json = answer.map_err(|e| {
            Refusal::Rejected(if e.path.is_empty() {
                e.message
            } else {
                format!("at {}: {}", e.path, e.message)
            })
        })?;
        validate::crd(&json, input).map_err(Refusal::Invalid)
    }
}

role_module! {
    related::RelatedSelectionPre for RelatedSelection;
    RelatedInput by bindings::related_input => Result<related::iface::RelatedPlan, String> => RelatedPlan;
    kbind_policy_related.call_select, checked by bindings::related_plan, validate::plan;
}

role_module! {
    placement::PlacementPolicyPre for Placement as PlacementPolicy;
    PlacementInput by bindings::placement_input => Result<placement::iface::Location, String> => Placement;
    kbind_policy_placement.call_place, checked by bindings::placement_location, validate::placement;
}
