//! Whether the kubeconfig `connect` stores is a cluster administrator on the provider: the
//! konnector needs far less (`provider-rbac` prints it), and an administrator's credentials
//! in a consumer Secret let whoever reads that Secret do anything on the provider.
//!
//! One `SelfSubjectReview` (who the credentials are) and one `SelfSubjectAccessReview` for
//! every verb on every resource of every group. Either failing (an old provider, no network)
//! only skips the warning: it never stops `connect`.

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

/// Who the credentials are, when they may do everything on the provider.
#[derive(Debug, PartialEq, Eq)]
pub struct Administrator {
    /// The authenticated user name, as the provider sees it.
    pub user: String,
    /// Its groups.
    pub groups: Vec<String>,
}

/// `Some` when the provider says the kubeconfig's identity may do `*` on `*/*`.
pub async fn check(kubeconfig: &str) -> Option<Administrator> {
    let parsed = Kubeconfig::from_yaml(kubeconfig).ok()?;
    let config = Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
        .await
        .ok()?;
    let client = Client::try_from(config).ok()?;
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some("*".into()),
                group: Some("*".into()),
                resource: Some("*".into()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let reviews = Api::<SelfSubjectAccessReview>::all(client.clone());
    let allowed = reviews
        .create(&PostParams::default(), &review)
        .await
        .ok()?
        .status
        .is_some_and(|s| s.allowed);
    if !allowed {
        return None;
    }
    let who = Api::<SelfSubjectReview>::all(client)
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .ok()
        .and_then(|r| r.status?.user_info);
    Some(Administrator {
        user: who
            .as_ref()
            .and_then(|u| u.username.clone())
            .unwrap_or_else(|| "(unknown user)".into()),
        groups: who.and_then(|u| u.groups).unwrap_or_default(),
    })
}

/// The warning `connect` prints for an administrator's credentials.
pub fn warning(admin: &Administrator, connection: &str) -> String {
    let groups = if admin.groups.is_empty() {
        String::new()
    } else {
        format!(" (groups {})", admin.groups.join(", "))
    };
    format!(
        "warning: the provider kubeconfig's identity {}{groups} is a cluster administrator on the provider; it is now stored in a consumer Secret, where whoever can read that Secret can do anything on the provider. The konnector needs far less: print exactly what it needs with `kubectl kbind provider-rbac --subject-kind ServiceAccount --subject konnector -n <namespace> --api <plural.group> ...`, apply it on the provider and connect Connection {connection} with that identity's kubeconfig.",
        admin.user
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warning_names_the_identity_and_the_way_out() {
        let admin = Administrator {
            user: "kubernetes-admin".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
        };
        let text = warning(&admin, "prov");
        assert!(text.starts_with("warning: the provider kubeconfig's identity kubernetes-admin (groups system:masters, system:authenticated) is a cluster administrator"), "{text}");
        assert!(
            text.contains("kubectl kbind provider-rbac --subject-kind"),
            "{text}"
        );
        assert!(text.contains("connect Connection prov with"), "{text}");
    }
}
