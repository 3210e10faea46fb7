//! autoBind, the heartbeat Lease, deletion, and what exports cannot reach on the consumer.

use super::*;
use kbind_tests::syncenv::remains::{Left, delete_gone, expect_left, kind, wait_left};
use konnector::api::ConditionType::Ready;
use konnector::api::IsolationStrategy;
use konnector::api::names::CONSUMER_CLUSTER_UID_ANNOTATION;
use konnector::conditions::is_true;

#[tokio::test]
async fn auto_bind_adds_new_exports_and_keeps_the_ones_that_leave() -> Result<()> {
    with_private_provider("autobind", async |_, consumer, cluster, provider, name| {
        let group = "autobind.example.org";
        install_crd(provider, &widget_crd(group, "Widget", true)?).await?;
        connect(consumer, cluster, &name, crd_source(), true).await?;
        let auto = wait_cluster_binding(consumer, &name, |_| true).await?;
        let (widgets, gadgets) = (format!("widgets.{group}"), format!("gadgets.{group}"));
        let managed = auto.labels().get(MANAGED_LABEL).map(String::as_str);
        let seen = (managed, &*auto.spec.connection_ref.name, api_names(&auto));
        assert_eq!(seen, (Some("true"), &*name, vec![widgets.as_str()]));
        // A new export joins the ClusterBinding, and both sync.
        install_crd(provider, &widget_crd(group, "Gadget", true)?).await?;
        let both = [&*gadgets, &*widgets];
        wait_cluster_binding(consumer, &name, |b| api_names(b) == both).await?;
        ensure_namespace(consumer, &name).await?;
        let resource = |kind| ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", kind));
        let (widget, gadget, x) = (resource("Widget"), resource("Gadget"), format!("{name}/x"));
        let params = PostParams::default();
        for kind in [&widget, &gadget] {
            let object = DynamicObject::new("x", kind).data(json!({"spec": {}}));
            let consumer_api = Api::namespaced_with(consumer.clone(), &name, kind);
            eventually(CONVERGE, || consumer_api.create(&params, &object)).await?;
            wait_left(&[(provider, kind.clone(), &x, Left::Kept)]).await?;
        }
        // The provider stops exporting Gadgets (the CRD stays): an un-export is not a
        // deletion, so the API stays listed, released: its instance loses the syncer
        // finalizer and its provider copy stays; the API still exported keeps its copy too.
        set_exported(provider, &gadgets, false).await?;
        let released = |b: &ClusterBinding| {
            b.status
                .iter()
                .flat_map(|s| &s.bound_apis)
                .any(|a| a.name == gadgets && a.released)
        };
        let auto = wait_cluster_binding(consumer, &name, released).await?;
        assert_eq!(api_names(&auto), both, "the un-exported API stays listed");
        let released = (consumer, gadget.clone(), &*x, Left::Released);
        wait_left(&[(provider, gadget.clone(), &x, Left::Kept), released]).await?;
        delete_gone(consumer, gadget.clone(), &x).await?;
        expect_left(&[
            (provider, gadget, &x, Left::Kept),
            (provider, widget, &x, Left::Kept),
        ])
        .await?;
        // With no export left the ClusterBinding stays, listing both; deleting the
        // Connection (a consumer's action) deletes it.
        set_exported(provider, &widgets, false).await?;
        let none_exported = |c: &Connection| exported_names(c).is_empty();
        wait_connection(consumer, &name, "no exports", none_exported).await?;
        let kept = wait_cluster_binding(consumer, &name, |_| true).await?;
        assert_eq!(
            api_names(&kept),
            both,
            "nothing exported, both still listed"
        );
        delete_connection(consumer, &name).await?;
        wait_left(&[(consumer, kind::<ClusterBinding>(), &name, Left::Gone)]).await
    })
    .await
}

#[tokio::test]
async fn heartbeat_lease_is_created_and_renewed() -> Result<()> {
    on_consumer("heartbeat", async |pair, consumer, name| {
        connect_ready(consumer, &pair.provider, &name).await?;
        let consumer_uid = cluster_uid(consumer).await?;
        let lease_name = heartbeat_lease_name(&name, &consumer_uid);
        let leases: Api<Lease> = Api::namespaced(pair.provider.client().await?, "kbind");
        let lease = eventually(CONVERGE, || leases.get(&lease_name)).await?;
        let spec = lease.spec.clone().context("lease spec")?;
        let (labels, notes) = (lease.labels(), lease.annotations());
        let seen = json!({"holder": spec.holder_identity, "seconds": spec.lease_duration_seconds,
            "managed": labels.get(MANAGED_LABEL), "connection": notes.get(CONNECTION_ANNOTATION),
            "consumer": notes.get(CONSUMER_CLUSTER_UID_ANNOTATION)});
        let expected = json!({"holder": consumer_uid, "seconds": 60, "managed": "true",
            "connection": name, "consumer": consumer_uid});
        assert_eq!(seen, expected);
        let first = spec.renew_time.context("renewTime")?.0;
        wait_for("the Lease renewed", CONVERGE, || async {
            let renewed = leases.get(&lease_name).await?.spec;
            Ok(renewed.and_then(|s| s.renew_time).filter(|t| t.0 > first))
        })
        .await?;
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn heartbeat_denied_by_rbac_keeps_the_connection_ready() -> Result<()> {
    on_consumer("no-lease", async |pair, consumer, name| {
        let rules = json!([
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
            {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
                "verbs": ["get", "list", "watch"]},
        ]);
        connect_as(pair, consumer, &name, rules, crd_source()).await?;
        wait_ready(consumer, &name).await?;
        let lease = heartbeat_lease_name(&name, &cluster_uid(consumer).await?);
        let leases: Api<Lease> = Api::namespaced(pair.provider.client().await?, "kbind");
        let written = leases.get_opt(&lease).await?;
        assert!(written.is_none(), "the denied heartbeat wrote nothing");
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn deletion_waits_in_draining_bindings_while_a_binding_references_it() -> Result<()> {
    on_consumer("draining", async |pair, consumer, name| {
        connect_ready(consumer, &pair.provider, &name).await?;
        ensure_namespace(consumer, &name).await?;
        let bindings: Api<Binding> = Api::namespaced(consumer.clone(), &name);
        let binding = Binding::new("uses-it", binding_spec(&name, "widgets.example.org")?);
        bindings.create(&PostParams::default(), &binding).await?;
        delete_connection(consumer, &name).await?;
        wait_reason(consumer, &name, "Ready=False", "DrainingBindings").await?;
        let guarded = secret_guarded(consumer, &name).await?;
        assert!(guarded, "credentials stay guarded while draining");
        bindings.delete("uses-it", &DeleteParams::default()).await?;
        wait_left(&[(consumer, kind::<Connection>(), &name, Left::Gone)]).await?;
        let guarded = secret_guarded(consumer, &name).await?;
        assert!(!guarded, "the Secret is released, not deleted");
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn shared_secret_keeps_its_finalizer_until_the_last_connection_is_gone() -> Result<()> {
    on_consumer("shared-secret", async |pair, consumer, secret| {
        connect_ready(consumer, &pair.provider, &secret).await?;
        let second = format!("{secret}-too");
        let also = connection(&second, &secret, crd_source(), false);
        let connections: Api<Connection> = Api::all(consumer.clone());
        connections.create(&PostParams::default(), &also).await?;
        wait_ready(consumer, &second).await?;
        delete_gone(consumer, kind::<Connection>(), &secret).await?;
        let guarded = secret_guarded(consumer, &secret).await?;
        assert!(guarded, "still guarded for the second Connection");
        delete_gone(consumer, kind::<Connection>(), &second).await?;
        let guarded = secret_guarded(consumer, &secret).await?;
        assert!(!guarded, "released with the last Connection");
        anyhow::Ok(())
    })
    .await
}

#[tokio::test]
async fn an_auto_bind_name_clash_is_one_warning_and_a_condition_while_it_lasts() -> Result<()> {
    on_consumer("events-taken", async |pair, consumer, name| {
        // A ClusterBinding of the consumer's own under the name autoBind would use; it points
        // elsewhere, so it never holds up this Connection's deletion.
        elsewhere_cluster_binding(consumer, &name, &name).await?;
        connect(consumer, &pair.provider, &name, crd_source(), true).await?;

        let (reason, exists) = ("AutoBindNameTaken", format!("ClusterBinding {name} exists"));
        let warning = published_once(consumer, &name, "Warning", reason, &[&exists]).await?;
        assert_eq!(warning.action.as_deref(), Some("AutoBind"));
        let taken = wait_reason(consumer, &name, "AutoBindInSync=False", reason).await?;
        let ready = has_condition(&taken, "Ready", "True", "AsExpected");
        assert!(ready, "a name clash does not make the Connection unready");
        let theirs = wait_cluster_binding(consumer, &name, |_| true).await?;
        let managed = theirs.labels().contains_key(MANAGED_LABEL);
        assert!(!managed, "autoBind left the other ClusterBinding alone");
        // autoBind off: nothing left to report.
        patch_spec(consumer, &name, json!({"autoBind": false})).await?;
        let unreported = |c: &Connection| condition(c, "AutoBindInSync").is_none();
        wait_connection(consumer, &name, "no AutoBindInSync condition", unreported).await?;
        delete_connection(consumer, &name).await?;
        delete_gone(consumer, kind::<ClusterBinding>(), &name).await
    })
    .await
}

// What a provider's exports cannot reach on the consumer: a provider labelling kbind's own
// `clusterbindings.core.kbind.io` exported, and exporting an API whose name a consumer CRD of
// the consumer's own already has. autoBind never lists either, and deleting the Connection
// leaves the consumer's core CRD, its ClusterBindings, and its own CRD and objects.
const CORE: &str = "clusterbindings.core.kbind.io";

#[tokio::test]
async fn auto_bind_never_lists_kbinds_own_api_or_a_consumer_owned_crd() -> Result<()> {
    with_private_provider("exports", async |_, consumer, cluster, provider, name| {
        let group = "exports.example.org";
        install_core_crds(provider).await?;
        set_exported(provider, CORE, true).await?;
        for kind in ["Widget", "Gadget"] {
            install_crd(provider, &widget_crd(group, kind, true)?).await?;
        }
        let (widgets, gadgets) = (format!("widgets.{group}"), format!("gadgets.{group}"));
        install_crd(consumer, &widget_crd(group, "Gadget", false)?).await?;
        ensure_namespace(consumer, &name).await?;
        let gadget = ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", "Gadget"));
        let own = DynamicObject::new("own", &gadget).data(json!({"spec": {"size": 1}}));
        let own_objects = Api::namespaced_with(consumer.clone(), &name, &gadget);
        own_objects.create(&PostParams::default(), &own).await?;
        // A ClusterBinding of the consumer's own that has nothing to do with this provider.
        let bystander = format!("{name}-bystander");
        elsewhere_cluster_binding(consumer, &bystander, &name).await?;

        connect(consumer, cluster, &name, crd_source(), true).await?;
        let ready = |b: &ClusterBinding| b.status.iter().any(|s| is_true(&s.conditions, Ready));
        let auto = wait_cluster_binding(consumer, &name, ready).await?;
        assert_eq!(api_names(&auto), [&widgets], "only the bindable export");
        let seen = wait_reason(consumer, &name, "SchemaInSync=False", "CRDNotManaged").await?;
        let core_exported = exported_names(&seen).contains(&CORE.to_string());
        assert!(!core_exported, "kbind's own API is never exported");
        says(message(&seen, "SchemaInSync"), &[CORE, &gadgets]);
        let still_ready = has_condition(&seen, "Ready", "True", "AsExpected");
        assert!(still_ready, "still Ready");
        published_once(consumer, &name, "Warning", "CRDNotManaged", &[]).await?;

        delete_gone(consumer, kind::<Connection>(), &name).await?;
        // The ordinary export's kbind-installed CRD goes with its ClusterBinding; the rest stays.
        let (crd, own) = (kind::<CustomResourceDefinition>, format!("{name}/own"));
        wait_left(&[
            (consumer, crd(), &widgets, Left::Gone),
            (consumer, crd(), CORE, Left::Kept),
            (consumer, crd(), &gadgets, Left::Kept),
            (consumer, gadget, &own, Left::Kept),
            (consumer, kind::<ClusterBinding>(), &bystander, Left::Kept),
        ])
        .await?;
        delete_gone(consumer, kind::<ClusterBinding>(), &bystander).await
    })
    .await
}

/// The isolation a Connection reports in force: strategy and prefix.
fn isolation_in_force(connection: &Connection) -> Option<(IsolationStrategy, String)> {
    let isolation = connection.status.as_ref()?.isolation.as_ref()?;
    Some((isolation.strategy, isolation.prefix.clone()))
}

/// Sets the Connection's `spec.isolation`.
async fn set_isolation(consumer: &Client, name: &str, prefix: &str) -> Result<()> {
    let patch = json!({ "spec": { "isolation": { "strategy": "Namespaced", "prefix": prefix } } });
    Api::<Connection>::all(consumer.clone())
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

#[tokio::test]
async fn an_isolation_change_waits_until_no_binding_uses_the_connection() -> Result<()> {
    on_consumer("isolation-change", async |pair, consumer, name| {
        connect_ready(consumer, &pair.provider, &name).await?;
        set_isolation(consumer, &name, "first").await?;
        let first = (IsolationStrategy::Namespaced, "first".to_string());
        wait_connection(consumer, &name, "isolation first in force", |c| {
            isolation_in_force(c) == Some(first.clone())
                && holds(c, "IsolationInSync=True", "AsExpected")
        })
        .await?;
        ensure_namespace(consumer, &name).await?;
        let bindings: Api<Binding> = Api::namespaced(consumer.clone(), &name);
        let binding = Binding::new("uses-it", binding_spec(&name, "widgets.example.org")?);
        bindings.create(&PostParams::default(), &binding).await?;

        // Copies never move: the change waits, and the Connection says why.
        set_isolation(consumer, &name, "second").await?;
        let pending = wait_reason(
            consumer,
            &name,
            "IsolationInSync=False",
            "IsolationChangePending",
        )
        .await?;
        assert_eq!(isolation_in_force(&pending), Some(first));
        says(
            message(&pending, "IsolationInSync"),
            &["1 binding(s)", "delete those bindings"],
        );
        assert!(is_true(
            &pending.status.clone().unwrap_or_default().conditions,
            Ready
        ));

        bindings.delete("uses-it", &DeleteParams::default()).await?;
        let second = (IsolationStrategy::Namespaced, "second".to_string());
        wait_connection(consumer, &name, "isolation second in force", |c| {
            isolation_in_force(c) == Some(second.clone())
                && holds(c, "IsolationInSync=True", "AsExpected")
        })
        .await?;
        anyhow::Ok(())
    })
    .await
}
