//! The built-in placement policy: where on the provider a consumer object's copy lives, by
//! the Connection's `spec.isolation.strategy` and consumer prefix.
//!
//! | strategy | namespaced object | cluster-scoped object |
//! |---|---|---|
//! | `None` | namespace and name unchanged | name unchanged |
//! | `Namespaced` | namespace `<prefix>-<namespace>`, name unchanged | name `<prefix>-<name>` |
//! | `Prefixed` | namespace unchanged, name `<prefix>-<name>` | name `<prefix>-<name>` |
//!
//! A composed name longer than Kubernetes allows (63 for a namespace, 253 for an object name)
//! is cut by [`fit_name`]: a prefix of it, `-` and a stable hash of the whole, so two long
//! names never cut down to the same place. Each answer depends on the input alone, so the same
//! object is always placed the same way; the host checks the answer and records it on the
//! copy, and never asks again for that object.

use kbind_policy_sdk::placement::{
    Guest, Location, MAX_NAME_LEN, MAX_NAMESPACE_LEN, PlacementInput, ResourceScope, Strategy,
    fit_name,
};

/// The built-in policy, exported as the component's `kbind:policy/placement` interface.
pub struct BuiltinPlacementPolicy;

impl Guest for BuiltinPlacementPolicy {
    /// Takes no settings: an empty document, or the module is refused with a message naming
    /// what was given.
    fn configure(settings: String) -> Result<(), String> {
        kbind_policy_sdk::settings::none(&settings)
    }

    fn place(input: PlacementInput) -> Result<Location, String> {
        place(&input)
    }
}

kbind_policy_sdk::export_placement_policy!(BuiltinPlacementPolicy);

/// Applies the strategy table. An input whose namespace does not match its API's scope is an
/// error: the host never sends one, and guessing would place the copy somewhere unexpected.
pub fn place(input: &PlacementInput) -> Result<Location, String> {
    let prefixed = |s: &str, max_len| fit_name(&format!("{}-{s}", input.isolation.prefix), max_len);
    let name = &input.name;
    let strategy = input.isolation.strategy;
    match (input.api.scope, &input.namespace) {
        (ResourceScope::Namespaced, Some(namespace)) => Ok(match strategy {
            Strategy::None => Location {
                namespace: Some(namespace.clone()),
                name: name.clone(),
            },
            Strategy::Namespaced => Location {
                namespace: Some(prefixed(namespace, MAX_NAMESPACE_LEN)),
                name: name.clone(),
            },
            Strategy::Prefixed => Location {
                namespace: Some(namespace.clone()),
                name: prefixed(name, MAX_NAME_LEN),
            },
        }),
        (ResourceScope::Cluster, None) => Ok(Location {
            namespace: None,
            name: match strategy {
                Strategy::None => name.clone(),
                Strategy::Namespaced | Strategy::Prefixed => prefixed(name, MAX_NAME_LEN),
            },
        }),
        (ResourceScope::Namespaced, None) => Err(format!(
            "{} {name} has no namespace, but {} is namespaced",
            input.api.kind,
            api_name(input)
        )),
        (ResourceScope::Cluster, Some(namespace)) => Err(format!(
            "{} {namespace}/{name} has a namespace, but {} is cluster-scoped",
            input.api.kind,
            api_name(input)
        )),
    }
}

/// `<resource>.<group>`, or the resource alone for the core group.
fn api_name(input: &PlacementInput) -> String {
    match input.api.group.as_str() {
        "" => input.api.resource.clone(),
        group => format!("{}.{group}", input.api.resource),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbind_policy_sdk::placement::{Api, Isolation, short_hash};

    const PREFIX: &str = "east";

    fn input(strategy: Strategy, namespace: Option<&str>, name: &str) -> PlacementInput {
        PlacementInput {
            consumer_cluster_uid: "6f1c2a4e-consumer-cluster".into(),
            connection: "provider".into(),
            api: Api {
                group: "example.org".into(),
                resource: "widgets".into(),
                kind: "Widget".into(),
                scope: match namespace {
                    Some(_) => ResourceScope::Namespaced,
                    None => ResourceScope::Cluster,
                },
            },
            namespace: namespace.map(Into::into),
            name: name.into(),
            isolation: Isolation {
                strategy,
                prefix: PREFIX.into(),
            },
        }
    }

    fn placed(input: &PlacementInput) -> (Option<String>, String) {
        match place(input) {
            Ok(l) => (l.namespace, l.name),
            Err(e) => panic!("placing {input:?}: {e}"),
        }
    }

    fn at(namespace: Option<&str>, name: &str) -> (Option<String>, String) {
        (namespace.map(Into::into), name.into())
    }

    #[test]
    fn none_keeps_namespace_and_name() {
        let copy = placed(&input(Strategy::None, Some("team-a"), "w1"));
        assert_eq!(copy, at(Some("team-a"), "w1"));
    }

    #[test]
    fn none_keeps_a_cluster_scoped_name() {
        assert_eq!(placed(&input(Strategy::None, None, "w1")), at(None, "w1"));
    }

    #[test]
    fn namespaced_prefixes_the_namespace_and_keeps_the_name() {
        let copy = placed(&input(Strategy::Namespaced, Some("team-a"), "w1"));
        assert_eq!(copy, at(Some("east-team-a"), "w1"));
    }

    #[test]
    fn namespaced_prefixes_a_cluster_scoped_name() {
        let copy = placed(&input(Strategy::Namespaced, None, "w1"));
        assert_eq!(copy, at(None, "east-w1"));
    }

    #[test]
    fn prefixed_names_keep_the_namespace() {
        let copy = placed(&input(Strategy::Prefixed, Some("team-a"), "w1"));
        assert_eq!(copy, at(Some("team-a"), "east-w1"));
    }

    #[test]
    fn prefixed_prefixes_a_cluster_scoped_name() {
        let copy = placed(&input(Strategy::Prefixed, None, "w1"));
        assert_eq!(copy, at(None, "east-w1"));
    }

    #[test]
    fn a_long_prefixed_namespace_is_shortened_by_hash() {
        let namespace = "n".repeat(63);
        let (ns, name) = placed(&input(Strategy::Namespaced, Some(&namespace), "w1"));
        let full = format!("east-{namespace}");
        assert_eq!(ns, Some(format!("{}-{}", &full[..52], short_hash(&full))));
        assert_eq!(ns.map(|n| n.len()), Some(MAX_NAMESPACE_LEN));
        assert_eq!(name, "w1");
    }

    #[test]
    fn a_long_prefixed_name_is_shortened_by_hash() {
        let long = "w".repeat(253);
        let (_, name) = placed(&input(Strategy::Prefixed, Some("team-a"), &long));
        assert_eq!(name.len(), MAX_NAME_LEN);
        assert!(name.starts_with("east-www"), "{name}");
        assert!(
            name.ends_with(&short_hash(&format!("east-{long}"))),
            "{name}"
        );
    }

    #[test]
    fn long_names_that_start_alike_are_placed_apart() {
        let stem = "w".repeat(250);
        for strategy in [Strategy::Namespaced, Strategy::Prefixed] {
            let a = placed(&input(strategy, None, &format!("{stem}-a")));
            let b = placed(&input(strategy, None, &format!("{stem}-b")));
            assert_ne!(a, b, "{strategy:?}");
        }
        let stem = "n".repeat(60);
        let a = placed(&input(
            Strategy::Namespaced,
            Some(&format!("{stem}-a")),
            "w",
        ));
        let b = placed(&input(
            Strategy::Namespaced,
            Some(&format!("{stem}-b")),
            "w",
        ));
        assert_ne!(a, b);
    }

    #[test]
    fn the_same_object_is_always_placed_the_same_way() {
        let long = input(Strategy::Prefixed, Some("team-a"), &"w".repeat(300));
        assert_eq!(placed(&long), placed(&long));
    }

    #[test]
    fn a_namespaced_object_without_a_namespace_is_an_error() {
        let mut i = input(Strategy::None, None, "w1");
        i.api.scope = ResourceScope::Namespaced;
        let e = place(&i);
        assert_eq!(
            e,
            Err("Widget w1 has no namespace, but widgets.example.org is namespaced".into())
        );
    }

    #[test]
    fn a_cluster_scoped_object_with_a_namespace_is_an_error() {
        let mut i = input(Strategy::Prefixed, Some("team-a"), "w1");
        i.api.scope = ResourceScope::Cluster;
        let e = place(&i);
        assert!(e.is_err_and(|e| e.contains("is cluster-scoped")));
    }
}
