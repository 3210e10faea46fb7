//! Restricted identities minted by the test environment: authenticated as the user and groups
//! asked for, and authorized by exactly the RBAC the test grants.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kbind_tests::access::{expect_refused, grant};
use kbind_tests::eventually;
use kbind_tests::fixtures::ensure_namespace;
use kbind_tests::testenv::shared_pair;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

const NAMESPACE: &str = "rbac-restricted";
const GROUP: &str = "kbind:testers";
/// How long a grant may take to reach the authorizer.
const GRANTED: Duration = Duration::from_secs(10);

/// Refused as 403 Forbidden for user alice.
fn forbidden<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> anyhow::Result<()> {
    expect_refused(result, (403, "Forbidden"), "\"alice\"")
}

#[tokio::test]
async fn restricted_identity_is_forbidden_until_granted() -> anyhow::Result<()> {
    let pair = shared_pair()?;
    pair.diagnose(async {
        let admin = pair.provider.client().await?;
        ensure_namespace(&admin, NAMESPACE).await?;

        let alice = pair.provider.mint_user("alice", &[GROUP])?;
        let as_alice = alice.client().await?;

        // The apiserver sees the user and group the certificate was minted for.
        let reviews: Api<SelfSubjectReview> = Api::all(as_alice.clone());
        let review = reviews.create(&PostParams::default(), &Default::default()).await?;
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
        eventually(GRANTED, || config_maps.list(&all)).await?;
        let granted = serde_json::from_value(json!({ "metadata": { "name": "granted" } }))?;
        config_maps.create(&PostParams::default(), &granted).await?;

        // Still forbidden: a verb, a resource and a namespace the grant does not cover.
        forbidden(config_maps.delete("granted", &Default::default()).await)?;
        forbidden(secrets.list(&all).await)?;
        let elsewhere: Api<ConfigMap> = Api::namespaced(as_alice.clone(), "default");
        forbidden(elsewhere.list(&all).await)?;

        // A grant to the certificate's group counts too.
        let list = rules("secrets", &["list"]);
        grant(&admin, Some(NAMESPACE), "secrets-list", list, ("Group", GROUP)).await?;
        eventually(GRANTED, || secrets.list(&all)).await?;
        anyhow::Ok(())
    })
    .await
}
