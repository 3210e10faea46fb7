//! Restricted identities minted by the test environment: authenticated as the user and groups
//! asked for, and authorized by exactly the RBAC the test grants.

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kbind_tests::access::{expect_refused, grant};
use kbind_tests::eventually;
use kbind_tests::testenv::shared_pair;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

const NAMESPACE: &str = "rbac-restricted";
const GROUP: &str = "kbind:testers";

/// Refused as 403 Forbidden for user alice.
fn forbidden<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> anyhow::Result<()> {
    expect_refused(result, (403, "Forbidden"), "\"alice\"")
}

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
        let all = ListParams::default();
        forbidden(config_maps.list(&all).await)?;

        let rules = |resource: &str, verbs: &[&str]| {
            json!([{ "apiGroups": [""], "resources": [resource], "verbs": verbs }])
        };
        let read_write = rules("configmaps", &["get", "list", "create"]);
        grant(&admin, Some(NAMESPACE), "configmaps-rw", read_write, ("User", "alice")).await?;
        eventually(Duration::from_secs(10), || config_maps.list(&all))
            .await
            .context("listing ConfigMaps after the grant")?;
        let config_map = serde_json::from_value(json!({ "metadata": { "name": "granted" } }))?;
        config_maps
            .create(&PostParams::default(), &config_map)
            .await?;

        // Still forbidden: a verb, a resource and a namespace the grant does not cover.
        forbidden(config_maps.delete("granted", &Default::default()).await)?;
        forbidden(secrets.list(&all).await)?;
        let elsewhere: Api<ConfigMap> = Api::namespaced(as_alice.clone(), "default");
        forbidden(elsewhere.list(&all).await)?;

        // A grant to the certificate's group counts too.
        let list = rules("secrets", &["list"]);
        grant(&admin, Some(NAMESPACE), "secrets-list", list, ("Group", GROUP)).await?;
        eventually(Duration::from_secs(10), || secrets.list(&all))
            .await
            .context("listing Secrets after the group grant")?;
        anyhow::Ok(())
    })
    .await
}
