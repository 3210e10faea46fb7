//! Per-API readiness covers schema synthesis: a Binding through an OpenAPI-source Connection
//! lists one API whose provider schema cannot be synthesized (its OpenAPI document is nested
//! deeper than the konnector parses) and one that can. The refused API's `boundAPIs` entry and
//! the binding's `APIsNotReady` message name it, a Warning Event says so, the other API syncs
//! meanwhile, and the refused one is retried: once the provider's schema is fixed, its consumer
//! CRD installs and the binding is Ready.

use super::*;
use kbind_tests::syncenv::ensure_namespace;
use konnector::api::{ApiState, BoundApi};

/// Nesting the konnector cannot synthesize: the OpenAPI document is nested deeper than its JSON
/// parser's recursion limit (128), and the schema deeper than the 64 levels synthesis allows.
const TOO_DEEP: usize = 70;

/// A provider CRD `Deep` of `group` whose spec nests `depth` objects (`.spec.a.a.a...`), as JSON:
/// valid on the provider at any depth, but too deep for typed clients to read back, so the test
/// writes it as text.
fn deep_crd(group: &str, depth: usize) -> Result<String> {
    let mut node = json!({"type": "string"});
    for _ in 0..depth {
        node = json!({"type": "object", "properties": {"a": node}});
    }
    Ok(serde_json::to_string(&json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("deeps.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "deeps", "singular": "deep", "kind": "Deep", "listKind": "DeepList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": node}}}}]}
    }))?)
}

/// Applies the CRD `deeps.<group>` given as JSON text and waits until it is Established,
/// reading the answers as text (a typed read would hit the JSON recursion limit).
async fn apply_deep_crd(provider: &Client, group: &str, depth: usize) -> Result<()> {
    let path = format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/deeps.{group}");
    let apply = http::Request::patch(format!("{path}?fieldManager=kbind-tests&force=true"))
        .header("Content-Type", "application/apply-patch+yaml")
        .body(deep_crd(group, depth)?.into_bytes())?;
    provider.request_text(apply).await?;
    let established = || async {
        let crd = provider
            .request_text(http::Request::get(&path).body(Vec::new())?)
            .await?;
        Ok(crd
            .contains(r#""type":"Established","status":"True""#)
            .then_some(()))
    };
    wait_for(&format!("deeps.{group} Established"), CONVERGE, established).await
}

/// The binding's entry for `api`, if it has one.
fn entry<'a>(binding: &'a Binding, api: &str) -> Option<&'a BoundApi> {
    let entries = binding.status.iter().flat_map(|s| &s.bound_apis);
    entries.into_iter().find(|e| e.name == api)
}

/// The binding's `Ready` condition as `(status, reason, message)`.
fn ready(binding: &Binding) -> Option<(&str, &str, &str)> {
    let conditions = binding.status.iter().flat_map(|s| &s.conditions);
    let ready = conditions.into_iter().find(|c| c.type_ == "Ready")?;
    Some((&ready.status, &ready.reason, &ready.message))
}

/// Waits until Binding `namespace/name` exists and `check` accepts it.
async fn wait_binding(
    consumer: &Client,
    (namespace, name): (&str, &str),
    what: &str,
    check: impl Fn(&Binding) -> bool,
) -> Result<Binding> {
    let bindings: Api<Binding> = Api::namespaced(consumer.clone(), namespace);
    let accepted = || async { Ok(bindings.get_opt(name).await?.filter(|b| check(b))) };
    wait_for(
        &format!("Binding {namespace}/{name}: {what}"),
        CONVERGE,
        accepted,
    )
    .await
}

#[tokio::test]
async fn a_schema_that_cannot_be_synthesized_fails_only_its_api_and_is_retried_once_fixed()
-> Result<()> {
    with_private_provider("refused", async |_, consumer, cluster, provider, name| {
        let (good, bad) = (
            "widgets.synth-ok.example.org",
            "deeps.synth-deep.example.org",
        );
        install_crd(
            provider,
            &widget_crd("synth-ok.example.org", "Widget", false)?,
        )
        .await?;
        apply_deep_crd(provider, "synth-deep.example.org", TOO_DEEP).await?;
        let schema: SchemaPolicy = serde_json::from_value(json!({"source": "OpenAPI"}))?;
        connect(consumer, cluster, &name, schema, false).await?;
        wait_ready(consumer, &name).await?;

        let namespace = name.as_str();
        ensure_namespace(consumer, namespace).await?;
        let bindings: Api<Binding> = Api::namespaced(consumer.clone(), namespace);
        let spec =
            json!({"connectionRef": {"name": name}, "apis": [{"name": good}, {"name": bad}]});
        let binding = Binding::new("both", serde_json::from_value(spec)?);
        bindings.create(&PostParams::default(), &binding).await?;

        // The refused API is named, with its reason and the parser's error; the other syncs.
        let at = (namespace, "both");
        // (Until the provider publishes the new group, its document is missing: retried too.)
        let refused = |b: &Binding| {
            ready(b).is_some_and(|(s, r, m)| s == "False" && r == "APIsNotReady" && m.contains(bad))
                && entry(b, good).is_some_and(|e| e.state == Some(ApiState::Syncing))
                && entry(b, bad)
                    .and_then(|e| e.message.as_deref())
                    .is_some_and(|m| m.contains("recursion limit"))
        };
        let seen =
            wait_binding(consumer, at, "APIsNotReady naming the refused API", refused).await?;
        let failed = entry(&seen, bad)
            .with_context(|| format!("an entry for the refused API: {:#?}", seen.status))?;
        assert_eq!(failed.state, Some(ApiState::Failed), "{failed:?}");
        assert_eq!(failed.reason.as_deref(), Some("SchemaInstallFailed"));
        says(
            failed.message.as_deref().unwrap_or_default(),
            &[bad, "OpenAPI document", "unusable", "recursion limit"],
        );
        // The Event is the binding's entering APIsNotReady: its note names the API with the
        // reason it had then (Pending while the provider publishes the new group's document).
        let note = event_note(consumer, at, "APIsNotReady", Some("Warning"), CONVERGE).await?;
        says(&note, &[bad]);
        let crds: Api<CustomResourceDefinition> = Api::all(consumer.clone());
        assert!(
            crds.get_opt(bad).await?.is_none(),
            "no half-carried CRD installed"
        );

        // Meanwhile the accepted API syncs.
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "synth-ok.example.org",
            "v1",
            "Widget",
        ));
        let widgets: Api<DynamicObject> =
            Api::namespaced_with(consumer.clone(), namespace, &resource);
        let widget = DynamicObject::new("w1", &resource).data(json!({"spec": {"size": 3}}));
        widgets.create(&PostParams::default(), &widget).await?;
        let copies: Api<DynamicObject> =
            Api::namespaced_with(provider.clone(), namespace, &resource);
        let copied = || async {
            Ok(copies
                .get_opt("w1")
                .await?
                .filter(|c| c.data["spec"]["size"] == 3))
        };
        wait_for("the provider copy of w1", CONVERGE, copied).await?;

        // The provider flattens its schema: the refused API is retried, installs, and syncs.
        apply_deep_crd(provider, "synth-deep.example.org", 3).await?;
        let fixed = |b: &Binding| {
            ready(b).is_some_and(|(s, _, _)| s == "True")
                && entry(b, bad).is_some_and(|e| e.state == Some(ApiState::Syncing))
        };
        wait_binding(
            consumer,
            at,
            "Ready once the provider's schema is fixed",
            fixed,
        )
        .await?;
        let installed = crds.get(bad).await?;
        assert!(konnector::schema::is_established(&installed));
        bindings.delete("both", &DeleteParams::default()).await?;
        anyhow::Ok(())
    })
    .await
}
