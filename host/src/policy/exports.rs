//! Which `kbind:policy` versions a module may be built against, and where its exports are.
//!
//! The host's bindings are generated from the current package (`kbind:policy@0.2.0`); a
//! module built against the previous one (`0.1.0`, before settings) exports the same role
//! interface under the older name, with the same types. The host looks the role's export up
//! under either name and type-checks it against the current records when it instantiates
//! the module, so modules built before the version bump keep loading unchanged. Only a
//! current module has `configure`; an older one takes no settings.
//!
//! ```text
//! component ──▶ kbind:policy/<role>@0.2.0 (<function>, configure) ──▶ Current
//!           └─▶ kbind:policy/<role>@0.1.0 (<function>)            ──▶ Previous (no settings)
//!           └─▶ neither                                           ──▶ WrongWorld
//! ```

use wasmtime::component::{ComponentExportIndex, InstancePre};

use super::runtime::HostState;

/// The package version the host's bindings are generated from.
pub const CURRENT_VERSION: &str = "0.2.0";
/// The older package version whose modules still load (they take no settings).
pub const PREVIOUS_VERSION: &str = "0.1.0";

/// The `kbind:policy` version a module was built against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WitVersion {
    /// `kbind:policy@0.2.0`: each role has `configure`.
    Current,
    /// `kbind:policy@0.1.0`: no settings.
    Previous,
}

impl WitVersion {
    /// The version as written in WIT.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Current => CURRENT_VERSION,
            Self::Previous => PREVIOUS_VERSION,
        }
    }
}

/// Where a module's role function (and `configure`, for a current module) is.
#[derive(Clone)]
pub(crate) struct Exports {
    /// The role's function, for example `decide` in `kbind:policy/conflict`.
    pub(crate) function: ComponentExportIndex,
    /// `configure` in the role's interface; none for a module built against 0.1.0.
    pub(crate) configure: Option<ComponentExportIndex>,
    /// What the module was built against.
    pub(crate) version: WitVersion,
}

/// Finds the role's export (`interface`.`function`) under the current or the previous
/// package version; the error says what is missing, naming both versions.
pub(crate) fn find(
    pre: &InstancePre<HostState>,
    interface: &str,
    function: &str,
) -> wasmtime::Result<Exports> {
    let component = pre.component();
    let lookup = |version: &str, interface: &str, function: &str| {
        let instance =
            component.get_export_index(None, format!("kbind:policy/{interface}@{version}"))?;
        component.get_export_index(Some(&instance), function)
    };
    if let Some(function_index) = lookup(CURRENT_VERSION, interface, function) {
        let configure = lookup(CURRENT_VERSION, interface, "configure").ok_or_else(|| {
            wasmtime::format_err!(
                "kbind:policy/{interface}@{CURRENT_VERSION} of the component has no `configure`"
            )
        })?;
        return Ok(Exports {
            function: function_index,
            configure: Some(configure),
            version: WitVersion::Current,
        });
    }
    if let Some(function_index) = lookup(PREVIOUS_VERSION, interface, function) {
        return Ok(Exports {
            function: function_index,
            configure: None,
            version: WitVersion::Previous,
        });
    }
    Err(wasmtime::format_err!(
        "the component exports no `{function}` in kbind:policy/{interface}@{CURRENT_VERSION} \
         (nor in @{PREVIOUS_VERSION})"
    ))
}

#[cfg(test)]
mod tests {
    use super::super::{
        ConflictDecision, ConflictInput, Policies, PolicyError, PolicyRole, PolicySettings, builtin,
    };
    use super::WitVersion;
    use crate::api::ConflictPolicy;

    /// The four built-in modules as built before the package moved to 0.2.0 (see the
    /// fixture's README).
    const PREVIOUS: [(PolicyRole, &[u8]); 4] = [
        (
            PolicyRole::SchemaSynthesis,
            include_bytes!(
                "../../../tests/fixtures/policy-0.1.0/kbind_policy_schema_synthesis.wasm"
            ),
        ),
        (
            PolicyRole::ConflictPolicy,
            include_bytes!(
                "../../../tests/fixtures/policy-0.1.0/kbind_policy_conflict_policy.wasm"
            ),
        ),
        (
            PolicyRole::RelatedSelection,
            include_bytes!(
                "../../../tests/fixtures/policy-0.1.0/kbind_policy_related_selection.wasm"
            ),
        ),
        (
            PolicyRole::Placement,
            include_bytes!(
                "../../../tests/fixtures/policy-0.1.0/kbind_policy_placement_policy.wasm"
            ),
        ),
    ];

    fn ask() -> ConflictInput {
        ConflictInput {
            consumer_cluster_uid: "consumer".into(),
            consumer_object_uid: "object".into(),
            conflict_policy: ConflictPolicy::Fail,
            target: None,
        }
    }

    #[tokio::test]
    async fn todays_built_in_modules_load_unchanged_after_the_wit_bump() -> Result<(), PolicyError>
    {
        for (role, bytes) in PREVIOUS {
            let policies = Policies::builtin()?.with_module(role, bytes, "previous.wasm")?;
            policies.check().await?;
            assert_eq!(policies.version(role), WitVersion::Previous, "{role}");
        }
        let (_, conflict) = PREVIOUS[1];
        let policies = Policies::builtin()?.with_module(
            PolicyRole::ConflictPolicy,
            conflict,
            "previous.wasm",
        )?;
        let decided = policies.decide_conflict(&ask()).await?;
        assert_eq!(decided, ConflictDecision::Create);
        Ok(())
    }

    #[tokio::test]
    async fn the_built_in_modules_are_built_against_the_current_version() -> Result<(), PolicyError>
    {
        let policies = Policies::builtin()?;
        policies.check().await?;
        for role in PolicyRole::ALL {
            assert_eq!(policies.version(role), WitVersion::Current, "{role}");
        }
        Ok(())
    }

    #[tokio::test]
    async fn a_module_refuses_settings_it_does_not_take_at_load_time() -> Result<(), PolicyError> {
        let settings: PolicySettings =
            r#"{"strategy": "Prefixed"}"#
                .parse()
                .map_err(|e: crate::policy::SettingsError| PolicyError::EncodeInput {
                    role: PolicyRole::Placement,
                    message: e.to_string(),
                })?;
        let current = Policies::builtin()?.with_configured_module(
            PolicyRole::Placement,
            builtin::PLACEMENT_POLICY,
            "placement.wasm",
            &settings,
        )?;
        let refused = current.check().await;
        assert!(
            matches!(&refused, Err(PolicyError::SettingsRejected { message, .. })
                if message.contains("takes no settings") && message.contains("`strategy`")),
            "{refused:?}"
        );
        let (_, previous) = PREVIOUS[3];
        let previous = Policies::builtin()?.with_configured_module(
            PolicyRole::Placement,
            previous,
            "previous.wasm",
            &settings,
        )?;
        let refused = previous.check().await;
        assert!(
            matches!(&refused, Err(PolicyError::SettingsRejected { message, .. })
                if message.contains("kbind:policy@0.1.0, which takes no settings")),
            "{refused:?}"
        );
        Ok(())
    }
}
