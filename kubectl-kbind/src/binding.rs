//! Bindings and ClusterBindings treated alike, through the konnector's own [`BindingObject`]:
//! most commands (bind, status, unbind) do the same with either, and read the same few things
//! from it.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

pub use konnector::binding::BindingObject;

/// `Binding` or `ClusterBinding`, for messages.
pub fn kind<B: BindingObject>() -> Cow<'static, str> {
    B::kind(&())
}

/// The listed APIs, as `<plural>.<group>`.
pub fn api_names<B: BindingObject>(b: &B) -> Vec<String> {
    let apis = b.binding_spec().apis.iter();
    apis.map(|a| a.name.clone()).collect()
}

/// The binding's conditions (empty before the konnector wrote a status).
pub fn conditions<B: BindingObject>(b: &B) -> &[Condition] {
    b.binding_status()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default()
}
