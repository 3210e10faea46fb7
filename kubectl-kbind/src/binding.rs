//! Bindings and ClusterBindings treated alike: both share one spec and one status, and most
//! commands (bind, status, unbind) do the same with either.

use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use konnector::api::{Binding, BindingSpec, BindingStatus, ClusterBinding};

/// A Binding or a ClusterBinding, for code that treats both alike.
pub trait BindingObject:
    Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
    /// `Binding` or `ClusterBinding`.
    const KIND: &'static str;
    /// The shared spec.
    fn binding_spec(&self) -> &BindingSpec;
    /// The status, once the konnector wrote one.
    fn binding_status(&self) -> Option<&BindingStatus>;
    /// The listed APIs, as `<plural>.<group>`.
    fn api_names(&self) -> Vec<String> {
        let apis = self.binding_spec().apis.iter();
        apis.map(|a| a.name.clone()).collect()
    }
}

impl BindingObject for Binding {
    const KIND: &'static str = "Binding";
    fn binding_spec(&self) -> &BindingSpec {
        &self.spec
    }
    fn binding_status(&self) -> Option<&BindingStatus> {
        self.status.as_ref()
    }
}

impl BindingObject for ClusterBinding {
    const KIND: &'static str = "ClusterBinding";
    fn binding_spec(&self) -> &BindingSpec {
        &self.spec.spec
    }
    fn binding_status(&self) -> Option<&BindingStatus> {
        self.status.as_ref()
    }
}

/// The binding's conditions (empty before the konnector wrote a status).
pub fn conditions<B: BindingObject>(b: &B) -> &[Condition] {
    b.binding_status()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default()
}
