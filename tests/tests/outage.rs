//! A cluster stopped and started again is the same cluster: same data, address and
//! credentials, so clients (and the konnector) recover without being reconfigured.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kbind_tests::eventually;
use kbind_tests::testenv::ClusterPair;
use kube::api::{Api, ObjectMeta, PostParams};

#[tokio::test]
async fn provider_restart_keeps_data() -> anyhow::Result<()> {
    // Stopping a cluster would break every other test of a shared pair: this one owns its pair.
    let pair = ClusterPair::start_private()?;
    pair.diagnose(async {
        let provider = &pair.provider;
        let client = provider.client().await?;
        let secrets: Api<Secret> = Api::namespaced(client, "default");
        let data = BTreeMap::from([("token".to_string(), ByteString(b"s3cret".to_vec()))]);
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some("survivor".into()),
                ..ObjectMeta::default()
            },
            data: Some(data.clone()),
            ..Secret::default()
        };
        let created = secrets.create(&PostParams::default(), &secret).await?;
        let server = provider.server();

        provider.stop();
        assert!(!provider.is_running());
        assert!(
            secrets.get("survivor").await.is_err(),
            "a stopped apiserver must not answer"
        );
        assert!(
            pair.consumer.is_running(),
            "stopping the provider touched the consumer"
        );

        provider.start()?;
        assert!(provider.is_running());
        assert_eq!(provider.server(), server, "the apiserver moved");
        // The client from before the outage works again: same address, CA and credentials.
        let after = eventually(Duration::from_secs(10), || secrets.get("survivor")).await?;
        assert_eq!(after.data, Some(data));
        assert_eq!(after.metadata.uid, created.metadata.uid);
        anyhow::Ok(())
    })
    .await
}
