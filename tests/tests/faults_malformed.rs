//! Fault: malformed consumer instances of a bound API get clear errors and crash nothing. The
//! consumer CRD is free-form (`pullPolicy: None`, installed by the test) while the provider's
//! is strict (`spec.size` an integer ≤ 100), so the consumer accepts instances the provider
//! refuses: each gets a `ProviderRejected` Warning quoting the provider and no copy, until
//! fixed. A 1.4 MiB spec (the apiserver's limit is 1.5 MiB) and a 253-character name (the
//! maximum) are copied intact, and the well-formed instances keep syncing.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_tests::faults::Sides;
use kbind_tests::fixtures::install_crd;
use kbind_tests::syncenv::{Scenario, TestApi, merge};
use konnector::api::PullPolicy;
use konnector::api::names::EXPORTED_LABEL;
use serde_json::json;

const GOOD: usize = 10;
const HUGE: usize = 1400 * 1024;

/// The provider's CRD for `api`, exported: the test API with a strict `spec`.
fn strict_provider_crd(api: &TestApi) -> anyhow::Result<CustomResourceDefinition> {
    let mut crd = serde_json::to_value(api.crd()?)?;
    crd["metadata"]["labels"] = json!({ EXPORTED_LABEL: "true" });
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = json!({
        "type": "object",
        "properties": {
            "size": { "type": "integer", "maximum": 100 },
            "payload": { "type": "string" },
            "index": { "type": "integer" },
        },
    });
    Ok(serde_json::from_value(crd)?)
}

#[test]
fn malformed_consumer_instances_get_clear_errors_and_the_rest_syncs() -> anyhow::Result<()> {
    let scenario = Scenario::unbound("faults-malformed").pull_policy(PullPolicy::None);
    scenario.run(async |s| {
        let (api, sides) = (&s.api, Sides::of(s));
        install_crd(&s.provider, &strict_provider_crd(api)?).await?;
        api.install_on_consumer(&s.consumer, Some(&s.name)).await?;
        s.engage();
        s.bind().await?;

        let long_name = "a".repeat(253);
        let rejected = ["garbage-type", "garbage-range"];
        s.create(rejected[0], json!({ "size": "not a number" }))
            .await?;
        s.create(rejected[1], json!({ "size": 1000 })).await?;
        s.create("huge", json!({ "payload": "x".repeat(HUGE) }))
            .await?;
        s.create(&long_name, json!({ "size": 1 })).await?;
        sides.create_many("good", 0..GOOD).await?;

        sides.wait_copies(GOOD + 2).await?;
        let huge = s.copies().get("huge").await?;
        let payload = huge.data["spec"]["payload"].as_str().map(str::len);
        assert_eq!(payload, Some(HUGE), "the huge instance is copied intact");
        assert!(s.copies().get_opt(&long_name).await?.is_some());
        for name in rejected {
            sides.warned(name, "ProviderRejected", "spec.size").await?;
        }
        sides.never_copied(&rejected).await?;
        // Still syncing.
        s.create("late", json!({ "size": 2 })).await?;
        sides.wait_copies(GOOD + 3).await?;
        // Fixing the spec clears the rejection: the copy appears and Synced turns True.
        let fixed = json!({ "spec": { "size": 5 } });
        merge(&s.instances(), rejected[1], fixed).await?;
        sides.synced(rejected[1], "True", "AsExpected").await?;
        assert!(s.copies().get_opt(rejected[1]).await?.is_some());
        Ok(())
    })
}
