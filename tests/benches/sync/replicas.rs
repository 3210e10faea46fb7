//! `BENCH_REPLICAS=N` (`--replicas N`, N ≥ 2): after the single konnector's run, N replicas
//! started with `--sharding` (default Lease timings) take the same instances over; the bench
//! reports what each replica holds and costs once settled, the spec and status latencies
//! through them, and how long the shards of a replica killed with SIGKILL stay without a
//! holder, and until an update of each of its APIs reaches the provider again.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kbind_tests::faults::instance_name;
use kbind_tests::faults::process::KonnectorProcess;
use kbind_tests::syncenv::{TestApi, wait_for};
use kbind_tests::testenv::ClusterPair;
use konnector::api::names::DEFAULT_SECRET_NAMESPACE;
use konnector::sharding::{SHARD_ANNOTATION, SHARD_KIND_LABEL, live_holder};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;

use crate::report::{Report, mib};
use crate::{Config, NS, WAIT, steady};

/// What one replica held and cost once settled.
#[derive(Default, serde::Serialize)]
pub struct ReplicaFigures {
    pub identity: String,
    pub shards: usize,
    pub api_shards: usize,
    pub rss_mib: f64,
    /// CPU from process start until settled (every shard held, its watches listed).
    pub cpu_seconds_to_settle: f64,
    /// CPU over the steady phase run through the replicas.
    pub cpu_seconds_steady: f64,
}

/// Each shard's live holder, by shard key.
async fn holders(leases: &Api<Lease>) -> anyhow::Result<BTreeMap<String, Option<String>>> {
    let now = Timestamp::now();
    let list = leases
        .list(&ListParams::default().labels(SHARD_KIND_LABEL))
        .await?;
    Ok(list
        .items
        .iter()
        .filter_map(|lease| {
            let key = lease.metadata.annotations.as_ref()?.get(SHARD_ANNOTATION)?;
            Some((key.clone(), live_holder(lease, now).map(str::to_string)))
        })
        .collect())
}

/// Runs the replicas phase; the single konnector has been stopped.
pub async fn replicas(
    config: &Config,
    binary: &Path,
    pair: &ClusterPair,
    apis: &[TestApi],
    report: &mut Report,
) -> anyhow::Result<()> {
    let n = config.replicas;
    let (consumer, provider) = (
        &pair.consumer.client().await?,
        &pair.provider.client().await?,
    );
    let (root, kubeconfig) = (pair.root(), pair.consumer.admin().kubeconfig_path());
    let leases: Api<Lease> = Api::namespaced(consumer.clone(), DEFAULT_SECRET_NAMESPACE);
    let mut processes = Vec::with_capacity(n);
    let started = Instant::now();
    for i in 0..n {
        let identity = format!("konnector-{i}");
        let log = root.join(format!("{identity}.log"));
        let args = ["--sharding", "--pod-name", identity.as_str()];
        processes.push((
            identity.clone(),
            KonnectorProcess::start(binary, kubeconfig, &log, &args)?,
        ));
    }
    // Settled: the Connection shard and one API shard per API held, each syncer listed.
    let expected = apis.len() + 1;
    wait_for("every shard held", WAIT, || async {
        let held = holders(&leases).await?;
        Ok((held.values().filter(|h| h.is_some()).count() >= expected).then_some(()))
    })
    .await?;
    // The syncers just started list both clusters and check every instance once.
    tokio::time::sleep(Duration::from_secs(15)).await;
    report.replicas_settle_seconds = started.elapsed().as_secs_f64();
    let held = holders(&leases).await?;
    let mut figures: Vec<ReplicaFigures> = Vec::new();
    for (identity, process) in &processes {
        let mine = held
            .iter()
            .filter(|(_, h)| h.as_deref() == Some(identity.as_str()));
        let keys: Vec<&String> = mine.map(|(k, _)| k).collect();
        figures.push(ReplicaFigures {
            identity: identity.clone(),
            shards: keys.len(),
            api_shards: keys.iter().filter(|k| k.contains('/')).count(),
            rss_mib: mib(process.rss_bytes()?),
            cpu_seconds_to_settle: process.cpu_seconds()?,
            cpu_seconds_steady: 0.0,
        });
    }

    let through = steady::updates(config, apis, consumer, provider, config.update_period).await?;
    report.replicas_spec_latency_p99_ms = through.spec_p99_ms;
    report.replicas_status_latency_p99_ms = through.status_p99_ms;
    for (figure, (_, process)) in figures.iter_mut().zip(&processes) {
        figure.cpu_seconds_steady = process.cpu_seconds()? - figure.cpu_seconds_to_settle;
        figure.rss_mib = figure.rss_mib.max(mib(process.rss_bytes()?));
    }

    // SIGKILL the replica holding the most shards; time until others hold all of them.
    let victim = figures
        .iter()
        .enumerate()
        .max_by_key(|(_, f)| f.shards)
        .map(|(i, _)| i)
        .unwrap_or(0);
    let victim_id = processes[victim].0.clone();
    let orphaned: BTreeSet<String> = held
        .iter()
        .filter(|(_, h)| h.as_deref() == Some(victim_id.as_str()))
        .map(|(k, _)| k.clone())
        .collect();
    let killed = Instant::now();
    processes[victim].1.kill_hard()?;
    wait_for(
        "the killed replica's shards held elsewhere",
        WAIT,
        || async {
            let now = holders(&leases).await?;
            let taken = orphaned.iter().all(|key| {
                now.get(key)
                    .and_then(|h| h.as_deref())
                    .is_some_and(|holder| holder != victim_id)
            });
            Ok(taken.then_some(()))
        },
    )
    .await?;
    report.replicas_takeover_seconds = killed.elapsed().as_secs_f64();
    // One update per moved API reaches its provider copy again.
    let moved: Vec<(usize, &TestApi)> = apis
        .iter()
        .enumerate()
        .filter(|(_, api)| {
            orphaned
                .iter()
                .any(|k| k.ends_with(&format!("/{}", api.name())))
        })
        .collect();
    for (k, api) in &moved {
        let name = instance_name("w", *k);
        let body = json!({ "spec": { "seq": 1_000_000 } });
        api.api(consumer, Some(NS))
            .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await?;
    }
    for (k, api) in &moved {
        let name = instance_name("w", *k);
        let copies = api.api(provider, Some(&config.provider_ns()));
        wait_for("an update through the new holder", WAIT, || async {
            let copy = copies.get_opt(&name).await?;
            let seq = copy.and_then(|c| c.data["spec"]["seq"].as_u64());
            Ok((seq == Some(1_000_000)).then_some(()))
        })
        .await?;
    }
    report.replicas_resumed_seconds = killed.elapsed().as_secs_f64();
    report.replicas_killed_shards = orphaned.len();
    report.replicas = figures;
    Ok(())
}
