//! Turning a provider CRD into the consumer's copy.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition,
};
use kube::api::ObjectMeta;

use crate::api::names::CONNECTION_ANNOTATION;

/// The consumer copy of a provider CRD: the spec without what only makes sense on the
/// provider (conversion webhooks pointing at provider services), none of the provider's
/// metadata or status, and the Connection pin.
pub fn consumer_crd_from_provider(
    provider: &CustomResourceDefinition,
    connection: &str,
) -> CustomResourceDefinition {
    let mut spec = provider.spec.clone();
    if spec
        .conversion
        .as_ref()
        .is_some_and(|c| c.strategy == "Webhook")
    {
        spec.conversion = Some(CustomResourceConversion {
            strategy: "None".into(),
            webhook: None,
        });
    }
    CustomResourceDefinition {
        metadata: ObjectMeta {
            name: provider.metadata.name.clone(),
            annotations: Some(BTreeMap::from([(
                CONNECTION_ANNOTATION.to_string(),
                connection.to_string(),
            )])),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceDefinitionStatus, WebhookConversion,
    };

    fn provider_crd() -> CustomResourceDefinition {
        let mut crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {
                "name": "widgets.example.org",
                "uid": "u-1",
                "resourceVersion": "42",
                "labels": {"core.kbind.io/exported": "true"},
                "managedFields": [{"manager": "kubectl"}]
            },
            "spec": {
                "group": "example.org",
                "names": {"plural": "widgets", "kind": "Widget"},
                "scope": "Namespaced",
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object"}}}]
            }
        }))
        .unwrap_or_default();
        crd.status = Some(CustomResourceDefinitionStatus::default());
        crd
    }

    #[test]
    fn provider_only_fields_are_stripped() {
        let consumer = consumer_crd_from_provider(&provider_crd(), "provider");
        assert_eq!(
            consumer.metadata.name.as_deref(),
            Some("widgets.example.org")
        );
        assert!(consumer.metadata.uid.is_none());
        assert!(consumer.metadata.resource_version.is_none());
        assert!(consumer.metadata.managed_fields.is_none());
        assert!(consumer.metadata.labels.is_none());
        assert!(consumer.status.is_none());
        assert_eq!(
            consumer
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(CONNECTION_ANNOTATION))
                .map(String::as_str),
            Some("provider")
        );
    }

    #[test]
    fn conversion_webhooks_are_dropped() {
        let mut crd = provider_crd();
        crd.spec.conversion = Some(CustomResourceConversion {
            strategy: "Webhook".into(),
            webhook: Some(WebhookConversion::default()),
        });
        let consumer = consumer_crd_from_provider(&crd, "provider");
        let conversion = consumer.spec.conversion.unwrap_or_default();
        assert_eq!(conversion.strategy, "None");
        assert!(conversion.webhook.is_none());
    }
}
