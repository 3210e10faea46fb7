//! Who owns which `spec` field of a provider copy, read from its managedFields: what drift
//! another manager added (removed with a merge patch, since a forced apply never removes a
//! field someone else owns), and when fields this engine created must move into its apply
//! entry so that removing them works.
//!
//! ```text
//! apply response ──managedFields──▶ extra spec fields owned by another manager ──▶ prune_patch
//!                                └─▶ extra spec fields owned by our create ──▶ ownership patch
//! ```

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use kube::api::DynamicObject;
use serde_json::{Value, json};

use crate::api::names::FIELD_MANAGER;

use super::desired::spec_of;

/// Fields under the provider copy's `spec` that the consumer's spec does not have and that
/// another field manager owns, as key paths (objects only; lists are atomic and replaced by
/// the forced apply). Server-side apply never removes a field another manager owns, so drift
/// that *adds* fields survives a plain apply; these are removed by [`prune_patch`].
///
/// Fields nobody else owns (defaults, or what a mutating webhook adds to our own writes) are
/// left alone: removing them would only bring them back and loop.
pub(super) fn foreign_extra_spec_fields(
    target: &DynamicObject,
    consumer: &DynamicObject,
) -> Vec<Vec<String>> {
    let (Some(have), want) = (spec_of(target), spec_of(consumer)) else {
        return Vec::new();
    };
    let mut extra = Vec::new();
    extra_paths(
        have,
        want.unwrap_or(&Value::Null),
        &mut Vec::new(),
        &mut extra,
    );
    let foreign: Vec<&Value> = target
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref().unwrap_or("").is_empty())
        .filter(|m| m.manager.as_deref() != Some(FIELD_MANAGER))
        .filter_map(|m| m.fields_v1.as_ref().and_then(|f| f.0.get("f:spec")))
        .collect();
    extra.retain(|path| foreign.iter().any(|owned| owns(owned, path)));
    extra
}

/// Collects key paths present in `have` but absent from `want`, descending into objects
/// present on both sides.
fn extra_paths(have: &Value, want: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let (Some(have), Some(want)) = (have.as_object(), want.as_object()) else {
        if prefix.is_empty() && have.is_object() {
            // The consumer has no spec at all: every provider key is extra.
            for key in have.as_object().into_iter().flat_map(|o| o.keys()) {
                out.push(vec![key.clone()]);
            }
        }
        return;
    };
    for (key, value) in have {
        prefix.push(key.clone());
        match want.get(key) {
            None => out.push(prefix.clone()),
            Some(wanted) => extra_paths(value, wanted, prefix, out),
        }
        prefix.pop();
    }
}

/// Whether a `fieldsV1` tree (below `f:spec`) covers `path`.
fn owns(fields: &Value, path: &[String]) -> bool {
    let Some((first, rest)) = path.split_first() else {
        return true;
    };
    match fields.get(format!("f:{first}")) {
        Some(child) => {
            rest.is_empty() || child.as_object().is_some_and(|o| o.is_empty()) || owns(child, rest)
        }
        None => false,
    }
}

/// When this engine created the copy (a create, not an apply: see `reconcile`), its fields
/// belong to an `Update` entry of our field manager, and a later server-side apply that
/// leaves a field out cannot remove it. Once that matters (a `spec` field the consumer no
/// longer has is still ours through that entry), this JSON patch folds the entry into our
/// `Apply` entry, as client-go's `csaupgrade` does; the next apply then removes the field.
/// Guarded by the resourceVersion it was computed on.
pub(super) fn create_time_ownership_patch(
    target: &DynamicObject,
    consumer: &DynamicObject,
) -> Option<Value> {
    let entries = target.metadata.managed_fields.as_ref()?;
    let is_ours = |m: &ManagedFieldsEntry, operation: &str| {
        m.manager.as_deref() == Some(FIELD_MANAGER)
            && m.operation.as_deref() == Some(operation)
            && m.subresource.as_deref().unwrap_or("").is_empty()
    };
    let created = entries.iter().find(|m| is_ours(m, "Update"))?;
    let created_fields = created.fields_v1.as_ref()?.0.clone();
    let owned_spec = created_fields.get("f:spec")?;
    let have = spec_of(target)?;
    let mut extra = Vec::new();
    extra_paths(
        have,
        spec_of(consumer).unwrap_or(&Value::Null),
        &mut Vec::new(),
        &mut extra,
    );
    if !extra.iter().any(|path| owns(owned_spec, path)) {
        return None;
    }
    let mut folded: Vec<ManagedFieldsEntry> = Vec::with_capacity(entries.len());
    let mut applied = None;
    for entry in entries {
        if is_ours(entry, "Update") {
            continue;
        }
        if is_ours(entry, "Apply") {
            applied = Some(entry.clone());
            continue;
        }
        folded.push(entry.clone());
    }
    let mut apply = applied.unwrap_or_else(|| ManagedFieldsEntry {
        operation: Some("Apply".into()),
        fields_v1: Some(FieldsV1(json!({}))),
        ..created.clone()
    });
    let mut fields = apply
        .fields_v1
        .take()
        .map(|f| f.0)
        .unwrap_or_else(|| json!({}));
    union_fields(&mut fields, &created_fields);
    apply.fields_v1 = Some(FieldsV1(fields));
    folded.push(apply);
    Some(json!([
        { "op": "test", "path": "/metadata/resourceVersion", "value": target.metadata.resource_version },
        { "op": "replace", "path": "/metadata/managedFields", "value": folded },
    ]))
}

/// Adds every field of the `fieldsV1` tree `other` to `into`.
fn union_fields(into: &mut Value, other: &Value) {
    let (Some(into), Some(other)) = (into.as_object_mut(), other.as_object()) else {
        return;
    };
    for (key, value) in other {
        match into.get_mut(key) {
            Some(existing) => union_fields(existing, value),
            None => {
                into.insert(key.clone(), value.clone());
            }
        }
    }
}

/// A JSON merge patch removing `paths` under `spec`, guarded by the resourceVersion the
/// decision was made on.
pub(super) fn prune_patch(paths: &[Vec<String>], resource_version: Option<&str>) -> Value {
    let mut spec = json!({});
    for path in paths {
        let mut node = &mut spec;
        for (i, key) in path.iter().enumerate() {
            if i + 1 == path.len() {
                node[key.as_str()] = Value::Null;
            } else {
                if !node.get(key.as_str()).is_some_and(Value::is_object) {
                    node[key.as_str()] = json!({});
                }
                node = &mut node[key.as_str()];
            }
        }
    }
    let mut patch = json!({ "spec": spec });
    if let Some(rv) = resource_version {
        patch["metadata"] = json!({ "resourceVersion": rv });
    }
    patch
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::desired::provider_copy;
    use crate::sync::testing::{consumer_widget, widgets};

    fn consumer() -> DynamicObject {
        consumer_widget(json!({ "spec": { "size": 3 } }))
    }

    fn provider_of(c: &DynamicObject) -> DynamicObject {
        let ar = widgets();
        let place = crate::sync::placement::same_place(&crate::markers::key_of(c));
        let body = provider_copy(c, &place, &ar, "cluster-uid", "obj-uid", None);
        let mut p: DynamicObject = serde_json::from_value(body).expect("valid object");
        p.metadata.uid = Some("provider-uid".into());
        p
    }

    fn managed(manager: &str, operation: &str, fields: Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            fields_v1: Some(FieldsV1(fields)),
            ..Default::default()
        }
    }

    #[test]
    fn extra_fields_owned_by_another_manager_are_found_at_any_depth() {
        let mut c = consumer();
        c.data["spec"] = json!({ "size": 3, "db": { "engine": "pg" } });
        let mut p = provider_of(&c);
        p.data["spec"] = json!({ "size": 3, "sneaked": 1, "db": { "engine": "pg", "extra": true }, "defaulted": 0 });
        p.metadata.managed_fields = Some(vec![
            managed(
                FIELD_MANAGER,
                "Apply",
                json!({ "f:spec": { "f:size": {}, "f:db": { "f:engine": {} } } }),
            ),
            managed(
                "kubectl-edit",
                "Update",
                json!({ "f:spec": { "f:sneaked": {}, "f:db": { "f:extra": {} } } }),
            ),
            managed(
                "operator",
                "Update",
                json!({ "f:status": { "f:defaulted": {} } }),
            ),
        ]);
        assert_eq!(
            foreign_extra_spec_fields(&p, &c),
            vec![
                vec!["db".to_string(), "extra".to_string()],
                vec!["sneaked".to_string()],
            ],
            "`defaulted` has no other owner and stays"
        );
    }

    #[test]
    fn our_own_fields_are_never_pruned() {
        let c = consumer();
        let mut p = provider_of(&c);
        p.data["spec"]["webhook"] = json!("injected");
        p.metadata.managed_fields = Some(vec![managed(
            FIELD_MANAGER,
            "Update",
            json!({ "f:spec": { "f:webhook": {} } }),
        )]);
        assert!(foreign_extra_spec_fields(&p, &c).is_empty());
    }

    #[test]
    fn atomic_ownership_of_a_parent_covers_its_children() {
        let mut c = consumer();
        c.data["spec"] = json!({ "db": {} });
        let mut p = provider_of(&c);
        p.data["spec"] = json!({ "db": { "extra": 1 } });
        p.metadata.managed_fields = Some(vec![managed(
            "other",
            "Update",
            json!({ "f:spec": { "f:db": {} } }),
        )]);
        assert_eq!(
            foreign_extra_spec_fields(&p, &c),
            vec![vec!["db".to_string(), "extra".to_string()]]
        );
    }

    #[test]
    fn prune_patch_nulls_each_path_under_a_resource_version_guard() {
        let paths = vec![
            vec!["a".to_string()],
            vec!["b".to_string(), "c".to_string()],
        ];
        assert_eq!(
            prune_patch(&paths, Some("7")),
            json!({ "spec": { "a": null, "b": { "c": null } }, "metadata": { "resourceVersion": "7" } })
        );
    }

    #[test]
    fn create_time_ownership_of_a_removed_field_moves_to_the_apply_entry() {
        let mut c = consumer();
        c.data["spec"] = json!({ "size": 3 });
        let mut p = provider_of(&c);
        p.metadata.resource_version = Some("7".into());
        p.data["spec"] = json!({ "size": 3, "tier": "gold" });
        p.metadata.managed_fields = Some(vec![
            managed(
                FIELD_MANAGER,
                "Update",
                json!({ "f:spec": { "f:size": {}, "f:tier": {} } }),
            ),
            managed(
                FIELD_MANAGER,
                "Apply",
                json!({ "f:spec": { "f:size": {} } }),
            ),
            managed("operator", "Update", json!({ "f:status": {} })),
        ]);
        let patch = create_time_ownership_patch(&p, &c).expect("a removed field is ours");
        assert_eq!(
            patch[0],
            json!({ "op": "test", "path": "/metadata/resourceVersion", "value": "7" })
        );
        let entries = patch[1]["value"].as_array().expect("entries");
        assert_eq!(
            entries.len(),
            2,
            "our Update entry is folded into the Apply entry"
        );
        assert_eq!(entries[0]["manager"], "operator");
        assert_eq!(entries[1]["operation"], "Apply");
        assert_eq!(
            entries[1]["fieldsV1"],
            json!({ "f:spec": { "f:size": {}, "f:tier": {} } })
        );
    }

    #[test]
    fn create_time_ownership_is_left_alone_while_nothing_was_removed() {
        let c = consumer();
        let mut p = provider_of(&c);
        p.metadata.managed_fields = Some(vec![managed(
            FIELD_MANAGER,
            "Update",
            json!({ "f:spec": { "f:size": {} } }),
        )]);
        assert!(create_time_ownership_patch(&p, &c).is_none());
    }
}
