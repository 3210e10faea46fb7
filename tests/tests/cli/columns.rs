//! What `kubectl get` shows for the core kinds, checked on the real apiserver: the
//! server-side Table columns (Connections: Ready, Source, APIs, Age; bindings: Connection,
//! APIs, Ready, Synced, Conflicts, Age), short names that collide with no built-in resource
//! (`kubectl get binding` means core/v1 bindings), and the `kbind` category.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result, ensure};
use kbind_tests::fixtures::{install_crd, widget_crd};
use konnector::api::Connection;
use kube::Api;
use serde_json::Value;

use super::{bind, connect, diagnose, disconnect, setup};

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

/// GETs `path` as a server-side `meta.k8s.io/v1` Table.
async fn table(client: &kube::Client, path: &str) -> Result<Value> {
    let request = http::Request::get(path)
        .header(http::header::ACCEPT, TABLE)
        .body(Vec::new())?;
    let table: Value = client
        .request(request)
        .await
        .with_context(|| format!("GET {path} as Table"))?;
    ensure!(table["kind"] == "Table", "not a Table: {table}");
    Ok(table)
}

fn column_names(table: &Value) -> Vec<String> {
    table["columnDefinitions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["priority"].as_i64().unwrap_or(0) == 0)
        .filter_map(|c| c["name"].as_str().map(String::from))
        .collect()
}

/// The first row's cells by column name (priority columns included).
fn row(table: &Value) -> Result<BTreeMap<String, Value>> {
    let names: Vec<String> = table["columnDefinitions"]
        .as_array()
        .context("no columnDefinitions")?
        .iter()
        .filter_map(|c| c["name"].as_str().map(String::from))
        .collect();
    let cells = table["rows"][0]["cells"].as_array().context("no row")?;
    Ok(names.into_iter().zip(cells.iter().cloned()).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn printer_columns_render_server_side_for_every_kind() -> Result<()> {
    let pair = setup().await?;
    let group = "cols.e2e.kbind.io";
    let api = format!("panels.{group}");
    diagnose(pair, async {
        let provider = pair.provider.client().await?;
        let consumer = pair.consumer.client().await?;
        install_crd(&provider, &widget_crd(group, "Panel", true)?).await?;
        let kubeconfig = pair.provider.admin().kubeconfig_path();
        connect(pair, "cols", kubeconfig, &["--schema-source", "CRD"]).await?;
        bind(pair, &api, "cols", &["-n", "cols-ns"]).await?;

        let connection = table(&consumer, "/apis/core.kbind.io/v1alpha1/connections/cols").await?;
        assert_eq!(
            column_names(&connection),
            ["Name", "Ready", "Source", "APIs", "Age"]
        );
        let cells = row(&connection)?;
        assert_eq!(cells["Ready"], "True");
        assert_eq!(cells["Source"], "CRD");
        // The provider is shared, so the Connection exports other tests' APIs too: the
        // column shows the first one its status lists.
        let status = Api::<Connection>::all(consumer.clone())
            .get("cols")
            .await?
            .status
            .context("no status")?;
        ensure!(
            status.exported_apis.iter().any(|a| a.name == api),
            "{api} exported"
        );
        let first = status
            .exported_apis
            .first()
            .map(|a| a.name.clone())
            .unwrap_or_default();
        assert_eq!(cells["APIs"], Value::String(first));
        assert_eq!(cells["Secret"], "cols-kubeconfig", "the wide column");

        let binding = table(
            &consumer,
            "/apis/core.kbind.io/v1alpha1/namespaces/cols-ns/bindings/panels",
        )
        .await?;
        let binding_columns = [
            "Name",
            "Connection",
            "APIs",
            "Ready",
            "Synced",
            "Conflicts",
            "Age",
        ];
        assert_eq!(column_names(&binding), binding_columns);
        let cells = row(&binding)?;
        assert_eq!(cells["Connection"], "cols");
        assert_eq!(cells["APIs"], Value::String(api.clone()));
        assert_eq!(cells["Ready"], "True");
        assert_eq!(cells["Conflicts"], 0, "an integer total, always present");
        ensure!(
            cells["Synced"].is_null() || cells["Synced"] == "True",
            "Synced is the binding's Synced condition: {}",
            cells["Synced"]
        );
        let cluster = table(&consumer, "/apis/core.kbind.io/v1alpha1/clusterbindings").await?;
        assert_eq!(column_names(&cluster), binding_columns);

        // kubectl itself: short names and the category resolve, the columns print.
        let kube = kbind_tests::testenv::kube_binary()?;
        let kubectl = |args: &[&str]| -> Result<String> {
            let out = std::process::Command::new(&kube)
                .arg("kubectl")
                .arg("--kubeconfig")
                .arg(pair.consumer.admin().kubeconfig_path())
                .args(args)
                .output()?;
            ensure!(
                out.status.success(),
                "kubectl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        };
        let kb = kubectl(&["get", "kb", "-n", "cols-ns"])?;
        ensure!(
            kb.lines()
                .next()
                .is_some_and(|h| h.split_whitespace().collect::<Vec<_>>()
                    == [
                        "NAME",
                        "CONNECTION",
                        "APIS",
                        "READY",
                        "SYNCED",
                        "CONFLICTS",
                        "AGE"
                    ]),
            "kubectl get kb:\n{kb}"
        );
        ensure!(
            kubectl(&["get", "kconn", "cols"])?.contains("CRD"),
            "kubectl get kconn"
        );
        let all = kubectl(&["get", "kbind", "-A"])?;
        ensure!(
            all.contains("connection.core.kbind.io/cols")
                && all.contains("binding.core.kbind.io/panels"),
            "kubectl get kbind -A:\n{all}"
        );

        disconnect(pair, "cols", &["--cascade"]).await?;
        anyhow::Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_names_collide_with_no_built_in_resource() -> Result<()> {
    let pair = setup().await?;
    diagnose(pair, async {
        let client = pair.consumer.client().await?;
        let mut lists = vec![client.list_core_api_resources("v1").await?];
        for group in client.list_api_groups().await?.groups {
            for version in &group.versions {
                lists.push(
                    client
                        .list_api_group_resources(&version.group_version)
                        .await?,
                );
            }
        }
        let mut ours: BTreeMap<String, (Vec<String>, Vec<String>)> = BTreeMap::new();
        let mut others: Vec<(String, String)> = Vec::new();
        for list in &lists {
            for r in &list.resources {
                let short = r.short_names.clone().unwrap_or_default();
                if list.group_version == "core.kbind.io/v1alpha1" {
                    ours.insert(
                        r.name.clone(),
                        (short, r.categories.clone().unwrap_or_default()),
                    );
                } else {
                    others.extend(
                        short
                            .into_iter()
                            .map(|s| (s, format!("{}/{}", list.group_version, r.name))),
                    );
                }
            }
        }
        let expect = [
            ("connections", vec!["kconn"]),
            ("bindings", vec!["kb", "kbinding"]),
            ("clusterbindings", vec!["kcb", "kclusterbinding"]),
        ];
        for (resource, short) in expect {
            let (names, categories) = ours
                .get(resource)
                .with_context(|| format!("{resource} not served: {ours:?}"))?;
            assert_eq!(names, &short, "{resource} short names");
            assert!(
                categories.iter().any(|c| c == "kbind"),
                "{resource} is in category kbind"
            );
            for name in names {
                let clash: Vec<_> = others.iter().filter(|(s, _)| s == name).collect();
                assert!(clash.is_empty(), "{name} collides with {clash:?}");
            }
        }
        anyhow::Ok(())
    })
    .await
}
