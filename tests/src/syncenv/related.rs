//! Builders and probes for the related-resource and teardown tests: Secrets and ConfigMaps on
//! either cluster, and `relatedResources` entries.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use konnector::api::names::RELATED_BINDING_ANNOTATION;
use konnector::api::{RelatedDirection, RelatedResource, RelatedResourceKind, RelatedSelector};
use konnector::telemetry::{RelatedLabels, RelatedReadLabels, metrics};
use kube::api::{ObjectMeta, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};

use super::{TEST_MANAGER, ensure_namespace, stays, wait_for};

/// How long related copies may take (the tests' binding period is 2 s).
pub const RELATED_WAIT: Duration = Duration::from_secs(30);
/// How long a "not copied" check watches after a positive signal (over two binding periods).
pub const QUIET: Duration = Duration::from_secs(5);

/// A `relatedResources` entry; empty `names` and `labels` make an empty selector.
pub fn entry(
    resource: RelatedResourceKind,
    direction: RelatedDirection,
    names: &[&str],
    labels: &[(&str, &str)],
) -> RelatedResource {
    RelatedResource {
        group: String::new(),
        resource,
        direction,
        selector: RelatedSelector {
            label_selector: (!labels.is_empty()).then(|| LabelSelector {
                match_labels: Some(to_map(labels)),
                ..Default::default()
            }),
            names: names.iter().map(|n| n.to_string()).collect(),
        },
    }
}

fn to_map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Applies an Opaque Secret (creating its namespace) as the test's field manager.
pub async fn put_secret(
    client: &Client,
    namespace: &str,
    name: &str,
    labels: &[(&str, &str)],
    data: &[(&str, &str)],
    immutable: Option<bool>,
) -> anyhow::Result<Secret> {
    put_typed_secret(client, namespace, name, "Opaque", labels, data, immutable).await
}

/// Applies an Opaque Secret holding `k: v` with `labels` (creating its namespace): a source
/// whose payload does not matter, only where it is and what selects it.
pub async fn put_plain_secret(
    client: &Client,
    namespace: &str,
    name: &str,
    labels: &[(&str, &str)],
) -> anyhow::Result<Secret> {
    put_secret(client, namespace, name, labels, &[("k", "v")], None).await
}

/// Applies a Secret of `type_` (creating its namespace) as the test's field manager.
pub async fn put_typed_secret(
    client: &Client,
    namespace: &str,
    name: &str,
    type_: &str,
    labels: &[(&str, &str)],
    data: &[(&str, &str)],
    immutable: Option<bool>,
) -> anyhow::Result<Secret> {
    ensure_namespace(client, namespace).await?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(to_map(labels)),
            annotations: Some(to_map(&[("kbind.test/source-annotation", "x")])),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        type_: Some(type_.into()),
        immutable,
        ..Default::default()
    };
    Ok(Api::<Secret>::namespaced(client.clone(), namespace)
        .patch(
            name,
            &PatchParams::apply(TEST_MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await?)
}

/// Applies a ConfigMap (creating its namespace) as the test's field manager.
pub async fn put_configmap(
    client: &Client,
    namespace: &str,
    name: &str,
    labels: &[(&str, &str)],
    data: &[(&str, &str)],
) -> anyhow::Result<ConfigMap> {
    ensure_namespace(client, namespace).await?;
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(to_map(labels)),
            ..Default::default()
        },
        data: Some(to_map(data)),
        ..Default::default()
    };
    Ok(Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .patch(
            name,
            &PatchParams::apply(TEST_MANAGER).force(),
            &Patch::Apply(&cm),
        )
        .await?)
}

/// A Secret's value for `key`, as text.
pub fn secret_value(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()?
        .get(key)
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
}

/// The related-binding marker of an object.
pub fn related_marker(obj: &impl ResourceExt) -> Option<String> {
    obj.annotations().get(RELATED_BINDING_ANNOTATION).cloned()
}

/// Waits for a Secret copy to exist on `client`.
pub async fn wait_secret(client: &Client, namespace: &str, name: &str) -> anyhow::Result<Secret> {
    let api = Api::<Secret>::namespaced(client.clone(), namespace);
    wait_for(
        &format!("Secret {namespace}/{name}"),
        RELATED_WAIT,
        || async { Ok(api.get_opt(name).await?) },
    )
    .await
}

/// Waits for a Secret to be gone on `client`.
pub async fn wait_secret_gone(client: &Client, namespace: &str, name: &str) -> anyhow::Result<()> {
    let api = Api::<Secret>::namespaced(client.clone(), namespace);
    wait_for(
        &format!("Secret {namespace}/{name} gone"),
        RELATED_WAIT,
        || async { Ok(api.get_opt(name).await?.is_none().then_some(())) },
    )
    .await
}

/// Whether a Secret exists on `client`.
pub async fn secret_exists(client: &Client, namespace: &str, name: &str) -> anyhow::Result<bool> {
    Ok(Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await?
        .is_some())
}

/// Fails if a Secret exists on `client` at any `(namespace, name)` of `absent` within
/// [`QUIET`]: places a related copy must not reach.
pub async fn none_of(client: &Client, absent: &[(&str, &str)]) -> anyhow::Result<()> {
    stays("no Secret copied to a refused place", QUIET, || async {
        for (ns, name) in absent {
            let written = secret_exists(client, ns, name).await?;
            anyhow::ensure!(!written, "Secret {ns}/{name} was written");
        }
        Ok(true)
    })
    .await
}

/// Waits for the Secret copies at `copied` on `client`, then checks [`none_of`] `absent`:
/// what a selection copies and what it leaves. Returns the copies.
pub async fn copied_only(
    client: &Client,
    copied: &[(&str, &str)],
    absent: &[(&str, &str)],
) -> anyhow::Result<Vec<Secret>> {
    let mut copies = Vec::new();
    for (ns, name) in copied {
        copies.push(wait_secret(client, ns, name).await?);
    }
    none_of(client, absent).await?;
    Ok(copies)
}

/// How often provider Secrets were not copied for `reason` (the metric is process-wide).
pub fn skipped_from_provider(reason: &'static str) -> u64 {
    let labels = RelatedLabels {
        resource: "secrets",
        direction: "FromProvider",
        reason,
    };
    metrics().related_skipped.get_or_create(&labels).get()
}

/// How many related reads of Secrets carried `read` (`list-metadata` or `get-full`); the
/// metric is process-wide.
pub fn secret_reads(read: &'static str) -> u64 {
    let labels = RelatedReadLabels {
        resource: "secrets",
        read,
    };
    metrics().related_reads.get_or_create(&labels).get()
}

/// Bytes an API server has answered to LIST requests for `resource` so far, from its own
/// `apiserver_response_sizes` histogram (every list of that resource, by anyone).
pub async fn listed_bytes(client: &Client, resource: &str) -> anyhow::Result<f64> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(request).await?;
    let resource = format!("resource=\"{resource}\"");
    Ok(text
        .lines()
        .filter(|l| l.starts_with("apiserver_response_sizes_sum{"))
        .filter(|l| l.contains(&resource) && l.contains("verb=\"LIST\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}
