//! Many consumers on one provider: two consumer clusters, each with its own konnector, bind
//! the same provider API and create objects with identical namespaces and names. Under
//! `Namespaced` and `Prefixed` isolation each gets its own provider copy, its own status back
//! and its own drift repair; deleting, unbinding or changing the strategy of one never touches
//! the other's copies, and copies that exist are never moved.

use std::time::Duration;

use kbind_tests::faults::policy::constant_placement_policy;
use kbind_tests::syncenv::related::{entry, none_of, put_secret, secret_value, wait_secret};
use kbind_tests::syncenv::{
    Scenario, WAIT, delete, gone, merge, set_status, stays, synced_condition, wait_for,
};
use kbind_tests::testenv::second_consumer;
use konnector::api::RelatedDirection::{FromConsumer, FromProvider};
use konnector::api::RelatedResourceKind::Secrets;
use konnector::api::names::{CONSUMER_NAME_ANNOTATION, CONSUMER_NAMESPACE_ANNOTATION};
use konnector::api::{Isolation, IsolationStrategy};
use konnector::policy::{Policies, PolicyRole};
use kube::Api;
use kube::api::DynamicObject;
use serde_json::{Value, json};

/// The built-in policies with a placement module answering `(namespace, name)` for everything.
fn placing_everything_at(namespace: &str, name: &str) -> anyhow::Result<Policies> {
    let module = constant_placement_policy(Some(namespace), name)?;
    Ok(Policies::builtin()?.with_module(PolicyRole::Placement, &module, "one-place.wasm")?)
}

/// Waits until `s`'s instance `name` says `Synced=False` with `reason`, and returns its message.
async fn refused(s: &Scenario, name: &str, reason: &str) -> anyhow::Result<String> {
    wait_for(&format!("{name} Synced=False {reason}"), WAIT, || async {
        let obj = s.instances().get(name).await?;
        Ok(synced_condition(&obj)
            .filter(|c| c["status"] == "False" && c["reason"] == reason)
            .map(|c| c["message"].as_str().unwrap_or_default().to_string()))
    })
    .await
}

/// Fails if the provider holds an object of `s`'s API named `name` anywhere.
async fn nowhere_on_the_provider(s: &Scenario, name: &str) -> anyhow::Result<()> {
    let all = s.api.all(&s.stack.provider);
    let found: Vec<_> = all
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|o| o.metadata.name.as_deref() == Some(name))
        .map(|o| (o.metadata.namespace, o.metadata.name))
        .collect();
    anyhow::ensure!(found.is_empty(), "written to the provider: {found:?}");
    Ok(())
}

/// `strategy` with the consumer prefix `prefix` (or the one derived from the cluster UID).
fn isolation(strategy: IsolationStrategy, prefix: Option<&str>) -> Isolation {
    Isolation {
        strategy,
        prefix: prefix.map(str::to_string),
    }
}

/// Runs `body` with two tenants of one provider, both bound to the API of `name` in namespace
/// `name`: `a` on the shared pair's consumer, `b` on the second consumer cluster.
fn two_tenants(
    name: &str,
    a: Isolation,
    b: Isolation,
    body: impl AsyncFnOnce(&Scenario, &Scenario) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let second = second_consumer()?;
    // Two scenarios' futures nest deeper than a test thread's stack holds in a debug build:
    // each lives on the heap.
    kbind_tests::runtime()?.block_on(Box::pin(async {
        let tenant_a = Box::pin(Scenario::bound(name).isolation(a).start()).await?;
        let tenant_b = Box::pin(
            Scenario::bound(name)
                .isolation(b)
                .on_consumer(second)
                .start(),
        )
        .await;
        let tenant_b = match tenant_b {
            Ok(b) => b,
            Err(e) => return Box::pin(tenant_a.finish(Err(e))).await,
        };
        // Diagnostics of both tenants on failure: a's wraps b's.
        let result = Box::pin(tenant_a.check(async |a| {
            let both = Box::pin(body(a, &tenant_b));
            Box::pin(tenant_b.check(async |_| both.await)).await
        }))
        .await;
        let result = Box::pin(tenant_b.finish(result)).await;
        Box::pin(tenant_a.finish(result)).await
    }))
}

/// Where the built-in placement puts `s`'s instance `name` under its isolation in force.
fn place(s: &Scenario, isolation: &Isolation, name: &str) -> (String, String) {
    let prefix = isolation.in_force(&s.consumer_uid).prefix;
    match isolation.strategy {
        IsolationStrategy::None => (s.ns().to_string(), name.to_string()),
        IsolationStrategy::Namespaced => (format!("{prefix}-{}", s.ns()), name.to_string()),
        IsolationStrategy::Prefixed => (s.ns().to_string(), format!("{prefix}-{name}")),
    }
}

/// The provider objects of `s`'s API in `namespace`.
fn provider_in(s: &Scenario, namespace: &str) -> Api<DynamicObject> {
    s.api.api(&s.stack.provider, Some(namespace))
}

/// Waits until the provider object at `(namespace, name)` has exactly `spec`.
async fn copy_at(
    s: &Scenario,
    (namespace, name): &(String, String),
    spec: Value,
) -> anyhow::Result<DynamicObject> {
    s.copy_at_with_spec(namespace, name, spec).await
}

/// Waits until `s`'s instance `name` has `status.phase` `phase`.
async fn phase_is(s: &Scenario, name: &str, phase: &str) -> anyhow::Result<()> {
    wait_for(&format!("{name} phase {phase}"), WAIT, || async {
        let obj = s.instances().get(name).await?;
        Ok((obj.data["status"]["phase"] == phase).then_some(()))
    })
    .await
}

/// Both tenants create `db` with their own specs: two provider copies at their own places,
/// each recording its consumer object, each tenant's status its own, drift on one copy
/// repaired from its own consumer only.
async fn identical_names_sync_apart(
    a: &Scenario,
    b: &Scenario,
    ia: &Isolation,
    ib: &Isolation,
) -> anyhow::Result<()> {
    let (at_a, at_b) = (place(a, ia, "db"), place(b, ib, "db"));
    assert_ne!(at_a, at_b, "two tenants, two places");
    a.create("db", json!({ "size": 1 })).await?;
    b.create("db", json!({ "size": 2 })).await?;
    let copy_a = copy_at(a, &at_a, json!({ "size": 1 })).await?;
    copy_at(b, &at_b, json!({ "size": 2 })).await?;
    assert_eq!(
        copy_a
            .metadata
            .annotations
            .as_ref()
            .and_then(|m| m.get(CONSUMER_NAME_ANNOTATION)),
        Some(&"db".to_string())
    );
    assert_eq!(
        copy_a
            .metadata
            .annotations
            .as_ref()
            .and_then(|m| m.get(CONSUMER_NAMESPACE_ANNOTATION)),
        Some(&a.ns().to_string())
    );
    let synced = a.in_sync("db").await?;
    b.in_sync("db").await?;
    // The instance says where its copy lives (what `kubectl kbind status` shows).
    let message = synced_condition(&synced).map(|c| c["message"].clone());
    let said = format!(
        "the provider copy at {}/{} matches the spec",
        at_a.0, at_a.1
    );
    assert_eq!(message, Some(json!(said)));

    set_status(
        &provider_in(a, &at_a.0),
        &at_a.1,
        json!({ "phase": "ForA" }),
    )
    .await?;
    set_status(
        &provider_in(b, &at_b.0),
        &at_b.1,
        json!({ "phase": "ForB" }),
    )
    .await?;
    phase_is(a, "db", "ForA").await?;
    phase_is(b, "db", "ForB").await?;

    merge(
        &provider_in(a, &at_a.0),
        &at_a.1,
        json!({ "spec": { "size": 9 } }),
    )
    .await?;
    copy_at(a, &at_a, json!({ "size": 1 })).await?;
    let untouched = provider_in(b, &at_b.0).get(&at_b.1).await?;
    assert_eq!(
        untouched.data["spec"],
        json!({ "size": 2 }),
        "b's copy is b's"
    );
    Ok(())
}

#[test]
fn namespaced_isolation_gives_each_consumer_its_own_copy() -> anyhow::Result<()> {
    let (ia, ib) = (
        isolation(IsolationStrategy::Namespaced, Some("tenant-a")),
        isolation(IsolationStrategy::Namespaced, Some("tenant-b")),
    );
    two_tenants("iso-ns", ia.clone(), ib.clone(), async |a, b| {
        identical_names_sync_apart(a, b, &ia, &ib).await
    })
}

#[test]
fn prefixed_isolation_gives_each_consumer_its_own_copy() -> anyhow::Result<()> {
    // Prefixes derived from each consumer cluster's UID.
    let (ia, ib) = (
        isolation(IsolationStrategy::Prefixed, None),
        isolation(IsolationStrategy::Prefixed, None),
    );
    two_tenants("iso-px", ia.clone(), ib.clone(), async |a, b| {
        identical_names_sync_apart(a, b, &ia, &ib).await
    })
}

#[test]
fn deleting_and_unbinding_one_consumer_leaves_the_other_syncing() -> anyhow::Result<()> {
    let (ia, ib) = (
        isolation(IsolationStrategy::Namespaced, Some("gone")),
        isolation(IsolationStrategy::Namespaced, Some("stays")),
    );
    two_tenants("iso-del", ia.clone(), ib.clone(), async |a, b| {
        let (one_a, one_b) = (place(a, &ia, "one"), place(b, &ib, "one"));
        let two_a = place(a, &ia, "two");
        a.create("one", json!({ "v": "a1" })).await?;
        a.create("two", json!({ "v": "a2" })).await?;
        b.create("one", json!({ "v": "b1" })).await?;
        copy_at(a, &one_a, json!({ "v": "a1" })).await?;
        copy_at(a, &two_a, json!({ "v": "a2" })).await?;
        copy_at(b, &one_b, json!({ "v": "b1" })).await?;

        // An instance deleted on a deletes a's copy only.
        delete(&a.instances(), "one").await?;
        gone(&provider_in(a, &one_a.0), &one_a.1).await?;
        assert!(provider_in(b, &one_b.0).get_opt(&one_b.1).await?.is_some());

        // Unbinding a drains a's remaining copy; b keeps syncing throughout.
        a.unbind().await?;
        gone(&provider_in(a, &two_a.0), &two_a.1).await?;
        merge(&b.instances(), "one", json!({ "spec": { "v": "b2" } })).await?;
        copy_at(b, &one_b, json!({ "v": "b2" })).await?;
        Ok(())
    })
}

#[test]
fn an_existing_copy_keeps_its_place_when_the_placement_changes() -> anyhow::Result<()> {
    let first = isolation(IsolationStrategy::Namespaced, Some("first"));
    Scenario::bound("iso-stable")
        .isolation(first.clone())
        .run(async |s| {
            let at = place(s, &first, "db");
            s.create("db", json!({ "size": 1 })).await?;
            copy_at(s, &at, json!({ "size": 1 })).await?;
            // The same objects now asked to be placed elsewhere: the syncer restarts, reads the
            // copy's place from the copy, and keeps writing there.
            let second = isolation(IsolationStrategy::Namespaced, Some("second"));
            s.stack.engage_isolated(&s.apis(), &second);
            merge(&s.instances(), "db", json!({ "spec": { "size": 2 } })).await?;
            copy_at(s, &at, json!({ "size": 2 })).await?;
            let elsewhere = place(s, &second, "db");
            stays(
                "no copy at the new place",
                Duration::from_secs(4),
                || async {
                    Ok(provider_in(s, &elsewhere.0)
                        .get_opt(&elsewhere.1)
                        .await?
                        .is_none())
                },
            )
            .await?;
            // A new object goes where the placement now says.
            s.create("fresh", json!({ "size": 3 })).await?;
            copy_at(s, &place(s, &second, "fresh"), json!({ "size": 3 })).await?;
            Ok(())
        })
}

#[test]
fn under_none_copies_carry_no_placement_record() -> anyhow::Result<()> {
    Scenario::bound("iso-none")
        .isolation(isolation(IsolationStrategy::None, Some("unused")))
        .run(async |s| {
            let copy = s.create_copied("db", json!({ "size": 1 })).await?;
            let annotations = copy.metadata.annotations.unwrap_or_default();
            assert!(!annotations.contains_key(CONSUMER_NAME_ANNOTATION));
            assert!(!annotations.contains_key(CONSUMER_NAMESPACE_ANNOTATION));
            Ok(())
        })
}

#[test]
fn a_placement_onto_another_consumers_copy_is_owned_by_another_and_two_objects_never_share_one()
-> anyhow::Result<()> {
    let ours = isolation(IsolationStrategy::Namespaced, Some("hostile"));
    let theirs = isolation(IsolationStrategy::Namespaced, Some("victim"));
    let second = second_consumer()?;
    kbind_tests::runtime()?.block_on(Box::pin(async {
        let victim = Box::pin(
            Scenario::bound("iso-hostile")
                .isolation(theirs.clone())
                .on_consumer(second)
                .start(),
        )
        .await?;
        let at = place(&victim, &theirs, "db");
        let policies = placing_everything_at(&at.0, &at.1)?;
        let hostile = Scenario::bound("iso-hostile")
            .isolation(ours)
            .policies(policies)
            .start();
        let hostile = match Box::pin(hostile).await {
            Ok(s) => s,
            Err(e) => return Box::pin(victim.finish(Err(e))).await,
        };
        let result = Box::pin(hostile.check(async |h| {
            victim.create("db", json!({ "size": 1 })).await?;
            copy_at(&victim, &at, json!({ "size": 1 })).await?;
            // Placed onto the victim's copy: the ownership check refuses it.
            h.create("db", json!({ "size": 666 })).await?;
            refused(h, "db", "OwnedByAnother").await?;
            // A second object answered the same place: refused before any write.
            h.create("other", json!({ "size": 667 })).await?;
            let message = refused(h, "other", "PolicyFailed").await?;
            kbind_tests::syncenv::says(&message, &["already the place of", "nothing was written"]);
            stays(
                "the victim's copy untouched",
                Duration::from_secs(4),
                || async {
                    let copy = provider_in(&victim, &at.0).get(&at.1).await?;
                    Ok(copy.data["spec"] == json!({ "size": 1 }))
                },
            )
            .await?;
            nowhere_on_the_provider(h, "other").await
        }))
        .await;
        let result = Box::pin(hostile.finish(result)).await;
        Box::pin(victim.finish(result)).await
    }))
}

/// One tenant whose placement module answers `(namespace, name)` for everything: its instance
/// is refused with `PolicyFailed` saying `why`, and nothing is written anywhere.
fn a_bad_placement_is_refused(
    scenario: &str,
    namespace: &str,
    name: &str,
    why: &[&str],
) -> anyhow::Result<()> {
    Scenario::bound(scenario)
        .isolation(isolation(IsolationStrategy::Namespaced, None))
        .policies(placing_everything_at(namespace, name)?)
        .run(async |s| {
            s.create("db", json!({ "size": 1 })).await?;
            let message = refused(s, "db", "PolicyFailed").await?;
            kbind_tests::syncenv::says(&message, why);
            nowhere_on_the_provider(s, name).await?;
            nowhere_on_the_provider(s, "db").await
        })
}

#[test]
fn a_placement_in_kube_system_is_refused() -> anyhow::Result<()> {
    a_bad_placement_is_refused(
        "iso-kube-system",
        "kube-system",
        "db-copy",
        &["kube-system"],
    )
}

#[test]
fn a_placement_in_the_heartbeat_namespace_is_refused() -> anyhow::Result<()> {
    a_bad_placement_is_refused("iso-heartbeat", "kbind", "db-copy", &["heartbeat"])
}

#[test]
fn a_placement_under_an_invalid_name_is_refused() -> anyhow::Result<()> {
    a_bad_placement_is_refused(
        "iso-invalid",
        "fine-namespace",
        "Not_A_Name",
        &["Not_A_Name"],
    )
}

/// A tenant under `iso` whose Binding copies Secret `creds` to the provider and Secret
/// `endpoint` from it.
fn with_related_secrets(
    name: &str,
    iso: &Isolation,
    body: impl AsyncFnOnce(&Scenario) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let entries = vec![
        entry(Secrets, FromConsumer, &["creds"], &[]),
        entry(Secrets, FromProvider, &["endpoint"], &[]),
    ];
    Scenario::bound(name)
        .isolation(iso.clone())
        .related(entries)
        .run(body)
}

#[test]
fn related_secrets_under_namespaced_land_next_to_their_instances() -> anyhow::Result<()> {
    let iso = isolation(IsolationStrategy::Namespaced, Some("rel"));
    with_related_secrets("iso-rel", &iso, async |s| {
        let at = place(s, &iso, "db");
        s.create("db", json!({ "size": 1 })).await?;
        copy_at(s, &at, json!({ "size": 1 })).await?;
        // Consumer → provider: the copy lands in the instance's provider namespace, named as
        // on the consumer, so the instance's reference by name keeps working there.
        put_secret(
            &s.consumer,
            s.ns(),
            "creds",
            &[],
            &[("password", "c")],
            None,
        )
        .await?;
        let copy = wait_secret(&s.provider, &at.0, "creds").await?;
        assert_eq!(secret_value(&copy, "password").as_deref(), Some("c"));
        // Provider → consumer: read from the placed namespace, written to the binding's.
        put_secret(&s.provider, &at.0, "endpoint", &[], &[("url", "p")], None).await?;
        let endpoint = wait_secret(&s.consumer, s.ns(), "endpoint").await?;
        assert_eq!(secret_value(&endpoint, "url").as_deref(), Some("p"));
        // Nothing at the unplaced coordinates: the provider's own namespace of that name is
        // not this consumer's.
        none_of(&s.provider, &[(s.ns(), "creds")]).await
    })
}

#[test]
fn related_secrets_under_prefixed_get_the_prefix_too() -> anyhow::Result<()> {
    let iso = isolation(IsolationStrategy::Prefixed, Some("relp"));
    with_related_secrets("iso-relp", &iso, async |s| {
        put_secret(
            &s.consumer,
            s.ns(),
            "creds",
            &[],
            &[("password", "c")],
            None,
        )
        .await?;
        wait_secret(&s.provider, s.ns(), "relp-creds").await?;
        // A provider Secret without this consumer's prefix is not its to copy.
        put_secret(
            &s.provider,
            s.ns(),
            "endpoint",
            &[],
            &[("url", "other")],
            None,
        )
        .await?;
        put_secret(
            &s.provider,
            s.ns(),
            "relp-endpoint",
            &[],
            &[("url", "p")],
            None,
        )
        .await?;
        let endpoint = wait_secret(&s.consumer, s.ns(), "endpoint").await?;
        assert_eq!(secret_value(&endpoint, "url").as_deref(), Some("p"));
        none_of(&s.provider, &[(s.ns(), "creds")]).await
    })
}

#[test]
fn swapping_in_a_module_that_places_elsewhere_moves_no_copy() -> anyhow::Result<()> {
    let iso = isolation(IsolationStrategy::Namespaced, Some("kept"));
    kbind_tests::runtime()?.block_on(Box::pin(async {
        let first = Box::pin(Scenario::bound("iso-swap").isolation(iso.clone()).start()).await?;
        let at = place(&first, &iso, "db");
        let written = first
            .check(async |s| {
                s.create("db", json!({ "size": 1 })).await?;
                copy_at(s, &at, json!({ "size": 1 })).await.map(drop)
            })
            .await;
        // The konnector stops; the binding, the instance and its copy stay.
        Box::pin(first.finish(written)).await?;
        // The same Connection and binding under a konnector whose placement module answers
        // another place for every object.
        let swapped = Scenario::unbound("iso-swap")
            .isolation(iso)
            .policies(placing_everything_at("elsewhere", "db")?)
            .start();
        Box::pin(swapped)
            .await?
            .run(async |s| {
                s.engage();
                merge(&s.instances(), "db", json!({ "spec": { "size": 2 } })).await?;
                copy_at(s, &at, json!({ "size": 2 })).await?;
                stays(
                    "no copy where the new module says",
                    Duration::from_secs(4),
                    || async { Ok(provider_in(s, "elsewhere").get_opt("db").await?.is_none()) },
                )
                .await?;
                // Only an object without a copy is placed the new way.
                s.create("fresh", json!({ "size": 3 })).await?;
                copy_at(s, &("elsewhere".into(), "db".into()), json!({ "size": 3 }))
                    .await
                    .map(drop)
            })
            .await
    }))
}
