//! The host never trusts a module's answer: each output is checked against its input before
//! a controller acts on it. A failed check is [`PolicyError::InvalidOutput`], so a broken or
//! hostile module can make the konnector do nothing, but never write a CRD for another
//! resource, take an object the decision table cannot allow, delete objects that are
//! not this binding's copies, or place a copy under a name Kubernetes refuses or in the
//! provider's own namespaces.
//!
//! [`PolicyError::InvalidOutput`]: super::PolicyError::InvalidOutput

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::api::{ConflictPolicy, ResourceScope};
use crate::markers::{PROTECTED_NAMESPACES, is_protected_namespace};

use super::types::{
    ConflictDecision, ConflictInput, Placement, PlacementInput, RelatedInput, RelatedPlan,
    SchemaInput,
};

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

/// Checks a placement before anything is written there: the namespace matches the API's scope,
/// is a DNS label and is not protected; the name is a DNS subdomain. The engine still checks
/// what only it knows (the heartbeat namespace, a place another consumer object already has).
pub fn placement(placement: &Placement, input: &PlacementInput) -> Result<(), String> {
    let api = match input.api.group.as_str() {
        "" => input.api.resource.clone(),
        group => format!("{}.{group}", input.api.resource),
    };
    match (input.api.scope, &placement.namespace) {
        (ResourceScope::Cluster, Some(namespace)) => {
            return Err(format!(
                "placed in namespace {namespace:?}, but {api} is cluster-scoped; a cluster-scoped copy has no namespace"
            ));
        }
        (ResourceScope::Namespaced, None) => {
            return Err(format!(
                "placed without a namespace, but {api} is namespaced; a namespaced copy needs one"
            ));
        }
        (ResourceScope::Namespaced, Some(namespace)) => {
            if let Some(problem) = dns_label_problem(namespace) {
                return Err(format!(
                    "the namespace {namespace:?} is not a valid namespace name: {problem}"
                ));
            }
            if is_protected_namespace(namespace) {
                return Err(format!(
                    "the namespace {namespace:?} is protected; copies are never placed in {}",
                    PROTECTED_NAMESPACES.join(", ")
                ));
            }
        }
        (ResourceScope::Cluster, None) => {}
    }
    if let Some(problem) = dns_subdomain_problem(&placement.name) {
        return Err(format!(
            "the name {:?} is not a valid Kubernetes object name: {problem}",
            placement.name
        ));
    }
    Ok(())
}

/// The longest DNS label (a namespace name).
const MAX_LABEL_LEN: usize = 63;
/// The longest DNS subdomain (an object name).
const MAX_SUBDOMAIN_LEN: usize = 253;

/// What makes `s` not a DNS label (RFC 1123, as Kubernetes checks namespace names), if anything.
fn dns_label_problem(s: &str) -> Option<String> {
    if s.len() > MAX_LABEL_LEN {
        return Some(format!("{} characters, more than {MAX_LABEL_LEN}", s.len()));
    }
    if let Some(c) = s.chars().find(|&c| !is_lower_alnum(c) && c != '-') {
        return Some(format!(
            "contains {c:?}; a namespace name has only lowercase letters, digits and '-'"
        ));
    }
    if s.is_empty() {
        return Some("it is empty".into());
    }
    edge_problem(s, "it")
}

/// What makes `s` not a DNS subdomain (RFC 1123, as Kubernetes checks object names), if
/// anything: at most 253 characters, dot-separated parts of lowercase letters, digits and '-',
/// each starting and ending with a letter or digit.
fn dns_subdomain_problem(s: &str) -> Option<String> {
    if s.len() > MAX_SUBDOMAIN_LEN {
        return Some(format!(
            "{} characters, more than {MAX_SUBDOMAIN_LEN}",
            s.len()
        ));
    }
    if let Some(c) = s
        .chars()
        .find(|&c| !is_lower_alnum(c) && c != '-' && c != '.')
    {
        return Some(format!(
            "contains {c:?}; an object name has only lowercase letters, digits, '-' and '.'"
        ));
    }
    if s.is_empty() {
        return Some("it is empty".into());
    }
    s.split('.')
        .find_map(|part| edge_problem(part, "each part between dots"))
}

fn is_lower_alnum(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// What is wrong with how one dot-free part of a DNS name starts or ends, if anything; `what`
/// names the part in the message.
fn edge_problem(part: &str, what: &str) -> Option<String> {
    match (part.chars().next(), part.chars().last()) {
        (Some(first), Some(last)) if is_lower_alnum(first) && is_lower_alnum(last) => None,
        (None, _) | (_, None) => Some(format!(
            "{what} must not be empty (no leading, trailing or double '.')"
        )),
        _ => Some(format!(
            "{what} must start and end with a lowercase letter or digit"
        )),
    }
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

    fn placement_input(scope: ResourceScope) -> PlacementInput {
        serde_json::from_value(serde_json::json!({
            "consumerClusterUid": "cluster-1", "connection": "provider",
            "api": {"group": "example.org", "resource": "widgets", "kind": "Widget",
                "scope": scope},
            "namespace": (scope == ResourceScope::Namespaced).then_some("team-a"),
            "name": "w1",
            "isolation": {"strategy": "Prefixed", "prefix": "east"}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn placed(namespace: Option<&str>, name: &str) -> Placement {
        Placement {
            namespace: namespace.map(Into::into),
            name: name.into(),
        }
    }

    /// The placement check's verdict on `namespace`/`name` for an API of `scope`.
    fn check(scope: ResourceScope, namespace: Option<&str>, name: &str) -> Result<(), String> {
        placement(&placed(namespace, name), &placement_input(scope))
    }

    use ResourceScope::{Cluster, Namespaced};

    #[test]
    fn a_valid_namespaced_placement_is_accepted() {
        assert_eq!(check(Namespaced, Some("east-team-a"), "w1"), Ok(()));
        assert_eq!(
            check(Namespaced, Some(&"n".repeat(63)), &"w".repeat(253)),
            Ok(())
        );
        assert_eq!(check(Namespaced, Some("team-a"), "east.w-1.v2"), Ok(()));
    }

    #[test]
    fn a_valid_cluster_scoped_placement_is_accepted() {
        assert_eq!(check(Cluster, None, "east-w1"), Ok(()));
    }

    #[test]
    fn a_name_that_is_not_a_dns_subdomain_is_refused() {
        for (name, because) in [
            ("Not_A_Name", "contains 'N'"),
            ("w_1", "contains '_'"),
            ("", "it is empty"),
            ("-w1", "must start and end with a lowercase letter or digit"),
            ("w1.", "must not be empty"),
            ("w..1", "must not be empty"),
            ("w1.-x", "must start and end"),
        ] {
            let e = check(Namespaced, Some("team-a"), name);
            assert!(
                e.as_ref().is_err_and(|e| e.starts_with(&format!(
                    "the name {name:?} is not a valid Kubernetes object name: "
                )) && e.contains(because)),
                "{name:?}: {e:?}"
            );
        }
    }

    #[test]
    fn a_name_longer_than_253_characters_is_refused() {
        let e = check(Cluster, None, &"w".repeat(254));
        assert!(e.is_err_and(|e| e.ends_with("254 characters, more than 253")));
    }

    #[test]
    fn a_namespace_that_is_not_a_dns_label_is_refused() {
        for (namespace, because) in [
            ("Team-A", "contains 'T'"),
            ("team.a", "contains '.'"),
            (
                "team-a-",
                "must start and end with a lowercase letter or digit",
            ),
            ("", "it is empty"),
        ] {
            let e = check(Namespaced, Some(namespace), "w1");
            assert!(
                e.as_ref().is_err_and(|e| e.starts_with(&format!(
                    "the namespace {namespace:?} is not a valid namespace name: "
                )) && e.contains(because)),
                "{namespace:?}: {e:?}"
            );
        }
    }

    #[test]
    fn a_namespace_longer_than_63_characters_is_refused() {
        let e = check(Namespaced, Some(&"n".repeat(64)), "w1");
        assert!(e.is_err_and(|e| e.ends_with("64 characters, more than 63")));
    }

    #[test]
    fn an_answer_in_kube_system_is_refused() {
        let e = check(Namespaced, Some("kube-system"), "w1");
        assert_eq!(
            e,
            Err("the namespace \"kube-system\" is protected; copies are never placed in kube-system, kube-public, kube-node-lease".into())
        );
    }

    #[test]
    fn every_protected_namespace_is_refused() {
        for namespace in PROTECTED_NAMESPACES {
            let e = check(Namespaced, Some(namespace), "w1");
            assert!(e.is_err_and(|e| e.contains("is protected")), "{namespace}");
        }
        assert!(!is_protected_namespace("team-a"));
    }

    #[test]
    fn a_namespace_for_a_cluster_scoped_api_is_refused() {
        let e = check(Cluster, Some("team-a"), "w1");
        assert_eq!(
            e,
            Err("placed in namespace \"team-a\", but widgets.example.org is cluster-scoped; a cluster-scoped copy has no namespace".into())
        );
    }

    #[test]
    fn no_namespace_for_a_namespaced_api_is_refused() {
        let e = check(Namespaced, None, "w1");
        assert!(e.is_err_and(|e| {
            e.starts_with("placed without a namespace, but widgets.example.org is namespaced")
        }));
    }

    #[test]
    fn a_core_api_is_named_by_its_resource_alone() {
        let mut input = placement_input(Cluster);
        input.api.group = String::new();
        input.api.resource = "secrets".into();
        let e = placement(&placed(Some("team-a"), "s"), &input);
        assert!(e.is_err_and(|e| e.contains("but secrets is cluster-scoped")));
    }
}
