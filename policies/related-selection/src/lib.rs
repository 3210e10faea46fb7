//! The built-in related-resource selection: for one `relatedResources` entry of a binding,
//! which sources to copy, which to skip, and which of the binding's copies to delete.
//!
//! The rules of the spec ("Related resources"), each one a test below:
//!
//! * A Binding selects within its namespace; a ClusterBinding across namespaces.
//! * Names match exactly; with names and a label selector both given, both must match.
//! * An omitted or empty selector matches everything in scope.
//! * A target with a different or absent `core.kbind.io/related-binding` marker is left
//!   untouched (reported as skipped, not as a conflict), even under `conflictPolicy: Adopt`.
//! * This binding's copies that no longer match are deleted; sources never are.
//! * Copies are owned per binding UID and kind+direction (the plan's key), not per
//!   selector: two entries for the same kind and direction delete each other's copies.
//!
//! An invalid label selector is an error: nothing is copied or deleted for the entry.

use std::collections::{BTreeMap, BTreeSet};

use kbind_policy_sdk::related::{
    BindingScope, Guest, ObjectRef, PlanKey, RelatedInput, RelatedPlan, SkipReason, Skipped,
};

/// The built-in policy, exported as the component's `kbind:policy/related` interface.
pub struct BuiltinRelatedSelection;

impl Guest for BuiltinRelatedSelection {
    /// Takes no settings: an empty document, or the module is refused with a message naming
    /// what was given.
    fn configure(settings: String) -> Result<(), String> {
        kbind_policy_sdk::settings::none(&settings)
    }

    fn select(input: RelatedInput) -> Result<RelatedPlan, String> {
        select(&input)
    }
}

kbind_policy_sdk::export_related_selection!(BuiltinRelatedSelection);

/// Computes the plan for one entry.
pub fn select(input: &RelatedInput) -> Result<RelatedPlan, String> {
    let label_selector = input
        .selector
        .label_selector
        .as_ref()
        .map(|s| s.compile())
        .transpose()
        .map_err(|e| e.to_string())?;
    let names: BTreeSet<&str> = input.selector.names.iter().map(String::as_str).collect();

    let in_scope = |namespace: &str| match &input.scope {
        BindingScope::Binding(ns) => ns == namespace,
        BindingScope::ClusterBinding => true,
    };

    let selected: BTreeSet<(&str, &str)> = input
        .sources
        .iter()
        .filter(|s| in_scope(&s.namespace))
        .filter(|s| names.is_empty() || names.contains(s.name.as_str()))
        .filter(|s| {
            label_selector
                .as_ref()
                .is_none_or(|sel| sel.matches(|k| s.label(k)))
        })
        .map(|s| (s.namespace.as_str(), s.name.as_str()))
        .collect();

    let targets: BTreeMap<(&str, &str), Option<&str>> = input
        .targets
        .iter()
        .map(|t| {
            (
                (t.namespace.as_str(), t.name.as_str()),
                t.related_binding.as_deref(),
            )
        })
        .collect();

    let mut plan = RelatedPlan {
        key: PlanKey {
            binding_uid: input.binding_uid.clone(),
            resource: input.resource,
            direction: input.direction,
        },
        copy: Vec::new(),
        skip: Vec::new(),
        delete: Vec::new(),
    };
    for &(namespace, name) in &selected {
        let object = object_ref(namespace, name);
        match targets.get(&(namespace, name)) {
            None => plan.copy.push(object),
            Some(Some(marker)) if *marker == input.binding_uid => plan.copy.push(object),
            Some(Some(_)) => plan.skip.push(Skipped {
                object,
                reason: SkipReason::OtherBinding,
            }),
            Some(None) => plan.skip.push(Skipped {
                object,
                reason: SkipReason::Unmarked,
            }),
        }
    }
    for (&(namespace, name), marker) in &targets {
        if *marker == Some(input.binding_uid.as_str())
            && in_scope(namespace)
            && !selected.contains(&(namespace, name))
        {
            plan.delete.push(object_ref(namespace, name));
        }
    }
    Ok(plan)
}

fn object_ref(namespace: &str, name: &str) -> ObjectRef {
    ObjectRef {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbind_policy_sdk::related::{
        Direction, Label, LabelSelector, LabelSelectorRequirement, RelatedSelector, ResourceKind,
        SourceObject, TargetObject,
    };

    const UID: &str = "binding-uid";

    fn source(ns: &str, name: &str, labels: &[(&str, &str)]) -> SourceObject {
        SourceObject {
            namespace: ns.into(),
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| Label {
                    key: (*k).into(),
                    value: (*v).into(),
                })
                .collect(),
        }
    }

    fn target(ns: &str, name: &str, marker: Option<&str>) -> TargetObject {
        TargetObject {
            namespace: ns.into(),
            name: name.into(),
            related_binding: marker.map(Into::into),
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> LabelSelector {
        LabelSelector {
            match_labels: pairs
                .iter()
                .map(|(k, v)| Label {
                    key: (*k).into(),
                    value: (*v).into(),
                })
                .collect(),
            match_expressions: vec![],
        }
    }

    struct Case {
        input: RelatedInput,
    }

    impl Case {
        fn binding(ns: &str) -> Self {
            Self::new(BindingScope::Binding(ns.into()))
        }
        fn cluster() -> Self {
            Self::new(BindingScope::ClusterBinding)
        }
        fn new(scope: BindingScope) -> Self {
            Self {
                input: RelatedInput {
                    binding_uid: UID.into(),
                    scope,
                    resource: ResourceKind::Secrets,
                    direction: Direction::FromProvider,
                    selector: RelatedSelector {
                        label_selector: None,
                        names: vec![],
                    },
                    sources: vec![],
                    targets: vec![],
                },
            }
        }
        fn names(mut self, names: &[&str]) -> Self {
            self.input.selector.names = names.iter().map(|n| (*n).into()).collect();
            self
        }
        fn selector(mut self, s: LabelSelector) -> Self {
            self.input.selector.label_selector = Some(s);
            self
        }
        fn sources(mut self, s: Vec<SourceObject>) -> Self {
            self.input.sources = s;
            self
        }
        fn targets(mut self, t: Vec<TargetObject>) -> Self {
            self.input.targets = t;
            self
        }
        fn plan(&self) -> RelatedPlan {
            select(&self.input).unwrap_or_else(|e| panic!("selection failed: {e}"))
        }
    }

    fn refs(v: &[ObjectRef]) -> Vec<String> {
        v.iter()
            .map(|r| format!("{}/{}", r.namespace, r.name))
            .collect()
    }

    #[test]
    fn binding_selects_within_its_namespace() {
        let plan = Case::binding("team-a")
            .sources(vec![
                source("team-a", "s1", &[]),
                source("team-b", "s2", &[]),
            ])
            .plan();
        assert_eq!(refs(&plan.copy), ["team-a/s1"]);
    }

    #[test]
    fn cluster_binding_selects_across_namespaces() {
        let plan = Case::cluster()
            .sources(vec![
                source("team-a", "s1", &[]),
                source("team-b", "s2", &[]),
            ])
            .plan();
        assert_eq!(refs(&plan.copy), ["team-a/s1", "team-b/s2"]);
    }

    #[test]
    fn names_match_exactly() {
        let plan = Case::cluster()
            .names(&["settings"])
            .sources(vec![
                source("a", "settings", &[]),
                source("a", "settings-2", &[]),
                source("a", "Settings", &[]),
            ])
            .plan();
        assert_eq!(refs(&plan.copy), ["a/settings"]);
    }

    #[test]
    fn label_selector_selects_matching_sources() {
        let plan = Case::cluster()
            .selector(labels(&[("widgets.example.org/related", "true")]))
            .sources(vec![
                source("a", "yes", &[("widgets.example.org/related", "true")]),
                source("a", "no", &[("widgets.example.org/related", "false")]),
                source("a", "unlabelled", &[]),
            ])
            .plan();
        assert_eq!(refs(&plan.copy), ["a/yes"]);
    }

    #[test]
    fn names_and_labels_must_both_match() {
        let plan = Case::cluster()
            .names(&["n1", "n2"])
            .selector(labels(&[("pick", "me")]))
            .sources(vec![
                source("a", "n1", &[("pick", "me")]),
                source("a", "n2", &[]),
                source("a", "n3", &[("pick", "me")]),
            ])
            .plan();
        assert_eq!(refs(&plan.copy), ["a/n1"]);
    }

    #[test]
    fn empty_selector_matches_everything_in_scope() {
        let sources = vec![source("a", "s1", &[("x", "y")]), source("b", "s2", &[])];
        let omitted = Case::binding("a").sources(sources.clone()).plan();
        assert_eq!(refs(&omitted.copy), ["a/s1"]);
        let empty = Case::binding("a")
            .selector(labels(&[]))
            .sources(sources)
            .plan();
        assert_eq!(refs(&empty.copy), ["a/s1"]);
    }

    #[test]
    fn match_expressions_use_kubernetes_semantics() {
        let sel = LabelSelector {
            match_labels: vec![],
            match_expressions: vec![LabelSelectorRequirement {
                key: "env".into(),
                operator: "NotIn".into(),
                values: vec!["prod".into()],
            }],
        };
        let plan = Case::cluster()
            .selector(sel)
            .sources(vec![
                source("a", "prod", &[("env", "prod")]),
                source("a", "dev", &[("env", "dev")]),
                source("a", "none", &[]),
            ])
            .plan();
        assert_eq!(refs(&plan.copy), ["a/dev", "a/none"]);
    }

    #[test]
    fn invalid_label_selector_is_an_error() {
        let sel = LabelSelector {
            match_labels: vec![],
            match_expressions: vec![LabelSelectorRequirement {
                key: "env".into(),
                operator: "Equals".into(),
                values: vec!["prod".into()],
            }],
        };
        let case = Case::cluster()
            .selector(sel)
            .sources(vec![source("a", "s", &[])]);
        let err = select(&case.input).err().unwrap_or_default();
        assert!(err.contains("operator \"Equals\""), "{err}");
    }

    #[test]
    fn own_copies_are_updated() {
        let plan = Case::cluster()
            .sources(vec![source("a", "s1", &[])])
            .targets(vec![target("a", "s1", Some(UID))])
            .plan();
        assert_eq!(refs(&plan.copy), ["a/s1"]);
        assert!(plan.skip.is_empty() && plan.delete.is_empty());
    }

    #[test]
    fn target_with_other_binding_marker_is_skipped() {
        let plan = Case::cluster()
            .sources(vec![source("a", "s1", &[])])
            .targets(vec![target("a", "s1", Some("other-binding"))])
            .plan();
        assert!(plan.copy.is_empty());
        assert_eq!(plan.skip.len(), 1);
        assert_eq!(plan.skip[0].reason, SkipReason::OtherBinding);
        assert!(
            plan.delete.is_empty(),
            "another binding's copy is never deleted"
        );
    }

    #[test]
    fn target_without_marker_is_skipped() {
        let plan = Case::cluster()
            .sources(vec![source("a", "s1", &[])])
            .targets(vec![target("a", "s1", None)])
            .plan();
        assert!(plan.copy.is_empty());
        assert_eq!(plan.skip.len(), 1);
        assert_eq!(plan.skip[0].reason, SkipReason::Unmarked);
        assert!(
            plan.delete.is_empty(),
            "an unmarked target is never deleted"
        );
    }

    #[test]
    fn own_copies_no_longer_selected_are_deleted() {
        let plan = Case::cluster()
            .names(&["keep"])
            .sources(vec![source("a", "keep", &[]), source("a", "dropped", &[])])
            .targets(vec![
                target("a", "keep", Some(UID)),
                target("a", "dropped", Some(UID)),
                target("a", "orphan-copy", Some(UID)),
                target("a", "foreign", Some("other")),
                target("a", "unmarked", None),
            ])
            .plan();
        assert_eq!(refs(&plan.copy), ["a/keep"]);
        assert_eq!(refs(&plan.delete), ["a/dropped", "a/orphan-copy"]);
    }

    #[test]
    fn copies_outside_a_bindings_namespace_are_not_deleted() {
        let plan = Case::binding("a")
            .targets(vec![
                target("a", "gone", Some(UID)),
                target("b", "elsewhere", Some(UID)),
            ])
            .plan();
        assert_eq!(refs(&plan.delete), ["a/gone"]);
    }

    #[test]
    fn plan_is_keyed_by_binding_uid_kind_and_direction() {
        let mut case = Case::cluster();
        case.input.resource = ResourceKind::Configmaps;
        case.input.direction = Direction::FromConsumer;
        let plan = case.plan();
        assert_eq!(
            plan.key,
            PlanKey {
                binding_uid: UID.into(),
                resource: ResourceKind::Configmaps,
                direction: Direction::FromConsumer,
            }
        );
    }

    #[test]
    fn entries_of_one_kind_and_direction_share_garbage_collection() {
        // Copies are keyed by binding UID and kind+direction, not by selector: a second
        // entry for the same kind/direction sees the first entry's copies as its own and
        // deletes them when it does not select them (the spec's documented caveat).
        let plan = Case::cluster()
            .names(&["second"])
            .sources(vec![source("a", "first", &[]), source("a", "second", &[])])
            .targets(vec![target("a", "first", Some(UID))])
            .plan();
        assert_eq!(refs(&plan.delete), ["a/first"]);
    }
}
