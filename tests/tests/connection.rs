//! The Connection controller against real kube-apiservers, one test per branch of
//! `spec/connection-controller.md` and the Connection parts of the other spec pages.

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use kbind_tests::eventually;
use kbind_tests::fixtures::*;
use kbind_tests::testenv::{ClusterPair, shared_pair};
use konnector::api::names::{
    CLEANUP_FINALIZER, CONNECTION_ANNOTATION, EXPORTED_LABEL, MANAGED_LABEL,
};
use konnector::api::{
    ApiReference, Binding, BindingSpec, ClusterBinding, Connection, ConnectionReference,
    PullPolicy, SchemaPolicy, SchemaSource, UpdatePolicy,
};

fn setup() -> anyhow::Result<&'static ClusterPair> {
    let pair = shared_pair()?;
    shared_konnector(pair)?;
    Ok(pair)
}

fn crd_source() -> SchemaPolicy {
    SchemaPolicy {
        source: SchemaSource::Crd,
        ..SchemaPolicy::default()
    }
}

async fn kube_system_uid(client: &kube::Client) -> anyhow::Result<String> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    Ok(namespaces
        .get("kube-system")
        .await?
        .uid()
        .unwrap_or_default())
}

/// Grants `user` on the provider exactly `rules`, cluster-wide.
async fn grant(provider: &kube::Client, user: &str, rules: Vec<PolicyRule>) -> anyhow::Result<()> {
    let roles: Api<ClusterRole> = Api::all(provider.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(provider.clone());
    let meta = ObjectMeta {
        name: Some(user.to_string()),
        ..ObjectMeta::default()
    };
    roles
        .create(
            &PostParams::default(),
            &ClusterRole {
                metadata: meta.clone(),
                rules: Some(rules),
                ..ClusterRole::default()
            },
        )
        .await?;
    bindings
        .create(
            &PostParams::default(),
            &ClusterRoleBinding {
                metadata: meta,
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "ClusterRole".into(),
                    name: user.into(),
                },
                subjects: Some(vec![Subject {
                    kind: "User".into(),
                    name: user.into(),
                    ..Subject::default()
                }]),
            },
        )
        .await?;
    Ok(())
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    let strings = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect());
    PolicyRule {
        api_groups: strings(groups),
        resources: strings(resources),
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        ..PolicyRule::default()
    }
}

/// A restricted provider user with a kubeconfig Secret on the consumer and a Connection.
async fn connect_as(
    pair: &ClusterPair,
    consumer: &kube::Client,
    name: &str,
    rules: Vec<PolicyRule>,
    schema: SchemaPolicy,
) -> anyhow::Result<()> {
    let provider = pair.provider.client().await?;
    let user = pair.provider.mint_user(name, &[])?;
    if !rules.is_empty() {
        grant(&provider, name, rules).await?;
    }
    put_kubeconfig_secret(consumer, name, &user.kubeconfig_yaml()?).await?;
    let connections: Api<Connection> = Api::all(consumer.clone());
    connections
        .create(
            &PostParams::default(),
            &connection(name, name, schema, false),
        )
        .await?;
    Ok(())
}

fn exported_names(connection: &Connection) -> Vec<String> {
    connection
        .status
        .as_ref()
        .map(|s| s.exported_apis.iter().map(|a| a.name.clone()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn missing_secret_sets_secret_not_found() -> anyhow::Result<()> {
    let pair = setup()?;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let name = unique("no-secret");
        let connections: Api<Connection> = Api::all(consumer.clone());
        connections
            .create(
                &PostParams::default(),
                &connection(&name, &name, SchemaPolicy::default(), false),
            )
            .await?;
        let seen = wait_connection(&consumer, &name, "SecretNotFound", |c| {
            has_condition(c, "SecretValid", "False", "SecretNotFound")
                && has_condition(c, "Ready", "False", "SecretNotFound")
        })
        .await?;
        let message = &condition(&seen, "SecretValid")
            .context("SecretValid")?
            .message;
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
    let pair = setup()?;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let name = unique("garbage");
        put_kubeconfig_secret(&consumer, &name, "{{{ this is not a kubeconfig").await?;
        let connections: Api<Connection> = Api::all(consumer.clone());
        connections
            .create(
                &PostParams::default(),
                &connection(&name, &name, SchemaPolicy::default(), false),
            )
            .await?;
        wait_connection(&consumer, &name, "KubeconfigInvalid", |c| {
            has_condition(c, "SecretValid", "False", "KubeconfigInvalid")
                && has_condition(c, "Ready", "False", "KubeconfigInvalid")
        })
        .await?;
        // Fixing the Secret is picked up through the Secret watch.
        put_kubeconfig_secret(&consumer, &name, &pair.provider.admin().kubeconfig_yaml()?).await?;
        wait_ready(&consumer, &name).await?;
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn secret_outside_designated_namespace_is_refused() -> anyhow::Result<()> {
    let pair = setup()?;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let name = unique("elsewhere");
        ensure_namespace(&consumer, "default").await?;
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
        wait_connection(&consumer, &name, "SecretNamespaceNotAllowed", |c| {
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
    let pair = setup()?;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let provider = pair.provider.client().await?;
        let name = unique("ready");
        connect(&consumer, &pair.provider, &name, crd_source(), false).await?;
        let seen = wait_ready(&consumer, &name).await?;
        let status = seen.status.clone().context("status")?;
        assert_eq!(
            status.remote_cluster_uid,
            Some(kube_system_uid(&provider).await?)
        );
        assert_eq!(
            status.local_cluster_uid,
            Some(kube_system_uid(&consumer).await?)
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
    let pair = setup()?;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let name = unique("nobody");
        connect_as(pair, &consumer, &name, Vec::new(), crd_source()).await?;
        let seen = wait_connection(&consumer, &name, "PermissionDenied", |c| {
            has_condition(c, "PermissionDenied", "True", "Forbidden")
                && has_condition(c, "Ready", "False", "Forbidden")
        })
        .await?;
        let message = &condition(&seen, "PermissionDenied")
            .context("PermissionDenied")?
            .message;
        assert!(message.contains("kube-system"), "{message}");
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn kcp_logical_cluster_identity_is_used_where_served() -> anyhow::Result<()> {
    let pair = setup()?;
    let provider_cluster = tokio::task::spawn_blocking(|| private_cluster("kcp")).await??;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let provider = provider_cluster.client().await?;
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
        install_crd(&provider, &crd).await?;
        let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("core.kcp.io", "v1alpha1", "LogicalCluster"), "logicalclusters");
        let logical: Api<DynamicObject> = Api::all_with(provider.clone(), &resource);
        let created = eventually(CONVERGE, || async {
            let object = DynamicObject::new("cluster", &resource);
            logical.create(&PostParams::default(), &object).await
        })
        .await?;
        let name = unique("kcp");
        connect(&consumer, &provider_cluster, &name, crd_source(), false).await?;
        let seen = wait_ready(&consumer, &name).await?;
        assert_eq!(seen.status.and_then(|s| s.remote_cluster_uid), created.uid());
        assert_ne!(created.uid(), Some(kube_system_uid(&provider).await?));
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn crd_source_exports_only_labelled_crds() -> anyhow::Result<()> {
    let pair = setup()?;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let provider = pair.provider.client().await?;
        let group = format!("{}.crd.example.org", unique("g"));
        install_crd(&provider, &widget_crd(&group, "Widget", true)?).await?;
        install_crd(&provider, &widget_crd(&group, "Gadget", false)?).await?;
        let name = unique("crd-source");
        connect(&consumer, &pair.provider, &name, crd_source(), false).await?;
        let seen = wait_connection(&consumer, &name, "exports", |c| {
            exported_names(c).contains(&format!("widgets.{group}"))
        })
        .await?;
        assert!(
            !exported_names(&seen).contains(&format!("gadgets.{group}")),
            "unlabelled CRDs are not exported"
        );
        let widget = seen
            .status
            .as_ref()
            .and_then(|s| s.exported_apis.iter().find(|a| a.group == group))
            .context("widget")?;
        assert_eq!(
            (widget.resource.as_str(), widget.versions.as_slice()),
            ("widgets", &["v1".to_string()][..])
        );
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn openapi_source_exports_served_apis_without_labels() -> anyhow::Result<()> {
    let pair = setup()?;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let provider = pair.provider.client().await?;
        let group = format!("{}.openapi.example.org", unique("g"));
        install_crd(&provider, &widget_crd(&group, "Gizmo", false)?).await?;
        let name = unique("openapi-source");
        let schema = SchemaPolicy {
            source: SchemaSource::OpenApi,
            ..SchemaPolicy::default()
        };
        connect(&consumer, &pair.provider, &name, schema, false).await?;
        let seen = wait_connection(&consumer, &name, "exports", |c| {
            exported_names(c).contains(&format!("gizmos.{group}"))
        })
        .await?;
        assert_eq!(
            seen.status
                .as_ref()
                .and_then(|s| s.active_schema_source.as_deref()),
            Some("OpenAPI")
        );
        assert!(
            exported_names(&seen)
                .iter()
                .all(|n| !n.ends_with(".k8s.io") && n.contains('.')),
            "built-in groups are never exported: {:?}",
            exported_names(&seen)
        );
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn auto_falls_back_to_openapi_only_after_an_empty_list() -> anyhow::Result<()> {
    let pair = setup()?;
    let provider_cluster = tokio::task::spawn_blocking(|| private_cluster("auto")).await??;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let provider = provider_cluster.client().await?;
        install_crd(
            &provider,
            &widget_crd("auto.example.org", "Sprocket", false)?,
        )
        .await?;
        let name = unique("auto");
        connect(
            &consumer,
            &provider_cluster,
            &name,
            SchemaPolicy::default(),
            false,
        )
        .await?;
        wait_connection(&consumer, &name, "OpenAPI after an empty list", |c| {
            c.status
                .as_ref()
                .and_then(|s| s.active_schema_source.as_deref())
                == Some("OpenAPI")
                && exported_names(c).contains(&"sprockets.auto.example.org".to_string())
        })
        .await?;
        install_crd(&provider, &widget_crd("auto.example.org", "Cog", true)?).await?;
        let seen = wait_connection(&consumer, &name, "CRD once something is labelled", |c| {
            c.status
                .as_ref()
                .and_then(|s| s.active_schema_source.as_deref())
                == Some("CRD")
        })
        .await?;
        assert_eq!(
            exported_names(&seen),
            vec!["cogs.auto.example.org".to_string()]
        );
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn auto_does_not_fall_back_after_a_list_error() -> anyhow::Result<()> {
    let pair = setup()?;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let name = unique("auto-denied");
        // May identify the cluster, may not list CRDs.
        let rules = vec![rule(&[""], &["namespaces"], &["get"])];
        connect_as(pair, &consumer, &name, rules, SchemaPolicy::default()).await?;
        let seen = wait_connection(
            &consumer,
            &name,
            "PermissionDenied from the CRD list",
            |c| {
                has_condition(c, "PermissionDenied", "True", "Forbidden")
                    && has_condition(c, "Ready", "False", "Forbidden")
            },
        )
        .await?;
        assert_ne!(
            seen.status
                .as_ref()
                .and_then(|s| s.active_schema_source.as_deref()),
            Some("OpenAPI")
        );
        let message = &condition(&seen, "PermissionDenied")
            .context("PermissionDenied")?
            .message;
        assert!(message.contains("CRD"), "{message}");
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn pull_policy_all_installs_established_crds_and_update_policy_once_pins_them()
-> anyhow::Result<()> {
    let pair = setup()?;
    let provider_cluster = tokio::task::spawn_blocking(|| private_cluster("pull-all")).await??;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let provider = provider_cluster.client().await?;
        let (plain_group, once_group) = ("plain.pull.example.org", "once.pull.example.org");
        install_crd(&provider, &widget_crd(plain_group, "Widget", true)?).await?;
        install_crd(&provider, &widget_crd(once_group, "Widget", true)?).await?;
        let name = unique("pull-all");
        let schema = SchemaPolicy { source: SchemaSource::Crd, pull_policy: PullPolicy::All, update_policy: UpdatePolicy::Once };
        connect(&consumer, &provider_cluster, &name, schema, false).await?;
        wait_connection(&consumer, &name, "SchemaInSync", |c| has_condition(c, "SchemaInSync", "True", "AsExpected")).await?;
        let consumer_crds: Api<CustomResourceDefinition> = Api::all(consumer.clone());
        for group in [plain_group, once_group] {
            let installed = consumer_crds.get(&format!("widgets.{group}")).await?;
            assert_eq!(installed.annotations().get(CONNECTION_ANNOTATION), Some(&name));
            let established = installed.status.and_then(|s| s.conditions).unwrap_or_default();
            assert!(established.iter().any(|c| c.type_ == "Established" && c.status == "True"));
        }
        // The provider schema changes; with updatePolicy Once the consumer copy stays pinned.
        let mut changed = widget_crd(once_group, "Widget", true)?;
        changed.spec.versions[0].schema = serde_json::from_value(json!({"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"size": {"type": "integer"}, "color": {"type": "string"}, "shape": {"type": "string"}}},
            "status": {"type": "object", "properties": {"phase": {"type": "string"}}}
        }}}))?;
        install_crd(&provider, &changed).await?;
        tokio::time::sleep(Duration::from_secs(4)).await;
        let pinned = consumer_crds.get(&format!("widgets.{once_group}")).await?;
        let spec_props = serde_json::to_value(&pinned.spec.versions[0].schema)?;
        assert!(
            spec_props.pointer("/openAPIV3Schema/properties/spec/properties/shape").is_none(),
            "updatePolicy Once keeps the first pulled schema"
        );
        // Switching the policy to Always makes the consumer follow the provider.
        let patch = json!({"spec": {"schema": {"updatePolicy": "Always"}}});
        Api::<Connection>::all(consumer.clone()).patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        eventually(CONVERGE, || async {
            let crd = consumer_crds.get(&format!("widgets.{once_group}")).await?;
            let schema = serde_json::to_value(&crd.spec.versions[0].schema)?;
            schema
                .pointer("/openAPIV3Schema/properties/spec/properties/shape")
                .map(|_| ())
                .context("consumer CRD has not followed the provider yet")
        })
        .await?;
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn newly_labelled_crd_appears_on_periodic_requeue() -> anyhow::Result<()> {
    let pair = setup()?;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let provider = pair.provider.client().await?;
        let group = format!("{}.late.example.org", unique("g"));
        install_crd(&provider, &widget_crd(&group, "Widget", false)?).await?;
        let name = unique("late");
        connect(&consumer, &pair.provider, &name, crd_source(), false).await?;
        wait_ready(&consumer, &name).await?;
        let crds: Api<CustomResourceDefinition> = Api::all(provider.clone());
        let label = json!({"metadata": {"labels": {EXPORTED_LABEL: "true"}}});
        crds.patch(
            &format!("widgets.{group}"),
            &PatchParams::default(),
            &Patch::Merge(&label),
        )
        .await?;
        wait_connection(&consumer, &name, "the new export", |c| {
            exported_names(c).contains(&format!("widgets.{group}"))
        })
        .await?;
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn auto_bind_creates_updates_and_deletes_its_cluster_binding() -> anyhow::Result<()> {
    let pair = setup()?;
    let provider_cluster = tokio::task::spawn_blocking(|| private_cluster("autobind")).await??;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let provider = provider_cluster.client().await?;
        let group = "autobind.example.org";
        install_crd(&provider, &widget_crd(group, "Widget", true)?).await?;
        let name = unique("autobind");
        connect(&consumer, &provider_cluster, &name, crd_source(), true).await?;
        let bindings: Api<ClusterBinding> = Api::all(consumer.clone());
        let apis = |b: &ClusterBinding| {
            b.spec
                .apis
                .iter()
                .map(|a| a.name.clone())
                .collect::<Vec<_>>()
        };
        let first = eventually(CONVERGE, || async { bindings.get(&name).await }).await?;
        assert_eq!(
            first.labels().get(MANAGED_LABEL).map(String::as_str),
            Some("true")
        );
        assert_eq!(first.spec.connection_ref.name, name);
        assert_eq!(apis(&first), vec![format!("widgets.{group}")]);
        install_crd(&provider, &widget_crd(group, "Gadget", true)?).await?;
        eventually(CONVERGE, || async {
            let current = bindings.get(&name).await?;
            let expected = vec![format!("gadgets.{group}"), format!("widgets.{group}")];
            anyhow::ensure!(apis(&current) == expected, "apis are {:?}", apis(&current));
            Ok(())
        })
        .await?;
        let crds: Api<CustomResourceDefinition> = Api::all(provider.clone());
        for kind in ["widgets", "gadgets"] {
            crds.delete(&format!("{kind}.{group}"), &DeleteParams::default())
                .await?;
        }
        eventually(CONVERGE, || async {
            anyhow::ensure!(
                bindings.get_opt(&name).await?.is_none(),
                "the managed ClusterBinding still exists"
            );
            Ok(())
        })
        .await?;
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn heartbeat_lease_is_created_and_renewed() -> anyhow::Result<()> {
    let pair = setup()?;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let provider = pair.provider.client().await?;
        let name = unique("heartbeat");
        connect(&consumer, &pair.provider, &name, crd_source(), false).await?;
        wait_ready(&consumer, &name).await?;
        let consumer_uid = kube_system_uid(&consumer).await?;
        let lease_name = format!("{name}-{}", &consumer_uid[..10]);
        let leases: Api<Lease> = Api::namespaced(provider.clone(), "kbind");
        let lease = eventually(CONVERGE, || async { leases.get(&lease_name).await }).await?;
        let spec = lease.spec.clone().context("lease spec")?;
        assert_eq!(spec.holder_identity.as_deref(), Some(consumer_uid.as_str()));
        assert_eq!(spec.lease_duration_seconds, Some(60));
        assert_eq!(
            lease.labels().get(MANAGED_LABEL).map(String::as_str),
            Some("true")
        );
        assert_eq!(
            lease
                .annotations()
                .get("core.kbind.io/consumer-cluster-uid"),
            Some(&consumer_uid)
        );
        assert_eq!(lease.annotations().get(CONNECTION_ANNOTATION), Some(&name));
        let first_renewal = spec.renew_time.context("renewTime")?;
        eventually(CONVERGE, || async {
            let renewed = leases
                .get(&lease_name)
                .await?
                .spec
                .and_then(|s| s.renew_time)
                .context("renewTime")?;
            anyhow::ensure!(renewed.0 > first_renewal.0, "not renewed yet");
            Ok(())
        })
        .await?;
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn heartbeat_denied_by_rbac_keeps_the_connection_ready() -> anyhow::Result<()> {
    let pair = setup()?;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let name = unique("no-lease");
        let rules = vec![
            rule(&[""], &["namespaces"], &["get"]),
            rule(
                &["apiextensions.k8s.io"],
                &["customresourcedefinitions"],
                &["get", "list", "watch"],
            ),
        ];
        connect_as(pair, &consumer, &name, rules, crd_source()).await?;
        wait_ready(&consumer, &name).await?;
        let provider = pair.provider.client().await?;
        let consumer_uid = kube_system_uid(&consumer).await?;
        let lease = Api::<Lease>::namespaced(provider, "kbind")
            .get_opt(&format!("{name}-{}", &consumer_uid[..10]))
            .await?;
        assert!(lease.is_none(), "the denied heartbeat wrote nothing");
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn deletion_waits_in_draining_bindings_while_a_binding_references_it() -> anyhow::Result<()> {
    let pair = setup()?;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let name = unique("draining");
        connect(&consumer, &pair.provider, &name, crd_source(), false).await?;
        wait_ready(&consumer, &name).await?;
        ensure_namespace(&consumer, &name).await?;
        let bindings: Api<Binding> = Api::namespaced(consumer.clone(), &name);
        let binding = Binding::new(
            "uses-it",
            BindingSpec {
                connection_ref: ConnectionReference { name: name.clone() },
                apis: vec![ApiReference {
                    name: "widgets.example.org".into(),
                }],
                conflict_policy: Default::default(),
                related_resources: Vec::new(),
            },
        );
        bindings.create(&PostParams::default(), &binding).await?;
        let connections: Api<Connection> = Api::all(consumer.clone());
        connections.delete(&name, &DeleteParams::default()).await?;
        wait_connection(&consumer, &name, "DrainingBindings", |c| {
            has_condition(c, "Ready", "False", "DrainingBindings")
        })
        .await?;
        let secret = Api::<Secret>::namespaced(consumer.clone(), SECRET_NAMESPACE)
            .get(&name)
            .await?;
        assert!(
            secret.finalizers().contains(&CLEANUP_FINALIZER.to_string()),
            "credentials stay guarded while draining"
        );
        bindings.delete("uses-it", &DeleteParams::default()).await?;
        eventually(CONVERGE, || async {
            anyhow::ensure!(
                connections.get_opt(&name).await?.is_none(),
                "Connection still exists"
            );
            Ok(())
        })
        .await?;
        let secret = Api::<Secret>::namespaced(consumer.clone(), SECRET_NAMESPACE)
            .get(&name)
            .await?;
        assert!(
            !secret.finalizers().contains(&CLEANUP_FINALIZER.to_string()),
            "the Secret is released, not deleted"
        );
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn shared_secret_keeps_its_finalizer_until_the_last_connection_is_gone() -> anyhow::Result<()>
{
    let pair = setup()?;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let secret_name = unique("shared-secret");
        put_kubeconfig_secret(
            &consumer,
            &secret_name,
            &pair.provider.admin().kubeconfig_yaml()?,
        )
        .await?;
        let connections: Api<Connection> = Api::all(consumer.clone());
        let (first, second) = (unique("share-a"), unique("share-b"));
        for name in [&first, &second] {
            connections
                .create(
                    &PostParams::default(),
                    &connection(name, &secret_name, crd_source(), false),
                )
                .await?;
            wait_ready(&consumer, name).await?;
        }
        let secrets: Api<Secret> = Api::namespaced(consumer.clone(), SECRET_NAMESPACE);
        let guarded = |s: &Secret| s.finalizers().contains(&CLEANUP_FINALIZER.to_string());
        connections.delete(&first, &DeleteParams::default()).await?;
        eventually(CONVERGE, || async {
            anyhow::ensure!(
                connections.get_opt(&first).await?.is_none(),
                "first Connection still exists"
            );
            Ok(())
        })
        .await?;
        assert!(
            guarded(&secrets.get(&secret_name).await?),
            "still guarded for the second Connection"
        );
        connections
            .delete(&second, &DeleteParams::default())
            .await?;
        eventually(CONVERGE, || async {
            anyhow::ensure!(
                !guarded(&secrets.get(&secret_name).await?),
                "Secret still guarded"
            );
            Ok(())
        })
        .await?;
        anyhow::Ok(())
    })
    .await
}

/// A provider CRD with the constructs schema synthesis must carry over.
fn rich_crd() -> anyhow::Result<CustomResourceDefinition> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gears.rich.example.org"},
        "spec": {
            "group": "rich.example.org",
            "names": {"plural": "gears", "singular": "gear", "kind": "Gear", "listKind": "GearList", "shortNames": ["gr"], "categories": ["machines"]},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "required": ["size"], "properties": {
                            "size": {"type": "integer", "minimum": 1},
                            "mode": {"type": "string", "enum": ["fast", "slow"]},
                            "port": {"x-kubernetes-int-or-string": true},
                            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                            "teeth": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                                "items": {"type": "object", "required": ["name"], "properties": {
                                    "name": {"type": "string"},
                                    "angle": {"type": "number"}
                                }}},
                            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                            "nested": {"type": "object", "properties": {"inner": {"type": "object", "properties": {"flag": {"type": "boolean"}}}}}
                        }},
                        "status": {"type": "object", "properties": {"phase": {"type": "string"}, "observed": {"type": "integer"}}}
                    }
                }}
            }]
        }
    }))?)
}

#[tokio::test]
async fn openapi_source_with_pull_all_synthesizes_a_crd_that_round_trips_every_field()
-> anyhow::Result<()> {
    let pair = setup()?;
    let provider_cluster = tokio::task::spawn_blocking(|| private_cluster("synth")).await??;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let provider = provider_cluster.client().await?;
        install_crd(&provider, &rich_crd()?).await?;
        let name = unique("synth");
        let schema = SchemaPolicy {
            source: SchemaSource::OpenApi,
            pull_policy: PullPolicy::All,
            update_policy: UpdatePolicy::Always,
        };
        connect(&consumer, &provider_cluster, &name, schema, false).await?;
        wait_connection(&consumer, &name, "SchemaInSync", |c| {
            has_condition(c, "SchemaInSync", "True", "AsExpected")
        })
        .await?;

        let installed = Api::<CustomResourceDefinition>::all(consumer.clone())
            .get("gears.rich.example.org")
            .await?;
        assert_eq!(
            installed.annotations().get(CONNECTION_ANNOTATION),
            Some(&name)
        );
        assert_eq!(
            installed.spec.names.short_names.as_deref(),
            Some(&["gr".to_string()][..])
        );
        let version = &installed.spec.versions[0];
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "status subresource carried over"
        );

        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("rich.example.org", "v1", "Gear"),
            "gears",
        );
        ensure_namespace(&consumer, &name).await?;
        let gears: Api<DynamicObject> = Api::namespaced_with(consumer.clone(), &name, &resource);
        let spec = json!({
            "size": 3,
            "mode": "fast",
            "port": "http",
            "labels": {"a": "b"},
            "teeth": [{"name": "t1", "angle": 1.5}, {"name": "t2", "angle": 2.5}],
            "tags": ["x", "y"],
            "extra": {"anything": {"goes": [1, 2]}},
            "nested": {"inner": {"flag": true}}
        });
        let mut gear = DynamicObject::new("g1", &resource).within(&name);
        gear.data = json!({"spec": spec});
        gears.create(&PostParams::default(), &gear).await?;
        let read = gears.get("g1").await?;
        assert_eq!(
            read.data["spec"], spec,
            "every field survives the synthesized schema"
        );

        let mut bad = DynamicObject::new("g2", &resource).within(&name);
        bad.data = json!({"spec": {"size": 3, "mode": "sideways"}});
        let refused = gears.create(&PostParams::default(), &bad).await;
        assert!(
            matches!(refused, Err(kube::Error::Api(ref s)) if s.code == 422),
            "enum kept: {refused:?}"
        );
        anyhow::Ok(())
    })
    .await
}
