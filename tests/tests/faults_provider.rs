//! Fault: the provider kube-apiserver (and its etcd) stopped while instances are created and
//! synced, then started on the same data, ports and credentials.
//!
//! - Under the sync machinery alone (5 s, 1 000 instances): the syncer's watches and writes
//!   ride out the outage on their own (error backoff, watch re-list), and both sides converge
//!   one to one.
//! - Under the real Connection controller (10 s down, plus the stop and the start, inside the
//!   grace period): the Connection stays Ready and engaged throughout, says `ProviderDegraded`
//!   while it lasts, and its syncer is never restarted (so the consumer is not listed again),
//!   nothing lost.
//! - Instances created while the provider is down (each failing once, with a first backoff of
//!   two minutes): the provider back, they are all copied well within that backoff, because the
//!   one probing the provider gets through and wakes the rest.
//! - Under API Priority and Fairness squeezing the konnector's identity to 3 requests at once
//!   (the rest answered 429): 250 instances sync, nothing lost, the Connection never leaves
//!   Ready.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kbind_tests::access::grant;
use kbind_tests::faults::{FAULT_WAIT, Sides, create_binding, restart, wait_binding_ready};
use kbind_tests::fixtures::{
    self, condition, crd_source, put_kubeconfig_secret, start_konnector, start_konnector_with,
    wait_ready,
};
use kbind_tests::syncenv::{Scenario, TestApi, wait_for};
use kbind_tests::testenv::{ClusterPair, Options};
use konnector::api::Connection;
use konnector::telemetry::{ApiLabels, WatchLabels, metrics};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const INSTANCES: usize = 1000;
const STOP_AFTER: usize = 200;

#[test]
fn provider_outage_mid_sync_loses_and_duplicates_nothing() -> anyhow::Result<()> {
    Scenario::bound("outage").private_pair().run(async |s| {
        let sides = Sides::of(s);
        let outage = async || restart(&s.pair().provider, Duration::from_secs(5)).await;
        sides.fault_mid_sync(INSTANCES, STOP_AFTER, outage).await?;
        let provider = s.pair().provider.client().await?;
        Sides { provider, ..sides }.converged(INSTANCES).await
    })
}

#[test]
fn instances_failing_while_the_provider_is_down_sync_as_soon_as_it_answers() -> anyhow::Result<()> {
    const WAITING: usize = 20;
    // Far longer than the wait below: an instance that waited out its backoff fails the test.
    const BACKOFF: Duration = Duration::from_secs(120);
    const WITHIN: Duration = Duration::from_secs(45);
    Scenario::bound("wake")
        .private_pair()
        .settings(|settings| {
            settings.sync.error_backoff_base = BACKOFF;
            settings.sync.error_backoff_max = BACKOFF;
            settings.sync.recovery_probe = Duration::from_secs(1);
            // The periodic resync retries every instance not in sync too: out of the way.
            settings.sync.resync_interval = BACKOFF * 5;
        })
        .run(async |s| {
            let sides = Sides::of(s);
            sides.create("before", json!({"size": 1})).await?;
            sides.wait_copies(1).await?;
            let provider = &s.pair().provider;
            tokio::task::block_in_place(|| provider.stop());
            sides.create_many("w", 0..WAITING).await?;
            // Each instance got its finalizer, then failed on the provider: its backoff runs.
            wait_for("the syncer finalizer on every instance", FAULT_WAIT, || async {
                let listed = sides.instances().list(&Default::default()).await?;
                let held = listed
                    .items
                    .iter()
                    .filter(|i| !i.metadata.finalizers.clone().unwrap_or_default().is_empty())
                    .count();
                Ok((held == WAITING + 1).then_some(()))
            })
            .await?;
            tokio::time::sleep(Duration::from_secs(3)).await;
            tokio::task::block_in_place(|| provider.start())?;
            let back = Instant::now();
            let sides = Sides {
                provider: provider.client().await?,
                ..sides
            };
            let what = format!("{} copies within {WITHIN:?} of the provider answering", WAITING + 1);
            wait_for(&what, WITHIN, || async {
                let n = kbind_tests::faults::count_copies(&sides.api, &sides.provider, &sides.namespace)
                    .await?;
                Ok((n == WAITING + 1).then_some(()))
            })
            .await?;
            println!(
                "{WAITING} instances failed while the provider was down; all copied {:?} after it answered (their backoff: {BACKOFF:?})",
                back.elapsed()
            );
            sides.converged(WAITING + 1).await
        })
}

/// The Connection's (Ready, ProviderDegraded) statuses and Ready's message, as seen every
/// 200 ms.
type Seen = Arc<Mutex<Vec<(String, String, String)>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_shorter_than_the_grace_period_keeps_the_connection_ready_and_engaged()
-> anyhow::Result<()> {
    const BLIP_INSTANCES: usize = 300;
    // Longer than any outage `restart` can make (a graceful stop of up to 15 s per process,
    // 10 s down, then a start on a machine busy with other test binaries), so that the outage
    // is shorter than the grace period however slow the machine; every failure below says how
    // long the outage was.
    const GRACE: Duration = Duration::from_secs(300);
    let pair = ClusterPair::start_private()?;
    let konnector = start_konnector_with(
        &pair.consumer,
        konnector::connection::Config {
            provider_grace_period: GRACE,
            ..fixtures::test_connection_config()
        },
    )?;
    let result = pair.diagnose(async {
        let sides = Sides::on(&pair, TestApi::namespaced("blip.faults.kbind.io"), "blip").await?;
        sides.connect(&pair.provider, "provider").await?;
        let engaged = || konnector.engagements.get("provider").map(|e| e.epoch);
        let epoch = engaged();
        anyhow::ensure!(epoch.is_some(), "a Ready Connection is engaged");
        let api_name = sides.api.name();
        let starts = || syncer_starts(&api_name);
        let started = starts();
        // The konnector's own count of its consumer watch's full lists, once its first is done.
        let consumer_lists = || watch_lists(&api_name, "consumer");
        wait_for("the consumer watch's first list", FAULT_WAIT, || async {
            Ok((consumer_lists() >= 1).then_some(()))
        })
        .await?;
        let lists = consumer_lists();

        let (seen, watching) = (Seen::default(), CancellationToken::new());
        let watcher = tokio::spawn(record_conditions(
            Api::all(sides.consumer.clone()),
            seen.clone(),
            watching.clone(),
        ));
        let outage = async || {
            let began = Instant::now();
            restart(&pair.provider, Duration::from_secs(10)).await?;
            anyhow::Ok(began.elapsed())
        };
        let outage = sides.fault_mid_sync(BLIP_INSTANCES, 50, outage).await?;
        anyhow::ensure!(
            outage < GRACE,
            "the provider was down for {outage:?}, longer than the grace period"
        );
        let provider = pair.provider.client().await?;
        let sides = Sides { provider, ..sides };
        sides.converged(BLIP_INSTANCES).await?;
        kbind_tests::fixtures::wait_connection(&sides.consumer, "provider", "healed", |c| {
            condition(c, "ProviderDegraded").is_some_and(|c| c.status == "False")
        })
        .await?;
        watching.cancel();
        watcher.await??;

        let seen = seen
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .clone();
        let mut not_ready: Vec<_> = seen.iter().filter(|(ready, ..)| ready != "True").collect();
        not_ready.dedup();
        anyhow::ensure!(
            not_ready.is_empty(),
            "Ready flapped during a {outage:?} outage: {not_ready:?}"
        );
        anyhow::ensure!(
            seen.iter().any(|(_, degraded, _)| degraded == "True"),
            "ProviderDegraded never said the provider was failing during a {outage:?} outage: {seen:?}"
        );
        anyhow::ensure!(
            engaged() == epoch,
            "the Connection was engaged again after a {outage:?} outage"
        );
        anyhow::ensure!(
            starts() == started,
            "the syncer was started again after a {outage:?} outage"
        );
        // Counted by the konnector itself: the apiserver's LIST count also has
        // kube-controller-manager's garbage collector, which lists a new resource on its own
        // discovery period and again whenever its watch starts over on a loaded machine.
        let after = consumer_lists();
        anyhow::ensure!(
            after == lists,
            "the consumer's instances were listed again ({lists} full lists before, {after} after a {outage:?} outage)"
        );
        anyhow::Ok(())
    });
    let result = result.await;
    konnector.stop().await?;
    result
}

/// How many full lists the konnector of this process made of `api` on `cluster`.
fn watch_lists(api: &str, cluster: &'static str) -> u64 {
    let labels = WatchLabels {
        api: api.into(),
        cluster,
    };
    metrics().watch_lists.get_or_create(&labels).get()
}

/// How many times the konnector of this process started a syncer for `api`.
fn syncer_starts(api: &str) -> u64 {
    let labels = ApiLabels { api: api.into() };
    metrics().syncer_starts.get_or_create(&labels).get()
}

/// Records the Connection's Ready and ProviderDegraded statuses until `stop`.
async fn record_conditions(
    connections: Api<Connection>,
    seen: Seen,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    while !stop.is_cancelled() {
        if let Some(connection) = connections.get_opt("provider").await? {
            let status = |type_| {
                condition(&connection, type_)
                    .map(|c| c.status.clone())
                    .unwrap_or_default()
            };
            let ready_message = condition(&connection, "Ready")
                .map(|c| c.message.clone())
                .unwrap_or_default();
            let entry = (status("Ready"), status("ProviderDegraded"), ready_message);
            seen.lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .push(entry);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// A priority level that lets the konnector's identity run 3 requests at once (the smallest
/// share of the apiserver's 600), borrowing nothing and rejecting the rest with 429, and the
/// FlowSchema that puts every request of `user` there.
fn squeeze(user: &str) -> [(ApiResource, &'static str, serde_json::Value); 2] {
    let flowcontrol = |kind| {
        ApiResource::from_gvk(&GroupVersionKind::gvk(
            "flowcontrol.apiserver.k8s.io",
            "v1",
            kind,
        ))
    };
    let level = json!({"spec": {"type": "Limited", "limited": {
        "nominalConcurrencyShares": 1, "lendablePercent": 0, "borrowingLimitPercent": 0,
        "limitResponse": {"type": "Reject"}}}});
    let schema = json!({"spec": {
        "priorityLevelConfiguration": {"name": "kbind-squeeze"},
        "matchingPrecedence": 100,
        "distinguisherMethod": {"type": "ByUser"},
        "rules": [{
            "subjects": [{"kind": "User", "user": {"name": user}}],
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                "clusterScope": true, "namespaces": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}});
    [
        (
            flowcontrol("PriorityLevelConfiguration"),
            "kbind-squeeze",
            level,
        ),
        (flowcontrol("FlowSchema"), "kbind-squeeze", schema),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_shedding_load_with_429s_loses_nothing_and_the_connection_stays_ready()
-> anyhow::Result<()> {
    const SHED_INSTANCES: usize = 250;
    let apf = Options {
        priority_and_fairness: true,
    };
    let pair = ClusterPair::start_private_with(apf)?;
    let konnector = start_konnector(&pair.consumer)?;
    let result = pair.diagnose(async {
        let sides = Sides::on(&pair, TestApi::namespaced("shed.faults.kbind.io"), "shed").await?;
        // API Priority and Fairness exempts system:masters: the konnector is someone else.
        let user = "kbind-konnector";
        let identity = pair.provider.mint_user(user, &[])?;
        let everything = json!([
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            {"nonResourceURLs": ["*"], "verbs": ["*"]}
        ]);
        grant(
            &sides.provider,
            None,
            "kbind-shed",
            everything,
            ("User", user),
        )
        .await?;
        for (resource, name, body) in squeeze(user) {
            let api: Api<DynamicObject> = Api::all_with(sides.provider.clone(), &resource);
            let object = DynamicObject::new(name, &resource).data(body);
            api.create(&PostParams::default(), &object).await?;
        }
        sides.api.install_on_provider(&sides.provider).await?;
        put_kubeconfig_secret(&sides.consumer, "provider", &identity.kubeconfig_yaml()?).await?;
        let connections: Api<Connection> = Api::all(sides.consumer.clone());
        let connection = fixtures::connection("provider", "provider", crd_source(), false);
        connections
            .create(&PostParams::default(), &connection)
            .await?;
        wait_ready(&sides.consumer, "provider").await?;
        create_binding(&sides.consumer, &sides.namespace, "provider", &[&sides.api]).await?;
        wait_binding_ready(&sides.consumer, &sides.namespace, FAULT_WAIT).await?;

        let (seen, watching) = (Seen::default(), CancellationToken::new());
        let watcher = tokio::spawn(record_conditions(
            connections.clone(),
            seen.clone(),
            watching.clone(),
        ));
        sides.create_many("w", 0..SHED_INSTANCES).await?;
        sides.converged(SHED_INSTANCES).await?;
        watching.cancel();
        watcher.await??;

        let rejected = rejected_requests(&sides.provider, "kbind-squeeze").await?;
        anyhow::ensure!(
            rejected > 0.0,
            "the provider never shed a request: no 429 was tested"
        );
        eprintln!("the provider rejected {rejected} requests with 429");
        let seen = seen
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .clone();
        let mut not_ready: Vec<_> = seen.iter().filter(|(ready, ..)| ready != "True").collect();
        not_ready.dedup();
        anyhow::ensure!(
            not_ready.is_empty(),
            "Ready flapped under {rejected} rejected requests: {not_ready:?}"
        );
        anyhow::Ok(())
    });
    let result = result.await;
    konnector.stop().await?;
    result
}

/// Requests the provider's API Priority and Fairness rejected (429) at priority level `level`.
async fn rejected_requests(provider: &kube::Client, level: &str) -> anyhow::Result<f64> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = provider.request_text(request).await?;
    let label = format!("priority_level=\"{level}\"");
    Ok(text
        .lines()
        .filter_map(|line| line.strip_prefix("apiserver_flowcontrol_rejected_requests_total{"))
        .filter_map(|rest| rest.rsplit_once('}'))
        .filter(|(labels, _)| labels.split(',').any(|l| l == label))
        .filter_map(|(_, value)| value.trim().parse::<f64>().ok())
        .sum())
}
