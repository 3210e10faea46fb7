//! Per-Connection modules: a Connection may name its own module for a role (its
//! `spec.policies`), with settings, overriding the process-wide one for the objects it
//! syncs. [`Policies::for_connection`] gives the copy a Connection's controllers call; it asks
//! the Connection's own module first and the process-wide one for every role the Connection
//! leaves alone (so a swap of the process-wide module reaches those roles too).
//!
//! ```text
//! Connection spec.policies ──changed──▶ Policies::choose(connection, role, choice)
//!     resolve + pull (registry) ──▶ compile ──▶ world check ──▶ configure(settings)
//!       │ ok                                     │ failed
//!       ▼                                        ▼
//!   swapped in atomically                  a module running before: it stays
//!   (calls in flight finish on the old)    none before: Unavailable (calls fail, never
//!                                          the built-in or process-wide module instead)
//! ```
//!
//! Only built-in modules and registry references may be named by a Connection: a file path
//! would let whoever writes Connections choose files on the konnector's filesystem.
//!
//! A choice that failed is not tried again on every reconcile: it waits out a delay that grows
//! with each failure of the same attempt ([`super::retry`]); a changed reference, settings or
//! pull credentials is tried at once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use tracing::{error, info};

use crate::artifact::{Fetcher, PolicyRef};
use crate::telemetry::{PolicySwapLabels, metrics};

use super::load::Slot;
use super::retry::{Retry, RetrySchedule};
use super::role_module::{
    ConflictModule, PlacementModule, RelatedModule, RoleModule, SchemaModule,
};
use super::{Policies, PolicyArgs, PolicyError, PolicyRole, PolicySettings, role_label};

/// A module a Connection names for a role: its reference and its settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// `built-in` or `oci://...` (file paths are refused).
    pub reference: PolicyRef,
    /// The settings document handed to the module.
    pub settings: PolicySettings,
}

/// What one attempt at a choice asked for: the reference and settings, and a fingerprint of
/// the pull credentials (none: no fetcher). A change of any is a new attempt, made at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// The reference and settings.
    pub choice: Choice,
    /// [`crate::artifact::Credentials::fingerprint`] of the credentials it was pulled with.
    pub credentials: Option<u64>,
}

/// What serves a role for a Connection.
pub(crate) enum Chosen<P: RoleModule> {
    /// The Connection's module, loaded and checked.
    Module {
        /// The module.
        slot: Slot<P>,
        /// What the Connection named.
        wanted: Choice,
    },
    /// The Connection's module could not be had and none ran before: calls fail.
    Unavailable {
        /// What the Connection named.
        wanted: Choice,
        /// Why it is not available.
        message: String,
    },
}

impl<P: RoleModule> Chosen<P> {
    /// The same choice sharing the module's warm instances.
    fn shared(&self) -> Self {
        match self {
            Self::Module { slot, wanted } => Self::Module {
                slot: slot.shared(),
                wanted: wanted.clone(),
            },
            Self::Unavailable { wanted, message } => Self::Unavailable {
                wanted: wanted.clone(),
                message: message.clone(),
            },
        }
    }
}

/// A Connection's own modules; a role left `None` uses the process-wide module.
#[derive(Default)]
pub(crate) struct Overrides {
    pub(crate) schema: Option<Chosen<SchemaModule>>,
    pub(crate) conflict: Option<Chosen<ConflictModule>>,
    pub(crate) related: Option<Chosen<RelatedModule>>,
    pub(crate) placement: Option<Chosen<PlacementModule>>,
    /// The roles whose last choice failed: when they are tried again.
    retries: BTreeMap<PolicyRole, Retry<Attempt>>,
}

impl Overrides {
    fn shared(&self) -> Self {
        Self {
            schema: self.schema.as_ref().map(Chosen::shared),
            conflict: self.conflict.as_ref().map(Chosen::shared),
            related: self.related.as_ref().map(Chosen::shared),
            placement: self.placement.as_ref().map(Chosen::shared),
            retries: self.retries.clone(),
        }
    }

    fn is_empty(&self) -> bool {
        self.schema.is_none()
            && self.conflict.is_none()
            && self.related.is_none()
            && self.placement.is_none()
    }

    /// What serves `role`: `(choice, Some(digest))` for a loaded module, `(choice, None)`
    /// when unavailable.
    fn state(&self, role: PolicyRole) -> Option<(Choice, Option<String>)> {
        fn of<P: RoleModule>(c: &Option<Chosen<P>>) -> Option<(Choice, Option<String>)> {
            c.as_ref().map(|c| match c {
                Chosen::Module { slot, wanted } => (wanted.clone(), Some(slot.digest.to_string())),
                Chosen::Unavailable { wanted, .. } => (wanted.clone(), None),
            })
        }
        match role {
            PolicyRole::SchemaSynthesis => of(&self.schema),
            PolicyRole::ConflictPolicy => of(&self.conflict),
            PolicyRole::RelatedSelection => of(&self.related),
            PolicyRole::Placement => of(&self.placement),
        }
    }
}

/// What a Connection runs for one role, for its status and `kubectl kbind status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionModule {
    /// The role.
    pub role: PolicyRole,
    /// The reference the Connection names.
    pub reference: String,
    /// The digest of the running module; none when it is unavailable.
    pub digest: Option<String>,
}

/// Why a Connection's choice was not swapped in.
#[derive(Debug, thiserror::Error)]
pub enum ChoiceError {
    /// A file path: Connections may name only built-in modules and registry references.
    #[error(
        "the {role} module {path} is a file path; a Connection may name only `built-in` or an oci:// reference (file paths are for the konnector's own flags)"
    )]
    FilePath {
        /// The role.
        role: PolicyRole,
        /// The path given.
        path: String,
    },
    /// A registry reference, but the konnector was started without a way to pull.
    #[error("the {role} module {reference} is in a registry, but this konnector pulls no modules")]
    NoFetcher {
        /// The role.
        role: PolicyRole,
        /// The reference.
        reference: String,
    },
    /// Loading, checking or configuring the module failed.
    #[error(transparent)]
    Policy(#[from] PolicyError),
}

/// A choice that failed: why, and when it is tried again.
#[derive(Debug)]
pub struct Failed {
    /// This attempt's error; none when no attempt was made (the last one's delay has not
    /// passed), in which case `retry.message` says why the last one failed.
    pub error: Option<ChoiceError>,
    /// The failures so far and the next attempt.
    pub retry: Retry<Attempt>,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({})",
            self.retry.message,
            self.retry.next_attempt_text()
        )
    }
}

/// How a choice ended.
#[derive(Debug)]
pub enum ChoiceOutcome {
    /// Nothing changed: the Connection already runs what it names.
    Unchanged,
    /// The named module now serves the role (or the process-wide one, when none is named).
    Swapped,
    /// The named module failed (now or before, and is not due again); the module running
    /// before keeps running.
    KeptOld(Failed),
    /// The named module failed (now or before, and is not due again) and nothing ran before:
    /// calls for the role fail.
    Unavailable(Failed),
}

impl Policies {
    /// These policies as a Connection's controllers call them: the Connection's own modules
    /// first, the process-wide ones for the roles it leaves alone.
    pub fn for_connection(&self, connection: &str) -> Policies {
        Policies {
            current: self.current.clone(),
            connections: self.connections.clone(),
            scope: Some(Arc::from(connection)),
        }
    }

    /// The Connection these calls are made for, if any.
    pub fn connection(&self) -> Option<&str> {
        self.scope.as_deref()
    }

    /// Whether the Connection these calls are for names its own module for `role`.
    pub fn chooses(&self, role: PolicyRole) -> bool {
        self.overrides().is_some_and(|o| o.state(role).is_some())
    }

    /// The Connection's own modules, if it has any.
    pub(crate) fn overrides(&self) -> Option<Arc<Overrides>> {
        let scope = self.scope.as_deref()?;
        let guard = self.connections.read().unwrap_or_else(|e| e.into_inner());
        guard.get(scope).cloned()
    }

    /// What `connection` runs for the roles it names.
    pub fn connection_modules_of(&self, connection: &str) -> Vec<ConnectionModule> {
        let guard = self.connections.read().unwrap_or_else(|e| e.into_inner());
        let Some(overrides) = guard.get(connection) else {
            return Vec::new();
        };
        PolicyRole::ALL
            .into_iter()
            .filter_map(|role| {
                let (choice, digest) = overrides.state(role)?;
                Some(ConnectionModule {
                    role,
                    reference: choice.reference.to_string(),
                    digest,
                })
            })
            .collect()
    }

    /// Every Connection's loaded modules as `(connection, role, reference, digest)`.
    pub(crate) fn connection_modules(&self) -> Vec<(String, PolicyRole, String, String)> {
        let guard = self.connections.read().unwrap_or_else(|e| e.into_inner());
        let mut rows = Vec::new();
        for (connection, overrides) in guard.iter() {
            for role in PolicyRole::ALL {
                if let Some((choice, Some(digest))) = overrides.state(role) {
                    rows.push((
                        connection.clone(),
                        role,
                        choice.reference.to_string(),
                        digest,
                    ));
                }
            }
        }
        rows
    }

    /// Makes `connection` run `choice` for `role` (`None`: the process-wide module). A
    /// changed choice is resolved, pulled, compiled, checked against the role's world and
    /// configured with its settings, then swapped in atomically: calls in flight finish on the
    /// old module. A failure leaves the old module running; with none before, the role is
    /// unavailable for the Connection. A failed attempt is made again only once `schedule`
    /// says so (see [`super::retry`]). Each attempt is logged and counted
    /// (`kbind_policy_swaps_total`).
    pub async fn choose(
        &self,
        connection: &str,
        role: PolicyRole,
        choice: Option<Choice>,
        fetcher: Option<&Fetcher>,
        schedule: &RetrySchedule,
    ) -> ChoiceOutcome {
        let (before, previous) = {
            let guard = self.connections.read().unwrap_or_else(|e| e.into_inner());
            let overrides = guard.get(connection);
            (
                overrides.and_then(|o| o.state(role)),
                overrides.and_then(|o| o.retries.get(&role).cloned()),
            )
        };
        let Some(choice) = choice else {
            if before.is_none() {
                return ChoiceOutcome::Unchanged;
            }
            self.replace(connection, |o| {
                clear(o, role);
                o.retries.remove(&role);
            });
            self.publish_module_info();
            info!(%connection, %role, "Connection's own policy module dropped; the process-wide module serves it");
            return ChoiceOutcome::Swapped;
        };
        // A choice already loaded is kept (a failed change back from it is forgotten); an
        // unavailable one is tried again when due.
        if let Some((wanted, Some(_))) = &before
            && *wanted == choice
        {
            if previous.is_some() {
                self.replace(connection, |o| {
                    o.retries.remove(&role);
                });
            }
            return ChoiceOutcome::Unchanged;
        }
        let runs_old = matches!(before, Some((_, Some(_))));
        let attempt = Attempt {
            choice: choice.clone(),
            credentials: fetcher.map(Fetcher::credentials_fingerprint),
        };
        let now = SystemTime::now();
        if let Some(waiting) = previous.as_ref().filter(|p| !p.is_due(&attempt, now)) {
            // Not due yet: the registry is not asked, nothing is logged or counted again.
            let failed = Failed {
                error: None,
                retry: waiting.clone(),
            };
            return if runs_old {
                ChoiceOutcome::KeptOld(failed)
            } else {
                ChoiceOutcome::Unavailable(failed)
            };
        }
        let result = self.load_choice(role, &choice, fetcher).await;
        let outcome = match result {
            Ok(loaded) => {
                self.replace(connection, |o| {
                    set(o, role, &loaded, &choice);
                    o.retries.remove(&role);
                });
                ChoiceOutcome::Swapped
            }
            Err(e) => {
                let message = e.to_string();
                let retry = Retry::after_failure(
                    previous.as_ref(),
                    attempt,
                    message.clone(),
                    now,
                    schedule,
                );
                self.replace(connection, |o| {
                    if !runs_old {
                        unavailable(o, role, &choice, &message);
                    }
                    o.retries.insert(role, retry.clone());
                });
                let failed = Failed {
                    error: Some(e),
                    retry,
                };
                if runs_old {
                    ChoiceOutcome::KeptOld(failed)
                } else {
                    ChoiceOutcome::Unavailable(failed)
                }
            }
        };
        let result = match &outcome {
            ChoiceOutcome::Swapped => "swapped",
            _ => "failed",
        };
        metrics()
            .policy_swaps
            .get_or_create(&PolicySwapLabels {
                role: role_label(role),
                result,
            })
            .inc();
        match &outcome {
            ChoiceOutcome::Swapped => info!(%connection, %role, reference = %choice.reference,
                "Connection's policy module swapped in"),
            ChoiceOutcome::KeptOld(e) => error!(%connection, %role, error = %e,
                "Connection's policy module not swapped; the running module stays"),
            ChoiceOutcome::Unavailable(e) => error!(%connection, %role, error = %e,
                "Connection's policy module unavailable; its calls fail until it can be had"),
            ChoiceOutcome::Unchanged => {}
        }
        self.publish_module_info();
        outcome
    }

    /// Forgets a deleted Connection's modules.
    pub fn forget_connection(&self, connection: &str) {
        let mut guard = self.connections.write().unwrap_or_else(|e| e.into_inner());
        if guard.remove(connection).is_some() {
            drop(guard);
            self.publish_module_info();
        }
    }

    /// Policies serving `role` with `choice`, checked (world, settings), under these limits.
    async fn load_choice(
        &self,
        role: PolicyRole,
        choice: &Choice,
        fetcher: Option<&Fetcher>,
    ) -> Result<Policies, ChoiceError> {
        let mut only = PolicyArgs::default();
        only.set_module(role, Some(choice.reference.clone()));
        only.set_settings(role, Some(choice.settings.clone()));
        let loaded = match &choice.reference {
            PolicyRef::File(path) => {
                return Err(ChoiceError::FilePath {
                    role,
                    path: path.display().to_string(),
                });
            }
            PolicyRef::Oci(reference) => {
                let fetcher = fetcher.ok_or_else(|| ChoiceError::NoFetcher {
                    role,
                    reference: reference.to_string(),
                })?;
                let module = fetcher
                    .fetch(reference)
                    .await
                    .map_err(|source| PolicyError::FetchModule { role, source })?;
                super::log_fetched(role, &module);
                let fetched = [(role, module)].into_iter().collect();
                Policies::assemble(&only, &fetched)?
            }
            PolicyRef::Builtin => Policies::load(&only)?,
        };
        let loaded = loaded.with_limits(self.limits());
        loaded.check_role(role).await?;
        Ok(loaded)
    }

    /// Replaces `connection`'s overrides with `change` applied to a copy (an atomic swap).
    fn replace(&self, connection: &str, change: impl FnOnce(&mut Overrides)) {
        let mut guard = self.connections.write().unwrap_or_else(|e| e.into_inner());
        let mut next = guard
            .get(connection)
            .map(|o| o.shared())
            .unwrap_or_default();
        change(&mut next);
        if next.is_empty() {
            guard.remove(connection);
        } else {
            guard.insert(connection.to_owned(), Arc::new(next));
        }
    }
}

fn clear(o: &mut Overrides, role: PolicyRole) {
    match role {
        PolicyRole::SchemaSynthesis => o.schema = None,
        PolicyRole::ConflictPolicy => o.conflict = None,
        PolicyRole::RelatedSelection => o.related = None,
        PolicyRole::Placement => o.placement = None,
    }
}

fn set(o: &mut Overrides, role: PolicyRole, loaded: &Policies, choice: &Choice) {
    let current = loaded.current();
    let module = Choice::clone;
    match role {
        PolicyRole::SchemaSynthesis => {
            o.schema = Some(Chosen::Module {
                slot: current.schema.shared(),
                wanted: module(choice),
            });
        }
        PolicyRole::ConflictPolicy => {
            o.conflict = Some(Chosen::Module {
                slot: current.conflict.shared(),
                wanted: module(choice),
            });
        }
        PolicyRole::RelatedSelection => {
            o.related = Some(Chosen::Module {
                slot: current.related.shared(),
                wanted: module(choice),
            });
        }
        PolicyRole::Placement => {
            o.placement = Some(Chosen::Module {
                slot: current.placement.shared(),
                wanted: module(choice),
            });
        }
    }
}

fn unavailable(o: &mut Overrides, role: PolicyRole, choice: &Choice, message: &str) {
    fn gone<P: RoleModule>(choice: &Choice, message: &str) -> Option<Chosen<P>> {
        Some(Chosen::Unavailable {
            wanted: choice.clone(),
            message: message.to_owned(),
        })
    }
    match role {
        PolicyRole::SchemaSynthesis => o.schema = gone(choice, message),
        PolicyRole::ConflictPolicy => o.conflict = gone(choice, message),
        PolicyRole::RelatedSelection => o.related = gone(choice, message),
        PolicyRole::Placement => o.placement = gone(choice, message),
    }
}

#[cfg(test)]
mod tests;
