//! Bounded inputs: a provider answer larger than the konnector's cap for it is refused while it
//! streams in, and the Connection says which cap and which flag raises it.
//!
//! The caps are process-wide (`konnector run` sets them once from its flags), so this binary
//! sets a small `/openapi/v3` index cap before its konnector starts; its tests are the only
//! ones it affects.

use anyhow::Result;
use kbind_tests::fixtures::{connect, has_condition, shared_konnector, unique, wait_connection};
use kbind_tests::syncenv::says;
use kbind_tests::testenv::shared_pair;
use konnector::api::{SchemaPolicy, SchemaSource};
use konnector::provider::limits::{self, Limits};

/// Smaller than any kube-apiserver's `/openapi/v3` index (one entry per served group-version).
const SMALL_INDEX: usize = 1024;

#[tokio::test]
async fn an_openapi_index_over_its_cap_makes_the_connection_say_so() -> Result<()> {
    limits::set(Limits {
        openapi_index: SMALL_INDEX,
        ..Limits::default()
    });
    let pair = shared_pair()?;
    shared_konnector(pair)?;
    pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        let name = unique("caps-index");
        let openapi = SchemaPolicy {
            source: SchemaSource::OpenApi,
            ..SchemaPolicy::default()
        };
        connect(&consumer, &pair.provider, &name, openapi, false).await?;
        let seen = wait_connection(&consumer, &name, "Ready=False ResponseTooLarge", |c| {
            has_condition(c, "Ready", "False", "ResponseTooLarge")
        })
        .await?;
        let ready = kbind_tests::fixtures::condition(&seen, "Ready");
        says(
            ready.map_or("", |c| c.message.as_str()),
            &[
                "/openapi/v3",
                &format!("larger than {SMALL_INDEX} bytes"),
                "--max-openapi-index-bytes",
            ],
        );
        let exported = seen.status.iter().flat_map(|s| &s.exported_apis).count();
        anyhow::ensure!(exported == 0, "nothing is exported from an unread index");
        anyhow::Ok(())
    })
    .await
}
