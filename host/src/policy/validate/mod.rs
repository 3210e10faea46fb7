//! The host never trusts a module's answer: each output is checked against its input before
//! a controller acts on it. A failed check is [`PolicyError::InvalidOutput`], so a broken or
//! hostile module can make the konnector do nothing, but never write a CRD for another
//! resource, take an object the decision table cannot allow, delete objects that are
//! not this binding's copies, or place a copy under a name Kubernetes refuses or in the
//! provider's own namespaces.
//!
//! This module checks the schema, conflict and related answers; [`placement`] checks where a
//! copy may go.
//!
//! [`PolicyError::InvalidOutput`]: super::PolicyError::InvalidOutput

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::api::ConflictPolicy;

use super::types::{ConflictDecision, ConflictInput, RelatedInput, RelatedPlan, SchemaInput};

mod placement;

pub use placement::placement;

/// Parses and checks a synthesised CRD.
pub(crate) fn crd(json: &str, input: &SchemaInput) -> Result<CustomResourceDefinition, String> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("not a JSON document: {e}"))?;
    let api_version = value.get("apiVersion").and_then(|v| v.as_str());
    let kind = value.get("kind").and_then(|v| v.as_str());
    if api_version != Some("apiextensions.k8s.io/v1") || kind != Some("CustomResourceDefinition") {
        return Err(format!(
            "expected an apiextensions.k8s.io/v1 CustomResourceDefinition, got apiVersion {api_version:?} kind {kind:?}"
        ));
    }
    let crd: CustomResourceDefinition = serde_json::from_value(value)
        .map_err(|e| format!("not a valid CustomResourceDefinition: {e}"))?;
    let spec = &crd.spec;
    let expected_name = format!("{}.{}", input.resource, input.group);
    if crd.metadata.name.as_deref() != Some(expected_name.as_str()) {
        return Err(format!(
            "metadata.name is {:?}, expected {expected_name:?}",
            crd.metadata.name
        ));
    }
    if spec.group != input.group {
        return Err(format!(
            "spec.group is {:?}, expected {:?}",
            spec.group, input.group
        ));
    }
    if spec.names.plural != input.resource || spec.names.kind != input.kind {
        return Err(format!(
            "spec.names are {}/{}, expected {}/{}",
            spec.names.plural, spec.names.kind, input.resource, input.kind
        ));
    }
    let storage = spec.versions.iter().filter(|v| v.storage).count();
    if storage != 1 {
        return Err(format!("{storage} storage versions, expected exactly one"));
    }
    let known: BTreeSet<&str> = input.versions.iter().map(|v| v.name.as_str()).collect();
    for v in &spec.versions {
        if !known.contains(v.name.as_str()) {
            return Err(format!("version {:?} was not discovered", v.name));
        }
        let root = v
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .ok_or_else(|| format!("version {:?} has no openAPIV3Schema", v.name))?;
        if root.type_.as_deref() != Some("object") {
            return Err(format!(
                "version {:?}: the root schema is not of type object",
                v.name
            ));
        }
    }
    Ok(crd)
}

/// The ownership rule the host enforces on every conflict decision, whatever the module
/// answered (spec, "Ownership and conflicts"):
///
/// | answer | allowed only when |
/// |---|---|
/// | `Create` | no provider object exists |
/// | `UpdateOwned` | both UID markers name this consumer cluster and object |
/// | `Adopt` | `conflictPolicy: Adopt` and the target carries no marker at all |
/// | `Conflict` | always (nothing is written) |
///
/// Partial markers count as foreign ownership. Any other answer is refused, so a swapped
/// module can make the konnector stop writing, never take an object the table forbids.
pub(crate) fn decision(d: &ConflictDecision, input: &ConflictInput) -> Result<(), String> {
    let Some(target) = &input.target else {
        return match d {
            ConflictDecision::Create | ConflictDecision::Conflict { .. } => Ok(()),
            ConflictDecision::UpdateOwned | ConflictDecision::Adopt => Err(format!(
                "decided {d:?}, but there is no provider object to update"
            )),
        };
    };
    let ours = target.cluster_uid.as_deref() == Some(input.consumer_cluster_uid.as_str())
        && target.object_uid.as_deref() == Some(input.consumer_object_uid.as_str());
    let unmarked = target.cluster_uid.is_none() && target.object_uid.is_none();
    match d {
        ConflictDecision::Conflict { .. } => Ok(()),
        ConflictDecision::Create => {
            Err("decided Create, but a provider object already exists".into())
        }
        ConflictDecision::UpdateOwned if ours => Ok(()),
        ConflictDecision::UpdateOwned => Err(
            "decided UpdateOwned, but the provider object's ownership markers do not both name this consumer object"
                .into(),
        ),
        ConflictDecision::Adopt if input.conflict_policy != ConflictPolicy::Adopt => Err(
            "decided Adopt, but the binding's conflictPolicy is Fail; only conflictPolicy: Adopt may take an existing object"
                .into(),
        ),
        ConflictDecision::Adopt if !unmarked => Err(
            "decided Adopt, but the provider object carries ownership markers; only an object without any marker may be adopted (partial markers count as foreign)"
                .into(),
        ),
        ConflictDecision::Adopt => Ok(()),
    }
}

/// Checks a related plan only names objects it may touch.
pub(crate) fn plan(plan: &RelatedPlan, input: &RelatedInput) -> Result<(), String> {
    if plan.binding_uid != input.binding_uid
        || plan.resource != input.entry.resource
        || plan.direction != input.entry.direction
    {
        return Err(format!(
            "the plan is keyed {}/{:?}/{:?}, expected {}/{:?}/{:?}",
            plan.binding_uid,
            plan.resource,
            plan.direction,
            input.binding_uid,
            input.entry.resource,
            input.entry.direction
        ));
    }
    let in_scope = |ns: &str| input.binding_namespace.as_deref().is_none_or(|b| b == ns);
    let sources: BTreeSet<(&str, &str)> = input
        .sources
        .iter()
        .map(|s| (s.namespace.as_str(), s.name.as_str()))
        .collect();
    let ours: BTreeSet<(&str, &str)> = input
        .targets
        .iter()
        .filter(|t| t.related_binding.as_deref() == Some(input.binding_uid.as_str()))
        .map(|t| (t.namespace.as_str(), t.name.as_str()))
        .collect();
    let others: BTreeSet<(&str, &str)> = input
        .targets
        .iter()
        .filter(|t| t.related_binding.as_deref() != Some(input.binding_uid.as_str()))
        .map(|t| (t.namespace.as_str(), t.name.as_str()))
        .collect();
    for c in &plan.copy {
        let key = (c.namespace.as_str(), c.name.as_str());
        if !sources.contains(&key) || !in_scope(&c.namespace) {
            return Err(format!(
                "copy {}/{} is not a source in scope",
                c.namespace, c.name
            ));
        }
        if others.contains(&key) {
            return Err(format!(
                "copy {}/{} would overwrite a target that is not this binding's copy",
                c.namespace, c.name
            ));
        }
    }
    for d in &plan.delete {
        let key = (d.namespace.as_str(), d.name.as_str());
        if !ours.contains(&key) || !in_scope(&d.namespace) {
            return Err(format!(
                "delete {}/{} is not a copy of this binding in scope",
                d.namespace, d.name
            ));
        }
    }
    Ok(())
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{RelatedDirection, RelatedResource, RelatedResourceKind, RelatedSelector};
    use crate::policy::types::{
        ConflictReason, ObjectRef, OwnershipMarkers, RelatedSource, RelatedTarget,
    };

    fn input(namespace: Option<&str>) -> RelatedInput {
        RelatedInput {
            binding_uid: "b".into(),
            binding_namespace: namespace.map(Into::into),
            entry: RelatedResource {
                group: String::new(),
                resource: RelatedResourceKind::Secrets,
                direction: RelatedDirection::FromProvider,
                selector: RelatedSelector::default(),
            },
            sources: vec![RelatedSource {
                namespace: "a".into(),
                name: "src".into(),
                labels: Default::default(),
            }],
            targets: vec![
                RelatedTarget {
                    namespace: "a".into(),
                    name: "mine".into(),
                    related_binding: Some("b".into()),
                },
                RelatedTarget {
                    namespace: "a".into(),
                    name: "theirs".into(),
                    related_binding: Some("other".into()),
                },
                RelatedTarget {
                    namespace: "a".into(),
                    name: "src".into(),
                    related_binding: None,
                },
            ],
        }
    }

    fn plan(copy: &[&str], delete: &[&str]) -> RelatedPlan {
        let r = |n: &&str| ObjectRef {
            namespace: "a".into(),
            name: (*n).into(),
        };
        RelatedPlan {
            binding_uid: "b".into(),
            resource: RelatedResourceKind::Secrets,
            direction: RelatedDirection::FromProvider,
            copy: copy.iter().map(r).collect(),
            skip: vec![],
            delete: delete.iter().map(r).collect(),
        }
    }

    #[test]
    fn plan_deleting_own_copies_is_valid() {
        assert_eq!(super::plan(&plan(&[], &["mine"]), &input(None)), Ok(()));
    }

    #[test]
    fn plan_deleting_another_bindings_object_is_invalid() {
        let e = super::plan(&plan(&[], &["theirs"]), &input(None));
        assert!(e.is_err_and(|e| e.contains("delete a/theirs is not a copy of this binding")));
    }

    #[test]
    fn plan_overwriting_an_unmarked_target_is_invalid() {
        let e = super::plan(&plan(&["src"], &[]), &input(None));
        assert!(e.is_err_and(|e| e.contains("not this binding's copy")));
    }

    #[test]
    fn plan_copying_an_unknown_source_is_invalid() {
        let e = super::plan(&plan(&["invented"], &[]), &input(None));
        assert!(e.is_err_and(|e| e.contains("copy a/invented is not a source in scope")));
    }

    #[test]
    fn plan_outside_the_bindings_namespace_is_invalid() {
        let e = super::plan(&plan(&[], &["mine"]), &input(Some("elsewhere")));
        assert!(e.is_err());
    }

    #[test]
    fn plan_with_another_key_is_invalid() {
        let mut p = plan(&[], &[]);
        p.direction = RelatedDirection::FromConsumer;
        assert!(super::plan(&p, &input(None)).is_err_and(|e| e.contains("keyed")));
    }

    const CLUSTER: &str = "cluster-1";
    const OBJECT: &str = "object-1";

    /// A conflict question under `policy` about a target carrying `markers` (`None`: absent).
    fn question(policy: ConflictPolicy, markers: Target) -> ConflictInput {
        ConflictInput {
            consumer_cluster_uid: CLUSTER.into(),
            consumer_object_uid: OBJECT.into(),
            conflict_policy: policy,
            target: markers.map(|(c, o)| OwnershipMarkers {
                cluster_uid: c.map(Into::into),
                object_uid: o.map(Into::into),
            }),
        }
    }

    /// The markers of a provider target: `None` when it is absent, else its cluster and object
    /// markers.
    type Target = Option<(Option<&'static str>, Option<&'static str>)>;

    const ABSENT: Target = None;
    const UNMARKED: Target = Some((None, None));
    const OURS: Target = Some((Some(CLUSTER), Some(OBJECT)));
    const OTHER_CLUSTER: Target = Some((Some("cluster-2"), Some(OBJECT)));
    const OTHER_OBJECT: Target = Some((Some(CLUSTER), Some("object-2")));
    const CLUSTER_ONLY: Target = Some((Some(CLUSTER), None));
    const OBJECT_ONLY: Target = Some((None, Some(OBJECT)));

    use ConflictDecision::{Adopt, Create, UpdateOwned};

    const BOTH: &[ConflictPolicy] = &[ConflictPolicy::Fail, ConflictPolicy::Adopt];
    const ADOPT: &[ConflictPolicy] = &[ConflictPolicy::Adopt];
    const FAIL: &[ConflictPolicy] = &[ConflictPolicy::Fail];

    /// Checks that `d` is allowed about each of `targets` under each of `policies`.
    fn allowed(d: ConflictDecision, policies: &[ConflictPolicy], targets: &[Target]) {
        judged(d, policies, targets, None);
    }

    /// Checks that `d` is refused about each of `targets` under each of `policies`, with a
    /// message containing `because`.
    fn refused(
        d: ConflictDecision,
        policies: &[ConflictPolicy],
        targets: &[Target],
        because: &str,
    ) {
        judged(d, policies, targets, Some(because));
    }

    fn judged(
        d: ConflictDecision,
        policies: &[ConflictPolicy],
        targets: &[Target],
        refusal: Option<&str>,
    ) {
        for &policy in policies {
            for &target in targets {
                let verdict = decision(&d, &question(policy, target));
                let case = format!("{d:?} under {policy:?} about {target:?}: {verdict:?}");
                match refusal {
                    None => assert!(verdict.is_ok(), "{case}"),
                    Some(text) => assert!(verdict.is_err_and(|e| e.contains(text)), "{case}"),
                }
            }
        }
    }

    #[test]
    fn create_allowed_for_absent_target() {
        allowed(Create, BOTH, &[ABSENT]);
    }

    #[test]
    fn create_refused_for_existing_target() {
        let existing = [UNMARKED, OURS, OTHER_CLUSTER, CLUSTER_ONLY];
        refused(Create, ADOPT, &existing, "already exists");
    }

    #[test]
    fn update_owned_allowed_when_both_markers_match() {
        allowed(UpdateOwned, BOTH, &[OURS]);
    }

    #[test]
    fn update_owned_refused_unless_both_markers_are_ours() {
        let others = [
            OTHER_CLUSTER,
            OTHER_OBJECT,
            CLUSTER_ONLY,
            OBJECT_ONLY,
            UNMARKED,
        ];
        refused(
            UpdateOwned,
            BOTH,
            &others,
            "do not both name this consumer object",
        );
    }

    #[test]
    fn update_owned_and_adopt_refused_for_absent_target() {
        for d in [UpdateOwned, Adopt] {
            refused(d, ADOPT, &[ABSENT], "there is no provider object to update");
        }
    }

    #[test]
    fn adopt_allowed_for_unmarked_target_under_adopt() {
        allowed(Adopt, ADOPT, &[UNMARKED]);
    }

    #[test]
    fn adopt_refused_when_policy_is_fail() {
        refused(Adopt, FAIL, &[UNMARKED], "conflictPolicy is Fail");
    }

    #[test]
    fn adopt_refused_for_any_marker() {
        // Our own copy is updated, not adopted, and partial markers count as foreign.
        let marked = [OURS, OTHER_CLUSTER, OTHER_OBJECT, CLUSTER_ONLY, OBJECT_ONLY];
        refused(
            Adopt,
            ADOPT,
            &marked,
            "only an object without any marker may be adopted",
        );
    }

    #[test]
    fn conflict_is_always_allowed() {
        let conflict = ConflictDecision::Conflict {
            reason: ConflictReason::OwnedByAnother,
            message: "no".into(),
        };
        let every = [
            ABSENT,
            UNMARKED,
            OURS,
            OTHER_CLUSTER,
            CLUSTER_ONLY,
            OBJECT_ONLY,
        ];
        allowed(conflict, BOTH, &every);
    }

    fn schema_input() -> SchemaInput {
        serde_json::from_value(serde_json::json!({
            "group": "example.org", "resource": "widgets", "kind": "Widget", "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true, "openapi": {}}]
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn crd_json(name: &str, storage: bool) -> String {
        serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": name},
            "spec": {"group": "example.org", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": storage,
                    "schema": {"openAPIV3Schema": {"type": "object"}}}]}
        })
        .to_string()
    }

    #[test]
    fn crd_for_the_requested_resource_is_valid() {
        assert!(crd(&crd_json("widgets.example.org", true), &schema_input()).is_ok());
    }

    #[test]
    fn crd_for_another_resource_is_invalid() {
        let e = crd(&crd_json("gadgets.example.org", true), &schema_input());
        assert!(e.is_err_and(|e| e.contains("metadata.name")));
    }

    #[test]
    fn crd_without_storage_version_is_invalid() {
        let e = crd(&crd_json("widgets.example.org", false), &schema_input());
        assert!(e.is_err_and(|e| e.contains("0 storage versions")));
    }
}
