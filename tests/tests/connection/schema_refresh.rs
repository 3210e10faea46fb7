//! A consumer CRD follows its provider schema without being applied again and again: an
//! unchanged provider schema over an untouched consumer CRD is left alone on every periodic
//! reconcile, a changed one is applied once.

use super::*;
use konnector::telemetry::{ApiLabels, metrics};

/// How often the konnector applied the consumer CRD of `api`.
fn applies(api: &str) -> u64 {
    metrics()
        .schema_applies
        .get_or_create(&ApiLabels {
            api: api.to_string(),
        })
        .get()
}

#[tokio::test]
async fn unchanged_provider_schema_is_not_applied_again() -> anyhow::Result<()> {
    // A provider of its own: Connections of other tests pulling every exported CRD of the
    // shared provider would pin this one to themselves.
    with_private_provider("refresh", async |_, consumer, provider_cluster, provider| {
        let group = "refresh.schema.example.org";
        let api = format!("widgets.{group}");
        install_crd(provider, &widget_crd(group, "Widget", true)?).await?;
        let name = unique("refresh");
        pull_all(consumer, provider_cluster, &name, SchemaSource::Crd, UpdatePolicy::Always).await?;
        let first = applies(&api);
        assert!(first >= 1, "the first reconcile applies the CRD");
        // The test konnector reconciles Connections every second: several periods pass.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(applies(&api), first, "an unchanged schema is not applied again");

        let mut changed = widget_crd(group, "Widget", true)?;
        changed.spec.versions[0].schema = serde_json::from_value(json!({"openAPIV3Schema": {
            "type": "object", "properties": {
                "spec": {"type": "object", "properties": {"size": {"type": "integer"}, "shape": {"type": "string"}}},
                "status": {"type": "object", "properties": {"phase": {"type": "string"}}}
        }}}))?;
        install_crd(provider, &changed).await?;
        let consumer_crds: Api<CustomResourceDefinition> = Api::all(consumer.clone());
        eventually(CONVERGE, || async {
            let crd = consumer_crds.get(&api).await?;
            let schema = serde_json::to_value(&crd.spec.versions[0].schema)?;
            schema
                .pointer("/openAPIV3Schema/properties/spec/properties/shape")
                .map(|_| ())
                .context("consumer CRD has not followed the provider yet")
        })
        .await?;
        let after_change = applies(&api);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            applies(&api),
            after_change,
            "the changed schema is applied once, then left alone"
        );
        assert!(after_change > first);
        anyhow::Ok(())
    })
    .await
}
