//! Bounded inputs: a provider answer larger than the konnector's cap for it is refused while it
//! streams in, and the Connection says which cap and which flag raises it.
//!
//! The caps are process-wide (`konnector run` sets them once from its flags), so this binary
//! sets a small `/openapi/v3` index cap and a small copy-status cap before its konnector
//! starts, the same for every test; its tests are the only ones they affect. The discovery cap
//! is set the way an operator sets it, on the command line of a `konnector run` process on a
//! pair of its own: a cap small enough for `/apis` would refuse every discovery in this binary.

use anyhow::Result;
use kbind_tests::faults::process::KonnectorProcess;
use kbind_tests::fixtures::{
    connect, has_condition, install_core_crds, shared_konnector, unique, wait_connection,
};
use kbind_tests::syncenv::{
    Scenario, WAIT, ensure_namespace, says, set_status, synced_condition, wait_for,
};
use kbind_tests::testenv::{ClusterPair, second_pair, shared_pair};
use konnector::api::names::DEFAULT_SECRET_NAMESPACE;
use konnector::api::{SchemaPolicy, SchemaSource};
use konnector::provider::limits::{self, Limits};
use serde_json::json;

/// Smaller than any kube-apiserver's `/openapi/v3` index (one entry per served group-version).
const SMALL_INDEX: usize = 1024;
/// Smaller than any kube-apiserver's `/apis` group list.
const SMALL_DISCOVERY: &str = "1KiB";
/// Larger than a test widget's ordinary status, smaller than the one written here to exceed it.
const SMALL_STATUS: usize = 2048;

/// Sets this binary's caps, the same whichever test comes first.
fn small_caps() {
    limits::set(Limits {
        openapi_index: SMALL_INDEX,
        copy_status: SMALL_STATUS,
        ..Limits::default()
    });
}

/// Connects `pair`'s consumer to its provider through the OpenAPI source, and checks that the
/// Connection is `Ready=False ResponseTooLarge`, its message saying each of `says_what` and
/// nothing exported.
async fn refused_as_too_large(
    consumer: &kube::Client,
    pair: &ClusterPair,
    prefix: &str,
    says_what: &[&str],
) -> Result<()> {
    let name = unique(prefix);
    let openapi = SchemaPolicy {
        source: SchemaSource::OpenApi,
        ..SchemaPolicy::default()
    };
    connect(consumer, &pair.provider, &name, openapi, false).await?;
    let seen = wait_connection(consumer, &name, "Ready=False ResponseTooLarge", |c| {
        has_condition(c, "Ready", "False", "ResponseTooLarge")
    })
    .await?;
    let ready = kbind_tests::fixtures::condition(&seen, "Ready");
    says(ready.map_or("", |c| c.message.as_str()), says_what);
    let exported = seen.status.iter().flat_map(|s| &s.exported_apis).count();
    anyhow::ensure!(exported == 0, "nothing is exported from an answer not read");
    Ok(())
}

#[tokio::test]
async fn an_openapi_index_over_its_cap_makes_the_connection_say_so() -> Result<()> {
    small_caps();
    let pair = shared_pair()?;
    shared_konnector(pair)?;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let cap = format!("larger than {SMALL_INDEX} bytes");
        let says_what = ["/openapi/v3", &cap, "--max-openapi-index-bytes"];
        refused_as_too_large(&consumer, pair, "caps-index", &says_what).await
    })
    .await
}

#[tokio::test]
async fn a_discovery_answer_over_its_cap_makes_the_connection_say_so_and_names_the_flag()
-> Result<()> {
    let pair = second_pair()?;
    let binary = kbind_tests::konnector_binary!();
    let log = pair.root().join("caps-discovery.log");
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        install_core_crds(&consumer).await?;
        ensure_namespace(&consumer, DEFAULT_SECRET_NAMESPACE).await?;
        let cap = format!("--max-discovery-response-bytes={SMALL_DISCOVERY}");
        let kubeconfig = pair.consumer.admin().kubeconfig_path();
        let konnector = KonnectorProcess::start(&binary, kubeconfig, &log, &[&cap])?;
        konnector.wait_ready(WAIT).await?;
        let says_what = [
            "/apis",
            "larger than 1024 bytes",
            "--max-discovery-response-bytes",
        ];
        refused_as_too_large(&consumer, pair, "caps-discovery", &says_what).await
    })
    .await
}

#[test]
fn a_copy_status_over_its_cap_is_not_copied_back_and_the_instance_says_so() -> Result<()> {
    small_caps();
    Scenario::bound("caps-status").run(async |s| {
        s.create_copied("w", json!({ "size": 1 })).await?;
        let big = "x".repeat(2 * SMALL_STATUS);
        set_status(&s.copies(), "w", json!({ "phase": big })).await?;
        let told = wait_for("w Synced=False ResponseTooLarge", WAIT, || async {
            let obj = s.instances().get("w").await?;
            Ok(synced_condition(&obj).filter(|c| c["reason"] == "ResponseTooLarge"))
        })
        .await?;
        says(
            told["message"].as_str().unwrap_or_default(),
            &[
                &format!("more than the konnector keeps of a copy ({SMALL_STATUS} bytes"),
                "--max-copy-status-bytes",
            ],
        );
        let obj = s.instances().get("w").await?;
        anyhow::ensure!(
            obj.data["status"]["phase"] != json!(big),
            "the oversized status was copied back"
        );
        // Shrunk on the provider: copied back, and in sync again.
        set_status(&s.copies(), "w", json!({ "phase": "Running" })).await?;
        wait_for("phase Running copied back", WAIT, || async {
            let obj = s.instances().get("w").await?;
            let synced = synced_condition(&obj).is_some_and(|c| c["status"] == "True");
            Ok((obj.data["status"]["phase"] == "Running" && synced).then_some(()))
        })
        .await
    })
}
