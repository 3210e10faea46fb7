//! One syncer: a consumer watch and a provider watch of one API, feeding one work queue keyed
//! by the consumer object, which feeds kube-runtime's `applier`.
//!
//! ```text
//! consumer watch (DynamicObject, all namespaces) ──────────────┐
//! provider watch ──▶ provider cache ──▶ same namespace/name ───┼─▶ work queue (dedup, oldest
//! selection changes, resync sweep (not in sync), wakes ─────────┘   first) ──▶ applier (N at a time)
//! ```
//!
//! Both caches hold what reconciles read and nothing more: the consumer cache keeps each
//! instance as a [`CachedInstance`] (kbind's metadata, spec and status as JSON text, a digest
//! of the spec), the provider cache each copy as a [`CachedCopy`] (markers, labels, a digest of
//! its spec, its status); managedFields never enter either: both watches read objects as
//! [`Watched`], which skips them unparsed (the drift check reads them from the write's
//! response). The provider watch selects on `core.kbind.io/consumer-cluster`, so a
//! konnector caches its own copies only, however many consumers share the provider. A foreign
//! object of the same name is still found: creating over it fails, and the live read that
//! follows decides.
//!
//! The work queue (`queue`) keeps one entry per object however many events arrive and hands
//! the applier keys only as fast as their reconciles start, so a first sync of every listed
//! instance waits in its compact table, not in the applier's scheduler. The applier gives the
//! rest: at most `concurrency` reconciles at once, never two for the same object, retries on
//! the error policy's backoff, and no task per waiting object. Watch restarts and `410 Gone`
//! are handled by kube-runtime's `watcher`. Provider events are how drift on a provider copy
//! gets reverted.

use std::sync::Arc;

use futures::StreamExt;
use kube::runtime::controller::{self, Action, Config as ControllerConfig};
use kube::runtime::reflector::{self, reflector};
use kube::runtime::utils::CancelableJoinHandle;
use kube::runtime::{WatchStreamExt, applier, watcher};
use kube::{Api, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, warn};

use crate::api::IsolationStrategy;
use crate::api::names::own_copies_selector;
use crate::k8s::ApiErrorExt;
use crate::registry::{DeniedBy, Outcomes};
use crate::shared::Shared;
use crate::telemetry::{WatchLabels, metrics};

use super::cache::CacheType;
use super::cache::copy::CachedCopy;
use super::cache::instance::CachedInstance;
use super::cache::watched::Watched;
use super::context::{SyncContext, SyncerSpec};
use super::placement::Placements;
use super::queue::Feed;
use super::{Error, SyncConfig};

/// A watch event with each object it carries turned into what a cache keeps of it.
fn each_object<A, B>(event: watcher::Event<A>, keep: impl Fn(A) -> B) -> watcher::Event<B> {
    match event {
        watcher::Event::Apply(obj) => watcher::Event::Apply(keep(obj)),
        watcher::Event::Delete(obj) => watcher::Event::Delete(keep(obj)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(obj) => watcher::Event::InitApply(keep(obj)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// Per-object backoff on failure, written down once: the delay doubles per consecutive
/// failure of the same object, capped; a success resets it.
fn error_policy(obj: Arc<CachedInstance>, err: &Error, ctx: Arc<SyncContext>) -> Action {
    // The backoff grows per failure; a cluster that said when to come back is not asked sooner.
    let asked = crate::k8s::retry_after_in(err).unwrap_or_default();
    let delay = ctx
        .failed(&obj.metadata, err.provider_unavailable())
        .max(asked);
    // Conflicts (409) are expected under concurrency and are not worth a warning.
    let quiet = matches!(err, Error::ApplyToProvider(e) | Error::CreateOnProvider(e) | Error::RemoveFinalizer(e) | Error::AddFinalizer(e) if e.is_conflict() || e.is_already_exists() || e.is_invalid());
    if quiet {
        debug!(name = %obj.name_any(), error = %err, ?delay, "reconcile retry");
    } else {
        warn!(
            connection = %ctx.spec.connection,
            api = %ctx.spec.api,
            namespace = obj.metadata.namespace.as_deref().unwrap_or(""),
            name = %obj.name_any(),
            error = %err,
            ?delay,
            "instance reconcile failed"
        );
    }
    ctx.queue.retried();
    Action::requeue(delay)
}

/// What a cluster said when it refused the watch of `api` (403); `None` for other errors,
/// which the watcher retries without them concerning permissions.
fn watch_denial(side: DeniedBy, api: &str, error: &watcher::Error) -> Option<String> {
    let message = match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e)
            if e.is_forbidden() =>
        {
            e.to_string()
        }
        watcher::Error::WatchError(status) if status.is_forbidden() => status.message.clone(),
        _ => return None,
    };
    Some(match side {
        DeniedBy::Provider => format!("the provider refuses to list/watch {api}: {message}"),
        DeniedBy::Consumer => {
            format!("this cluster refuses the konnector list/watch of {api}: {message}")
        }
    })
}

/// Records on the binding's `PermissionDenied` whether `side` refuses the watch of `api`:
/// set by a refusal, cleared by the next event the watch delivers. Nothing of the API can
/// sync until the refusing identity may list and watch it.
fn follow_denials<K>(
    outcomes: Outcomes,
    (connection, api): (String, String),
    side: DeniedBy,
) -> impl FnMut(watcher::Result<K>) -> watcher::Result<K> {
    move |event| {
        match &event {
            Ok(_) => outcomes.set_denied(&connection, &api, side, None),
            Err(error) => {
                if let Some(message) = watch_denial(side, &api, error) {
                    outcomes.set_denied(&connection, &api, side, Some(message));
                }
            }
        }
        event
    }
}

/// Counts each full list a watch completes (`kbind_watch_lists_total`): the first, and every
/// one after a watch that could not resume. A list that failed part-way is not counted (the
/// watcher starts it over), and each watch error is logged with what the watcher does next,
/// so that a rising count can be read against its cause.
fn count_lists<K>(
    api: &str,
    cluster: &'static str,
) -> impl FnMut(watcher::Result<watcher::Event<K>>) -> watcher::Result<watcher::Event<K>> + use<K> {
    let api = api.to_string();
    let lists = metrics()
        .watch_lists
        .get_or_create(&WatchLabels {
            api: api.clone(),
            cluster,
        })
        .clone();
    move |event| {
        match &event {
            Ok(watcher::Event::InitDone) => {
                lists.inc();
            }
            Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                info!(%api, cluster, "watch expired (410 Gone): listing again");
            }
            Err(error) => warn!(%api, cluster, %error, next = watch_retry(error), "watch failed"),
            Ok(_) => {}
        }
        event
    }
}

/// What kube-runtime's watcher does after `error`, in the words of the log line.
fn watch_retry(error: &watcher::Error) -> &'static str {
    match error {
        watcher::Error::InitialListFailed(_) | watcher::Error::NoResourceVersion => {
            "list again after backoff"
        }
        _ => "resume the watch after backoff",
    }
}

/// Runs one syncer until `shutdown`. Binding changes re-reconcile the instances whose
/// selection they changed, so newly selected namespaces are picked up without a resync.
pub(super) async fn run(
    spec: SyncerSpec,
    shared: Shared,
    settings: SyncConfig,
    shutdown: CancellationToken,
) {
    let ar = spec.target.api_resource();
    let cache_type = CacheType::new(ar.clone());
    let writer = reflector::store::Writer::new(cache_type.clone());
    let provider_store = writer.as_reader();
    let own_copies =
        watcher::Config::default().labels(&own_copies_selector(&spec.consumer_cluster_uid));
    // Either cluster refusing its watch is the binding's PermissionDenied: the provider
    // refusing the Connection's identity, or the consumer refusing the konnector itself.
    let key = (spec.connection.clone(), spec.api.clone());
    let strategy = spec.isolation.strategy;
    let placements = Arc::new(Placements::default());
    let observing = placements.clone();
    let provider_events = reflector(
        writer,
        watcher(
            Api::<Watched>::all_with(spec.provider.clone(), &ar),
            own_copies,
        )
        // Every copy the watch shows is its instance's place (nothing to record under None).
        .map(move |event| {
            if strategy != IsolationStrategy::None
                && let Ok(watcher::Event::Apply(copy) | watcher::Event::InitApply(copy)) = &event
            {
                observing.observed(&copy.0, strategy);
            }
            event
        })
        .map(count_lists(&spec.api, "provider"))
        .map(follow_denials(
            shared.outcomes.clone(),
            key.clone(),
            DeniedBy::Provider,
        ))
        .map(|event| event.map(|e| each_object(e, |copy| CachedCopy::of(&copy.0)))),
    )
    .default_backoff()
    .touched_objects()
    // A provider event concerns the consumer object the copy was copied from (a failed watch
    // is logged and backed off above; it queues nothing).
    .filter_map(move |copy| futures::future::ready(copy.ok().map(|c| c.origin(strategy))));
    // Instances queued now, not at the end of their backoff (the provider answers again).
    let (wake, woken) = futures::channel::mpsc::unbounded();
    let ctx = Arc::new(SyncContext::new(
        spec,
        shared,
        cache_type.clone(),
        provider_store,
        placements,
        settings,
        wake,
    ));
    info!(connection = %ctx.spec.connection, api = %ctx.spec.api, version = %ar.version, "syncer started");
    let consumer_api = Api::<Watched>::all_with(ctx.shared.consumer.clone(), &ar);
    let consumer_writer = reflector::store::Writer::new(cache_type.clone());
    let consumer_store = consumer_writer.as_reader();
    // The outcome registry follows the consumer listing: what is listed holds the API's first
    // pass back until reconciled, and a deleted instance leaves (the controller does not
    // reconcile deletions it did not hold open with a finalizer).
    let listing = ctx.clone();
    let instances = reflector(
        consumer_writer,
        watcher(consumer_api, watcher::Config::default())
            .map(count_lists(&ctx.spec.api, "consumer"))
            .map(follow_denials(
                ctx.shared.outcomes.clone(),
                key,
                DeniedBy::Consumer,
            ))
            .map(|event| event.map(|e| each_object(e, |obj| CachedInstance::of(obj.0)))),
    )
    .default_backoff()
    .map(move |event| {
        if let Ok(event) = &event {
            listing.follow_listing(event);
        }
        event
    })
    .applied_objects()
    // The watch's view of a status write this konnector made, whose answer showed the
    // instance settled (see `report`), would be answered by the resync shortcut: it is not
    // queued at all.
    .filter({
        let ctx = ctx.clone();
        move |instance| {
            let settled =
                matches!(instance, Ok(instance) if shows_own_settled_write(instance, &ctx));
            futures::future::ready(!settled)
        }
    })
    .inspect({
        let ctx = ctx.clone();
        move |instance| {
            if let Ok(instance) = instance {
                ctx.queue.added_object(&instance.metadata);
            }
        }
    });
    let selections = super::selection_changes::selection_changes(
        ctx.shared.index.clone(),
        ctx.spec.connection.clone(),
        ctx.spec.api.clone(),
        consumer_store.clone(),
    );
    let resyncs = super::resync::sweep(consumer_store.clone(), ctx.clone());
    // What else queues an instance, each as the instance's key: a provider event (for the
    // consumer object the copy was copied from), a binding change (for the instances whose
    // selection it changed), the periodic resync (instances its sweep finds not in sync) and
    // instances waiting on the provider, once one of them got through.
    let triggers = futures::stream::select_all([
        provider_events.boxed(),
        selections.boxed(),
        resyncs.boxed(),
        woken.boxed(),
    ])
    .inspect({
        let ctx = ctx.clone();
        move |(namespace, name)| ctx.queue.added(namespace.as_deref(), name)
    });
    // Everything that queues an instance, driven by the queue's feed: the watches flow as
    // events come, and the applier gets keys only as fast as its reconciles start.
    let feed = Feed::new(
        Box::pin(
            futures::stream::select(instances.map(|_| ()), triggers.map(|_| ()))
                .take_until(shutdown.cancelled_owned()),
        ),
        ctx.queue.clone(),
        cache_type,
    );
    let config = ControllerConfig::default().concurrency(ctx.settings.concurrency);
    let spawned = |instance, ctx| {
        CancelableJoinHandle::spawn(
            super::reconcile::reconcile(instance, ctx).in_current_span(),
            &tokio::runtime::Handle::current(),
        )
    };
    let queue = ctx.queue.clone();
    applier(
        spawned,
        error_policy,
        ctx.clone(),
        consumer_store,
        feed,
        config,
    )
    .for_each(|result| {
        match result {
            // A key whose object is gone by its turn (deleted) leaves the queue unreconciled.
            Err(controller::Error::ObjectNotFound(obj_ref)) => {
                queue.dropped(obj_ref.namespace.as_deref(), &obj_ref.name);
            }
            Err(e) => debug!(error = %e, "syncer controller event"),
            Ok(_) => {}
        }
        futures::future::ready(())
    })
    .await;
    ctx.forget_all_failures();
    info!(connection = %ctx.spec.connection, api = %ctx.spec.api, "syncer stopped");
}

/// Whether `watched`, just delivered by the consumer watch, is the version of the instance
/// this konnector's own status write left settled: a reconcile of it would find it still in
/// sync and do nothing.
fn shows_own_settled_write(watched: &CachedInstance, ctx: &SyncContext) -> bool {
    ctx.newer_instance(watched).is_none() && super::reconcile::still_in_sync(watched, ctx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lists(api: &str) -> u64 {
        let labels = WatchLabels {
            api: api.to_string(),
            cluster: "consumer",
        };
        metrics().watch_lists.get_or_create(&labels).get()
    }

    fn list_failed() -> watcher::Error {
        watcher::Error::InitialListFailed(kube::Error::Api(
            kube::core::Status::failure(
                "the server is currently unable to handle the request",
                "ServiceUnavailable",
            )
            .with_code(503)
            .boxed(),
        ))
    }

    #[test]
    fn a_list_that_failed_part_way_is_not_counted() {
        let api = "counted-once.syncer.kbind.io";
        let mut count = count_lists::<()>(api, "consumer");
        // The first attempt fails after its Init; the watcher starts over and completes.
        for event in [
            Ok(watcher::Event::Init),
            Err(list_failed()),
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(())),
            Ok(watcher::Event::InitDone),
            Ok(watcher::Event::Apply(())),
        ] {
            let _ = count(event);
        }
        assert_eq!(lists(api), 1);
    }

    #[test]
    fn each_completed_list_is_counted() {
        let api = "counted-twice.syncer.kbind.io";
        let mut count = count_lists::<()>(api, "consumer");
        let gone =
            kube::core::Status::failure("too old resource version", "Expired").with_code(410);
        for event in [
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitDone),
            Err(watcher::Error::WatchError(gone.boxed())),
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitDone),
        ] {
            let _ = count(event);
        }
        assert_eq!(lists(api), 2);
    }

    #[test]
    fn only_a_failed_list_is_listed_again() {
        assert_eq!(watch_retry(&list_failed()), "list again after backoff");
        assert_eq!(
            watch_retry(&watcher::Error::WatchStartFailed(
                kube::Error::LinesCodecMaxLineLengthExceeded
            )),
            "resume the watch after backoff"
        );
    }
}
