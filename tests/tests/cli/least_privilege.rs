//! Least privilege, proven: the konnector's provider identity is a ServiceAccount bound to
//! exactly what `kubectl kbind provider-rbac` prints, and the whole happy path works with it:
//! connect, spec consumer → provider, status back, a related Secret copy, the heartbeat Lease,
//! and teardown.

use anyhow::{Result, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kbind_tests::fixtures::condition;
use kbind_tests::syncenv::related::{put_secret, secret_value, wait_secret};
use kbind_tests::syncenv::remains::Left::{Gone, Kept};
use kbind_tests::syncenv::remains::{expect_left, kind};
use kbind_tests::syncenv::{cluster_uid, set_status, wait_for};
use konnector::api::names::{DEFAULT_HEARTBEAT_NAMESPACE, heartbeat_lease_name};
use konnector::api::{Binding, Connection};
use konnector::k8s::ApiErrorExt as _;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use super::{Cli, WAIT};

#[test]
fn the_konnector_works_with_exactly_the_printed_provider_rbac() -> Result<()> {
    Cli::run("lp", async |c| {
        // Nothing but what provider-rbac prints.
        let related = ["--related", "secrets:FromProvider"];
        let (identity, rbac) = c.konnector_identity(&related).await?;
        let kinds: Vec<_> = rbac.iter().map(|d| &d["kind"]).collect();
        let printed = "Namespace ClusterRole ClusterRoleBinding Role RoleBinding";
        assert_eq!(kinds, printed.split(' ').collect::<Vec<_>>());
        c.apply_on_provider(&rbac).await?;

        // The identity really is restricted: no Secrets outside what related reads, no writes.
        let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "x"}}))?;
        let secrets = Api::<Secret>::namespaced(identity.client().await?, "lp-system");
        let denied = secrets.create(&PostParams::default(), &secret).await;
        let forbidden = denied.as_ref().is_err_and(|e| e.is_http_forbidden());
        ensure!(forbidden, "secret create allowed: {denied:?}");

        let connected = c.connect(&identity, &["--schema-source", "CRD"]).await?;
        let admin = "cluster administrator";
        ensure!(!connected.stderr.contains(admin), "{connected:?}");
        let password = [("password", "s3cret")];
        put_secret(&c.provider, "lp", "lp-creds", &[], &password, None).await?;
        let related = "secrets:FromProvider:names=lp-creds";
        c.bind(&["-n", "lp", "--related", related]).await?;

        // Spec consumer → provider, status back.
        let spec = json!({"size": 3, "color": "blue"});
        assert_eq!(c.create_synced("w", spec.clone()).await?.data["spec"], spec);
        set_status(&c.copies, "w", json!({"phase": "Running"})).await?;
        wait_for("the status back on the consumer", WAIT, || async {
            let w = c.instances.get("w").await?;
            Ok((w.data["status"]["phase"] == "Running").then_some(()))
        })
        .await?;

        // A related Secret copied provider → consumer.
        let copied = wait_secret(&c.consumer, "lp", "lp-creds").await?;
        assert_eq!(secret_value(&copied, "password").as_deref(), Some("s3cret"));

        // The heartbeat Lease, renewed by the restricted identity.
        let lease = heartbeat_lease_name("lp", &cluster_uid(&c.consumer).await?);
        let leases = Api::<Lease>::namespaced(c.provider.clone(), DEFAULT_HEARTBEAT_NAMESPACE);
        wait_for("the heartbeat Lease, with a holder", WAIT, || async {
            let lease = leases.get_opt(&lease).await?;
            Ok(lease.and_then(|l| l.spec?.holder_identity))
        })
        .await?;

        // Never refused along the way.
        let connection = Api::<Connection>::all(c.consumer.clone()).get("lp").await?;
        let refused = condition(&connection, "PermissionDenied").filter(|d| d.status == "True");
        ensure!(refused.is_none(), "{refused:?}");
        let counts = "instances: 1 synced, 0 conflicting, 0 failing, 0 pending";
        c.kbind(&["status", "lp"]).await?.expect(0, &[counts])?;

        // Teardown with the same identity: the copies go, the sources stay.
        c.ok(&["disconnect", "lp", "--cascade"], &[]).await?;
        expect_left(&[
            (&c.provider, c.api.resource(), "lp/w", Gone),
            (&c.consumer, kind::<Secret>(), "lp/lp-creds", Gone),
            (&c.provider, kind::<Secret>(), "lp/lp-creds", Kept),
            (&c.consumer, kind::<Binding>(), "lp/widgets", Gone),
            (&c.consumer, kind::<Connection>(), "lp", Gone),
            (&c.consumer, kind::<Secret>(), "kbind/lp-kubeconfig", Gone),
        ])
        .await
    })
}
