//! A cluster stopped and started again is the same cluster: same data, address and
//! credentials, so clients (and the konnector) recover without being reconfigured.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kbind_tests::eventually;
use kbind_tests::syncenv::related::{put_secret, secret_value};
use kbind_tests::testenv::ClusterPair;
use kube::api::Api;

#[tokio::test]
async fn provider_restart_keeps_data() -> anyhow::Result<()> {
    // Stopping a cluster would break every other test of a shared pair: this one owns its pair.
    let pair = ClusterPair::start_private()?;
    pair.diagnose(async {
        let provider = &pair.provider;
        let client = provider.client().await?;
        let token = [("token", "s3cret")];
        let created = put_secret(&client, "default", "survivor", &[], &token, None).await?;
        let secrets: Api<Secret> = Api::namespaced(client, "default");
        let server = provider.server();

        provider.stop();
        assert!(!provider.is_running());
        let answer = secrets.get("survivor").await;
        assert!(answer.is_err(), "a stopped apiserver must not answer");
        assert!(
            pair.consumer.is_running(),
            "stopping the provider touched the consumer"
        );

        provider.start()?;
        assert!(provider.is_running());
        assert_eq!(provider.server(), server, "the apiserver moved");
        // The client from before the outage works again: same address, CA and credentials.
        let after = eventually(Duration::from_secs(10), || secrets.get("survivor")).await?;
        assert_eq!(secret_value(&after, "token").as_deref(), Some("s3cret"));
        assert_eq!(after.metadata.uid, created.metadata.uid);
        anyhow::Ok(())
    })
    .await
}
