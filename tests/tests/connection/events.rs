//! Events on Connections: a Warning per failure reason when the Connection enters it (not one
//! per periodic reconcile), and a Normal Event when it becomes Ready.

use super::*;
use k8s_openapi::api::events::v1::Event;
use kbind_tests::syncenv::events_for;

/// Events on Connection `name` with `reason`.
async fn events_with(
    consumer: &kube::Client,
    name: &str,
    reason: &str,
) -> anyhow::Result<Vec<Event>> {
    Ok(events_for(consumer, None, name)
        .await?
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect())
}

/// Waits for the first Event of `type_` and `reason` on Connection `name`.
async fn wait_event(
    consumer: &kube::Client,
    name: &str,
    type_: &str,
    reason: &str,
) -> anyhow::Result<Event> {
    eventually(CONVERGE, || async {
        events_with(consumer, name, reason)
            .await?
            .into_iter()
            .find(|e| e.type_.as_deref() == Some(type_))
            .with_context(|| format!("no {type_} {reason} Event on {name} yet"))
    })
    .await
}

/// Waits for a Warning `reason`, then lets several periodic reconciles (1 s apart in tests)
/// pass and checks it is still the one Event, published once.
async fn warned_once(consumer: &kube::Client, name: &str, reason: &str) -> anyhow::Result<Event> {
    let first = wait_event(consumer, name, "Warning", reason).await?;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let all = events_with(consumer, name, reason).await?;
    assert_eq!(all.len(), 1, "one {reason} Event: {all:?}");
    assert!(
        all[0].series.is_none(),
        "{reason} published once, not per reconcile: {all:?}"
    );
    Ok(first)
}

#[tokio::test]
async fn each_failure_reason_is_one_warning_and_becoming_ready_a_normal_event() -> anyhow::Result<()>
{
    on_consumer(async |pair, consumer| {
        let name = unique("events");
        create_connection(
            consumer,
            &connection(&name, &name, SchemaPolicy::default(), false),
        )
        .await?;
        let missing = warned_once(consumer, &name, "SecretNotFound").await?;
        let note = missing.note.unwrap_or_default();
        assert!(note.contains(&name), "names the Secret to create: {note}");
        let regarding = missing.regarding.context("regarding")?;
        assert_eq!(regarding.kind.as_deref(), Some("Connection"));
        assert_eq!(regarding.name.as_deref(), Some(name.as_str()));

        put_kubeconfig_secret(consumer, &name, "{{{ not a kubeconfig").await?;
        warned_once(consumer, &name, "KubeconfigInvalid").await?;

        put_kubeconfig_secret(consumer, &name, &pair.provider.admin().kubeconfig_yaml()?).await?;
        wait_ready(consumer, &name).await?;
        let ready = wait_event(consumer, &name, "Normal", "Ready").await?;
        assert!(
            ready
                .note
                .is_some_and(|n| n.contains("connected to provider cluster")),
            "says what it is connected to"
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(events_with(consumer, &name, "Ready").await?.len(), 1);

        Api::<Connection>::all(consumer.clone())
            .delete(&name, &DeleteParams::default())
            .await?;
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn refused_and_unreachable_providers_are_warnings() -> anyhow::Result<()> {
    on_consumer(async |pair, consumer| {
        // No RBAC at all: the identity read is refused.
        let refused = unique("events-refused");
        connect_as(pair, consumer, &refused, Vec::new(), crd_source()).await?;
        let warning = warned_once(consumer, &refused, "Forbidden").await?;
        assert!(
            warning.note.is_some_and(|n| n.contains("kube-system")),
            "says what was refused"
        );

        // The provider's own kubeconfig, pointing at a port nothing listens on.
        let unreachable = unique("events-unreachable");
        let port = free_port()?;
        let server = pair.provider.server();
        let kubeconfig = pair
            .provider
            .admin()
            .kubeconfig_yaml()?
            .replace(&server, &format!("https://127.0.0.1:{port}"));
        anyhow::ensure!(kubeconfig.contains(&port.to_string()), "server replaced");
        put_kubeconfig_secret(consumer, &unreachable, &kubeconfig).await?;
        create_connection(
            consumer,
            &connection(&unreachable, &unreachable, crd_source(), false),
        )
        .await?;
        warned_once(consumer, &unreachable, "ProviderUnreachable").await?;

        for name in [refused, unreachable] {
            Api::<Connection>::all(consumer.clone())
                .delete(&name, &DeleteParams::default())
                .await?;
        }
        anyhow::Ok(())
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
        let bindings: Api<ClusterBinding> = Api::all(consumer.clone());
        let theirs = elsewhere_cluster_binding(&name, &name);
        bindings.create(&PostParams::default(), &theirs).await?;
        put_kubeconfig_secret(consumer, &name, &pair.provider.admin().kubeconfig_yaml()?).await?;
        let connections: Api<Connection> = Api::all(consumer.clone());
        connections
            .create(
                &PostParams::default(),
                &connection(&name, &name, crd_source(), true),
            )
            .await?;

        let warning = warned_once(consumer, &name, "AutoBindNameTaken").await?;
        let note = warning.note.unwrap_or_default();
        assert!(
            note.contains(&format!("ClusterBinding {name} exists")),
            "{note}"
        );
        assert_eq!(warning.action.as_deref(), Some("AutoBind"));
        let taken = wait_connection(consumer, &name, "AutoBindInSync=False", |c| {
            has_condition(c, "AutoBindInSync", "False", "AutoBindNameTaken")
        })
        .await?;
        assert!(
            has_condition(&taken, "Ready", "True", "AsExpected"),
            "a name clash does not make the Connection unready"
        );
        let theirs = bindings.get(&name).await?;
        assert!(
            !theirs.labels().contains_key(MANAGED_LABEL),
            "autoBind left the other ClusterBinding alone"
        );

        // autoBind off: nothing left to report.
        connections
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "autoBind": false } })),
            )
            .await?;
        wait_connection(consumer, &name, "no AutoBindInSync condition", |c| {
            condition(c, "AutoBindInSync").is_none()
        })
        .await?;
        connections.delete(&name, &DeleteParams::default()).await?;
        bindings.delete(&name, &DeleteParams::default()).await?;
        anyhow::Ok(())
    })
    .await
}
