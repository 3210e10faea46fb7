//! Credentials and identity: the Secret, the kubeconfig, pinning, RBAC denials, kcp.

use super::*;

#[tokio::test]
async fn each_secret_problem_is_a_condition_and_one_warning_until_fixed() -> Result<()> {
    on_consumer("no-secret", async |pair, consumer, name| {
        connect_with(consumer, &name, None, SchemaPolicy::default()).await?;
        let unready = "SecretValid=False Ready=False";
        let seen = wait_reason(consumer, &name, unready, "SecretNotFound").await?;
        says(message(&seen, "SecretValid"), &[&name, "kubeconfig"]);
        assert!(seen.finalizers().contains(&CLEANUP_FINALIZER.to_string()));
        published_once(consumer, &name, "Warning", "SecretNotFound", &[&name]).await?;

        put_kubeconfig_secret(consumer, &name, "{{{ this is not a kubeconfig").await?;
        wait_reason(consumer, &name, unready, "KubeconfigInvalid").await?;
        published_once(consumer, &name, "Warning", "KubeconfigInvalid", &[]).await?;
        // Fixing the Secret is picked up through the Secret watch.
        put_kubeconfig_secret(consumer, &name, &pair.provider.admin().kubeconfig_yaml()?).await?;
        wait_ready(consumer, &name).await?;
        let connected = ["connected to provider cluster"];
        published_once(consumer, &name, "Normal", "Ready", &connected).await?;
        delete_connection(consumer, &name).await
    })
    .await
}

#[tokio::test]
async fn secret_outside_designated_namespace_is_refused() -> Result<()> {
    on_consumer("elsewhere", async |pair, consumer, name| {
        ensure_namespace(consumer, "default").await?;
        let secrets: Api<Secret> = Api::namespaced(consumer.clone(), "default");
        let kubeconfig = pair.provider.admin().kubeconfig_yaml()?;
        let secret = json!({"metadata": {"name": name}, "stringData": {"kubeconfig": kubeconfig}});
        secrets
            .create(&PostParams::default(), &serde_json::from_value(secret)?)
            .await?;
        let mut conn = connection(&name, &name, SchemaPolicy::default(), false);
        conn.spec.kubeconfig_secret_ref.namespace = "default".into();
        let connections: Api<Connection> = Api::all(consumer.clone());
        connections.create(&PostParams::default(), &conn).await?;
        let reason = "SecretNamespaceNotAllowed";
        wait_reason(consumer, &name, "SecretValid=False", reason).await?;
        let finalizers = secrets.get(&name).await?.metadata.finalizers;
        assert_eq!(finalizers, None, "no finalizer outside the namespace");
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn ready_connection_pins_both_identities_and_guards_its_secret() -> Result<()> {
    on_consumer("ready", async |pair, consumer, name| {
        let seen = connect_ready(consumer, &pair.provider, &name).await?;
        let state = "SecretValid=True Connected=True PermissionDenied=False";
        assert!(holds(&seen, state, "AsExpected"), "{state}");
        let status = seen.status.clone().context("status")?;
        let provider_uid = cluster_uid(&pair.provider.client().await?).await?;
        let uids = (Some(provider_uid), Some(cluster_uid(consumer).await?));
        assert_eq!((status.remote_cluster_uid, status.local_cluster_uid), uids);
        assert_eq!(status.observed_generation, seen.metadata.generation);
        assert_eq!(status.active_schema_source.as_deref(), Some("CRD"));
        assert!(secret_guarded(consumer, &name).await?, "Secret guarded");
        // Nothing changes, so nothing is written: the resourceVersion stays across resyncs.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let after = Api::<Connection>::all(consumer.clone()).get(&name).await?;
        let unchanged = after.resource_version() == seen.resource_version();
        assert!(unchanged, "no status write when nothing changed");
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn kubeconfig_for_another_cluster_is_an_identity_failure_and_nothing_is_written_there()
-> Result<()> {
    with_private_provider("third", async |pair, consumer, third, other, name| {
        connect_ready(consumer, &pair.provider, &name).await?;
        put_kubeconfig_secret(consumer, &name, &third.admin().kubeconfig_yaml()?).await?;
        let unready = "Connected=False Ready=False";
        let seen = wait_reason(consumer, &name, unready, "ClusterIdentityChanged").await?;
        let provider_uid = cluster_uid(&pair.provider.client().await?).await?;
        let pinned = seen.status.and_then(|s| s.remote_cluster_uid);
        assert_eq!(pinned, Some(provider_uid), "the pin never moves");
        let engaged = shared_konnector(pair)?.engagements.get(&name).is_some();
        assert!(!engaged, "not engaged with the other cluster");
        let lease = heartbeat_lease_name(&name, &cluster_uid(consumer).await?);
        let untouched = || no_heartbeat(other, "kbind", &lease);
        stays(
            "nothing written to the other cluster",
            Duration::from_secs(3),
            untouched,
        )
        .await
    })
    .await
}

#[tokio::test]
async fn restricted_identity_without_kube_system_access_is_permission_denied() -> Result<()> {
    on_consumer("nobody", async |pair, consumer, name| {
        connect_as(pair, consumer, &name, json!([]), crd_source()).await?;
        let denied = "PermissionDenied=True Ready=False";
        let seen = wait_reason(consumer, &name, denied, "Forbidden").await?;
        says(message(&seen, "PermissionDenied"), &["kube-system"]);
        published_once(consumer, &name, "Warning", "Forbidden", &["kube-system"]).await?;
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn an_unreachable_provider_is_one_warning() -> Result<()> {
    on_consumer("events-unreachable", async |pair, consumer, name| {
        let nowhere = json!({"server": format!("https://127.0.0.1:{}", free_port()?)});
        let kubeconfig = provider_kubeconfig(pair, "kbind", &nowhere)?;
        connect_with(consumer, &name, Some(&kubeconfig), crd_source()).await?;
        published_once(consumer, &name, "Warning", "ProviderUnreachable", &[]).await?;
        delete_connection(consumer, &name).await
    })
    .await
}

#[tokio::test]
async fn kcp_logical_cluster_identity_is_used_where_served() -> Result<()> {
    with_private_provider("kcp", async |_, consumer, cluster, provider, name| {
        let mut crd = widget_crd("core.kcp.io", "LogicalCluster", false)?;
        crd.spec.scope = "Cluster".into();
        crd.spec.versions[0].name = "v1alpha1".into();
        install_crd(provider, &crd).await?;
        let gvk = GroupVersionKind::gvk("core.kcp.io", "v1alpha1", "LogicalCluster");
        let resource = ApiResource::from_gvk(&gvk);
        let logical: Api<DynamicObject> = Api::all_with(provider.clone(), &resource);
        let (object, params) = (DynamicObject::new("cluster", &resource), Default::default());
        let created = eventually(CONVERGE, || logical.create(&params, &object)).await?;
        let seen = connect_ready(consumer, cluster, &name).await?;
        let pinned = seen.status.and_then(|s| s.remote_cluster_uid);
        assert_eq!(pinned, created.uid());
        assert_ne!(created.uid(), Some(cluster_uid(provider).await?));
        anyhow::Ok(())
    })
    .await
}

/// The names of every entry of a [`provider_kubeconfig`]: distinctive, so that "the message
/// quotes no kubeconfig value" cannot be confused with prose using a word like "provider".
const KUBECONFIG_NAMES: [&str; 3] = ["cluster-x9q", "user-x9q", "context-x9q"];

/// The provider's admin kubeconfig under [`KUBECONFIG_NAMES`], its context namespace
/// `namespace` (where a heartbeat Lease would go), its cluster entry changed by `edit`.
fn provider_kubeconfig(pair: &ClusterPair, namespace: &str, edit: &Value) -> Result<String> {
    let admin: Value = serde_saphyr::from_str(&pair.provider.admin().kubeconfig_yaml()?)?;
    let mut entry = admin["clusters"][0]["cluster"].clone();
    for (key, value) in edit.as_object().context("edit")? {
        entry[key] = value.clone();
    }
    let [cluster, user, context] = KUBECONFIG_NAMES;
    let context_entry = json!({"cluster": cluster, "user": user, "namespace": namespace});
    let config = json!({"apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": cluster, "cluster": entry}],
        "users": [{"name": user, "user": admin["users"][0]["user"]}],
        "contexts": [{"name": context, "context": context_entry}]});
    Ok(serde_saphyr::to_string(&config)?)
}

#[tokio::test]
async fn insecure_provider_kubeconfigs_are_refused_and_nothing_is_written_there() -> Result<()> {
    on_consumer("insecure", async |pair, consumer, _| {
        let provider = pair.provider.client().await?;
        let consumer_uid = cluster_uid(consumer).await?;
        let server = pair.provider.server();
        let host_port = server.trim_start_matches("https://");
        let never_quoted = [KUBECONFIG_NAMES.as_slice(), &[host_port]].concat();
        let skip = json!({"insecure-skip-tls-verify": true, "certificate-authority-data": null});
        let plain_http = json!({"server": server.replacen("https://", "http://", 1)});
        for (case, field, edit) in [
            ("skip-verify", "insecure-skip-tls-verify", skip),
            ("plain-http", "plain http://", plain_http),
        ] {
            let name = unique(case);
            let lease_namespace = unique("heartbeat");
            let insecure = provider_kubeconfig(pair, &lease_namespace, &edit)?;
            connect_with(consumer, &name, Some(&insecure), crd_source()).await?;
            let (unready, reason) = ("SecretValid=False Ready=False", "KubeconfigUnusable");
            let seen = wait_reason(consumer, &name, unready, reason).await?;
            for type_ in ["SecretValid", "Ready"] {
                let message = message(&seen, type_);
                says(message, &[field, "--allow-insecure-provider"]);
                let quoted = never_quoted.iter().find(|value| message.contains(*value));
                assert_eq!(quoted, None, "{case}: quotes the kubeconfig: {message}");
            }
            // Several resyncs later, nothing reached the provider: no engagement, no heartbeat
            // namespace or Lease; the refusal was one Warning naming the field.
            published_once(consumer, &name, "Warning", reason, &[field]).await?;
            let engaged = shared_konnector(pair)?.engagements.get(&name).is_some();
            assert!(!engaged, "{case}: not engaged");
            let lease_name = heartbeat_lease_name(&name, &consumer_uid);
            let untouched = no_heartbeat(&provider, &lease_namespace, &lease_name).await?;
            assert!(untouched, "{case}: no heartbeat namespace or Lease");
            // The same credentials with verified TLS are accepted, and the heartbeat lands
            // where the checks above looked.
            let verified = provider_kubeconfig(pair, &lease_namespace, &json!({}))?;
            put_kubeconfig_secret(consumer, &name, &verified).await?;
            wait_ready(consumer, &name).await?;
            let leases: Api<Lease> = Api::namespaced(provider.clone(), &lease_namespace);
            eventually(CONVERGE, || leases.get(&lease_name)).await?;
        }
        anyhow::Ok(())
    })
    .await
}
