//! Restricted identities minted by the test environment: authenticated as the user and groups
//! asked for, and authorized by exactly the RBAC the test grants.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kbind_tests::eventually;
use kbind_tests::testenv::shared_pair;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

const NAMESPACE: &str = "rbac-restricted";
const GROUP: &str = "kbind:testers";

#[tokio::test]
async fn restricted_identity_is_forbidden_until_granted() -> anyhow::Result<()> {
    let pair = shared_pair()?;
    pair.diagnose(async {
        let admin = pair.provider.client().await?;
        let namespace = serde_json::from_value(json!({ "metadata": { "name": NAMESPACE } }))?;
        Api::<Namespace>::all(admin.clone())
            .create(&PostParams::default(), &namespace)
            .await?;

        let alice = pair.provider.mint_user("alice", &[GROUP])?;
        let as_alice = alice.client().await?;

        // The apiserver sees the user and group the certificate was minted for.
        let review = Api::<SelfSubjectReview>::all(as_alice.clone())
            .create(&PostParams::default(), &SelfSubjectReview::default())
            .await?;
        let user = review.status.and_then(|s| s.user_info).unwrap_or_default();
        assert_eq!(user.username.as_deref(), Some("alice"));
        let groups = user.groups.unwrap_or_default();
        assert!(groups.iter().any(|g| g == GROUP), "{groups:?}");

        let config_maps: Api<ConfigMap> = Api::namespaced(as_alice.clone(), NAMESPACE);
        let secrets: Api<Secret> = Api::namespaced(as_alice.clone(), NAMESPACE);
        expect_forbidden(config_maps.list(&ListParams::default()).await)?;

        // Grant the user get/list/create on ConfigMaps in the namespace.
        grant(
            &admin,
            "configmaps-rw",
            &["configmaps"],
            &["get", "list", "create"],
            json!({ "kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io" }),
        )
        .await?;
        let all = ListParams::default();
        eventually(Duration::from_secs(10), || config_maps.list(&all))
            .await
            .context("listing ConfigMaps after the grant")?;
        let config_map = serde_json::from_value(json!({ "metadata": { "name": "granted" } }))?;
        config_maps
            .create(&PostParams::default(), &config_map)
            .await?;

        // Still forbidden: a verb, a resource and a namespace the grant does not cover.
        expect_forbidden(config_maps.delete("granted", &Default::default()).await)?;
        expect_forbidden(secrets.list(&ListParams::default()).await)?;
        let elsewhere: Api<ConfigMap> = Api::namespaced(as_alice.clone(), "default");
        expect_forbidden(elsewhere.list(&ListParams::default()).await)?;

        // A grant to the certificate's group counts too.
        grant(
            &admin,
            "secrets-list",
            &["secrets"],
            &["list"],
            json!({ "kind": "Group", "name": GROUP, "apiGroup": "rbac.authorization.k8s.io" }),
        )
        .await?;
        eventually(Duration::from_secs(10), || secrets.list(&all))
            .await
            .context("listing Secrets after the group grant")?;
        anyhow::Ok(())
    })
    .await
}

/// Creates a Role on `resources` with `verbs` in the test namespace, bound to `subject`.
async fn grant(
    admin: &kube::Client,
    name: &str,
    resources: &[&str],
    verbs: &[&str],
    subject: serde_json::Value,
) -> anyhow::Result<()> {
    let role: Role = serde_json::from_value(json!({
        "metadata": { "name": name },
        "rules": [{ "apiGroups": [""], "resources": resources, "verbs": verbs }],
    }))?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name },
        "subjects": [subject],
    }))?;
    Api::<Role>::namespaced(admin.clone(), NAMESPACE)
        .create(&PostParams::default(), &role)
        .await?;
    Api::<RoleBinding>::namespaced(admin.clone(), NAMESPACE)
        .create(&PostParams::default(), &binding)
        .await?;
    Ok(())
}

/// Asserts the request was refused as 403 Forbidden for user alice.
fn expect_forbidden<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> anyhow::Result<()> {
    match result {
        Err(kube::Error::Api(status)) => {
            ensure!(
                status.code == 403 && status.reason == "Forbidden",
                "expected 403 Forbidden, got {status:?}"
            );
            ensure!(
                status.message.contains("\"alice\""),
                "expected the user in {:?}",
                status.message
            );
            Ok(())
        }
        other => bail!("expected 403 Forbidden, got {other:?}"),
    }
}
