//! Events of the failures not covered with their conditions: an unreachable provider and an
//! autoBind name clash, each one Warning when the Connection enters it (not one per periodic
//! reconcile).

use super::*;

#[tokio::test]
async fn an_unreachable_provider_is_one_warning() -> anyhow::Result<()> {
    on_consumer(async |pair, consumer| {
        let name = unique("events-unreachable");
        // The provider's own kubeconfig, pointing at a port nothing listens on.
        let nowhere = format!("https://127.0.0.1:{}", free_port()?);
        let kubeconfig = pair.provider.admin().kubeconfig_yaml()?;
        let kubeconfig = kubeconfig.replace(&pair.provider.server(), &nowhere);
        anyhow::ensure!(kubeconfig.contains(&nowhere), "server replaced");
        connect_with(consumer, &name, Some(&kubeconfig), crd_source()).await?;
        published_once(consumer, &name, "Warning", "ProviderUnreachable").await?;
        delete_connection(consumer, &name).await
    })
    .await
}

#[tokio::test]
async fn an_auto_bind_name_clash_is_one_warning_and_a_condition_while_it_lasts()
-> anyhow::Result<()> {
    on_consumer(async |pair, consumer| {
        let name = unique("events-taken");
        // A ClusterBinding of the consumer's own under the name autoBind would use; it points
        // elsewhere, so it never holds up this Connection's deletion.
        elsewhere_cluster_binding(consumer, &name, &name).await?;
        connect(consumer, &pair.provider, &name, crd_source(), true).await?;

        let warning = published_once(consumer, &name, "Warning", "AutoBindNameTaken").await?;
        let note = warning.note.unwrap_or_default();
        assert!(
            note.contains(&format!("ClusterBinding {name} exists")),
            "{note}"
        );
        assert_eq!(warning.action.as_deref(), Some("AutoBind"));
        let taken =
            wait_reason(consumer, &name, "AutoBindInSync=False", "AutoBindNameTaken").await?;
        assert!(
            has_condition(&taken, "Ready", "True", "AsExpected"),
            "a name clash does not make the Connection unready"
        );
        let bindings: Api<ClusterBinding> = Api::all(consumer.clone());
        let theirs = bindings.get(&name).await?;
        assert!(
            !theirs.labels().contains_key(MANAGED_LABEL),
            "autoBind left it alone"
        );

        // autoBind off: nothing left to report.
        let off = json!({ "spec": { "autoBind": false } });
        Api::<Connection>::all(consumer.clone())
            .patch(&name, &PatchParams::default(), &Patch::Merge(&off))
            .await?;
        wait_connection(consumer, &name, "no AutoBindInSync condition", |c| {
            condition(c, "AutoBindInSync").is_none()
        })
        .await?;
        delete_connection(consumer, &name).await?;
        bindings.delete(&name, &DeleteParams::default()).await?;
        anyhow::Ok(())
    })
    .await
}
