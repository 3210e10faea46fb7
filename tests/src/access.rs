//! Access for restricted test identities: RBAC grants of exactly the rules a case needs, and
//! the refusals the apiserver answers with when a request goes beyond them.

use std::fmt::Debug;

use anyhow::Context as _;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
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
    let role = namespace.map_or("ClusterRole", |_| "Role");
    let bound = json!({
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": role, "name": name},
        "subjects": [{"kind": kind, "name": subject, "apiGroup": RBAC_GROUP}],
    });
    for (kind, data) in [
        (role.to_string(), json!({ "rules": rules })),
        (format!("{role}Binding"), bound),
    ] {
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(RBAC_GROUP, "v1", &kind));
        let api: Api<DynamicObject> = match namespace {
            Some(namespace) => Api::namespaced_with(admin.clone(), namespace, &resource),
            None => Api::all_with(admin.clone(), &resource),
        };
        let object = DynamicObject::new(name, &resource).data(data);
        let created = api.create(&PostParams::default(), &object).await;
        created.with_context(|| format!("creating {kind} {name}"))?;
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
    let refused = matches!(&result, Err(kube::Error::Api(s))
        if s.code == code && s.reason == reason && s.message.contains(fragment));
    anyhow::ensure!(
        refused,
        "expected {code} {reason} with {fragment:?}, got {result:?}"
    );
    Ok(())
}
