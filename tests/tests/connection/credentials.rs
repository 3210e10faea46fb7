//! Credentials and identity: the Secret, the kubeconfig, pinning, RBAC denials, kcp.

use super::*;

#[tokio::test]
async fn missing_secret_sets_secret_not_found() -> anyhow::Result<()> {
    on_consumer(async |_, consumer| {
        let name = unique("no-secret");
        create_connection(
            consumer,
            &connection(&name, &name, SchemaPolicy::default(), false),
        )
        .await?;
        let seen = wait_connection(consumer, &name, "SecretNotFound", |c| {
            has_condition(c, "SecretValid", "False", "SecretNotFound")
                && has_condition(c, "Ready", "False", "SecretNotFound")
        })
        .await?;
        let message = message(&seen, "SecretValid")?;
        assert!(
            message.contains(&name) && message.contains("kubeconfig"),
            "message tells what to create: {message}"
        );
        assert!(seen.finalizers().contains(&CLEANUP_FINALIZER.to_string()));
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn garbage_kubeconfig_sets_kubeconfig_invalid() -> anyhow::Result<()> {
    on_consumer(async |pair, consumer| {
        let name = unique("garbage");
        put_kubeconfig_secret(consumer, &name, "{{{ this is not a kubeconfig").await?;
        create_connection(
            consumer,
            &connection(&name, &name, SchemaPolicy::default(), false),
        )
        .await?;
        wait_connection(consumer, &name, "KubeconfigInvalid", |c| {
            has_condition(c, "SecretValid", "False", "KubeconfigInvalid")
                && has_condition(c, "Ready", "False", "KubeconfigInvalid")
        })
        .await?;
        // Fixing the Secret is picked up through the Secret watch.
        put_kubeconfig_secret(consumer, &name, &pair.provider.admin().kubeconfig_yaml()?).await?;
        wait_ready(consumer, &name).await?;
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn secret_outside_designated_namespace_is_refused() -> anyhow::Result<()> {
    on_consumer(async |pair, consumer| {
        let name = unique("elsewhere");
        ensure_namespace(consumer, "default").await?;
        let secrets: Api<Secret> = Api::namespaced(consumer.clone(), "default");
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name},
            "stringData": {"kubeconfig": pair.provider.admin().kubeconfig_yaml()?},
        }))?;
        secrets.create(&PostParams::default(), &secret).await?;
        let mut conn = connection(&name, &name, SchemaPolicy::default(), false);
        conn.spec.kubeconfig_secret_ref.namespace = "default".into();
        Api::<Connection>::all(consumer.clone())
            .create(&PostParams::default(), &conn)
            .await?;
        wait_connection(consumer, &name, "SecretNamespaceNotAllowed", |c| {
            has_condition(c, "SecretValid", "False", "SecretNamespaceNotAllowed")
        })
        .await?;
        let untouched = secrets.get(&name).await?;
        assert!(
            untouched.finalizers().is_empty(),
            "a Secret outside the namespace gets no finalizer"
        );
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn ready_connection_pins_both_identities_and_guards_its_secret() -> anyhow::Result<()> {
    on_consumer(async |pair, consumer| {
        let provider = pair.provider.client().await?;
        let name = unique("ready");
        connect(consumer, &pair.provider, &name, crd_source(), false).await?;
        let seen = wait_ready(consumer, &name).await?;
        let status = seen.status.clone().context("status")?;
        assert_eq!(
            status.remote_cluster_uid,
            Some(kube_system_uid(&provider).await?)
        );
        assert_eq!(
            status.local_cluster_uid,
            Some(kube_system_uid(consumer).await?)
        );
        assert!(has_condition(&seen, "SecretValid", "True", "AsExpected"));
        assert!(has_condition(&seen, "Connected", "True", "AsExpected"));
        assert!(has_condition(
            &seen,
            "PermissionDenied",
            "False",
            "AsExpected"
        ));
        assert_eq!(status.observed_generation, seen.metadata.generation);
        assert_eq!(status.active_schema_source.as_deref(), Some("CRD"));
        let secret = Api::<Secret>::namespaced(consumer.clone(), SECRET_NAMESPACE)
            .get(&name)
            .await?;
        assert!(
            secret.finalizers().contains(&CLEANUP_FINALIZER.to_string()),
            "the Secret is guarded"
        );
        // Nothing changes, so nothing is written: the resourceVersion stays across resyncs.
        let before = seen.resource_version();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let after = Api::<Connection>::all(consumer.clone()).get(&name).await?;
        assert_eq!(
            after.resource_version(),
            before,
            "no status write per requeue when nothing changed"
        );
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn kubeconfig_for_another_cluster_is_an_identity_failure_and_nothing_is_written_there()
-> anyhow::Result<()> {
    let pair = setup()?;
    let third = tokio::task::spawn_blocking(|| private_cluster("third")).await??;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let name = unique("rotated");
        connect(&consumer, &pair.provider, &name, crd_source(), false).await?;
        wait_ready(&consumer, &name).await?;
        put_kubeconfig_secret(&consumer, &name, &third.admin().kubeconfig_yaml()?).await?;
        let seen = wait_connection(&consumer, &name, "ClusterIdentityChanged", |c| {
            has_condition(c, "Connected", "False", "ClusterIdentityChanged")
                && has_condition(c, "Ready", "False", "ClusterIdentityChanged")
        })
        .await?;
        let provider_uid = kube_system_uid(&pair.provider.client().await?).await?;
        assert_eq!(
            seen.status.and_then(|s| s.remote_cluster_uid),
            Some(provider_uid),
            "the pin never moves"
        );
        assert!(pair_not_engaged(pair, &name)?);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let third_client = third.client().await?;
        let kbind_ns = Api::<Namespace>::all(third_client.clone())
            .get_opt("kbind")
            .await?;
        assert!(
            kbind_ns.is_none(),
            "no heartbeat namespace was created on the other cluster"
        );
        let leases = Api::<Lease>::all(third_client)
            .list(&Default::default())
            .await?;
        assert!(
            leases
                .items
                .iter()
                .all(|l| !l.labels().contains_key(MANAGED_LABEL)),
            "no kbind Lease was written to the other cluster"
        );
        anyhow::Ok(())
    })
    .await
}

fn pair_not_engaged(pair: &'static ClusterPair, connection: &str) -> anyhow::Result<bool> {
    Ok(shared_konnector(pair)?
        .engagements
        .get(connection)
        .is_none())
}

#[tokio::test]
async fn restricted_identity_without_kube_system_access_is_permission_denied() -> anyhow::Result<()>
{
    on_consumer(async |pair, consumer| {
        let name = unique("nobody");
        connect_as(pair, consumer, &name, Vec::new(), crd_source()).await?;
        let seen = wait_connection(consumer, &name, "PermissionDenied", |c| {
            has_condition(c, "PermissionDenied", "True", "Forbidden")
                && has_condition(c, "Ready", "False", "Forbidden")
        })
        .await?;
        let message = message(&seen, "PermissionDenied")?;
        assert!(message.contains("kube-system"), "{message}");
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn kcp_logical_cluster_identity_is_used_where_served() -> anyhow::Result<()> {
    with_private_provider("kcp", async |_, consumer, provider_cluster, provider| {
        let crd: CustomResourceDefinition = serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "logicalclusters.core.kcp.io"},
            "spec": {
                "group": "core.kcp.io",
                "names": {"plural": "logicalclusters", "singular": "logicalcluster", "kind": "LogicalCluster", "listKind": "LogicalClusterList"},
                "scope": "Cluster",
                "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
            }
        }))?;
        install_crd(provider, &crd).await?;
        let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("core.kcp.io", "v1alpha1", "LogicalCluster"), "logicalclusters");
        let logical: Api<DynamicObject> = Api::all_with(provider.clone(), &resource);
        let created = eventually(CONVERGE, || async {
            let object = DynamicObject::new("cluster", &resource);
            logical.create(&PostParams::default(), &object).await
        })
        .await?;
        let name = unique("kcp");
        connect(consumer, provider_cluster, &name, crd_source(), false).await?;
        let seen = wait_ready(consumer, &name).await?;
        assert_eq!(seen.status.and_then(|s| s.remote_cluster_uid), created.uid());
        assert_ne!(created.uid(), Some(kube_system_uid(provider).await?));
        anyhow::Ok(())
    })
    .await
}

/// The provider's admin kubeconfig with its context namespace set to `namespace` (where a
/// heartbeat Lease would go), its cluster edited by `edit`.
fn provider_kubeconfig(
    pair: &ClusterPair,
    namespace: &str,
    edit: impl Fn(&mut kube::config::Cluster),
) -> anyhow::Result<(String, kube::config::Kubeconfig)> {
    let mut kubeconfig =
        kube::config::Kubeconfig::from_yaml(&pair.provider.admin().kubeconfig_yaml()?)?;
    // Distinctive names, so that "the message quotes no kubeconfig value" cannot be confused
    // with prose that happens to use a word like "provider".
    let distinct = |name: &str| format!("{name}-x9q");
    for named in &mut kubeconfig.contexts {
        named.name = distinct(&named.name);
        if let Some(context) = named.context.as_mut() {
            context.namespace = Some(namespace.to_string());
            context.cluster = distinct(&context.cluster);
            context.user = context.user.as_deref().map(distinct);
        }
    }
    kubeconfig.current_context = kubeconfig.current_context.as_deref().map(distinct);
    for named in &mut kubeconfig.clusters {
        named.name = distinct(&named.name);
        if let Some(cluster) = named.cluster.as_mut() {
            edit(cluster);
        }
    }
    for named in &mut kubeconfig.auth_infos {
        named.name = distinct(&named.name);
    }
    Ok((serde_yaml::to_string(&kubeconfig)?, kubeconfig))
}

/// Every value of a kubeconfig that a condition message must not quote: names of contexts,
/// clusters and users, and the server's host and port.
fn kubeconfig_values(kubeconfig: &kube::config::Kubeconfig) -> Vec<String> {
    let mut values = Vec::new();
    values.extend(kubeconfig.contexts.iter().map(|c| c.name.clone()));
    values.extend(kubeconfig.clusters.iter().map(|c| c.name.clone()));
    values.extend(kubeconfig.auth_infos.iter().map(|u| u.name.clone()));
    for named in &kubeconfig.clusters {
        if let Some(server) = named.cluster.as_ref().and_then(|c| c.server.as_deref()) {
            let host_port = server.split_once("://").map_or(server, |(_, rest)| rest);
            values.push(host_port.trim_end_matches('/').to_string());
        }
    }
    values.retain(|v| !v.is_empty());
    values
}

#[tokio::test]
async fn insecure_provider_kubeconfigs_are_refused_and_nothing_is_written_there()
-> anyhow::Result<()> {
    on_consumer(async |pair, consumer| {
        let provider = pair.provider.client().await?;
        let consumer_uid = kube_system_uid(consumer).await?;
        let skip_verify = |cluster: &mut kube::config::Cluster| {
            cluster.insecure_skip_tls_verify = Some(true);
            cluster.certificate_authority_data = None;
        };
        let plain_http = |cluster: &mut kube::config::Cluster| {
            cluster.server = cluster
                .server
                .as_ref()
                .map(|s| s.replacen("https://", "http://", 1));
        };
        let cases: [(&str, &str, &ClusterEdit); 2] = [
            ("skip-verify", "insecure-skip-tls-verify", &skip_verify),
            ("plain-http", "plain http://", &plain_http),
        ];
        for (case, field, edit) in cases {
            let name = unique(case);
            let lease_namespace = unique("heartbeat");
            let (insecure, parsed) = provider_kubeconfig(pair, &lease_namespace, edit)?;
            put_kubeconfig_secret(consumer, &name, &insecure).await?;
            Api::<Connection>::all(consumer.clone())
                .create(
                    &PostParams::default(),
                    &connection(&name, &name, crd_source(), false),
                )
                .await?;
            let seen = wait_connection(consumer, &name, "KubeconfigUnusable", |c| {
                has_condition(c, "SecretValid", "False", "KubeconfigUnusable")
                    && has_condition(c, "Ready", "False", "KubeconfigUnusable")
            })
            .await?;
            for type_ in ["SecretValid", "Ready"] {
                let message = &condition(&seen, type_).context("condition")?.message;
                assert!(message.contains(field), "{case}: names {field}: {message}");
                assert!(
                    message.contains("--allow-insecure-provider"),
                    "{case}: tells the opt-in: {message}"
                );
                for value in kubeconfig_values(&parsed) {
                    assert!(
                        !message.contains(&value),
                        "{case}: quotes {value:?}: {message}"
                    );
                }
            }
            // Several resyncs later, nothing reached the provider: no engagement, no heartbeat
            // namespace or Lease; the refusal was one Warning naming the field, not one per
            // resync.
            tokio::time::sleep(Duration::from_secs(3)).await;
            assert!(pair_not_engaged(pair, &name)?, "{case}: not engaged");
            let warnings: Vec<_> = kbind_tests::syncenv::events_for(consumer, None, &name)
                .await?
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("KubeconfigUnusable"))
                .collect();
            assert_eq!(warnings.len(), 1, "{case}: one Warning: {warnings:?}");
            let warning = &warnings[0];
            assert_eq!(warning.type_.as_deref(), Some("Warning"), "{case}");
            assert!(
                warning.series.is_none(),
                "{case}: published once: {warning:?}"
            );
            assert!(
                warning.note.as_deref().is_some_and(|n| n.contains(field)),
                "{case}: the Warning names {field}: {warning:?}"
            );
            let namespace = Api::<Namespace>::all(provider.clone())
                .get_opt(&lease_namespace)
                .await?;
            assert!(namespace.is_none(), "{case}: no heartbeat namespace");
            let lease_name = konnector::api::names::heartbeat_lease_name(&name, &consumer_uid);
            let leases = Api::<Lease>::all(provider.clone())
                .list(&Default::default())
                .await?;
            assert!(
                leases.items.iter().all(|l| l.name_any() != lease_name),
                "{case}: no heartbeat Lease"
            );

            // The same credentials with verified TLS are accepted, and the heartbeat lands
            // where the checks above looked.
            let (verified, _) = provider_kubeconfig(pair, &lease_namespace, |_| {})?;
            put_kubeconfig_secret(consumer, &name, &verified).await?;
            wait_ready(consumer, &name).await?;
            let leases: Api<Lease> = Api::namespaced(provider.clone(), &lease_namespace);
            eventually(CONVERGE, || async { leases.get(&lease_name).await }).await?;
        }
        anyhow::Ok(())
    })
    .await
}

/// An edit of a kubeconfig's cluster entry, turning it into a bad input.
type ClusterEdit = dyn Fn(&mut kube::config::Cluster);
