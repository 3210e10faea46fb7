//! What `kubectl get` shows for the core kinds, checked on the real apiserver: the
//! server-side Table columns (Connections: Ready, Source, APIs, Age; bindings: Connection,
//! APIs, Ready, Synced, Conflicts, Age), short names that collide with no built-in resource
//! (`kubectl get binding` means core/v1 bindings), and the `kbind` category.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result, ensure};
use kbind_tests::fixtures::wait_ready;
use serde_json::{Value, json};

use super::{Cli, kubectl};

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const BINDING_COLUMNS: &str = "Name Connection APIs Ready Synced Conflicts Age";

/// GETs `path` below `core.kbind.io/v1alpha1` as a server-side `meta.k8s.io/v1` Table;
/// returns its default (priority 0) column names, space-separated, and its first row's cells
/// by column name (priority columns included, Age left out since it changes with time).
async fn table(client: &kube::Client, path: &str) -> Result<(String, Value)> {
    let path = format!("/apis/core.kbind.io/v1alpha1/{path}");
    let request = http::Request::get(&path).header(http::header::ACCEPT, TABLE);
    let response = client.request::<Value>(request.body(Vec::new())?);
    let table = response.await.with_context(|| format!("GET {path}"))?;
    let columns = &table["columnDefinitions"];
    let columns = columns.as_array().context("not a Table")?;
    let name = |i: usize| columns[i]["name"].as_str().unwrap_or_default().to_string();
    let defaults =
        (0..columns.len()).filter(|&i| columns[i]["priority"].as_i64().unwrap_or(0) == 0);
    let cells = table["rows"][0]["cells"].as_array().into_iter().flatten();
    let row = cells.enumerate().map(|(i, cell)| (name(i), cell.clone()));
    let row = row.filter(|(column, _)| column != "Age").collect();
    let defaults: Vec<_> = defaults.map(name).collect();
    Ok((defaults.join(" "), Value::Object(row)))
}

#[test]
fn printer_columns_render_server_side_for_every_kind() -> Result<()> {
    Cli::run("cols", async |c| {
        let api = c.api.name();
        c.connect(c.pair.provider.admin(), &["--schema-source", "CRD"])
            .await?;
        c.bind(&["-n", "cols"]).await?;

        let (columns, cells) = table(&c.consumer, "connections/cols").await?;
        assert_eq!(columns, "Name Ready Source APIs Age");
        // The provider is shared, so the Connection exports other tests' APIs too: the
        // column shows the first one its status lists.
        let status = wait_ready(&c.consumer, "cols").await?.status;
        let exported: Vec<_> = status.iter().flat_map(|s| &s.exported_apis).collect();
        ensure!(exported.iter().any(|a| a.name == api), "{api} not exported");
        let expected = json!({
            "Name": "cols", "Ready": "True", "Source": "CRD", "APIs": exported[0].name,
            "Secret": "cols-kubeconfig", // the wide column
        });
        assert_eq!(cells, expected, "the Connection's row");

        let binding = "namespaces/cols/bindings/widgets";
        // Synced is the binding's Synced condition: False (Pending) until the API's syncer
        // has listed its instances, then True; Conflicts an integer total, always present.
        let mut settled = None;
        for _ in 0..60 {
            let (columns, cells) = table(&c.consumer, binding).await?;
            if cells["Synced"] != "False" {
                settled = Some((columns, cells));
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        let (columns, cells) = settled.context("the binding's Synced stayed False for 30 s")?;
        assert_eq!(columns, BINDING_COLUMNS);
        let synced = cells["Synced"].clone();
        ensure!(synced.is_null() || synced == "True", "Synced {synced}");
        let expected = json!({
            "Name": "widgets", "Connection": "cols", "APIs": api, "Ready": "True",
            "Synced": synced, "Conflicts": 0,
        });
        assert_eq!(cells, expected, "the Binding's row");
        let (columns, _) = table(&c.consumer, "clusterbindings").await?;
        assert_eq!(columns, BINDING_COLUMNS);

        // kubectl itself: short names and the category resolve, the columns print.
        let kubectl = async |args| kubectl(&c.pair.consumer, args).await;
        let kb = kubectl(&["get", "kb", "-n", "cols"]).await?;
        let (header, upper) = (kb.lines().next(), BINDING_COLUMNS.to_uppercase());
        let same = header.is_some_and(|h| h.split_whitespace().eq(upper.split(' ')));
        assert!(same, "kubectl get kb:\n{kb}");
        let kconn = kubectl(&["get", "kconn", "cols"]).await?;
        ensure!(kconn.contains("CRD"), "kubectl get kconn:\n{kconn}");
        let all = kubectl(&["get", "kbind", "-A"]).await?;
        ensure!(all.contains("connection.core.kbind.io/cols"), "{all}");
        ensure!(all.contains("binding.core.kbind.io/widgets"), "{all}");

        c.ok(&["disconnect", "cols", "--cascade"], &[]).await?;
        Ok(())
    })
}

#[test]
fn short_names_collide_with_no_built_in_resource() -> Result<()> {
    Cli::run("short", async |c| {
        let client = &c.consumer;
        let mut lists = vec![client.list_core_api_resources("v1").await?];
        for group in client.list_api_groups().await?.groups {
            for version in &group.versions {
                let group_version = &version.group_version;
                lists.push(client.list_api_group_resources(group_version).await?);
            }
        }
        let (mut ours, mut others) = (BTreeMap::new(), Vec::new());
        for list in &lists {
            for r in list.resources.iter().filter(|r| !r.name.contains('/')) {
                let short = r.short_names.clone().unwrap_or_default();
                if list.group_version == "core.kbind.io/v1alpha1" {
                    ours.insert(r.name.clone(), (short, r.categories.clone()));
                } else {
                    let resource = format!("{}/{}", list.group_version, r.name);
                    others.extend(short.into_iter().map(|s| (s, resource.clone())));
                }
            }
        }
        let expected = json!({
            "bindings": [["kb", "kbinding"], ["kbind"]],
            "clusterbindings": [["kcb", "kclusterbinding"], ["kbind"]],
            "connections": [["kconn"], ["kbind"]],
        });
        assert_eq!(json!(ours), expected, "short names and categories");
        let taken = |s: &String| ours.values().any(|(names, _)| names.contains(s));
        let clashes: Vec<_> = others.iter().filter(|(s, _)| taken(s)).collect();
        assert!(clashes.is_empty(), "short names collide: {clashes:?}");
        Ok(())
    })
}
