//! Least privilege, proven: the konnector's provider identity is a ServiceAccount bound to
//! exactly what `kubectl kbind provider-rbac` prints, and the whole happy path works with it:
//! connect, spec consumer → provider, status back, a related Secret copy, the heartbeat Lease,
//! and teardown.

use anyhow::{Result, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kbind_tests::fixtures::SECRET_NAMESPACE;
use kbind_tests::syncenv::related::{put_secret, secret_value, wait_secret};
use kbind_tests::syncenv::remains::Left::{Gone, Kept};
use kbind_tests::syncenv::remains::{expect_left, kind};
use kbind_tests::syncenv::{cluster_uid, set_status, wait_for};
use konnector::api::names::{DEFAULT_HEARTBEAT_NAMESPACE, heartbeat_lease_name};
use konnector::api::{Binding, ConditionType, Connection};
use konnector::conditions::is_true;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use super::{Cli, WAIT};

#[test]
fn the_konnector_works_with_exactly_the_printed_provider_rbac() -> Result<()> {
    Cli::run("lp", async |c| {
        let ns = c.ns();
        // Nothing but what provider-rbac prints.
        let (identity, rbac) = c
            .konnector_identity(&["--related", "secrets:FromProvider"])
            .await?;
        let kinds: Vec<_> = rbac.iter().map(|d| d["kind"].as_str()).collect();
        let expected = [
            "Namespace",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
        ];
        assert_eq!(kinds, expected.map(Some));
        c.apply_on_provider(&rbac).await?;

        // The identity really is restricted: no Secrets outside what related reads, no writes.
        let denied = Api::<Secret>::namespaced(identity.client().await?, "lp-system")
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "x"}}))?,
            )
            .await;
        ensure!(
            matches!(&denied, Err(kube::Error::Api(s)) if s.code == 403),
            "secret create allowed: {denied:?}"
        );

        c.connect(identity.kubeconfig_path(), &["--schema-source", "CRD"])
            .await?;
        put_secret(
            &c.provider,
            ns,
            "lp-creds",
            &[],
            &[("password", "s3cret")],
            None,
        )
        .await?;
        c.bind(&["-n", ns, "--related", "secrets:FromProvider:names=lp-creds"])
            .await?;

        // Spec consumer → provider, status back.
        let spec = json!({"size": 3, "color": "blue"});
        assert_eq!(c.create_synced("w", spec.clone()).await?.data["spec"], spec);
        set_status(&c.copies(), "w", json!({"phase": "Running"})).await?;
        wait_for("the status back on the consumer", WAIT, || async {
            let w = c.instances().get("w").await?;
            Ok((w.data["status"]["phase"] == "Running").then_some(()))
        })
        .await?;

        // A related Secret copied provider → consumer.
        let copied = wait_secret(&c.consumer, ns, "lp-creds").await?;
        assert_eq!(secret_value(&copied, "password").as_deref(), Some("s3cret"));

        // The heartbeat Lease, renewed by the restricted identity.
        let lease_name = heartbeat_lease_name("lp", &cluster_uid(&c.consumer).await?);
        let leases = Api::<Lease>::namespaced(c.provider.clone(), DEFAULT_HEARTBEAT_NAMESPACE);
        let lease = wait_for("the heartbeat Lease", WAIT, || async {
            Ok(leases.get_opt(&lease_name).await?)
        })
        .await?;
        ensure!(
            lease.spec.and_then(|s| s.holder_identity).is_some(),
            "the Lease has a holder"
        );

        // Never refused along the way.
        let connection = Api::<Connection>::all(c.consumer.clone()).get("lp").await?;
        let conditions = connection.status.map(|s| s.conditions).unwrap_or_default();
        ensure!(
            !is_true(&conditions, ConditionType::PermissionDenied),
            "PermissionDenied: {conditions:?}"
        );
        let counts = "instances: 1 synced, 0 conflicting, 0 failing, 0 pending";
        c.kbind(&["status", "lp"]).await?.expect(0, &[counts])?;

        // Teardown with the same identity: the copies go, the sources stay.
        c.ok(&["disconnect", "lp", "--cascade"], &[]).await?;
        expect_left(&[
            (&c.provider, c.api.resource(), Some(ns), "w", Gone),
            (&c.consumer, kind::<Secret>(), Some(ns), "lp-creds", Gone),
            (&c.provider, kind::<Secret>(), Some(ns), "lp-creds", Kept),
            (&c.consumer, kind::<Binding>(), Some(ns), "widgets", Gone),
            (&c.consumer, kind::<Connection>(), None, "lp", Gone),
            (
                &c.consumer,
                kind::<Secret>(),
                Some(SECRET_NAMESPACE),
                "lp-kubeconfig",
                Gone,
            ),
        ])
        .await
    })
}
