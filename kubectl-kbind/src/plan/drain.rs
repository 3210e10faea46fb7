//! A deleting binding's drain as the CLI sees it: what it still waits for (instances holding
//! `core.kbind.io/syncer`, finalizers on the binding, the Connection's readiness, `Drained`,
//! the `TeardownFailed` condition naming the step that failed), one progress line, and — when
//! `--timeout` passes — why it is stuck and what to do.

use konnector::api::names::{DELETION_POLICY_ANNOTATION, DELETION_POLICY_ORPHAN, SYNCER_FINALIZER};

/// What a deleting binding is waiting for, from what the CLI can see.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainState {
    /// Finalizers still on the binding.
    pub finalizers: Vec<String>,
    /// Instances in scope still carrying the syncer finalizer, per API.
    pub instances_left: Vec<(String, usize)>,
    /// Some of those instances (namespace/name).
    pub examples: Vec<String>,
    /// Whether the binding's Connection is Ready.
    pub connection_ready: bool,
    /// The binding's Drained condition reason, if False.
    pub drained_false: Option<String>,
    /// The binding's `TeardownFailed` condition, if True: the konnector's last teardown
    /// attempt failed at the step its message names, and is retried.
    pub teardown_failed: Option<Blocker>,
}

/// A condition that names what blocks a teardown: its reason and message as the konnector
/// wrote them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Blocker {
    /// The condition reason (`Forbidden`, `ProviderUnreachable`, `DeleteFailed`, ...).
    pub reason: String,
    /// The condition message: the failed step, the error and what to do.
    pub message: String,
}

impl DrainState {
    /// One progress line.
    pub fn progress(&self) -> String {
        let left: usize = self.instances_left.iter().map(|(_, n)| n).sum();
        let per_api = self
            .instances_left
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(api, n)| format!("{api}: {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut line = format!("{left} instance(s) still carry {SYNCER_FINALIZER}");
        if !per_api.is_empty() {
            line += &format!(" ({per_api})");
        }
        line += &format!(
            "; finalizers left: {}",
            if self.finalizers.is_empty() {
                "none".into()
            } else {
                self.finalizers.join(", ")
            }
        );
        if let Some(blocker) = &self.teardown_failed {
            line += &format!("; teardown blocked ({})", blocker.reason);
        }
        line
    }

    /// Why the drain is stuck and what to do, for the message after `--timeout`.
    pub fn explain_blocked(&self) -> String {
        let mut out = String::new();
        if let Some(Blocker { reason, message }) = &self.teardown_failed {
            out += &format!(
                "  - TeardownFailed=True reason {reason}: {message}\n    what to do: {}\n    the konnector retries with a backoff that grows to minutes; once the cause is fixed, any change to the binding (e.g. kubectl annotate) retries at once, and this command follows the rest\n",
                crate::hints::what_to_do(reason)
            );
        }
        if !self.connection_ready {
            out += "  - the Connection is not Ready: cleanup then builds a client from its credentials and, when that fails, releases finalizers without deleting provider copies (Drained=False, NoProviderClient). Make the Connection Ready again: kubectl kbind status\n";
        }
        if let Some(reason) = &self.drained_false {
            out += &format!(
                "  - Drained=False ({reason}): {}\n",
                crate::hints::what_to_do(reason)
            );
        }
        if self.instances_left.iter().any(|(_, n)| *n > 0) {
            out += &format!(
                "  - instances still carry {SYNCER_FINALIZER} (e.g. {}): the konnector deletes only provider copies it owns and a provider-side finalizer can hold them; to keep a copy, annotate the instance {DELETION_POLICY_ANNOTATION}={DELETION_POLICY_ORPHAN}\n",
                self.examples.join(", ")
            );
        }
        if out.is_empty() {
            out += "  - the binding reports no blocking condition yet (is the konnector running?): look for `binding reconcile failed` in the konnector log (kubectl -n kbind-system logs deploy/konnector)\n";
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stuck_drain_names_the_cause_and_the_remedy() {
        let state = DrainState {
            finalizers: vec!["core.kbind.io/cleanup".into()],
            instances_left: vec![("w.x".into(), 2)],
            examples: vec!["a/w1".into()],
            connection_ready: false,
            drained_false: None,
            teardown_failed: None,
        };
        assert_eq!(
            state.progress(),
            "2 instance(s) still carry core.kbind.io/syncer (w.x: 2); finalizers left: core.kbind.io/cleanup"
        );
        let why = state.explain_blocked();
        assert!(why.contains("Connection is not Ready"));
        assert!(why.contains("deletion-policy=Orphan"));
        let quiet = DrainState {
            connection_ready: true,
            ..DrainState::default()
        };
        assert!(quiet.explain_blocked().contains("konnector log"));
    }

    #[test]
    fn a_failed_teardown_step_is_explained_from_its_condition_not_the_log() {
        let state = DrainState {
            finalizers: vec!["core.kbind.io/cleanup".into()],
            instances_left: vec![("w.x".into(), 1)],
            examples: vec!["a/w".into()],
            connection_ready: true,
            drained_false: None,
            teardown_failed: Some(Blocker {
                reason: "Forbidden".into(),
                message: "teardown blocked: deleting provider copy w: forbidden; grant delete"
                    .into(),
            }),
        };
        assert!(
            state.progress().ends_with("; teardown blocked (Forbidden)"),
            "{}",
            state.progress()
        );
        let why = state.explain_blocked();
        assert!(
            why.starts_with(
                "  - TeardownFailed=True reason Forbidden: teardown blocked: deleting provider copy w"
            ),
            "{why}"
        );
        assert!(
            why.contains(&format!(
                "what to do: {}",
                crate::hints::what_to_do("Forbidden")
            )),
            "{why}"
        );
        assert!(why.contains("retries at once"), "{why}");
        assert!(!why.contains("konnector log"), "{why}");
    }

    #[test]
    fn a_teardown_reason_the_cli_does_not_know_still_shows_the_message() {
        let state = DrainState {
            connection_ready: true,
            teardown_failed: Some(Blocker {
                reason: "SomethingNew".into(),
                message: "teardown blocked: the step".into(),
            }),
            ..DrainState::default()
        };
        let why = state.explain_blocked();
        assert!(
            why.contains("reason SomethingNew: teardown blocked: the step"),
            "{why}"
        );
        assert!(
            why.contains(crate::hints::what_to_do("SomethingNew")),
            "{why}"
        );
    }
}
