//! The test API (`widgets.<group>`) each sync test installs on both clusters, and CRD
//! installation that waits for `Established`.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use konnector::api::names::{CONNECTION_ANNOTATION, EXPORTED_LABEL};
use konnector::api::{ExportedApi, ResourceScope};
use konnector::schema::is_established;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use super::{Stack, TEST_MANAGER, ensure_namespace, wait_for};

/// A test API `widgets.<group>`, kind `Widget`, version `v1`, with a status subresource and
/// free-form `spec` and `status`.
#[derive(Clone, Debug)]
pub struct TestApi {
    /// API group, unique per test.
    pub group: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
}

impl TestApi {
    /// A namespaced API in `group`.
    pub fn namespaced(group: &str) -> Self {
        Self {
            group: group.to_string(),
            namespaced: true,
        }
    }

    /// A cluster-scoped API in `group`.
    pub fn cluster_scoped(group: &str) -> Self {
        Self {
            group: group.to_string(),
            namespaced: false,
        }
    }

    /// `widgets.<group>`.
    pub fn name(&self) -> String {
        format!("widgets.{}", self.group)
    }

    /// The export record the Connection controller would discover.
    pub fn exported(&self) -> ExportedApi {
        ExportedApi {
            name: self.name(),
            group: self.group.clone(),
            resource: "widgets".into(),
            scope: if self.namespaced {
                ResourceScope::Namespaced
            } else {
                ResourceScope::Cluster
            },
            versions: vec!["v1".into()],
        }
    }

    /// The dynamic resource.
    pub fn resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&self.group, "v1", "Widget"),
            "widgets",
        )
    }

    /// The API in one namespace (or cluster-wide for a cluster-scoped API).
    pub fn api(&self, client: &Client, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) if self.namespaced => {
                Api::namespaced_with(client.clone(), ns, &self.resource())
            }
            _ => Api::all_with(client.clone(), &self.resource()),
        }
    }

    /// The API across namespaces.
    pub fn all(&self, client: &Client) -> Api<DynamicObject> {
        Api::all_with(client.clone(), &self.resource())
    }

    /// An object of this API with `spec`.
    pub fn object(&self, namespace: Option<&str>, name: &str, spec: Value) -> DynamicObject {
        let mut obj = DynamicObject::new(name, &self.resource()).data(json!({ "spec": spec }));
        if self.namespaced {
            obj.metadata.namespace = namespace.map(str::to_string);
        }
        obj
    }

    /// Creates an object, and its namespace when needed.
    pub async fn create(
        &self,
        client: &Client,
        namespace: Option<&str>,
        name: &str,
        spec: Value,
    ) -> anyhow::Result<DynamicObject> {
        if let (Some(ns), true) = (namespace, self.namespaced) {
            ensure_namespace(client, ns).await?;
        }
        Ok(self
            .api(client, namespace)
            .create(&PostParams::default(), &self.object(namespace, name, spec))
            .await?)
    }

    /// The CRD, as the provider exports it.
    pub fn crd(&self) -> anyhow::Result<CustomResourceDefinition> {
        let free_form = json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true });
        Ok(serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": { "name": self.name() },
            "spec": {
                "group": self.group,
                "names": { "kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList" },
                "scope": if self.namespaced { "Namespaced" } else { "Cluster" },
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "subresources": { "status": {} },
                    "schema": { "openAPIV3Schema": {
                        "type": "object",
                        "properties": { "spec": free_form, "status": free_form },
                    }},
                }],
            },
        }))?)
    }

    /// Installs the CRD on the provider, labelled exported, and waits until Established.
    pub async fn install_on_provider(&self, provider: &Client) -> anyhow::Result<()> {
        let mut crd = self.crd()?;
        crd.metadata.labels = Some(BTreeMap::from([(
            EXPORTED_LABEL.to_string(),
            "true".to_string(),
        )]));
        apply_crd(provider, &crd).await
    }

    /// Labels the provider CRD exported, or removes the label: a provider (or a GitOps tool
    /// re-creating the CRD without it) changing its exports. The CRD and its objects stay.
    pub async fn set_exported(&self, provider: &Client, exported: bool) -> anyhow::Result<()> {
        let label = exported.then_some("true");
        let patch = Patch::Merge(json!({"metadata": {"labels": {EXPORTED_LABEL: label}}}));
        Api::<CustomResourceDefinition>::all(provider.clone())
            .patch(&self.name(), &PatchParams::default(), &patch)
            .await
            .with_context(|| format!("labelling {} exported={exported}", self.name()))?;
        Ok(())
    }

    /// Installs the CRD on the consumer as schema installation would (pinned to `connection`)
    /// and waits until Established.
    pub async fn install_on_consumer(
        &self,
        consumer: &Client,
        connection: Option<&str>,
    ) -> anyhow::Result<()> {
        let mut crd = self.crd()?;
        if let Some(connection) = connection {
            crd.metadata.annotations = Some(BTreeMap::from([(
                CONNECTION_ANNOTATION.to_string(),
                connection.to_string(),
            )]));
        }
        apply_crd(consumer, &crd).await
    }

    /// Exports the API on the provider. The stack's binding installs the consumer CRD
    /// (`pullPolicy: Bound`), as in production.
    pub async fn export(&self, stack: &Stack) -> anyhow::Result<()> {
        self.install_on_provider(&stack.provider).await
    }
}

async fn apply_crd(client: &Client, crd: &CustomResourceDefinition) -> anyhow::Result<()> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let name = crd.name_any();
    api.patch(
        &name,
        &PatchParams::apply(TEST_MANAGER).force(),
        &Patch::Apply(crd),
    )
    .await
    .with_context(|| format!("applying CRD {name}"))?;
    wait_for(
        &format!("CRD {name} Established"),
        Duration::from_secs(30),
        || async { Ok(api.get_opt(&name).await?.filter(is_established).map(|_| ())) },
    )
    .await
}

pub(super) async fn install_core_crds(consumer: &Client) -> anyhow::Result<()> {
    for (_, crd) in konnector::api::core_crds() {
        apply_crd(consumer, &crd).await?;
    }
    Ok(())
}
