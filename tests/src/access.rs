//! Access for restricted test identities: RBAC grants of exactly the rules a case needs, and
//! the refusals the apiserver answers with when a request goes beyond them.

use std::fmt::Debug;

use anyhow::{Context as _, bail};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::{Value, json};

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Grants `subject` (`("User" | "Group", name)`) exactly `rules`: a Role and RoleBinding `name`
/// in `namespace`, or a ClusterRole and ClusterRoleBinding `name` when `namespace` is `None`.
pub async fn grant(
    admin: &kube::Client,
    namespace: Option<&str>,
    name: &str,
    rules: Value,
    (kind, subject): (&str, &str),
) -> anyhow::Result<()> {
    let (role, binding) = match namespace {
        Some(_) => (
            ApiResource::erase::<Role>(&()),
            ApiResource::erase::<RoleBinding>(&()),
        ),
        None => (
            ApiResource::erase::<ClusterRole>(&()),
            ApiResource::erase::<ClusterRoleBinding>(&()),
        ),
    };
    let bound = json!({
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": role.kind, "name": name},
        "subjects": [{"kind": kind, "name": subject, "apiGroup": RBAC_GROUP}],
    });
    for (resource, data) in [(&role, json!({ "rules": rules })), (&binding, bound)] {
        let api: Api<DynamicObject> = match namespace {
            Some(namespace) => Api::namespaced_with(admin.clone(), namespace, resource),
            None => Api::all_with(admin.clone(), resource),
        };
        let object = DynamicObject::new(name, resource).data(data);
        api.create(&PostParams::default(), &object)
            .await
            .with_context(|| format!("creating {} {name}", resource.kind))?;
    }
    Ok(())
}

/// Checks that a request was refused with HTTP `code` and `reason`, the apiserver's message
/// containing `fragment` (the user refused, the rule that fired).
pub fn expect_refused<T: Debug>(
    result: Result<T, kube::Error>,
    (code, reason): (u16, &str),
    fragment: &str,
) -> anyhow::Result<()> {
    match result {
        Err(kube::Error::Api(status))
            if status.code == code
                && status.reason == reason
                && status.message.contains(fragment) =>
        {
            Ok(())
        }
        other => bail!("expected {code} {reason} with {fragment:?}, got {other:?}"),
    }
}
