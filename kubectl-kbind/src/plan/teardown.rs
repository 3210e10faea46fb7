//! The documented teardown as decisions over plain values, so the order is unit-tested:
//! bindings first (namespaced Bindings, then ClusterBindings), then the Connection, then its
//! credential Secret unless another Connection still uses it — all while the konnector and the
//! credentials still work. Which consumer CRDs a plan deletes is not decided here: the
//! konnector's own teardown rule (`konnector::binding::Consumer::crds_deleted`) answers it for
//! the bindings [`deleted_by`] names.
//!
//! Why Bindings before ClusterBindings: a binding's cleanup skips an API that another
//! non-deleting binding lists, and the last ClusterBinding of an API deletes the consumer CRD
//! (and with it every instance). Draining the namespaced Bindings first lets each release its
//! own namespace; the ClusterBinding then drains what is left and removes the CRD.

use std::fmt;

use konnector::registry::BindingKey;

/// Kind of a binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// Namespaced.
    Binding,
    /// Cluster-scoped.
    ClusterBinding,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Binding => "Binding",
            Self::ClusterBinding => "ClusterBinding",
        })
    }
}

/// A binding as the plan sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingRef {
    /// Binding or ClusterBinding.
    pub kind: Kind,
    /// Namespace of a Binding.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
    /// The Connection it references.
    pub connection: String,
    /// The APIs it lists.
    pub apis: Vec<String>,
    /// Whether it is already being deleted.
    pub deleting: bool,
    /// Whether it is the autoBind ClusterBinding (label `core.kbind.io/managed`).
    pub managed: bool,
}

impl BindingRef {
    /// Its key in the konnector's terms.
    pub fn key(&self) -> BindingKey {
        match (&self.kind, &self.namespace) {
            (Kind::Binding, Some(namespace)) => BindingKey::Namespaced {
                namespace: namespace.clone(),
                name: self.name.clone(),
            },
            _ => BindingKey::Cluster {
                name: self.name.clone(),
            },
        }
    }

    /// `kubectl kbind unbind` arguments for it.
    pub fn unbind_command(&self) -> String {
        match (&self.kind, &self.namespace) {
            (Kind::Binding, Some(ns)) => format!("kubectl kbind unbind {} -n {ns}", self.name),
            _ => format!("kubectl kbind unbind {} --cluster", self.name),
        }
    }
}

impl fmt::Display for BindingRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// One step of a disconnect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Delete a binding and wait for its drain.
    Unbind(BindingRef),
    /// Delete the Connection and wait until its finalizer is released.
    DeleteConnection(String),
    /// Delete the credential Secret (released by the Connection's teardown).
    DeleteSecret {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// Keep the credential Secret: other Connections use it.
    KeepSecret {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// The Connections still using it.
        used_by: Vec<String>,
    },
}

/// What a disconnect must know.
#[derive(Debug, Clone)]
pub struct DisconnectInput<'a> {
    /// The Connection.
    pub connection: &'a str,
    /// Whether it has autoBind (its managed ClusterBinding is deleted by the Connection).
    pub auto_bind: bool,
    /// Its credential Secret (namespace, name).
    pub secret: (&'a str, &'a str),
    /// Every binding on the consumer.
    pub bindings: &'a [BindingRef],
    /// Other non-deleting Connections referencing the same Secret.
    pub secret_users: &'a [String],
    /// Unbind explicit bindings first (`--cascade`), instead of refusing.
    pub cascade: bool,
    /// Leave the Secret in place (`--keep-secret`).
    pub keep_secret: bool,
}

/// Why a disconnect does not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    /// Explicit bindings still referencing the Connection.
    pub bindings: Vec<BindingRef>,
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} binding(s) still use this Connection; a Connection never deletes explicit bindings and would wait for them (DrainingBindings). Unbind them first, while the konnector and credentials work:",
            self.bindings.len()
        )?;
        for b in &self.bindings {
            writeln!(f, "  {}", b.unbind_command())?;
        }
        write!(
            f,
            "or pass --cascade to unbind them in the documented order."
        )
    }
}

/// The steps of `disconnect`, in the documented order, or why it must not start.
pub fn plan_disconnect(input: &DisconnectInput<'_>) -> Result<Vec<Step>, Blocked> {
    let mut explicit: Vec<BindingRef> = input
        .bindings
        .iter()
        .filter(|b| b.connection == input.connection)
        .filter(|b| !(input.auto_bind && is_auto_bind_of(b, input.connection)))
        .cloned()
        .collect();
    explicit.sort_by(|a, b| (a.kind, &a.namespace, &a.name).cmp(&(b.kind, &b.namespace, &b.name)));
    let pending: Vec<BindingRef> = explicit.iter().filter(|b| !b.deleting).cloned().collect();
    if !pending.is_empty() && !input.cascade {
        return Err(Blocked { bindings: pending });
    }
    let mut steps: Vec<Step> = explicit.into_iter().map(Step::Unbind).collect();
    steps.push(Step::DeleteConnection(input.connection.to_string()));
    let (namespace, name) = (input.secret.0.to_string(), input.secret.1.to_string());
    if !input.secret_users.is_empty() {
        steps.push(Step::KeepSecret {
            namespace,
            name,
            used_by: input.secret_users.to_vec(),
        });
    } else if !input.keep_secret {
        steps.push(Step::DeleteSecret { namespace, name });
    }
    Ok(steps)
}

/// The bindings a disconnect's steps delete, with the autoBind ClusterBinding the Connection's
/// own teardown deletes (which the steps leave to it): what the konnector's teardown rule is
/// asked about.
pub fn deleted_by(input: &DisconnectInput<'_>, steps: &[Step]) -> Vec<BindingRef> {
    let mut deleted: Vec<BindingRef> = steps
        .iter()
        .filter_map(|s| match s {
            Step::Unbind(b) => Some(b.clone()),
            _ => None,
        })
        .collect();
    if input.auto_bind {
        deleted.extend(
            input
                .bindings
                .iter()
                .filter(|b| is_auto_bind_of(b, input.connection))
                .cloned(),
        );
    }
    deleted
}

/// Whether `b` is the autoBind ClusterBinding of `connection`.
fn is_auto_bind_of(b: &BindingRef, connection: &str) -> bool {
    b.managed
        && b.kind == Kind::ClusterBinding
        && b.name == connection
        && b.connection == connection
}

/// How a dry run shows `steps`, one numbered line each.
pub fn describe(steps: &[Step]) -> Vec<String> {
    steps
        .iter()
        .enumerate()
        .map(|(i, step)| {
            let what = match step {
                Step::Unbind(b) if b.deleting => {
                    format!("follow the teardown of {b} (already deleting)")
                }
                Step::Unbind(b) => format!("delete {b} and follow its teardown"),
                Step::DeleteConnection(name) => {
                    format!("delete Connection {name} and follow its teardown")
                }
                Step::DeleteSecret { namespace, name } => {
                    format!("delete Secret {namespace}/{name}")
                }
                Step::KeepSecret {
                    namespace,
                    name,
                    used_by,
                } => format!(
                    "keep Secret {namespace}/{name} (still used by Connection(s) {})",
                    used_by.join(", ")
                ),
            };
            format!("{}. {what}", i + 1)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(kind: Kind, ns: Option<&str>, name: &str, conn: &str, apis: &[&str]) -> BindingRef {
        BindingRef {
            kind,
            namespace: ns.map(String::from),
            name: name.into(),
            connection: conn.into(),
            apis: apis.iter().map(|s| s.to_string()).collect(),
            deleting: false,
            managed: false,
        }
    }

    fn input<'a>(
        bindings: &'a [BindingRef],
        users: &'a [String],
        cascade: bool,
    ) -> DisconnectInput<'a> {
        DisconnectInput {
            connection: "p",
            auto_bind: false,
            secret: ("kbind", "p-kubeconfig"),
            bindings,
            secret_users: users,
            cascade,
            keep_secret: false,
        }
    }

    #[test]
    fn explicit_bindings_block_a_disconnect_without_cascade() {
        let bindings = [
            b(Kind::Binding, Some("a"), "w", "p", &["w.x"]),
            b(Kind::Binding, Some("a"), "o", "other", &["w.x"]),
        ];
        let blocked = plan_disconnect(&input(&bindings, &[], false)).err();
        assert_eq!(
            blocked.map(|b| b.bindings),
            Some(vec![bindings[0].clone()]),
            "only this Connection's"
        );
    }

    #[test]
    fn cascade_unbinds_bindings_then_cluster_bindings_then_connection_then_secret()
    -> Result<(), Blocked> {
        let bindings = [
            b(Kind::ClusterBinding, None, "all", "p", &["w.x"]),
            b(Kind::Binding, Some("b"), "w", "p", &["w.x"]),
            b(Kind::Binding, Some("a"), "w", "p", &["w.x"]),
        ];
        let steps = plan_disconnect(&input(&bindings, &[], true))?;
        assert_eq!(
            steps,
            vec![
                Step::Unbind(bindings[2].clone()),
                Step::Unbind(bindings[1].clone()),
                Step::Unbind(bindings[0].clone()),
                Step::DeleteConnection("p".into()),
                Step::DeleteSecret {
                    namespace: "kbind".into(),
                    name: "p-kubeconfig".into()
                },
            ]
        );
        Ok(())
    }

    #[test]
    fn the_auto_bind_cluster_binding_is_left_to_the_connection() -> Result<(), Blocked> {
        let mut managed = b(Kind::ClusterBinding, None, "p", "p", &["w.x"]);
        managed.managed = true;
        let bindings = [managed];
        let mut i = input(&bindings, &[], false);
        i.auto_bind = true;
        assert_eq!(plan_disconnect(&i)?[0], Step::DeleteConnection("p".into()));
        Ok(())
    }

    #[test]
    fn bindings_already_deleting_do_not_block_but_are_followed() -> Result<(), Blocked> {
        let mut deleting = b(Kind::Binding, Some("a"), "w", "p", &["w.x"]);
        deleting.deleting = true;
        let bindings = [deleting.clone()];
        assert_eq!(
            plan_disconnect(&input(&bindings, &[], false))?[0],
            Step::Unbind(deleting)
        );
        Ok(())
    }

    #[test]
    fn a_secret_another_connection_uses_is_kept() -> Result<(), Blocked> {
        let users = vec!["q".to_string()];
        let steps = plan_disconnect(&input(&[], &users, false))?;
        assert_eq!(
            steps.last(),
            Some(&Step::KeepSecret {
                namespace: "kbind".into(),
                name: "p-kubeconfig".into(),
                used_by: users.clone()
            })
        );
        let mut keep = input(&[], &[], false);
        keep.keep_secret = true;
        assert_eq!(
            plan_disconnect(&keep)?,
            vec![Step::DeleteConnection("p".into())]
        );
        Ok(())
    }

    #[test]
    fn a_disconnect_of_an_auto_bind_connection_deletes_its_managed_cluster_binding_too()
    -> Result<(), Blocked> {
        let mut managed = b(Kind::ClusterBinding, None, "p", "p", &["w.x"]);
        managed.managed = true;
        let bindings = [
            managed.clone(),
            b(Kind::Binding, Some("a"), "w", "p", &["w.x"]),
        ];
        let mut i = input(&bindings, &[], true);
        i.auto_bind = true;
        let steps = plan_disconnect(&i)?;
        assert_eq!(deleted_by(&i, &steps), vec![bindings[1].clone(), managed]);
        i.auto_bind = false;
        let steps = plan_disconnect(&i)?;
        assert_eq!(
            deleted_by(&i, &steps).len(),
            2,
            "a plain ClusterBinding is a step"
        );
        Ok(())
    }

    #[test]
    fn a_dry_run_numbers_every_step() -> Result<(), Blocked> {
        let bindings = [b(Kind::ClusterBinding, None, "all", "p", &["w.x"])];
        let lines = describe(&plan_disconnect(&input(&bindings, &[], true))?);
        assert_eq!(
            lines[0],
            "1. delete ClusterBinding all and follow its teardown"
        );
        assert_eq!(lines[1], "2. delete Connection p and follow its teardown");
        assert_eq!(lines[2], "3. delete Secret kbind/p-kubeconfig");
        Ok(())
    }
}
