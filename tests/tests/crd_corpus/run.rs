//! The corpus run: the CRDs generated and loaded, installed on the provider, bound through both
//! schema sources, the examples created and their copies compared; what each came to.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow};
use futures::{StreamExt as _, stream};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use kbind_policy_schema_synthesis::fidelity::differences;
use kbind_tests::daemon::built_by_script;
use kbind_tests::fixtures::{Konnector, connect, shared_konnector, start_konnector};
use kbind_tests::syncenv::ensure_namespace;
use kbind_tests::testenv::{second_consumer, shared_pair};
use konnector::api::names::EXPORTED_LABEL;
use konnector::api::{Binding, BindingSpec, ClusterBinding, SchemaPolicy};
use konnector::schema::is_established;
use konnector::schema::managed::is_protected_api;
use konnector::schema::sanitize::CATEGORY_ALL;

use super::{
    Corpus, CorpusCrd, Example, ExampleOutcome, INSTALL, Row, SYNC, Source, SourceFacts,
    repository_root,
};

/// The corpus CRDs, generated (once per machine and inputs) by `scripts/crd-corpus.sh`.
fn load_corpus() -> Result<Vec<CorpusCrd>> {
    let script = repository_root().join("scripts/crd-corpus.sh");
    let dir = built_by_script(&script.to_string_lossy()).map_err(|e| anyhow!(e))?;
    let mut crds = Vec::new();
    let mut projects: Vec<_> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .collect::<Result<_, _>>()?;
    projects.sort_by_key(|e| e.file_name());
    for project in projects.into_iter().filter(|p| p.path().is_dir()) {
        let mut files: Vec<_> = std::fs::read_dir(project.path())?.collect::<Result<_, _>>()?;
        files.sort_by_key(|e| e.file_name());
        for file in files {
            let text = std::fs::read_to_string(file.path())?;
            let crd: Value = serde_saphyr::from_str(&text)
                .with_context(|| format!("parsing {}", file.path().display()))?;
            let name = crd["metadata"]["name"]
                .as_str()
                .with_context(|| format!("{} has no name", file.path().display()))?
                .to_owned();
            crds.push(CorpusCrd {
                project: project.file_name().to_string_lossy().into_owned(),
                name,
                crd,
                bytes: text.len(),
            });
        }
    }
    Ok(crds)
}

/// The example objects of `tests/corpus/examples`, one file per project.
fn load_examples() -> Result<Vec<Example>> {
    let dir = repository_root().join("tests/corpus/examples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)?.collect::<Result<_, _>>()?;
    files.sort_by_key(|e| e.file_name());
    let mut examples = Vec::new();
    for file in files {
        let path = file.path();
        let project = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = std::fs::read_to_string(&path)?;
        let documents: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text)?;
        for object in documents {
            if !object.is_null() {
                examples.push(Example {
                    project: project.clone(),
                    object,
                });
            }
        }
    }
    Ok(examples)
}

/// An example with the corpus CRD it is an instance of.
struct Matched<'a> {
    example: &'a Example,
    /// `<plural>.<group>`.
    api: String,
    resource: ApiResource,
    namespaced: bool,
}

impl Matched<'_> {
    /// The example as `source`'s consumer creates it: a cluster-scoped one named for the
    /// source, since both consumers' copies land on the one provider.
    fn object(&self, source: Source) -> Result<DynamicObject> {
        let mut object: DynamicObject = serde_json::from_value(self.example.object.clone())?;
        if !self.namespaced {
            object.metadata.name = Some(format!("{}-{}", object.name_any(), source.namespace()));
        }
        Ok(object)
    }

    /// The example's objects on `client`: in `namespace` when namespaced.
    fn api(&self, client: &Client, namespace: &str) -> Api<DynamicObject> {
        if self.namespaced {
            Api::namespaced_with(client.clone(), namespace, &self.resource)
        } else {
            Api::all_with(client.clone(), &self.resource)
        }
    }
}

/// The CRD an example is an instance of, and its API resource.
fn resource_of<'a>(corpus: &[CorpusCrd], example: &'a Example) -> Option<Matched<'a>> {
    let api_version = example.object["apiVersion"].as_str()?;
    let kind = example.object["kind"].as_str()?;
    let (group, version) = api_version.split_once('/')?;
    let crd = corpus
        .iter()
        .find(|c| c.crd["spec"]["group"] == group && c.crd["spec"]["names"]["kind"] == kind)?;
    let plural = crd.crd["spec"]["names"]["plural"].as_str()?;
    let gvk = GroupVersionKind::gvk(group, version, kind);
    Some(Matched {
        example,
        api: crd.name.clone(),
        resource: ApiResource::from_gvk_with_plural(&gvk, plural),
        namespaced: crd.crd["spec"]["scope"] == "Namespaced",
    })
}

/// Creates every corpus CRD on the provider, labelled exported, and waits until each is
/// Established; returns why the provider refused a CRD, for each it refused (a CRD that
/// controller-gen generates from newer Kubernetes types than the project pins can be one).
async fn install_on_provider(
    provider: &Client,
    corpus: &[CorpusCrd],
) -> Result<BTreeMap<String, String>> {
    let crds: Api<CustomResourceDefinition> = Api::all(provider.clone());
    let created = stream::iter(corpus)
        .map(|c| {
            let crds = crds.clone();
            async move {
                let mut crd = c.crd.clone();
                crd["metadata"]["labels"] = json!({ EXPORTED_LABEL: "true" });
                let crd: CustomResourceDefinition = serde_json::from_value(crd)?;
                match crds.create(&PostParams::default(), &crd).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(refused)) if refused.code == 422 => {
                        return anyhow::Ok(Some((c.name.clone(), refused.message)));
                    }
                    Err(e) => return Err(e).context(format!("creating {}", c.name)),
                }
                konnector::schema::established(provider, &c.name, INSTALL).await?;
                anyhow::Ok(None)
            }
        })
        .buffer_unordered(4)
        .collect::<Vec<_>>()
        .await;
    let mut refused = BTreeMap::new();
    for outcome in created {
        refused.extend(outcome?);
    }
    Ok(refused)
}

/// Connects `consumer` to the provider with `source` and `pullPolicy: All`.
async fn connect_source(consumer: &Client, source: Source) -> Result<()> {
    let pair = shared_pair()?;
    let schema = json!({"source": source.spelled(), "pullPolicy": "All"});
    let schema: SchemaPolicy = serde_json::from_value(schema)?;
    connect(
        consumer,
        &pair.provider,
        connection_name(source),
        schema,
        false,
    )
    .await?;
    Ok(())
}

fn connection_name(source: Source) -> &'static str {
    match source {
        Source::Crd => "corpus-crd",
        Source::OpenApi => "corpus-openapi",
    }
}

/// Waits until every corpus CRD is Established on `consumer` (or [`INSTALL`] passes), and
/// returns the consumer CRDs found, by name.
async fn installed_on(
    consumer: &Client,
    corpus: &[CorpusCrd],
) -> Result<BTreeMap<String, CustomResourceDefinition>> {
    let crds: Api<CustomResourceDefinition> = Api::all(consumer.clone());
    let began = Instant::now();
    loop {
        let listed = crds.list(&Default::default()).await?.items;
        let found: BTreeMap<String, CustomResourceDefinition> = listed
            .into_iter()
            .filter(|c| corpus.iter().any(|k| k.name == c.name_any()) && is_established(c))
            .map(|c| (c.name_any(), c))
            .collect();
        let expected = corpus.iter().filter(|c| !is_protected_api(&c.name)).count();
        if found.len() >= expected || began.elapsed() > INSTALL {
            return Ok(found);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The Connection's `SchemaInSync` message, for a CRD that did not install.
async fn schema_message(consumer: &Client, source: Source) -> String {
    let connections: Api<konnector::api::Connection> = Api::all(consumer.clone());
    let Ok(connection) = connections.get(connection_name(source)).await else {
        return "the Connection could not be read".into();
    };
    let conditions = connection.status.map(|s| s.conditions).unwrap_or_default();
    conditions
        .into_iter()
        .find(|c| c.type_ == "SchemaInSync")
        .map(|c| format!("{}: {}", c.reason, c.message))
        .unwrap_or_else(|| "no SchemaInSync condition".into())
}

/// The `openAPIV3Schema` of `version` in a CRD's JSON, if it has that version.
fn schema_of(crd: &Value, version: &str) -> Option<Value> {
    let versions = crd["spec"]["versions"].as_array()?;
    let found = versions.iter().find(|v| v["name"] == version)?;
    Some(found["schema"]["openAPIV3Schema"].clone())
}

/// Every difference between the provider's CRD and the consumer's that changes what the
/// consumer stores, accepts or shows: the schema of each version the consumer CRD serves (the
/// differential check), its status subresource and selectable fields, the scope and names;
/// with `source` CRD also the printer columns and the scale subresource, which the OpenAPI
/// source cannot carry (not published).
fn schema_differences(
    original: &Value,
    installed: &CustomResourceDefinition,
    source: Source,
) -> Result<Vec<String>> {
    let installed = serde_json::to_value(installed)?;
    let mut found = Vec::new();
    for field in ["scope", "group"] {
        if original["spec"][field] != installed["spec"][field] {
            found.push(format!("spec.{field} differs"));
        }
    }
    // No bound API joins the `all` category (`kubectl get all` lists the cluster's own).
    let mut names = original["spec"]["names"].clone();
    if let Some(categories) = names["categories"].as_array_mut() {
        categories.retain(|c| c != CATEGORY_ALL);
    }
    for field in [
        "plural",
        "singular",
        "kind",
        "listKind",
        "shortNames",
        "categories",
    ] {
        let (a, b) = (&names[field], &installed["spec"]["names"][field]);
        if a != b {
            found.push(format!("names.{field}: original {a}, installed {b}"));
        }
    }
    let mut kept = vec!["/subresources/status", "/selectableFields"];
    if source == Source::Crd {
        kept.extend(["/subresources/scale", "/additionalPrinterColumns"]);
    }
    for version in installed["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = version["name"].as_str().unwrap_or_default();
        if version["served"] != json!(true) {
            continue;
        }
        let Some(schema) = schema_of(original, name) else {
            found.push(format!("{name}: a version the provider does not have"));
            continue;
        };
        let provider_version = original["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == name);
        for pointer in &kept {
            let a = provider_version.and_then(|v| v.pointer(pointer));
            let b = version.pointer(pointer);
            if a != b {
                found.push(format!(
                    "{name}: {pointer}: original {a:?}, installed {b:?}"
                ));
            }
        }
        let synthesized = &version["schema"]["openAPIV3Schema"];
        found.extend(
            differences(&schema, synthesized)
                .iter()
                .map(|d| format!("{name}: {d}")),
        );
    }
    Ok(found)
}

/// Paths at which two JSON values differ (at most a few, for a table cell).
fn differing_paths(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for key in keys {
                let child = format!("{path}.{key}");
                match (x.get(key), y.get(key)) {
                    (Some(p), Some(q)) => differing_paths(p, q, &child, out),
                    _ => out.push(child),
                }
            }
        }
        _ if a != b => out.push(path.to_owned()),
        _ => {}
    }
}

/// Creates the examples on `consumer` (namespaced ones in `source`'s namespace), binds their
/// APIs (a Binding there, a ClusterBinding for the cluster-scoped ones), and waits for each
/// provider copy to carry the consumer's spec.
async fn run_examples(
    consumer: &Client,
    provider: &Client,
    source: Source,
    examples: &[Matched<'_>],
) -> Result<Vec<(String, ExampleOutcome)>> {
    let namespace = source.namespace();
    ensure_namespace(consumer, namespace).await?;
    // The APIs of the namespaced (or cluster-scoped) examples, if any.
    let listed = |namespaced: bool| -> Result<Option<BindingSpec>> {
        let mut apis: Vec<&str> = examples
            .iter()
            .filter(|m| m.namespaced == namespaced)
            .map(|m| m.api.as_str())
            .collect();
        apis.sort_unstable();
        apis.dedup();
        if apis.is_empty() {
            return Ok(None);
        }
        let apis: Vec<Value> = apis.iter().map(|a| json!({ "name": a })).collect();
        let spec = json!({"connectionRef": {"name": connection_name(source)}, "apis": apis});
        Ok(Some(serde_json::from_value(spec)?))
    };
    if let Some(spec) = listed(true)? {
        let bindings: Api<Binding> = Api::namespaced(consumer.clone(), namespace);
        let binding = Binding::new("corpus", spec);
        bindings.create(&PostParams::default(), &binding).await?;
    }
    if let Some(spec) = listed(false)? {
        let cluster_bindings: Api<ClusterBinding> = Api::all(consumer.clone());
        let binding = ClusterBinding::new(namespace, spec.into());
        cluster_bindings
            .create(&PostParams::default(), &binding)
            .await?;
    }

    let mut outcomes = Vec::new();
    let mut waiting = Vec::new();
    for (i, matched) in examples.iter().enumerate() {
        let described = matched.example.describe();
        let objects = matched.api(consumer, namespace);
        match objects
            .create(&PostParams::default(), &matched.object(source)?)
            .await
        {
            Ok(created) => waiting.push((i, described, matched, created)),
            Err(e) => outcomes.push((i, (described, ExampleOutcome::Refused(e.to_string())))),
        }
    }
    let began = Instant::now();
    for (i, described, matched, created) in waiting {
        let copies = matched.api(provider, namespace);
        let spec = created.data["spec"].clone();
        let outcome = loop {
            let copy = copies.get_opt(&created.name_any()).await?;
            let mismatch = match &copy {
                Some(copy) => {
                    let mut paths = Vec::new();
                    differing_paths(&spec, &copy.data["spec"], ".spec", &mut paths);
                    paths
                }
                None => vec!["no provider copy".to_owned()],
            };
            if mismatch.is_empty() {
                break ExampleOutcome::SameSpec;
            }
            if began.elapsed() > SYNC {
                break ExampleOutcome::Differs(mismatch.join(", "));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        outcomes.push((i, (described, outcome)));
    }
    // In the order of `examples`.
    outcomes.sort_by_key(|(i, _)| *i);
    Ok(outcomes.into_iter().map(|(_, o)| o).collect())
}

/// Checks each example against the provider's own CRD (a server-side dry run): an example it
/// refuses is a fixture to fix.
async fn invalid_fixtures(provider: &Client, examples: &[Matched<'_>]) -> Result<Vec<String>> {
    let namespace = "corpus-fixtures";
    ensure_namespace(provider, namespace).await?;
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let mut invalid = Vec::new();
    for matched in examples {
        let objects = matched.api(provider, namespace);
        let object: DynamicObject = serde_json::from_value(matched.example.object.clone())?;
        if let Err(e) = objects.create(&dry_run, &object).await {
            let example = matched.example;
            invalid.push(format!("{} ({}): {e}", example.describe(), example.project));
        }
    }
    Ok(invalid)
}

/// The whole corpus run, on the binary's own pair and second consumer.
pub(super) async fn run_corpus() -> Result<Corpus> {
    let started = Instant::now();
    let corpus = load_corpus()?;
    let examples = load_examples()?;
    eprintln!(
        "corpus: {} CRDs, {} examples loaded in {:?}",
        corpus.len(),
        examples.len(),
        started.elapsed()
    );
    let pair = shared_pair()?;
    let provider = pair.provider.client().await?;
    let consumers = [
        (Source::Crd, pair.consumer.client().await?),
        (Source::OpenApi, second_consumer()?.client().await?),
    ];
    shared_konnector(pair)?;
    let second: Konnector = start_konnector(second_consumer()?)?;
    eprintln!(
        "corpus: clusters and konnectors up at {:?}",
        started.elapsed()
    );

    let provider_refused = install_on_provider(&provider, &corpus).await?;
    let (corpus, refused): (Vec<CorpusCrd>, Vec<CorpusCrd>) = corpus
        .into_iter()
        .partition(|c| !provider_refused.contains_key(&c.name));
    let provider_refused: Vec<(String, String, String)> = refused
        .into_iter()
        .map(|c| {
            let why = provider_refused.get(&c.name).cloned().unwrap_or_default();
            (c.project, c.name, why)
        })
        .collect();
    eprintln!(
        "corpus: provider CRDs Established at {:?}",
        started.elapsed()
    );
    for (source, consumer) in &consumers {
        connect_source(consumer, *source).await?;
    }
    let mut installed = BTreeMap::new();
    for (source, consumer) in &consumers {
        installed.insert(*source, installed_on(consumer, &corpus).await?);
        eprintln!(
            "corpus: {} consumer CRDs installed at {:?}",
            source.spelled(),
            started.elapsed()
        );
    }

    let mut matched = Vec::new();
    let mut unmatched_fixtures = Vec::new();
    for example in &examples {
        match resource_of(&corpus, example) {
            Some(found) => matched.push(found),
            None => {
                unmatched_fixtures.push(format!("{} ({})", example.describe(), example.project))
            }
        }
    }
    let invalid = invalid_fixtures(&provider, &matched).await?;
    let mut example_outcomes = BTreeMap::new();
    for (source, consumer) in &consumers {
        let outcomes = run_examples(consumer, &provider, *source, &matched).await?;
        example_outcomes.insert(*source, outcomes);
        eprintln!(
            "corpus: {} examples synced at {:?}",
            source.spelled(),
            started.elapsed()
        );
    }

    let mut rows = Vec::new();
    for c in &corpus {
        let mut sources = BTreeMap::new();
        for (source, consumer) in &consumers {
            let mut facts = SourceFacts::default();
            match installed[source].get(&c.name) {
                Some(crd) => facts.differences = schema_differences(&c.crd, crd, *source)?,
                None => facts.not_installed = Some(schema_message(consumer, *source).await),
            }
            for (m, outcome) in matched.iter().zip(&example_outcomes[source]) {
                if m.api == c.name {
                    facts.examples.push(outcome.clone());
                }
            }
            sources.insert(*source, facts);
        }
        let versions = c.crd["spec"]["versions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        rows.push(Row {
            project: c.project.clone(),
            name: c.name.clone(),
            scope: c.crd["spec"]["scope"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            versions: versions
                .iter()
                .map(|v| v["name"].as_str().unwrap_or_default().to_owned())
                .collect(),
            bytes: c.bytes,
            protected: is_protected_api(&c.name),
            printer_columns: versions
                .iter()
                .map(|v| v["additionalPrinterColumns"].as_array().map_or(0, Vec::len))
                .max()
                .unwrap_or(0),
            scale: versions
                .iter()
                .any(|v| v["subresources"]["scale"].is_object()),
            sources,
        });
    }
    second.stop().await?;
    let projects = {
        let mut p: Vec<&str> = corpus.iter().map(|c| c.project.as_str()).collect();
        p.dedup();
        p.len()
    };
    eprintln!("corpus: done at {:?}", started.elapsed());
    Ok(Corpus {
        projects,
        rows,
        provider_refused,
        invalid_fixtures: invalid,
        unmatched_fixtures,
    })
}
