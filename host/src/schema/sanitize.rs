//! What of a CRD reaches the consumer, whatever its source (the provider's own CRD or the
//! schema-synthesis module's answer): only what a consumer needs to serve the API.
//!
//! ```text
//! source CRD ──▶ group, plural and scope must be the exported API's
//!            ──▶ kept: group, names, scope, versions (name, served, storage, schema,
//!                      subresources, additionalPrinterColumns, selectableFields); of a
//!                      source converting with a webhook (or synthesized), the synced
//!                      version only ([`super::versions`])
//!            ──▶ dropped: every label, annotation, finalizer and ownerReference of the
//!                      source, conversion webhooks (strategy None), deprecation texts,
//!                      shortNames and categories another consumer resource already answers
//!                      to, and the category `all`
//!            ──▶ added: core.kbind.io/connection: <Connection>, and
//!                      core.kbind.io/versions-left-out when versions were left out
//! ```
//!
//! A plural, singular or kind that a built-in or aggregated consumer resource answers to is
//! refused before this, by the install path ([`super::taken::collision`]).
//!
//! The host enforces this after the module answered, so a swapped schema module cannot plant
//! a conversion webhook pointing anywhere, hold the CRD with a finalizer, hand it to an owner
//! whose deletion garbage-collects it, or take over `kubectl get po` / `kubectl get all`.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, CustomResourceDefinitionNames,
    CustomResourceDefinitionSpec, CustomResourceDefinitionVersion,
};
use kube::api::ObjectMeta;

use super::taken::TakenNames;
use super::versions::{self, Conversion};
use crate::api::names::{CONNECTION_ANNOTATION, VERSIONS_LEFT_OUT_ANNOTATION};
use crate::api::{ExportedApi, ResourceScope};

/// The category kubectl expands for `kubectl get all`; no bound API joins it.
pub const CATEGORY_ALL: &str = "all";

/// How the source converts between its versions, and which versions the existing consumer CRD
/// has stored objects in: what decides the versions the consumer CRD serves ([`versions`]).
#[derive(Clone, Copy, Debug)]
pub struct Versioning<'a> {
    /// The provider's conversion (`Unknown` for a synthesized schema).
    pub conversion: Conversion,
    /// The existing consumer CRD's `status.storedVersions`, empty on a first install.
    pub stored: &'a [String],
}

/// The consumer's copy of `source` for `api`, pinned to `connection`. `Err` names what makes
/// the source unacceptable (a CRD for another group, resource or scope, or no version to sync).
pub fn consumer_crd(
    source: &CustomResourceDefinition,
    api: &ExportedApi,
    connection: &str,
    taken: &TakenNames,
    versioning: Versioning<'_>,
) -> Result<CustomResourceDefinition, String> {
    let spec = &source.spec;
    if spec.group != api.group {
        return Err(format!(
            "spec.group is {:?}, expected {:?}",
            spec.group, api.group
        ));
    }
    if spec.names.plural != api.resource {
        return Err(format!(
            "spec.names.plural is {:?}, expected {:?}",
            spec.names.plural, api.resource
        ));
    }
    let scope = match api.scope {
        ResourceScope::Namespaced => "Namespaced",
        ResourceScope::Cluster => "Cluster",
    };
    if spec.scope != scope {
        return Err(format!(
            "spec.scope is {:?}, but the provider serves {} as {scope}",
            spec.scope, api.name
        ));
    }
    let cut: Vec<CustomResourceDefinitionVersion> = spec.versions.iter().map(version).collect();
    let plan = versions::plan(
        &cut,
        versioning.conversion,
        &api.versions,
        versioning.stored,
    )?;
    let mut annotations =
        BTreeMap::from([(CONNECTION_ANNOTATION.to_string(), connection.to_string())]);
    if let Some(left_out) = plan.left_out {
        annotations.insert(VERSIONS_LEFT_OUT_ANNOTATION.to_string(), left_out);
    }
    Ok(CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(api.name.clone()),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: spec.group.clone(),
            names: names(&spec.names, taken),
            scope: spec.scope.clone(),
            versions: plan.versions,
            // Conversion webhooks point at services the consumer does not run (or anywhere a
            // module chooses): the consumer apiserver converts nothing but apiVersion, which is
            // why versions the provider converts for real are not served ([`versions`]).
            conversion: Some(CustomResourceConversion {
                strategy: "None".into(),
                webhook: None,
            }),
            preserve_unknown_fields: None,
        },
        status: None,
    })
}

fn names(
    names: &CustomResourceDefinitionNames,
    taken: &TakenNames,
) -> CustomResourceDefinitionNames {
    let keep = |list: &Option<Vec<String>>, extra_forbidden: Option<&str>| {
        let mut seen = BTreeSet::new();
        let kept: Vec<String> = list
            .iter()
            .flatten()
            .filter(|n| Some(n.as_str()) != extra_forbidden && !taken.contains(n))
            .filter(|n| seen.insert(n.as_str()))
            .cloned()
            .collect();
        (!kept.is_empty()).then_some(kept)
    };
    CustomResourceDefinitionNames {
        plural: names.plural.clone(),
        singular: names.singular.clone(),
        kind: names.kind.clone(),
        list_kind: names.list_kind.clone(),
        short_names: keep(&names.short_names, None),
        categories: keep(&names.categories, Some(CATEGORY_ALL)),
    }
}

fn version(v: &CustomResourceDefinitionVersion) -> CustomResourceDefinitionVersion {
    CustomResourceDefinitionVersion {
        name: v.name.clone(),
        served: v.served,
        storage: v.storage,
        schema: v.schema.clone(),
        subresources: v.subresources.clone(),
        additional_printer_columns: v.additional_printer_columns.clone(),
        selectable_fields: v.selectable_fields.clone(),
        deprecated: None,
        deprecation_warning: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceDefinitionStatus, WebhookConversion,
    };
    use kube::core::discovery::v2::APIGroupDiscoveryList;
    use serde_json::json;

    /// A source converting with None, over no existing consumer CRD.
    const NONE: Versioning<'static> = Versioning {
        conversion: Conversion::None,
        stored: &[],
    };

    fn api() -> ExportedApi {
        ExportedApi {
            name: "widgets.example.org".into(),
            group: "example.org".into(),
            resource: "widgets".into(),
            scope: ResourceScope::Namespaced,
            versions: vec!["v1".into()],
        }
    }

    fn hostile_crd() -> CustomResourceDefinition {
        let mut crd: CustomResourceDefinition = serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {
                "name": "widgets.example.org",
                "uid": "u-1",
                "resourceVersion": "42",
                "labels": {"core.kbind.io/exported": "true", "evil": "yes"},
                "annotations": {"core.kbind.io/connection": "someone-else", "evil": "yes"},
                "finalizers": ["evil.example.com/hold"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "Namespace", "name": "gone", "uid": "u-0"}],
                "managedFields": [{"manager": "kubectl"}]
            },
            "spec": {
                "group": "example.org",
                "names": {
                    "plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList",
                    "shortNames": ["po", "wd", "wd"],
                    "categories": ["all", "pods", "gadgets"]
                },
                "scope": "Namespaced",
                "preserveUnknownFields": false,
                "conversion": {"strategy": "Webhook", "webhook": {
                    "clientConfig": {"url": "https://evil.example.com/convert"},
                    "conversionReviewVersions": ["v1"]
                }},
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "deprecated": true, "deprecationWarning": "visit evil.example.com",
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                    "selectableFields": [{"jsonPath": ".spec.color"}]
                }]
            }
        }))
        .unwrap_or_default();
        crd.status = Some(CustomResourceDefinitionStatus::default());
        crd
    }

    fn pods_taken() -> TakenNames {
        let core: APIGroupDiscoveryList = serde_json::from_value(json!({"items": [{
            "metadata": {"name": ""},
            "versions": [{"version": "v1", "resources": [
                {"resource": "pods", "singularResource": "pod", "shortNames": ["po"], "categories": ["all"]}
            ]}]
        }]}))
        .unwrap_or_default();
        let groups: APIGroupDiscoveryList = serde_json::from_value(json!({"items": [{
            "metadata": {"name": "example.org"},
            "versions": [{"version": "v1", "resources": [
                {"resource": "widgets", "singularResource": "widget", "shortNames": ["wd"]}
            ]}]
        }]}))
        .unwrap_or_default();
        TakenNames::from_discovery([&core, &groups], &api(), &Default::default())
    }

    #[test]
    fn foreign_metadata_is_dropped_and_only_the_connection_pin_remains() {
        let crd =
            consumer_crd(&hostile_crd(), &api(), "p", &pods_taken(), NONE).unwrap_or_default();
        let meta = &crd.metadata;
        assert_eq!(meta.name.as_deref(), Some("widgets.example.org"));
        assert!(meta.uid.is_none() && meta.resource_version.is_none());
        assert!(meta.managed_fields.is_none());
        assert!(meta.labels.is_none(), "{:?}", meta.labels);
        assert!(meta.finalizers.is_none(), "{:?}", meta.finalizers);
        assert!(meta.owner_references.is_none());
        assert_eq!(
            meta.annotations,
            Some(BTreeMap::from([(
                CONNECTION_ANNOTATION.to_string(),
                "p".to_string()
            )]))
        );
        assert!(crd.status.is_none());
    }

    #[test]
    fn conversion_webhooks_are_replaced_by_strategy_none() {
        let crd =
            consumer_crd(&hostile_crd(), &api(), "p", &pods_taken(), NONE).unwrap_or_default();
        let conversion = crd.spec.conversion.unwrap_or_default();
        assert_eq!(conversion.strategy, "None");
        assert!(conversion.webhook.is_none());
    }

    #[test]
    fn short_names_and_categories_of_other_resources_and_all_are_dropped() {
        let crd =
            consumer_crd(&hostile_crd(), &api(), "p", &pods_taken(), NONE).unwrap_or_default();
        assert_eq!(crd.spec.names.short_names, Some(vec!["wd".to_string()]));
        assert_eq!(crd.spec.names.categories, Some(vec!["gadgets".to_string()]));
        assert_eq!(crd.spec.names.kind, "Widget");
        assert_eq!(crd.spec.names.list_kind.as_deref(), Some("WidgetList"));
        assert_eq!(crd.spec.names.singular.as_deref(), Some("widget"));
    }

    #[test]
    fn nothing_left_of_a_list_leaves_the_field_out() {
        let mut source = hostile_crd();
        source.spec.names.short_names = Some(vec!["po".into()]);
        source.spec.names.categories = Some(vec!["all".into()]);
        let crd = consumer_crd(&source, &api(), "p", &pods_taken(), NONE).unwrap_or_default();
        assert!(crd.spec.names.short_names.is_none());
        assert!(crd.spec.names.categories.is_none());
    }

    #[test]
    fn versions_keep_schema_subresources_columns_and_selectable_fields_only() {
        let crd =
            consumer_crd(&hostile_crd(), &api(), "p", &pods_taken(), NONE).unwrap_or_default();
        let v = &crd.spec.versions[..];
        assert_eq!(v.len(), 1);
        assert!(v[0].served && v[0].storage);
        assert!(v[0].schema.is_some());
        assert!(
            v[0].subresources
                .as_ref()
                .is_some_and(|s| s.status.is_some())
        );
        assert_eq!(
            v[0].additional_printer_columns.as_ref().map(Vec::len),
            Some(1)
        );
        assert_eq!(v[0].selectable_fields.as_ref().map(Vec::len), Some(1));
        assert!(v[0].deprecated.is_none() && v[0].deprecation_warning.is_none());
        assert!(crd.spec.preserve_unknown_fields.is_none());
    }

    #[test]
    fn a_crd_for_another_group_resource_or_scope_is_refused() {
        let mut other_group = hostile_crd();
        other_group.spec.group = "core.kbind.io".into();
        let mut other_plural = hostile_crd();
        other_plural.spec.names.plural = "gadgets".into();
        let mut other_scope = hostile_crd();
        other_scope.spec.scope = "Cluster".into();
        for (source, expected) in [
            (other_group, "spec.group"),
            (other_plural, "spec.names.plural"),
            (other_scope, "spec.scope"),
        ] {
            let error = consumer_crd(&source, &api(), "p", &TakenNames::default(), NONE).err();
            assert!(
                error.as_deref().is_some_and(|e| e.contains(expected)),
                "{error:?}"
            );
        }
    }

    #[test]
    fn the_api_itself_does_not_take_its_own_names() {
        // On an update, consumer discovery lists the installed CRD with its short name `wd`.
        assert!(pods_taken().contains("po"));
        assert!(pods_taken().contains("pod"));
        assert!(!pods_taken().contains("wd"));
    }

    #[test]
    fn versions_are_copied_as_they_are_apart_from_deprecation_texts() {
        let mut source = hostile_crd();
        source.spec.conversion = Some(CustomResourceConversion {
            strategy: "Webhook".into(),
            webhook: Some(WebhookConversion::default()),
        });
        let crd =
            consumer_crd(&source, &api(), "p", &TakenNames::default(), NONE).unwrap_or_default();
        assert_eq!(crd.spec.versions, {
            let mut v = source.spec.versions.clone();
            v[0].deprecated = None;
            v[0].deprecation_warning = None;
            v
        });
    }

    #[test]
    fn a_webhook_converted_source_serves_only_the_synced_version_and_says_so() {
        let mut source = hostile_crd();
        let mut beta = source.spec.versions[0].clone();
        beta.name = "v1beta1".into();
        beta.storage = false;
        source.spec.versions.insert(0, beta);
        let served = |versioning| {
            let crd = consumer_crd(&source, &api(), "p", &TakenNames::default(), versioning)
                .unwrap_or_default();
            let names: Vec<String> = crd.spec.versions.iter().map(|v| v.name.clone()).collect();
            let note = crd
                .metadata
                .annotations
                .unwrap_or_default()
                .remove(VERSIONS_LEFT_OUT_ANNOTATION);
            (names, note)
        };
        let webhook = Versioning {
            conversion: Conversion::of_crd(&source),
            stored: &[],
        };
        let (names, note) = served(webhook);
        assert_eq!(names, ["v1"]);
        assert!(
            note.as_deref()
                .is_some_and(|n| n.contains("v1beta1 left out") && n.contains("webhook")),
            "{note:?}"
        );
        let (names, note) = served(NONE);
        assert_eq!(names, ["v1beta1", "v1"]);
        assert_eq!(note, None);
    }
}
