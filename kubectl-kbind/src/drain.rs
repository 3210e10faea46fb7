//! A deleting binding's drain as the CLI sees it: what it still waits for (instances holding
//! `core.kbind.io/syncer`, finalizers on the binding, the Connection's readiness, `Drained`),
//! one progress line, and — when `--timeout` passes — why it is stuck and what to do.

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
        line
    }

    /// Why the drain is stuck and what to do, for the message after `--timeout`.
    pub fn explain_blocked(&self) -> String {
        let mut out = String::new();
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
            out += "  - look for `binding reconcile failed` in the konnector log (kubectl -n kbind-system logs deploy/konnector): a provider delete error such as Forbidden blocks and is retried; fix provider RBAC (kubectl kbind provider-rbac) or connectivity\n";
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
}
