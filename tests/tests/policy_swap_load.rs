//! A process-wide policy module swapped live in the middle of a 1 000-instance sync, as an
//! operator does by changing the reference in the chart's references file: every instance
//! syncs one to one, no policy call fails, the new module answers, and nothing restarts or
//! lists again (a list the konnector logs as a cluster's expiry of its watch, `410 Gone`
//! under load, is the cluster's doing, not the swap's).

use std::time::Duration;

use anyhow::ensure;
use kbind_tests::faults::Sides;
use kbind_tests::faults::process::KonnectorProcess;
use kbind_tests::fixtures::install_core_crds;
use kbind_tests::syncenv::{TestApi, ensure_namespace};
use kbind_tests::testenv::shared_pair;
use konnector::api::names::DEFAULT_SECRET_NAMESPACE;
use konnector::policy::builtin;

const INSTANCES: usize = 1000;
const SWAP_AFTER: usize = 300;

/// The value of the sample `name{labels}` in `metrics`, 0 when absent.
fn sample(metrics: &str, name_and_labels: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name_and_labels)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Every sample of the policy failure counter that is not zero.
fn failed_calls(metrics: &str) -> Vec<&str> {
    metrics
        .lines()
        .filter(|line| line.starts_with("kbind_policy_failures_total{"))
        .filter(|line| !line.ends_with(" 0"))
        .collect()
}

/// The konnector log's lines about its watches expiring or failing (why one listed again).
fn watch_lines(log: &std::path::Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_else(|e| format!("(no log: {e})"));
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("watch expired") || l.contains("watch failed"))
        .collect();
    lines.join("\n")
}

/// How often the konnector log says a watch on `cluster` expired and listed again.
fn expiries(log: &std::path::Path, cluster: &str) -> usize {
    let cluster = format!("cluster=\"{cluster}\"");
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("watch expired") && l.contains(&cluster))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_swapped_during_a_1000_instance_sync_fails_no_call_and_lists_nothing_again()
-> anyhow::Result<()> {
    let pair = shared_pair()?;
    let work = pair.root().join("swap-under-load");
    std::fs::create_dir_all(&work)?;
    // Two module files, the conflict policy as built: a new path is a new reference, so the
    // konnector pulls, checks, compiles and swaps it as it would a new registry tag.
    let (first, second) = (work.join("conflict-a.wasm"), work.join("conflict-b.wasm"));
    for path in [&first, &second] {
        std::fs::write(path, builtin::CONFLICT_POLICY)?;
    }
    let refs = work.join("refs.yaml");
    let refer = |module: &std::path::Path| {
        std::fs::write(&refs, format!("conflict: {}\n", module.display()))
    };
    refer(&first)?;
    let flags = format!("--policy-refs-file={}", refs.display());
    let binary = kbind_tests::konnector_binary!();
    let log = work.join("konnector.log");
    let kubeconfig = pair.consumer.admin().kubeconfig_path().to_path_buf();
    pair.diagnose(async {
        let api = TestApi::namespaced("swap.policies.kbind.io");
        let sides = Sides::on(pair, api, "swapped").await?;
        install_core_crds(&sides.consumer).await?;
        ensure_namespace(&sides.consumer, DEFAULT_SECRET_NAMESPACE).await?;
        let konnector = KonnectorProcess::start(&binary, &kubeconfig, &log, &[&flags])?;
        konnector.wait_ready(Duration::from_secs(60)).await?;
        sides.connect(&pair.provider, "provider").await?;

        let name = sides.api.name();
        let starts = format!("kbind_syncer_starts_total{{api=\"{name}\"}}");
        let lists = |cluster: &str| {
            format!("kbind_watch_lists_total{{api=\"{name}\",cluster=\"{cluster}\"}}")
        };
        // Both watches' first lists done (a list is counted once complete).
        for cluster in ["consumer", "provider"] {
            konnector
                .wait_for_metric(&format!("{} 1", lists(cluster)))
                .await?;
        }
        let before = konnector.metrics().await?;
        let counted =
            |m: &str| [starts.clone(), lists("consumer"), lists("provider")].map(|s| sample(m, &s));
        let (starts_before, lists_before) = {
            let [s, c, p] = counted(&before);
            (s, (c, p))
        };
        // Each counter read is a real sample: a started syncer listed both sides.
        ensure!(
            starts_before >= 1.0 && lists_before.0 >= 1.0 && lists_before.1 >= 1.0,
            "no syncer started and listed:\n{before}"
        );

        let calls = "kbind_policy_call_duration_seconds_count{role=\"conflict\"}";
        let swap = async || {
            refer(&second)?;
            let running = format!("reference=\"{}\"", second.display());
            konnector.wait_for_metric(&running).await?;
            konnector
                .wait_for_metric("kbind_policy_swaps_total{role=\"conflict\",result=\"swapped\"} 1")
                .await?;
            Ok(sample(&konnector.metrics().await?, calls))
        };
        let calls_at_swap = sides.fault_mid_sync(INSTANCES, SWAP_AFTER, swap).await?;
        ensure!(
            calls_at_swap > 0.0,
            "no conflict call counted before the swap"
        );
        sides.converged(INSTANCES).await?;

        let after = konnector.metrics().await?;
        let failed = failed_calls(&after);
        ensure!(failed.is_empty(), "policy calls failed: {failed:?}");
        let [starts_after, consumer_lists, provider_lists] = counted(&after);
        ensure!(
            starts_after == starts_before,
            "the syncer restarted: {starts_before} → {starts_after} starts"
        );
        // A list after the first is the swap's doing unless the cluster expired the watch
        // (410 Gone under load), which the konnector logs; each must be so explained.
        let expired = |cluster: &str| expiries(&log, cluster) as f64;
        let explained = (
            lists_before.0 + expired("consumer"),
            lists_before.1 + expired("provider"),
        );
        ensure!(
            (consumer_lists, provider_lists) == explained,
            "listed again: {lists_before:?} → ({consumer_lists}, {provider_lists}), of which the \
             clusters' expiries explain {explained:?}; the watches logged:\n{}",
            watch_lines(&log)
        );
        // The swapped-in module answered the instances created after the swap.
        let calls_after = sample(&after, calls);
        ensure!(
            calls_after > calls_at_swap,
            "no conflict call after the swap: {calls_at_swap} → {calls_after}"
        );
        anyhow::Ok(())
    })
    .await
}
