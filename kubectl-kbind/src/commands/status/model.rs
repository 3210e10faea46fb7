//! The status report as plain values (what `-o json|yaml` prints and the tree renders), how
//! one instance is classified, and when the whole report counts as healthy.
//!
//! An instance is *conflicting* when it carries `core.kbind.io/conflict` (the durable
//! diagnostic: the API's status schema may prune conditions), *synced* when its `Synced`
//! condition is True, *failing* when it is False, and *pending* otherwise (not written yet,
//! or a status schema that keeps no conditions). When some instance has no `Synced`
//! condition and the binding's status carries the konnector's own counts for the API
//! (`boundAPIs[].instances`), those are shown: the konnector knows an instance is in sync
//! whether or not its status schema keeps conditions.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use konnector::api::names::CONFLICT_ANNOTATION;

use super::shards::Holders;
pub use super::shards::Shard;

/// Everything `status` found.
#[derive(Serialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// One entry per Connection.
    pub connections: Vec<ConnectionNode>,
    /// Bindings whose Connection does not exist.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub orphans: Vec<BindingNode>,
}

/// A condition's state in one word plus its reason.
#[derive(Serialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct State {
    /// `True`, `False` or `Unknown` (not reported yet).
    pub status: String,
    /// The condition's reason, if reported.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The condition's message, if reported.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl State {
    /// The state of condition `type_` in `conditions`.
    pub fn of(
        conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
        type_: konnector::api::ConditionType,
    ) -> Self {
        match crate::output::condition(conditions, type_) {
            Some(c) => Self::from_condition(c),
            None => Self {
                status: "Unknown".into(),
                ..Self::default()
            },
        }
    }

    /// The state a reported condition says.
    pub fn from_condition(c: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition) -> Self {
        Self {
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
        }
    }

    /// Whether the condition is True.
    pub fn is_true(&self) -> bool {
        self.status == "True"
    }
}

/// One Connection and what hangs off it.
#[derive(Serialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionNode {
    /// Its name.
    pub name: String,
    /// Its Ready condition.
    pub ready: State,
    /// The schema source in effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Whether it is being deleted.
    pub deleting: bool,
    /// Where its copies go on the provider, when isolation places them elsewhere:
    /// `<strategy> (prefix <prefix>)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isolation: Option<String>,
    /// The policy modules the Connection names for itself (`spec.policies`), as
    /// `<role>=<module> (<digest>)` (`unavailable` for a module none runs for), from
    /// [`policy_line`].
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub policies: Vec<String>,
    /// Its other conditions that are not as expected (SchemaInSync=False,
    /// ProviderDegraded=True, ...), by type.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub problems: BTreeMap<String, State>,
    /// Exported APIs, and APIs its bindings list that it does not export.
    pub apis: Vec<ApiNode>,
    /// The replica running the Connection's own work, when the konnector shards its work.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
}

/// One API of a Connection.
#[derive(Serialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApiNode {
    /// `<plural>.<group>`.
    pub name: String,
    /// Whether the Connection's status lists it as exported.
    pub exported: bool,
    /// Bindings listing it.
    pub bindings: Vec<BindingNode>,
    /// The replica running its syncer, when the konnector shards its work and the API is bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
}

/// One binding's view of one API.
#[derive(Serialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BindingNode {
    /// `Binding` or `ClusterBinding`.
    pub kind: String,
    /// Namespace of a Binding.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Its Ready condition.
    pub ready: State,
    /// Its Synced condition.
    pub synced: State,
    /// Whether it is being deleted.
    pub deleting: bool,
    /// Instance counts of this API in the binding's scope.
    pub counts: Counts,
    /// Conflicting and failing instances, by name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failing: Vec<Failing>,
    /// Where in-sync instances' copies live on the provider, when isolation placed them
    /// elsewhere than the instances.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub placed: Vec<Placed>,
    /// Why instances could not be counted (no consumer CRD yet, a list error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Instance counts.
#[derive(Serialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// `Synced=True`.
    pub synced: usize,
    /// Carrying the conflict annotation.
    pub conflicting: usize,
    /// `Synced=False` for another reason.
    pub failing: usize,
    /// Not reported yet.
    pub pending: usize,
}

/// One instance that is not in sync.
#[derive(Serialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Failing {
    /// Its namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Why (condition reason, or the conflict annotation's reason).
    pub reason: String,
    /// What the konnector said.
    pub message: String,
}

/// One instance whose provider copy lives elsewhere than the instance.
#[derive(Serialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Placed {
    /// Its namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Its provider copy, `namespace/name`.
    pub at: String,
}

/// Where the provider copy of an in-sync instance is, as its `Synced=True` message says when
/// isolation placed it elsewhere.
pub fn placed_at(instance: &Value) -> Option<String> {
    let synced = instance["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Synced" && c["status"] == "True")?;
    let message = synced["message"].as_str()?;
    let rest = message.strip_prefix(konnector::sync::PLACED_PREFIX)?;
    rest.strip_suffix(" matches the spec").map(str::to_string)
}

/// How one instance stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Instance {
    /// In sync.
    Synced,
    /// A foreign provider object blocks it.
    Conflicting {
        /// ForeignObjectExists or OwnedByAnother.
        reason: String,
        /// The konnector's message.
        message: String,
    },
    /// Its last write failed.
    Failing {
        /// The Synced condition's reason.
        reason: String,
        /// Its message.
        message: String,
    },
    /// Nothing reported yet.
    Pending,
}

/// Classifies one consumer instance (as JSON) from its annotation and `Synced` condition.
pub fn classify(instance: &Value) -> Instance {
    if let Some(value) = instance["metadata"]["annotations"][CONFLICT_ANNOTATION].as_str() {
        // Written as "<Reason>: <message>".
        let (reason, message) = value.split_once(": ").unwrap_or((value, ""));
        return Instance::Conflicting {
            reason: reason.to_string(),
            message: message.to_string(),
        };
    }
    let synced = instance["status"]["conditions"]
        .as_array()
        .and_then(|list| list.iter().find(|c| c["type"] == "Synced"));
    match synced {
        Some(c) if c["status"] == "True" => Instance::Synced,
        Some(c) if c["status"] == "False" => Instance::Failing {
            reason: c["reason"].as_str().unwrap_or_default().to_string(),
            message: c["message"].as_str().unwrap_or_default().to_string(),
        },
        _ => Instance::Pending,
    }
}

impl BindingNode {
    /// Adds one instance to the counts (and to the failing list when it is not in sync).
    pub fn count(&mut self, namespace: Option<String>, name: String, state: Instance) {
        match state {
            Instance::Synced => self.counts.synced += 1,
            Instance::Pending => self.counts.pending += 1,
            Instance::Conflicting { reason, message } => {
                self.counts.conflicting += 1;
                self.failing.push(Failing {
                    namespace,
                    name,
                    reason,
                    message,
                });
            }
            Instance::Failing { reason, message } => {
                self.counts.failing += 1;
                self.failing.push(Failing {
                    namespace,
                    name,
                    reason,
                    message,
                });
            }
        }
    }

    /// Takes the counts the konnector published for this API (which know the instances whose
    /// status schema keeps no conditions) over the ones read from instance conditions.
    pub fn counted_by_konnector(&mut self, published: konnector::api::InstanceCounts) {
        let count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        self.counts = Counts {
            synced: count(published.synced),
            conflicting: count(published.conflicting),
            failing: count(published.failing),
            pending: count(published.pending),
        };
    }

    fn healthy(&self) -> bool {
        self.ready.is_true() && self.counts.conflicting == 0 && self.counts.failing == 0
    }
}

impl Report {
    /// Records where each Connection's work and each bound API's syncer run, from a sharded
    /// konnector's shard holders. An API no binding lists runs nowhere and says nothing.
    pub fn place(&mut self, holders: &Holders) {
        for connection in &mut self.connections {
            connection.shard = Some(holders.connection(&connection.name));
            for api in &mut connection.apis {
                if !api.bindings.is_empty() {
                    api.shard = Some(holders.api(&connection.name, &api.name));
                }
            }
        }
    }

    /// Healthy: every Connection and binding Ready, no conflicting or failing instance, no
    /// binding without its Connection. `status` exits 1 otherwise.
    pub fn healthy(&self) -> bool {
        self.orphans.is_empty()
            && self.connections.iter().all(|c| {
                c.ready.is_true()
                    && c.problems.is_empty()
                    && c.apis
                        .iter()
                        .all(|a| a.bindings.iter().all(BindingNode::healthy))
            })
    }
}

/// What runs for one role a Connection names, as `status` shows it: `<role>=<module>
/// (<digest>)`, or `(unavailable)` while no module runs for it.
pub fn policy_line(module: &konnector::api::PolicyModuleStatus) -> String {
    let running = module.digest.as_deref().unwrap_or("unavailable");
    format!("{}={} ({running})", module.role, module.module)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placed_copy_is_read_from_the_synced_message() {
        let placed = serde_json::json!({ "status": { "conditions": [{ "type": "Synced",
            "status": "True", "message": "the provider copy at east-team-a/db matches the spec" }] } });
        assert_eq!(placed_at(&placed).as_deref(), Some("east-team-a/db"));
        let beside = serde_json::json!({ "status": { "conditions": [{ "type": "Synced",
            "status": "True", "message": "the provider copy matches the spec" }] } });
        assert_eq!(placed_at(&beside), None);
    }
    use serde_json::json;

    #[test]
    fn the_conflict_annotation_wins_over_a_pruned_or_stale_condition() {
        let instance = json!({
            "metadata": {"annotations": {CONFLICT_ANNOTATION: "OwnedByAnother: owned by object 123"}},
            "status": {"conditions": [{"type": "Synced", "status": "True"}]},
        });
        assert_eq!(
            classify(&instance),
            Instance::Conflicting {
                reason: "OwnedByAnother".into(),
                message: "owned by object 123".into()
            }
        );
    }

    #[test]
    fn the_synced_condition_tells_synced_from_failing_and_pending() {
        let synced = json!({"status": {"conditions": [{"type": "Synced", "status": "True"}]}});
        let failing = json!({"status": {"conditions": [
            {"type": "Synced", "status": "False", "reason": "ProviderRejected", "message": "too big"}
        ]}});
        assert_eq!(classify(&synced), Instance::Synced);
        assert_eq!(
            classify(&failing),
            Instance::Failing {
                reason: "ProviderRejected".into(),
                message: "too big".into()
            }
        );
        assert_eq!(classify(&json!({"spec": {}})), Instance::Pending);
    }

    #[test]
    fn a_report_is_unhealthy_with_a_failing_instance_or_an_unready_binding() {
        let mut binding = BindingNode {
            ready: State {
                status: "True".into(),
                ..State::default()
            },
            ..BindingNode::default()
        };
        binding.count(None, "a".into(), Instance::Synced);
        let mut report = Report {
            connections: vec![ConnectionNode {
                ready: State {
                    status: "True".into(),
                    ..State::default()
                },
                apis: vec![ApiNode {
                    bindings: vec![binding.clone()],
                    ..ApiNode::default()
                }],
                ..ConnectionNode::default()
            }],
            orphans: vec![],
        };
        assert!(report.healthy());
        binding.count(
            None,
            "b".into(),
            Instance::Failing {
                reason: "Forbidden".into(),
                message: String::new(),
            },
        );
        report.connections[0].apis[0].bindings = vec![binding.clone()];
        assert!(!report.healthy());
        assert_eq!(
            binding.counts,
            Counts {
                synced: 1,
                conflicting: 0,
                failing: 1,
                pending: 0
            }
        );
        assert_eq!(binding.failing[0].name, "b");
    }

    #[test]
    fn a_policy_line_names_the_role_the_reference_and_the_running_digest() {
        let module = |digest: Option<&str>| konnector::api::PolicyModuleStatus {
            role: "conflict".into(),
            module: "oci://r.example/acme/conflict:v1".into(),
            digest: digest.map(str::to_owned),
        };
        assert_eq!(
            policy_line(&module(Some("sha256:abc"))),
            "conflict=oci://r.example/acme/conflict:v1 (sha256:abc)"
        );
        assert_eq!(
            policy_line(&module(None)),
            "conflict=oci://r.example/acme/conflict:v1 (unavailable)"
        );
    }
}
