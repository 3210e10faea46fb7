//! Binding teardown: a namespaced Binding deletes its owned provider copies and releases its
//! instances, keeping the CRD; the last ClusterBinding deletes the consumer CRD; another
//! binding listing the API makes teardown skip it as a whole; an Orphan instance keeps its
//! copy. The full Connection teardown sequence is in `teardown_sequence.rs`.

use std::time::Duration;

use anyhow::Result;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition as Crd;
use kbind_tests::syncenv::remains::Left::{Gone, Kept, Released};
use kbind_tests::syncenv::remains::{expect_left, kind, wait_left};
use kbind_tests::syncenv::{Scenario, gone, holds_syncer_finalizer, merge, stays};
use konnector::api::ConflictPolicy;
use konnector::api::names::{DELETION_POLICY_ANNOTATION, DELETION_POLICY_ORPHAN};
use serde_json::json;

#[test]
fn namespaced_binding_teardown_deletes_owned_copies_keeps_crd_and_instances() -> Result<()> {
    Scenario::bound("td-binding").run(async |s| {
        s.create("w", json!({"size": 1})).await?;
        s.copy("w").await?;
        s.unbind().await?;
        gone(&s.copies(), "w").await?;
        expect_left(&[
            (&s.consumer, s.api.resource(), "td-binding/w", Released),
            (&s.consumer, kind::<Crd>(), &s.api.name(), Kept),
        ])
        .await
    })
}

#[test]
fn last_cluster_binding_teardown_deletes_crd_and_instances() -> Result<()> {
    let scenario = Scenario::bound("td-cluster").cluster_binding();
    scenario.run(async |s| {
        s.create("w", json!({})).await?;
        s.copy("w").await?;
        s.unbind().await?;
        gone(&s.copies(), "w").await?;
        wait_left(&[
            (&s.consumer, kind::<Crd>(), &s.api.name(), Gone),
            // The provider's CRD is the provider's: untouched.
            (&s.provider, kind::<Crd>(), &s.api.name(), Kept),
        ])
        .await
    })
}

#[test]
fn binding_still_covering_the_namespace_keeps_its_instances_on_teardown() -> Result<()> {
    Scenario::bound("td-overlap").run(async |s| {
        // A second Binding in the same namespace lists the API on the same Connection.
        let other = s.binding(s.ns(), "widgets-too", &[&s.api], ConflictPolicy::Fail);
        s.create_ready_binding(&other).await?;
        s.create("w", json!({})).await?;
        s.copy("w").await?;
        s.unbind().await?;
        // Coverage is computed: the other binding still covers this namespace, so the
        // teardown leaves its instances alone, copies and finalizers included.
        let kept = || async {
            let copy = s.copies().get_opt("w").await?;
            Ok(copy.is_some() && holds_syncer_finalizer(&s.instances().get("w").await?))
        };
        stays("copy and finalizer kept", Duration::from_secs(3), kept).await
    })
}

#[test]
fn orphan_instance_keeps_its_copy_on_binding_teardown() -> Result<()> {
    Scenario::bound("td-orphan").run(async |s| {
        for name in ["kept", "dropped"] {
            s.create(name, json!({})).await?;
            s.copy(name).await?;
        }
        let orphan = json!({"metadata": {"annotations": {
            DELETION_POLICY_ANNOTATION: DELETION_POLICY_ORPHAN }}});
        merge(&s.instances(), "kept", orphan).await?;
        s.unbind().await?;
        gone(&s.copies(), "dropped").await?;
        expect_left(&[
            (&s.provider, s.api.resource(), "td-orphan/kept", Kept),
            (&s.consumer, s.api.resource(), "td-orphan/kept", Released),
        ])
        .await
    })
}
