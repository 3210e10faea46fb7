//! What differs between the four roles, and only that: which export a module has (under the
//! current or the previous package version, see `exports`), how the host's input becomes the
//! world's record, and how its answer is checked ([`RoleModule`]). Every new instance is
//! type-checked against the role's records and handed its settings ([`Prepared`]). `call` and `load` are written once against this trait.

use std::future::Future;
use std::sync::OnceLock;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use wasmtime::Store;
use wasmtime::component::{Func, Instance, InstancePre};

use super::bindings::{self, conflict, placement, related, schema};
use super::error::{SettingsRefused, WorldMismatch};
use super::exports::{self, Exports, WitVersion};
use super::role::PolicyRole;
use super::runtime::HostState;
use super::settings::PolicySettings;
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

/// A role's compiled module, where its exports are, and the settings each new instance is
/// configured with.
#[derive(Clone)]
pub(crate) struct Prepared {
    pre: InstancePre<HostState>,
    exports: Exports,
    settings: PolicySettings,
}

impl Prepared {
    /// The module with its exports found under either package version.
    fn new(pre: InstancePre<HostState>, interface: &str, function: &str) -> wasmtime::Result<Self> {
        let exports = exports::find(&pre, interface, function)?;
        Ok(Self {
            pre,
            exports,
            settings: PolicySettings::default(),
        })
    }

    /// The same module configured with `settings` on each new instance.
    pub(crate) fn with_settings(&self, settings: PolicySettings) -> Self {
        Self {
            settings,
            ..self.clone()
        }
    }

    /// The settings each new instance is configured with.
    pub(crate) fn settings(&self) -> &PolicySettings {
        &self.settings
    }

    /// The package version the module was built against.
    pub(crate) fn version(&self) -> WitVersion {
        self.exports.version
    }

    /// Instantiates the module in `store`.
    async fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<Instance> {
        self.pre.instantiate_async(&mut *store).await
    }

    /// Hands a new instance its settings: `configure` for a current module; a module built
    /// against 0.1.0 has no `configure` and takes only an empty document.
    async fn configure(
        &self,
        instance: &Instance,
        store: &mut Store<HostState>,
    ) -> wasmtime::Result<()> {
        let Some(index) = &self.exports.configure else {
            if self.settings.is_empty() {
                return Ok(());
            }
            return Err(wasmtime::Error::new(SettingsRefused(format!(
                "the module is built against kbind:policy@{}, which takes no settings; \
                 build it against @{} to take settings, or give none",
                WitVersion::Previous.as_str(),
                WitVersion::Current.as_str()
            ))));
        };
        let configure = instance
            .get_typed_func::<(&str,), (Result<(), String>,)>(&mut *store, index)
            .map_err(|e| wasmtime::Error::new(WorldMismatch(format!("`configure`: {e:#}"))))?;
        let (answer,) = configure
            .call_async(&mut *store, (self.settings.as_str(),))
            .await?;
        answer.map_err(|message| wasmtime::Error::new(SettingsRefused(message)))
    }
}

/// A configured instance of a role's module: the role's function, ready to call.
pub(crate) struct Configured {
    function: Func,
}

/// A role's prepared module and how one call of it goes.
pub(crate) trait RoleModule: Clone + Send + Sync + 'static {
    /// The role.
    const ROLE: PolicyRole;
    /// The instantiated, configured module.
    type Instance: Send + 'static;
    /// The host's input.
    type Input: Serialize + Sync;
    /// The input as the world's record.
    type WitInput: Send + Sync;
    /// What the export returns.
    type WitOutput: Send;
    /// The checked decision.
    type Output;

    /// Finds the role's export in the instance-pre (either package version).
    fn new(pre: InstancePre<HostState>) -> wasmtime::Result<Self>;
    /// The prepared module.
    fn prepared(&self) -> &Prepared;
    /// The same module configured with other settings.
    fn with_settings(&self, settings: PolicySettings) -> Self;
    /// The process-wide cache of the built-in module.
    fn builtin_cell() -> &'static OnceLock<Result<Self, String>>;
    /// Converts the input.
    fn wit_input(input: &Self::Input) -> Self::WitInput;
    /// Instantiates the module in a store, type-checks its export against the role's
    /// records and hands it its settings.
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

/// Writes a role's [`RoleModule`] type and impl from what differs between roles: the
/// interface and function the module exports, the input conversion and record, and the
/// check of its answer. A role whose export answers `result<T, string>` finishes `checked
/// by` a conversion and a check ([`converted_and_checked`]); another says how it finishes.
macro_rules! role_module {
    (
        $(#[$doc:meta])* $name:ident for $role:ident: $interface:literal.$function:literal;
        $world:ident::$input:ident by $convert:path => $wit_output:ty => $output:ty;
        $($finish:tt)+
    ) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub(crate) struct $name(Prepared);

        impl RoleModule for $name {
            const ROLE: PolicyRole = PolicyRole::$role;
            type Instance = Configured;
            type Input = $input;
            type WitInput = $world::iface::$input;
            type WitOutput = $wit_output;
            type Output = $output;

            fn new(pre: InstancePre<HostState>) -> wasmtime::Result<Self> {
                Prepared::new(pre, $interface, $function).map(Self)
            }
            fn prepared(&self) -> &Prepared {
                &self.0
            }
            fn with_settings(&self, settings: PolicySettings) -> Self {
                Self(self.0.with_settings(settings))
            }
            fn builtin_cell() -> &'static OnceLock<Result<Self, String>> {
                static CELL: OnceLock<Result<$name, String>> = OnceLock::new();
                &CELL
            }
            fn wit_input(input: &$input) -> Self::WitInput {
                $convert(input)
            }
            fn instantiate<'a>(
                &'a self,
                store: &'a mut Store<HostState>,
            ) -> impl Future<Output = wasmtime::Result<Self::Instance>> + Send + 'a {
                async move {
                    let instance = self.0.instantiate(&mut *store).await?;
                    let function = instance
                        .get_typed_func::<(&$world::iface::$input,), ($wit_output,)>(
                            &mut *store,
                            &self.0.exports.function,
                        )
                        .map_err(|e| {
                            wasmtime::Error::new(WorldMismatch(format!(
                                "`{}` in kbind:policy/{}@{}: {e:#}",
                                $function,
                                $interface,
                                self.0.version().as_str()
                            )))
                        })?;
                    self.0.configure(&instance, &mut *store).await?;
                    Ok(Configured {
                        function: *function.func(),
                    })
                }
            }
            fn invoke<'a>(
                instance: &'a Self::Instance,
                store: &'a mut Store<HostState>,
                input: &'a Self::WitInput,
            ) -> impl Future<Output = wasmtime::Result<Self::WitOutput>> + Send + 'a {
                async move {
                    let function = instance
                        .function
                        .typed::<(&$world::iface::$input,), ($wit_output,)>(&*store)?;
                    let (answer,) = function.call_async(&mut *store, (input,)).await?;
                    Ok(answer)
                }
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
    /// A conflict-policy module.
    ConflictModule for ConflictPolicy: "conflict"."decide";
    conflict::ConflictInput by bindings::conflict_input => Result<conflict::iface::Decision, String> => ConflictDecision;
    checked by bindings::conflict_decision, validate::decision;
}

role_module! {
    /// A schema-synthesis module.
    SchemaModule for SchemaSynthesis: "schema"."synthesize";
    schema::SchemaInput by bindings::schema_input => Result<String, schema::iface::SynthesisError> => CustomResourceDefinition;
    finish |answer, input| {
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
    /// A related-selection module.
    RelatedModule for RelatedSelection: "related"."select";
    related::RelatedInput by bindings::related_input => Result<related::iface::RelatedPlan, String> => RelatedPlan;
    checked by bindings::related_plan, validate::plan;
}

role_module! {
    /// A placement module.
    PlacementModule for Placement: "placement"."place";
    placement::PlacementInput by bindings::placement_input => Result<placement::iface::Location, String> => Placement;
    checked by bindings::placement_location, validate::placement;
}
