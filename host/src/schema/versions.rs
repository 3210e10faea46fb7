//! Which versions of an API the consumer CRD serves, so that the consumer never converts
//! between versions by relabelling `apiVersion` where the provider converts for real.
//!
//! ```text
//! source converts with None (CRD source, strategy None or unset) ──▶ every version, as given
//! source converts with a webhook (or OpenAPI source: unknown)   ──▶ the synced version only,
//!       served and storage; every other version left out, except one still in the consumer
//!       CRD's status.storedVersions: kept in spec.versions unserved (the apiserver refuses to
//!       drop a stored version), never served again
//! ```
//!
//! The synced version is the one the sync engine uses on both clusters ([`synced_version`],
//! also behind [`super::ApiTarget::from_crd`]): the provider's storage version when it is
//! served and exported, so the provider never needs its webhook for kbind's traffic either.
//! What was left out is written on the consumer CRD as the
//! [`VERSIONS_LEFT_OUT_ANNOTATION`](crate::api::names::VERSIONS_LEFT_OUT_ANNOTATION) message,
//! which binding readiness and the Connection's SchemaInSync repeat.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion,
};

use crate::api::names::VERSIONS_LEFT_OUT_ANNOTATION;

/// How the provider converts between the versions of an API, as far as kbind can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conversion {
    /// The provider CRD declares strategy `None`: versions differ in name only.
    None,
    /// The provider CRD converts with a webhook the consumer cannot call.
    Webhook,
    /// The schema was synthesized from OpenAPI: the provider's conversion is unknown.
    Unknown,
}

impl Conversion {
    /// The conversion a provider CRD declares (`spec.conversion.strategy`; unset is `None`).
    pub fn of_crd(crd: &CustomResourceDefinition) -> Self {
        match crd.spec.conversion.as_ref().map(|c| c.strategy.as_str()) {
            None | Some("None") => Self::None,
            Some(_) => Self::Webhook,
        }
    }

    /// Why versions other than the synced one cannot be served on the consumer.
    fn why(self) -> &'static str {
        match self {
            Self::None => "",
            Self::Webhook => {
                "the provider converts them with a webhook the consumer cannot call, and the consumer would only relabel apiVersion (dropping fields the synced version lacks)"
            }
            Self::Unknown => {
                "the schema comes from the provider's OpenAPI document, which does not say how the provider converts between versions, and the consumer would only relabel apiVersion (dropping fields the synced version lacks)"
            }
        }
    }
}

/// The version the sync engine uses for an API: the storage version when it is served and
/// exported, else the first served version that is exported (`exported` empty: any).
pub fn synced_version<'a>(
    versions: &'a [CustomResourceDefinitionVersion],
    exported: &[String],
) -> Option<&'a CustomResourceDefinitionVersion> {
    let exported_ok = |name: &str| exported.is_empty() || exported.iter().any(|v| v == name);
    versions
        .iter()
        .find(|v| v.storage && v.served && exported_ok(&v.name))
        .or_else(|| versions.iter().find(|v| v.served && exported_ok(&v.name)))
}

/// The versions a consumer CRD gets, and what the operator is told about the others.
#[derive(Clone, Debug, PartialEq)]
pub struct VersionPlan {
    /// `spec.versions` of the consumer CRD.
    pub versions: Vec<CustomResourceDefinitionVersion>,
    /// The message for [`VERSIONS_LEFT_OUT_ANNOTATION`]; `None` when every version is served.
    pub left_out: Option<String>,
}

/// Plans the consumer CRD's versions from the (already cut down) source `versions`.
/// `stored` is the existing consumer CRD's `status.storedVersions` (empty on a first install).
/// `Err` when no served, exported version exists to sync.
pub fn plan(
    versions: &[CustomResourceDefinitionVersion],
    conversion: Conversion,
    exported: &[String],
    stored: &[String],
) -> Result<VersionPlan, String> {
    if conversion == Conversion::None || versions.len() <= 1 {
        return Ok(VersionPlan {
            versions: versions.to_vec(),
            left_out: None,
        });
    }
    let synced = synced_version(versions, exported).ok_or_else(|| {
        format!(
            "no served version of it is exported (exported: {exported:?}), so there is no version to sync"
        )
    })?;
    let mut planned = Vec::new();
    let mut left_out = Vec::new();
    let mut kept_unserved = Vec::new();
    for version in versions {
        if version.name == synced.name {
            planned.push(CustomResourceDefinitionVersion {
                served: true,
                storage: true,
                ..version.clone()
            });
            continue;
        }
        left_out.push(version.name.clone());
        if stored.contains(&version.name) {
            kept_unserved.push(version.name.clone());
            planned.push(CustomResourceDefinitionVersion {
                served: false,
                storage: false,
                ..version.clone()
            });
        }
    }
    let mut message = format!(
        "versions {} left out: {}; only {} is served",
        left_out.join(", "),
        conversion.why(),
        synced.name
    );
    if !kept_unserved.is_empty() {
        message.push_str(&format!(
            "; {} stays in the CRD unserved because objects may still be stored in it (status.storedVersions): once they are rewritten in {}, remove it from storedVersions to drop it",
            kept_unserved.join(", "),
            synced.name
        ));
    }
    Ok(VersionPlan {
        versions: planned,
        left_out: Some(message),
    })
}

/// The note an installed consumer CRD carries about versions it does not serve, if any.
pub fn left_out_note(crd: &CustomResourceDefinition) -> Option<&str> {
    crd.metadata
        .annotations
        .as_ref()?
        .get(VERSIONS_LEFT_OUT_ANNOTATION)
        .map(String::as_str)
        .filter(|note| !note.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceConversion;

    fn v(name: &str, served: bool, storage: bool) -> CustomResourceDefinitionVersion {
        CustomResourceDefinitionVersion {
            name: name.into(),
            served,
            storage,
            ..Default::default()
        }
    }

    fn served(plan: &VersionPlan) -> Vec<(&str, bool, bool)> {
        plan.versions
            .iter()
            .map(|v| (v.name.as_str(), v.served, v.storage))
            .collect()
    }

    /// A served v1beta1 and the storage version v1.
    fn both() -> Vec<CustomResourceDefinitionVersion> {
        vec![v("v1beta1", true, false), v("v1", true, true)]
    }

    #[test]
    fn none_conversion_serves_every_version_as_given() {
        let plan = plan(&both(), Conversion::None, &[], &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            served(&plan),
            [("v1beta1", true, false), ("v1", true, true)]
        );
        assert!(plan.left_out.is_none());
    }

    #[test]
    fn webhook_conversion_serves_only_the_storage_version_and_says_what_was_left_out() {
        let plan = plan(&both(), Conversion::Webhook, &[], &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(served(&plan), [("v1", true, true)]);
        let note = plan.left_out.unwrap_or_default();
        assert!(note.starts_with("versions v1beta1 left out: "), "{note}");
        assert!(
            note.contains("webhook") && note.ends_with("only v1 is served"),
            "{note}"
        );
    }

    #[test]
    fn the_planned_version_is_the_one_the_sync_engine_picks() {
        for exported in [vec![], vec!["v1beta1".to_string()], vec!["v1".to_string()]] {
            let plan = plan(&both(), Conversion::Webhook, &exported, &[])
                .unwrap_or_else(|e| panic!("{e}"));
            let on_consumer = synced_version(&plan.versions, &exported).map(|v| &v.name);
            let source = both();
            let on_source = synced_version(&source, &exported).map(|v| &v.name);
            assert_eq!(on_consumer, on_source, "exported {exported:?}");
            assert_eq!(plan.versions.len(), 1);
        }
    }

    #[test]
    fn an_unserved_storage_version_gives_way_to_the_first_served_exported_one() {
        let versions = [v("v1alpha1", true, false), v("v1", false, true)];
        let plan = plan(&versions, Conversion::Webhook, &[], &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(served(&plan), [("v1alpha1", true, true)]);
        let none = super::plan(&versions, Conversion::Webhook, &["v2".into()], &[]);
        assert!(none.is_err(), "{none:?}");
    }

    #[test]
    fn a_left_out_version_still_stored_stays_unserved_and_the_note_says_why() {
        let stored = ["v1beta1".to_string(), "v1".to_string()];
        let plan =
            plan(&both(), Conversion::Webhook, &[], &stored).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            served(&plan),
            [("v1beta1", false, false), ("v1", true, true)]
        );
        let note = plan.left_out.unwrap_or_default();
        assert!(note.contains("storedVersions"), "{note}");
    }

    #[test]
    fn an_openapi_source_with_several_versions_serves_one() {
        let plan = plan(&both(), Conversion::Unknown, &[], &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(served(&plan), [("v1", true, true)]);
        assert!(plan.left_out.unwrap_or_default().contains("OpenAPI"));
        let single = [v("v1", true, true)];
        let plan = super::plan(&single, Conversion::Unknown, &[], &[]);
        assert_eq!(plan.map(|p| p.left_out), Ok(None));
    }

    #[test]
    fn the_declared_strategy_decides_the_conversion() {
        let mut crd = CustomResourceDefinition::default();
        assert_eq!(Conversion::of_crd(&crd), Conversion::None);
        for (strategy, expected) in [("None", Conversion::None), ("Webhook", Conversion::Webhook)] {
            crd.spec.conversion = Some(CustomResourceConversion {
                strategy: strategy.into(),
                webhook: None,
            });
            assert_eq!(Conversion::of_crd(&crd), expected);
        }
    }
}
