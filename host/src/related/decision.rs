//! What one selected source's copy needs, decided from the two objects' metadata alone (the
//! lists are metadata-only), so a pass reads a source in full only when its copy is missing or
//! out of date.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::names::{
    RELATED_DIGEST_ANNOTATION, RELATED_FIELD_MANAGER, RELATED_SOURCE_VERSION_ANNOTATION,
};

use super::payload::PAYLOAD_FIELDS;
use super::{annotation, marker};

/// What one selected source's copy needs, decided from metadata alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Decision {
    /// No target at list time: create it (never apply over whatever appears meanwhile).
    Create,
    /// Our copy, from this very source version and not edited by anyone else: nothing to do.
    UpToDate,
    /// Our copy, but the source changed, the copy predates the annotations, or someone else
    /// wrote its payload: read the source and apply under the copy's resourceVersion.
    Refresh,
    /// A target with another binding's marker or none: never touched.
    Foreign,
}

/// Decides what a selected source's copy needs from the two objects' metadata.
pub(super) fn decide(
    binding_uid: &str,
    source: &ObjectMeta,
    target: Option<&ObjectMeta>,
) -> Decision {
    let Some(target) = target else {
        return Decision::Create;
    };
    if marker(target) != Some(binding_uid) {
        return Decision::Foreign;
    }
    let same_source = source.resource_version.is_some()
        && annotation(target, RELATED_SOURCE_VERSION_ANNOTATION)
            == source.resource_version.as_deref();
    if same_source
        && annotation(target, RELATED_DIGEST_ANNOTATION).is_some()
        && !foreign_payload_writer(target)
    {
        Decision::UpToDate
    } else {
        Decision::Refresh
    }
}

/// Whether a manager other than ours owns a payload field of the copy (someone edited it), as
/// the copy's managedFields in a metadata-only list tell.
fn foreign_payload_writer(target: &ObjectMeta) -> bool {
    target.managed_fields.iter().flatten().any(|m| {
        m.manager.as_deref() != Some(RELATED_FIELD_MANAGER)
            && m.fields_v1.as_ref().is_some_and(|f| {
                f.0.as_object().is_some_and(|fields| {
                    PAYLOAD_FIELDS
                        .iter()
                        .any(|p| fields.contains_key(&format!("f:{p}")))
                })
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::names::RELATED_BINDING_ANNOTATION;
    use serde_json::{Value, json};

    fn meta(value: Value) -> ObjectMeta {
        serde_json::from_value(value).unwrap_or_else(|e| panic!("fixture: {e}"))
    }

    #[test]
    fn a_target_absent_at_list_time_is_created_never_applied() {
        let source = meta(json!({ "name": "s", "namespace": "ns", "resourceVersion": "7" }));
        assert_eq!(decide("b", &source, None), Decision::Create);
    }

    #[test]
    fn a_target_with_another_or_no_marker_is_never_touched() {
        let source = meta(json!({ "name": "s", "resourceVersion": "7" }));
        let unmarked = meta(json!({ "name": "s" }));
        let other =
            meta(json!({ "name": "s", "annotations": { RELATED_BINDING_ANNOTATION: "x" } }));
        assert_eq!(decide("b", &source, Some(&unmarked)), Decision::Foreign);
        assert_eq!(decide("b", &source, Some(&other)), Decision::Foreign);
    }

    #[test]
    fn our_copy_of_the_same_source_version_is_up_to_date_unless_someone_edited_it() {
        let source = meta(json!({ "name": "s", "resourceVersion": "7" }));
        let copy = |version: &str, managers: Value| {
            meta(json!({ "name": "s", "annotations": {
                RELATED_BINDING_ANNOTATION: "b",
                RELATED_DIGEST_ANNOTATION: "d",
                RELATED_SOURCE_VERSION_ANNOTATION: version,
            }, "managedFields": managers }))
        };
        let ours = json!([{ "manager": RELATED_FIELD_MANAGER, "operation": "Apply",
            "fieldsType": "FieldsV1", "fieldsV1": { "f:data": { "f:k": {} } } }]);
        assert_eq!(
            decide("b", &source, Some(&copy("7", ours.clone()))),
            Decision::UpToDate
        );
        assert_eq!(
            decide("b", &source, Some(&copy("6", ours))),
            Decision::Refresh,
            "source changed"
        );
        let edited = json!([
            { "manager": RELATED_FIELD_MANAGER, "operation": "Apply", "fieldsType": "FieldsV1",
              "fieldsV1": { "f:data": {} } },
            { "manager": "kubectl-edit", "operation": "Update", "fieldsType": "FieldsV1",
              "fieldsV1": { "f:data": { "f:k": {} } } },
        ]);
        assert_eq!(
            decide("b", &source, Some(&copy("7", edited))),
            Decision::Refresh,
            "edited"
        );
        let labelled = json!([{ "manager": "kubectl-label", "operation": "Update",
            "fieldsType": "FieldsV1", "fieldsV1": { "f:metadata": { "f:labels": {} } } }]);
        assert_eq!(
            decide("b", &source, Some(&copy("7", labelled))),
            Decision::UpToDate
        );
        let old = meta(json!({ "name": "s", "annotations": { RELATED_BINDING_ANNOTATION: "b" } }));
        assert_eq!(
            decide("b", &source, Some(&old)),
            Decision::Refresh,
            "no annotations yet"
        );
    }
}
