//! Fault: malformed inputs on the consumer side of a bound API (garbage in a bound API, huge
//! objects near the apiserver limit, names at the length limit) get clear errors and crash
//! nothing.
//!
//! Injected: the consumer CRD is free-form (`pullPolicy: None`, installed by the test) while
//! the provider's schema is strict (`spec.size` an integer ≤ 100, `spec.payload` a string), so
//! the consumer accepts instances the provider refuses: a string `size`, an out-of-range
//! `size`. Also an instance whose spec is a 1.4 MiB string (the apiserver's default request
//! limit is 1.5 MiB) and one whose name is 253 characters (the maximum).
//!
//! Counted: each refused instance carries a `ProviderRejected` Warning Event quoting the
//! provider's validation message and has no provider copy; the huge and the longest-named
//! instances are copied intact; the 10 well-formed instances and one created afterwards are
//! all copied (the syncer did not stop): 13 copies in the end. Fixing a refused spec clears
//! the rejection: the copy appears and the instance says `Synced=True`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_tests::faults::{create_instances, wait_copies};
use kbind_tests::fixtures::install_crd;
use kbind_tests::syncenv::{
    Scenario, TestApi, event_note, merge, stays, synced_condition, wait_for,
};
use konnector::api::PullPolicy;
use konnector::api::names::EXPORTED_LABEL;
use serde_json::json;

const GOOD: usize = 10;
const HUGE: usize = 1400 * 1024;
const WAIT: Duration = Duration::from_secs(120);

/// The provider's CRD for `api`: the test API with a strict `spec`.
fn strict_provider_crd(api: &TestApi) -> anyhow::Result<CustomResourceDefinition> {
    let mut crd = serde_json::to_value(api.crd()?)?;
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = json!({
        "type": "object",
        "properties": {
            "size": { "type": "integer", "maximum": 100 },
            "payload": { "type": "string" },
            "index": { "type": "integer" },
        },
    });
    let mut crd: CustomResourceDefinition = serde_json::from_value(crd)?;
    crd.metadata.labels = Some(BTreeMap::from([(
        EXPORTED_LABEL.to_string(),
        "true".to_string(),
    )]));
    Ok(crd)
}

#[test]
fn malformed_consumer_instances_get_clear_errors_and_the_rest_syncs() -> anyhow::Result<()> {
    let scenario = Scenario::unbound("faults-malformed").pull_policy(PullPolicy::None);
    scenario.run(async |s| {
        let (api, ns) = (&s.api, s.ns());
        install_crd(&s.provider, &strict_provider_crd(api)?).await?;
        api.install_on_consumer(&s.consumer, Some(&s.name)).await?;
        s.engage();
        s.bind().await?;

        let long_name = "a".repeat(253);
        let rejected = [
            ("garbage-type", json!({ "size": "not a number" })),
            ("garbage-range", json!({ "size": 1000 })),
        ];
        for (name, spec) in &rejected {
            s.create(name, spec.clone()).await?;
        }
        s.create("huge", json!({ "payload": "x".repeat(HUGE) }))
            .await?;
        s.create(&long_name, json!({ "size": 1 })).await?;
        create_instances(api, &s.consumer, ns, "good", 0..GOOD).await?;

        wait_copies(api, &s.provider, ns, GOOD + 2, WAIT).await?;
        let huge = s.copies().get("huge").await?;
        assert_eq!(
            huge.data["spec"]["payload"].as_str().map(str::len),
            Some(HUGE),
            "the huge instance is copied intact"
        );
        assert!(s.copies().get_opt(&long_name).await?.is_some());

        for (name, _) in &rejected {
            let note = event_note(&s.consumer, (ns, *name), "ProviderRejected", None, WAIT).await?;
            println!("{name}: {note}");
            assert!(
                note.contains("spec.size"),
                "the Event quotes the provider: {note}"
            );
        }
        stays(
            "no copy of a rejected instance",
            Duration::from_secs(2),
            || async {
                Ok(s.copies().get_opt("garbage-type").await?.is_none()
                    && s.copies().get_opt("garbage-range").await?.is_none())
            },
        )
        .await?;
        // Still syncing.
        s.create("late", json!({ "size": 2 })).await?;
        wait_copies(api, &s.provider, ns, GOOD + 3, WAIT).await?;
        // Fixing the spec clears the rejection: the copy appears and Synced turns True.
        merge(
            &s.instances(),
            "garbage-range",
            json!({ "spec": { "size": 5 } }),
        )
        .await?;
        wait_for("garbage-range Synced=True once fixed", WAIT, || async {
            let obj = s.instances().get("garbage-range").await?;
            Ok(synced_condition(&obj)
                .filter(|c| c["status"] == "True" && c["reason"] == "AsExpected")
                .map(|_| ()))
        })
        .await?;
        assert!(s.copies().get_opt("garbage-range").await?.is_some());
        Ok(())
    })
}
