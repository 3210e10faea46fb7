//! The Connection's own policy modules (`spec.policies`): each named role is loaded for this
//! Connection ([`Policies::choose`]) and the outcome recorded, so the operator sees what runs
//! and why a module does not.
//!
//! ```text
//! spec.policies ─▶ per role: unchanged │ swapped │ failed, old kept │ failed, none before
//!                                       ▼                  ▼                  ▼
//!           PoliciesInSync=True   PoliciesInSync=False   Ready=False PolicyUnavailable
//!                                 PolicySwapFailed        (the Connection disengages)
//! ```
//!
//! A reference with a pull Secret reads it from the credential namespace; a Secret that cannot
//! be read fails the module like a registry that cannot be reached. A module that failed is
//! asked for again on a growing delay, not on every reconcile; the condition says when.

use kube::ResourceExt;

use super::{Steps, Stop};
use crate::api::{ConditionType, PolicyChoice, PolicyModuleStatus, Reason};
use crate::artifact::{Fetcher, PolicyRef};
use crate::conditions::{self, Desired};
use crate::policy::scoped::{Choice, ChoiceOutcome};
use crate::policy::{PolicyRole, PolicySettings};

/// A role's short name in `spec.policies`.
fn role_of(name: &str) -> Option<PolicyRole> {
    match name {
        "schema" => Some(PolicyRole::SchemaSynthesis),
        "conflict" => Some(PolicyRole::ConflictPolicy),
        "related" => Some(PolicyRole::RelatedSelection),
        "placement" => Some(PolicyRole::Placement),
        _ => None,
    }
}

/// The host's choice from the Connection's entry: the reference parsed, the settings checked.
fn choice(entry: &PolicyChoice) -> Result<Choice, String> {
    let reference: PolicyRef = entry
        .module
        .parse()
        .map_err(|e: crate::artifact::ReferenceError| e.to_string())?;
    let settings = match &entry.settings {
        None => PolicySettings::default(),
        Some(value) => PolicySettings::from_value(value).map_err(|e| e.to_string())?,
    };
    Ok(Choice {
        reference,
        settings,
    })
}

impl Steps<'_> {
    /// Loads the modules `spec.policies` names for this Connection (and drops those it no longer
    /// names). A module that cannot be had with none running before stops the Connection
    /// (`Ready=False PolicyUnavailable`); one that fails while an older one runs is reported
    /// (`PoliciesInSync=False PolicySwapFailed`) and the old one keeps serving.
    pub(super) async fn policies(&mut self) -> Result<(), Stop> {
        let name = self.connection.name_any();
        let policies = &self.ctx.shared.policies;
        let spec = self.connection.spec.policies.clone().unwrap_or_default();
        let fetcher = self.fetcher(spec.pull_secret_name.as_deref()).await;
        let mut unavailable = Vec::new();
        let mut kept_old = Vec::new();
        for (role_name, entry) in spec.by_role() {
            let Some(role) = role_of(role_name) else {
                continue;
            };
            let wanted = match entry.map(choice).transpose() {
                Ok(wanted) => wanted,
                Err(message) => {
                    kept_old.push(format!("{role_name}: {message}"));
                    continue;
                }
            };
            let fetcher = match &fetcher {
                Ok(f) => f.as_deref(),
                Err(message)
                    if wanted
                        .as_ref()
                        .is_some_and(|w| matches!(w.reference, PolicyRef::Oci(_))) =>
                {
                    unavailable.push(format!("{role_name}: {message}"));
                    continue;
                }
                Err(_) => None,
            };
            let schedule = &self.ctx.config.policy_retry;
            match policies
                .choose(&name, role, wanted, fetcher, schedule)
                .await
            {
                ChoiceOutcome::Unchanged | ChoiceOutcome::Swapped => {}
                ChoiceOutcome::KeptOld(e) => kept_old.push(format!(
                    "{role_name}: {e}; the module running before keeps running"
                )),
                ChoiceOutcome::Unavailable(e) => unavailable.push(format!("{role_name}: {e}")),
            }
        }
        self.status.policies = policies
            .connection_modules_of(&name)
            .into_iter()
            .map(|m| PolicyModuleStatus {
                role: crate::policy::role_label(m.role).to_owned(),
                module: m.reference,
                digest: m.digest,
            })
            .collect();
        let names_any = spec.by_role().iter().any(|(_, e)| e.is_some());
        if kept_old.is_empty() && unavailable.is_empty() {
            if names_any {
                self.set(Desired::truthy(
                    ConditionType::PoliciesInSync,
                    Reason::AsExpected,
                    "the policy modules spec.policies names are running",
                ));
            } else {
                conditions::remove(&mut self.status.conditions, ConditionType::PoliciesInSync);
            }
        } else if !kept_old.is_empty() {
            self.set(Desired::falsy(
                ConditionType::PoliciesInSync,
                Reason::PolicySwapFailed,
                format!(
                    "{}; fix the reference or its settings in spec.policies",
                    kept_old.join("; ")
                ),
            ));
        }
        if !unavailable.is_empty() {
            let message = format!(
                "{}; nothing runs in its place: push the module, fix the reference or its pull Secret, or remove it from spec.policies",
                unavailable.join("; ")
            );
            self.set(Desired::falsy(
                ConditionType::PoliciesInSync,
                Reason::PolicyUnavailable,
                message.clone(),
            ));
            return Err(self.not_ready(Reason::PolicyUnavailable, message));
        }
        Ok(())
    }

    /// The fetcher for this Connection's registry modules: the konnector's, or one with the
    /// Connection's pull Secret. `Ok(None)`: this konnector pulls nothing.
    async fn fetcher(&self, pull_secret: Option<&str>) -> Result<Option<FetcherOrShared>, String> {
        let Some(fetch) = self.ctx.shared.policy_fetcher.clone() else {
            return Ok(None);
        };
        let Some(secret) = pull_secret else {
            let shared = fetch.fetcher().map_err(|e| e.to_string())?;
            return Ok(Some(FetcherOrShared::Shared(shared)));
        };
        let namespace = &self.ctx.config.secret_namespace;
        let credentials =
            crate::artifact::from_pull_secret(self.ctx.shared.consumer.clone(), namespace, secret)
                .await
                .map_err(|e| e.to_string())?;
        let mut config = fetch.config.clone();
        config.credentials = credentials;
        let fetcher = Fetcher::new(config).map_err(|e| e.to_string())?;
        Ok(Some(FetcherOrShared::Own(Box::new(fetcher))))
    }
}

/// The konnector's fetcher, or one of the Connection's own (its pull Secret).
pub(super) enum FetcherOrShared {
    /// The konnector's.
    Shared(std::sync::Arc<Fetcher>),
    /// With the Connection's pull Secret (boxed: a fetcher with verification is large).
    Own(Box<Fetcher>),
}

impl std::ops::Deref for FetcherOrShared {
    type Target = Fetcher;

    fn deref(&self) -> &Fetcher {
        match self {
            Self::Shared(fetcher) => fetcher,
            Self::Own(fetcher) => fetcher,
        }
    }
}
