//! What a provider's change of exports leaves, seen from a real Connection (the Connection
//! controller discovering exports, not a test engaging it): instances of [`TestApi`]s on both
//! sides in one namespace, their provider copies' UIDs (the same UIDs after an un-export and a
//! re-export: nothing was recreated), and the binding's released APIs.
//!
//! ```text
//! Exports { consumer, provider, namespace }
//!   .create_copied(api, "x")      instance x and its provider copy, whose UID it returns
//!   .uids(&apis, "x")             the copies' UIDs now (all still there)
//!   api.set_exported(provider, false)         (syncenv::TestApi) the provider un-exports
//!   binding_until(&api, name, "…", released(&["a", "b"]))
//! ```

use std::time::Duration;

use anyhow::Context as _;
use konnector::api::BindingStatus;
use konnector::binding::BindingObject;
use kube::api::DynamicObject;
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::syncenv::{TestApi, appears, merge, set_status, wait_for};

/// How long an export test waits for the konnector (discovery runs every second in tests).
pub const WAIT: Duration = Duration::from_secs(60);

/// Instances of test APIs in one namespace, on both clusters.
pub struct Exports<'a> {
    /// The consumer's admin client.
    pub consumer: &'a Client,
    /// The provider's admin client.
    pub provider: &'a Client,
    /// The namespace of the instances (and of their copies).
    pub namespace: &'a str,
}

impl Exports<'_> {
    /// `api`'s instances on the consumer.
    pub fn instances(&self, api: &TestApi) -> Api<DynamicObject> {
        api.api(self.consumer, Some(self.namespace))
    }

    /// `api`'s copies on the provider.
    pub fn copies(&self, api: &TestApi) -> Api<DynamicObject> {
        api.api(self.provider, Some(self.namespace))
    }

    /// Creates instance `name` of `api` (retrying until its consumer CRD is served) and waits
    /// for its provider copy; returns the copy's UID.
    pub async fn create_copied(&self, api: &TestApi, name: &str) -> anyhow::Result<String> {
        crate::eventually(WAIT, || {
            api.create(
                self.consumer,
                Some(self.namespace),
                name,
                json!({"size": 1}),
            )
        })
        .await?;
        let copy = appears(&self.copies(api), name).await?;
        copy.uid().context("a provider copy without uid")
    }

    /// The UIDs of the provider copies named `name` of every API in `apis`; fails if one is
    /// missing.
    pub async fn uids(&self, apis: &[&TestApi], name: &str) -> anyhow::Result<Vec<String>> {
        let mut uids = Vec::new();
        for api in apis {
            let copy = self.copies(api).get(name).await?;
            uids.push(copy.uid().context("a provider copy without uid")?);
        }
        Ok(uids)
    }

    /// Sets `spec` on consumer instance `name` of `api` and waits until its provider copy has
    /// it.
    pub async fn spec_reaches_provider(
        &self,
        api: &TestApi,
        name: &str,
        spec: Value,
    ) -> anyhow::Result<()> {
        merge(&self.instances(api), name, json!({ "spec": spec })).await?;
        let copies = self.copies(api);
        wait_for(
            &format!("{name}'s spec {spec} on the provider"),
            WAIT,
            || async { Ok(copies.get(name).await?.data["spec"].eq(&spec).then_some(())) },
        )
        .await
    }

    /// Sets `status` on provider copy `name` of `api` and waits until the consumer instance has
    /// it.
    pub async fn status_reaches_consumer(
        &self,
        api: &TestApi,
        name: &str,
        status: Value,
    ) -> anyhow::Result<()> {
        set_status(&self.copies(api), name, status.clone()).await?;
        let instances = self.instances(api);
        wait_for(
            &format!("{name}'s status {status} on the consumer"),
            WAIT,
            || async {
                let seen = instances.get(name).await?;
                let copied = status
                    .as_object()
                    .into_iter()
                    .flatten()
                    .all(|(k, v)| seen.data["status"][k] == *v);
                Ok(copied.then_some(()))
            },
        )
        .await
    }
}

/// The APIs `status.boundAPIs` says are released, sorted.
pub fn released_apis(status: &BindingStatus) -> Vec<&str> {
    let mut names: Vec<&str> = status
        .bound_apis
        .iter()
        .filter(|b| b.released)
        .map(|b| b.name.as_str())
        .collect();
    names.sort();
    names
}

/// A check that the binding shows exactly the `apis` released, each in `boundAPIs` and all in
/// a `Released=True` condition naming them; with none, that nothing is released.
pub fn released(apis: &[String]) -> impl Fn(&BindingStatus) -> bool + '_ {
    move |status| {
        let mut expected: Vec<&str> = apis.iter().map(String::as_str).collect();
        expected.sort();
        let condition = status.conditions.iter().find(|c| c.type_ == "Released");
        let condition_holds = match (expected.is_empty(), condition) {
            (true, None) => true,
            (true, Some(c)) => c.status == "False",
            (false, Some(c)) => {
                c.status == "True"
                    && c.reason == "APIReleased"
                    && expected.iter().all(|a| c.message.contains(a))
            }
            (false, None) => false,
        };
        released_apis(status) == expected && condition_holds
    }
}

/// Waits until binding `name` (in `api`) has a status passing `check`, and returns the binding.
pub async fn binding_until<K: BindingObject>(
    api: &Api<K>,
    name: &str,
    what: &str,
    check: impl Fn(&BindingStatus) -> bool,
) -> anyhow::Result<K> {
    wait_for(&format!("binding {name}: {what}"), WAIT, || async {
        let binding = api.get(name).await?;
        let holds = binding.binding_status().is_some_and(&check);
        Ok(holds.then_some(binding))
    })
    .await
}
