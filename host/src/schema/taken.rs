//! Which names the consumer's resources already answer to, read from consumer discovery, and
//! whether a CRD to install would take one over.
//!
//! ```text
//! consumer discovery (/api, /apis: every group) ──▶ every other resource's plural, singular,
//!                                                    kind (lowercase), short names
//!    ├─ all of them: a bound API's shortNames and categories that match are dropped
//!    └─ those of resources no CRD defines (built-in and aggregated APIs): a bound API whose
//!       plural, singular or kind is one of them is refused ([`collision`])
//! ```
//!
//! `kubectl get configmaps` resolves a bare name across groups: a bound API in a custom group
//! with plural `configmaps` would make it mean something else (or ambiguous). Resources
//! defined by CRDs are kept apart by their group as Kubernetes keeps them (two providers may
//! both export `widgets`); their short names are still never shadowed. The API itself (its
//! CRD as installed earlier) does not collide with itself.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionNames,
};
use kube::api::{Api, ListParams};
use kube::core::discovery::v2::APIGroupDiscoveryList;

use crate::api::ExportedApi;

/// Every name the consumer's other resources answer to, each with the resource holding it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TakenNames {
    /// Names of every other resource: plural, singular, kind (lowercase), short names.
    names: BTreeMap<String, String>,
    /// The subset held by resources no CRD defines (built-in and aggregated APIs).
    reserved: BTreeMap<String, String>,
}

/// A name of a CRD to install that a consumer resource already answers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Collision {
    /// Which name of the CRD: `plural`, `singular` or `kind`.
    pub field: &'static str,
    /// The name (lowercase).
    pub name: String,
    /// The consumer resource answering to it (`<plural>` or `<plural>.<group>`).
    pub holder: String,
}

impl TakenNames {
    /// Names taken by every discovered resource except `api` itself (its own installed CRD
    /// must not make its names collide with themselves). `crds` names the consumer's CRDs
    /// (`<plural>.<group>`): their resources take names for aliases only.
    pub fn from_discovery<'a>(
        lists: impl IntoIterator<Item = &'a APIGroupDiscoveryList>,
        api: &ExportedApi,
        crds: &BTreeSet<String>,
    ) -> Self {
        let mut taken = Self::default();
        for group in lists.into_iter().flat_map(|l| &l.items) {
            let group_name = group
                .metadata
                .as_ref()
                .and_then(|m| m.name.as_deref())
                .unwrap_or("");
            for resource in group.versions.iter().flat_map(|v| &v.resources) {
                let Some(plural) = resource.resource.as_deref() else {
                    continue;
                };
                if group_name == api.group && plural == api.resource {
                    continue;
                }
                let holder = if group_name.is_empty() {
                    plural.to_string()
                } else {
                    format!("{plural}.{group_name}")
                };
                let kind = resource
                    .response_kind
                    .as_ref()
                    .and_then(|k| k.kind.as_deref())
                    .map(str::to_lowercase);
                let names = std::iter::once(plural.to_string())
                    .chain(resource.singular_resource.iter().cloned())
                    .chain(kind)
                    .chain(resource.short_names.iter().cloned())
                    .filter(|n| !n.is_empty());
                let defined_by_crd = crds.contains(&holder);
                for name in names {
                    if !defined_by_crd {
                        taken
                            .reserved
                            .entry(name.clone())
                            .or_insert_with(|| holder.clone());
                    }
                    taken.names.entry(name).or_insert_with(|| holder.clone());
                }
            }
        }
        taken
    }

    /// Reads the consumer's aggregated discovery (`/api` and `/apis`) and its CRD names.
    pub async fn discover(consumer: &kube::Client, api: &ExportedApi) -> Result<Self, kube::Error> {
        let core = consumer.list_core_api_versions_aggregated().await?;
        let groups = consumer.list_api_groups_aggregated().await?;
        let crds: Api<CustomResourceDefinition> = Api::all(consumer.clone());
        let crds: BTreeSet<String> = crds
            .list_metadata(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|crd| crd.metadata.name)
            .collect();
        Ok(Self::from_discovery([&core, &groups], api, &crds))
    }

    /// Whether another consumer resource answers to `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }
}

/// The first of `names`' plural, singular and kind (lowercase) that a consumer resource no CRD
/// defines already answers to. Short names are not refused: they are dropped instead.
pub fn collision(names: &CustomResourceDefinitionNames, taken: &TakenNames) -> Option<Collision> {
    let candidates = [
        ("plural", Some(names.plural.to_lowercase())),
        ("singular", names.singular.as_deref().map(str::to_lowercase)),
        ("kind", Some(names.kind.to_lowercase())),
    ];
    candidates.into_iter().find_map(|(field, name)| {
        let name = name.filter(|n| !n.is_empty())?;
        let holder = taken.reserved.get(&name)?.clone();
        Some(Collision {
            field,
            name,
            holder,
        })
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::api::ResourceScope;
    use serde_json::json;

    pub(crate) fn api(group: &str, resource: &str) -> ExportedApi {
        ExportedApi {
            name: format!("{resource}.{group}"),
            group: group.into(),
            resource: resource.into(),
            scope: ResourceScope::Namespaced,
            versions: vec!["v1".into()],
        }
    }

    /// Consumer discovery with core pods and configmaps, apps deployments, and the CRDs
    /// `widgets.example.org` (short name `wd`) and `gadgets.other.org` (short name `gd`).
    pub(crate) fn taken_for(api: &ExportedApi) -> TakenNames {
        let core: APIGroupDiscoveryList = serde_json::from_value(json!({"items": [{
            "metadata": {"name": ""},
            "versions": [{"version": "v1", "resources": [
                {"resource": "pods", "singularResource": "pod", "shortNames": ["po"],
                 "categories": ["all"], "responseKind": {"kind": "Pod"}},
                {"resource": "configmaps", "singularResource": "configmap",
                 "shortNames": ["cm"], "responseKind": {"kind": "ConfigMap"}}
            ]}]
        }]}))
        .unwrap_or_default();
        let groups: APIGroupDiscoveryList = serde_json::from_value(json!({"items": [
            {"metadata": {"name": "apps"}, "versions": [{"version": "v1", "resources": [
                {"resource": "deployments", "singularResource": "deployment",
                 "shortNames": ["deploy"], "responseKind": {"kind": "Deployment"}}
            ]}]},
            {"metadata": {"name": "example.org"}, "versions": [{"version": "v1", "resources": [
                {"resource": "widgets", "singularResource": "widget", "shortNames": ["wd"],
                 "responseKind": {"kind": "Widget"}}
            ]}]},
            {"metadata": {"name": "other.org"}, "versions": [{"version": "v1", "resources": [
                {"resource": "gadgets", "singularResource": "gadget", "shortNames": ["gd"],
                 "responseKind": {"kind": "Gadget"}}
            ]}]}
        ]}))
        .unwrap_or_default();
        let crds = BTreeSet::from(["widgets.example.org".into(), "gadgets.other.org".into()]);
        TakenNames::from_discovery([&core, &groups], api, &crds)
    }

    fn names(plural: &str, singular: &str, kind: &str) -> CustomResourceDefinitionNames {
        CustomResourceDefinitionNames {
            plural: plural.into(),
            singular: Some(singular.into()),
            kind: kind.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_plural_singular_or_kind_of_a_built_in_resource_collides_and_names_it() {
        let taken = taken_for(&api("collide.example.org", "configmaps"));
        let cases = [
            (
                names("configmaps", "thing", "Thing"),
                "plural",
                "configmaps",
            ),
            (names("things", "pod", "Thing"), "singular", "pods"),
            (
                names("things", "thing", "Deployment"),
                "kind",
                "deployments.apps",
            ),
            (names("po", "thing", "Thing"), "plural", "pods"),
        ];
        for (names, field, holder) in cases {
            let collision = collision(&names, &taken);
            assert_eq!(
                collision.as_ref().map(|c| (c.field, c.holder.as_str())),
                Some((field, holder)),
                "{names:?}"
            );
        }
    }

    #[test]
    fn names_of_other_crds_and_of_the_api_itself_do_not_collide() {
        // Two providers may both export `gadgets`; the group keeps them apart.
        let taken = taken_for(&api("mine.org", "gadgets"));
        assert_eq!(
            collision(&names("gadgets", "gadget", "Gadget"), &taken),
            None
        );
        assert!(
            taken.contains("gd"),
            "other CRDs' short names are still taken"
        );
        // On an update, discovery lists the API's own installed CRD.
        let own = taken_for(&api("example.org", "widgets"));
        assert_eq!(collision(&names("widgets", "widget", "Widget"), &own), None);
        assert!(!own.contains("wd") && !own.contains("widget"));
    }

    #[test]
    fn every_name_of_other_resources_is_taken_for_aliases() {
        let taken = taken_for(&api("example.org", "widgets"));
        for name in ["po", "pod", "pods", "configmap", "deploy", "gadget"] {
            assert!(taken.contains(name), "{name}");
        }
    }
}
