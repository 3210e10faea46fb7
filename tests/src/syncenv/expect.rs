//! What a scenario waits for and checks, named as the spec names it: a provider copy with a
//! spec, an instance in sync, the binding's status and Events, an object left unwritten.

use std::fmt::Debug;
use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use konnector::api::BindingStatus;
use konnector::api::names::{
    CONSUMER_CLUSTER_UID_ANNOTATION, CONSUMER_OBJECT_UID_ANNOTATION, MANAGED_LABEL,
};
use kube::api::DynamicObject;
use kube::{Api, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{BINDING, Scenario, WAIT, events_for, stays, synced_condition, wait_for};

/// A binding condition by type.
pub fn condition<'a>(status: &'a BindingStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// Whether a binding condition has this status and reason: the check most waits make.
pub fn has(status: &BindingStatus, type_: &str, value: &str, reason: &str) -> bool {
    condition(status, type_).is_some_and(|c| c.status == value && c.reason == reason)
}

/// A binding condition's message, empty when the condition is missing (so that an assertion
/// on it fails with the whole status in view).
pub fn message<'a>(status: &'a BindingStatus, type_: &str) -> &'a str {
    condition(status, type_).map_or("", |c| c.message.as_str())
}

/// Panics unless `text` contains every fragment: for condition messages and Event notes,
/// which must say what happened and what to do.
pub fn says(text: &str, fragments: &[&str]) {
    for fragment in fragments {
        assert!(
            text.contains(fragment),
            "{text:?} does not say {fragment:?}"
        );
    }
}

/// A provider copy's ownership markers (the managed label, the consumer cluster's and the
/// instance's UIDs) as one value, to compare with [`Scenario::markers_of`].
pub fn markers(copy: &DynamicObject) -> Value {
    json!({
        "managed": copy.labels().get(MANAGED_LABEL),
        "cluster": copy.annotations().get(CONSUMER_CLUSTER_UID_ANNOTATION),
        "object": copy.annotations().get(CONSUMER_OBJECT_UID_ANNOTATION),
    })
}

/// Waits until object `name` exists and returns it.
pub async fn appears<K>(api: &Api<K>, name: &str) -> anyhow::Result<K>
where
    K: Clone + DeserializeOwned + Debug,
{
    wait_for(&format!("{name} to exist"), WAIT, || async {
        Ok(api.get_opt(name).await?)
    })
    .await
}

/// Fails if object `since` is written again (its resourceVersion changes) within `period`.
pub async fn unwritten(
    api: &Api<DynamicObject>,
    since: &DynamicObject,
    period: Duration,
) -> anyhow::Result<()> {
    let (name, version) = (since.name_any(), since.resource_version());
    stays(&format!("{name} unwritten"), period, || async {
        Ok(api.get(&name).await?.resource_version() == version)
    })
    .await
}

impl Scenario {
    /// The [`markers`] a provider copy of `instance` carries when this consumer owns it.
    pub fn markers_of(&self, instance: &DynamicObject) -> Value {
        json!({ "managed": "true", "cluster": self.consumer_uid, "object": instance.uid() })
    }

    /// Waits until the provider copy of instance `name` has exactly `spec`.
    pub async fn copy_with_spec(&self, name: &str, spec: Value) -> anyhow::Result<DynamicObject> {
        self.copy_at_with_spec(self.ns(), name, spec).await
    }

    /// Waits until the provider object `namespace/name` of the main API has exactly `spec`:
    /// a copy placed elsewhere than its instance.
    pub async fn copy_at_with_spec(
        &self,
        namespace: &str,
        name: &str,
        spec: Value,
    ) -> anyhow::Result<DynamicObject> {
        let copies = self.api.api(&self.stack.provider, Some(namespace));
        wait_for(
            &format!("the provider copy {namespace}/{name} with spec {spec}"),
            WAIT,
            || async {
                Ok(copies
                    .get_opt(name)
                    .await?
                    .filter(|o| o.data["spec"] == spec))
            },
        )
        .await
    }

    /// Creates instance `name` with `spec` and waits until its provider copy has that spec, which
    /// it returns: how most sync scenarios begin.
    pub async fn create_copied(&self, name: &str, spec: Value) -> anyhow::Result<DynamicObject> {
        self.create(name, spec.clone()).await?;
        self.copy_with_spec(name, spec).await
    }

    /// Waits until instance `name` says `Synced=True` for its current generation.
    pub async fn in_sync(&self, name: &str) -> anyhow::Result<DynamicObject> {
        let instances = self.instances();
        wait_for(
            &format!("{name} Synced=True for its generation"),
            WAIT,
            || async {
                let obj = instances.get(name).await?;
                let synced = synced_condition(&obj).is_some_and(|c| {
                    c["status"] == "True"
                        && c["observedGeneration"] == json!(obj.metadata.generation)
                });
                Ok(synced.then_some(obj))
            },
        )
        .await
    }

    /// The scenario's binding status (the Binding's, or the ClusterBinding's), if it has one.
    pub async fn binding_status(&self) -> anyhow::Result<Option<BindingStatus>> {
        Ok(if self.is_cluster_binding() {
            self.cluster_bindings().get(&self.stack.name).await?.status
        } else {
            self.bindings().get(BINDING).await?.status
        })
    }

    /// Waits until the scenario's binding status passes `check`, and returns it.
    pub async fn binding_until(
        &self,
        what: &str,
        check: impl Fn(&BindingStatus) -> bool,
    ) -> anyhow::Result<BindingStatus> {
        wait_for(what, WAIT, || async {
            Ok(self.binding_status().await?.filter(|s| check(s)))
        })
        .await
    }

    /// Waits until the scenario's binding has condition `type_` with `value` and `reason`.
    pub async fn binding_has(
        &self,
        type_: &str,
        value: &str,
        reason: &str,
    ) -> anyhow::Result<BindingStatus> {
        let what = format!("the binding's {type_}={value} {reason}");
        self.binding_until(&what, |s| has(s, type_, value, reason))
            .await
    }

    /// Events about the scenario's binding (a ClusterBinding's land in `default`).
    pub async fn binding_events(&self) -> anyhow::Result<Vec<Event>> {
        if self.is_cluster_binding() {
            events_for(&self.consumer, None, &self.stack.name).await
        } else {
            events_for(&self.consumer, Some(self.ns()), BINDING).await
        }
    }

    /// Waits for an Event of `type_` and `reason` on the scenario's binding, and returns it.
    pub async fn binding_event(&self, type_: &str, reason: &str) -> anyhow::Result<Event> {
        wait_for(
            &format!("a {type_} {reason} Event on the binding"),
            WAIT,
            || async {
                Ok(self.binding_events().await?.into_iter().find(|e| {
                    e.type_.as_deref() == Some(type_) && e.reason.as_deref() == Some(reason)
                }))
            },
        )
        .await
    }
}
