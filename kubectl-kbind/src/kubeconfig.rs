//! Preparing a provider kubeconfig for a credential Secret, like `kubectl config view
//! --minify --flatten`: only the chosen context with its cluster and user, and certificate or
//! token files embedded, because the konnector refuses kubeconfigs that point at local files
//! (its Pod has none of them).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde_json::{Map, Value};

/// File fields and the embedded field each becomes.
const FILE_FIELDS: &[(&str, &str, bool)] = &[
    ("certificate-authority", "certificate-authority-data", true),
    ("client-certificate", "client-certificate-data", true),
    ("client-key", "client-key-data", true),
    ("tokenFile", "token", false),
];

/// Reads `path` and returns the minified, flattened kubeconfig for `context` (default: its
/// current context) as YAML.
pub fn prepare(path: &Path, context: Option<&str>) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading provider kubeconfig {}", path.display()))?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let doc: Value =
        serde_saphyr::from_str(&text).with_context(|| format!("{} is not YAML", path.display()))?;
    let out = minify_flatten(&doc, context, &|file| {
        let file = resolve(&base, file);
        std::fs::read(&file).with_context(|| format!("reading {}", file.display()))
    })?;
    Ok(serde_saphyr::to_string(&out)?)
}

fn resolve(base: &Path, file: &str) -> PathBuf {
    let p = PathBuf::from(file);
    if p.is_absolute() { p } else { base.join(p) }
}

/// The kubeconfig reduced to one context, its cluster and user, with file references
/// replaced by their contents (`read` gives a file's bytes).
pub fn minify_flatten(
    doc: &Value,
    context: Option<&str>,
    read: &dyn Fn(&str) -> anyhow::Result<Vec<u8>>,
) -> anyhow::Result<Value> {
    let context = match context {
        Some(c) => c.to_string(),
        None => doc["current-context"]
            .as_str()
            .filter(|c| !c.is_empty())
            .context(
                "the provider kubeconfig has no current-context (pick one with --provider-context)",
            )?
            .to_string(),
    };
    let entry = named(doc, "contexts", &context)
        .with_context(|| format!("the provider kubeconfig has no context {context:?}"))?;
    let cluster_name = entry["context"]["cluster"].as_str().unwrap_or_default();
    let user_name = entry["context"]["user"].as_str().unwrap_or_default();
    let mut cluster = named(doc, "clusters", cluster_name)
        .with_context(|| format!("context {context:?} names no existing cluster"))?
        .clone();
    let mut user = named(doc, "users", user_name)
        .with_context(|| format!("context {context:?} names no existing user"))?
        .clone();
    flatten(&mut cluster["cluster"], read)?;
    flatten(&mut user["user"], read)?;
    if user["user"].get("exec").is_some() || user["user"].get("auth-provider").is_some() {
        bail!(
            "user {user_name:?} authenticates with an exec or auth-provider plugin, which the konnector does not run: use a token or client-certificate kubeconfig (e.g. a service account token)"
        );
    }
    let mut out = Map::new();
    out.insert("apiVersion".into(), "v1".into());
    out.insert("kind".into(), "Config".into());
    out.insert("clusters".into(), Value::Array(vec![cluster]));
    out.insert("users".into(), Value::Array(vec![user]));
    out.insert("contexts".into(), Value::Array(vec![entry.clone()]));
    out.insert("current-context".into(), context.into());
    Ok(Value::Object(out))
}

fn named<'a>(doc: &'a Value, list: &str, name: &str) -> Option<&'a Value> {
    doc[list]
        .as_array()?
        .iter()
        .find(|e| e["name"].as_str() == Some(name))
}

fn flatten(
    section: &mut Value,
    read: &dyn Fn(&str) -> anyhow::Result<Vec<u8>>,
) -> anyhow::Result<()> {
    let Some(map) = section.as_object_mut() else {
        return Ok(());
    };
    for (file_key, data_key, encode) in FILE_FIELDS {
        let Some(file) = map.remove(*file_key) else {
            continue;
        };
        let file = file.as_str().unwrap_or_default();
        let bytes = read(file)?;
        let value = if *encode {
            base64(bytes)
        } else {
            String::from_utf8(bytes)
                .with_context(|| format!("token file {file} is not UTF-8"))?
                .trim()
                .to_string()
        };
        map.insert((*data_key).into(), value.into());
    }
    Ok(())
}

/// Base64 of a byte string, as kubeconfig `*-data` fields hold it (k8s-openapi's
/// `ByteString` serialises to exactly that).
fn base64(bytes: Vec<u8>) -> String {
    serde_json::to_value(k8s_openapi::ByteString(bytes))
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_CONTEXTS: &str = r#"
apiVersion: v1
kind: Config
current-context: provider
clusters:
- name: p
  cluster: {server: "https://p:6443", certificate-authority: ca.pem}
- name: other
  cluster: {server: "https://o:6443"}
users:
- name: admin
  user: {client-certificate: crt.pem, client-key-data: S0VZ}
- name: o
  user: {token: x}
contexts:
- name: provider
  context: {cluster: p, user: admin, namespace: kbind}
- name: other
  context: {cluster: other, user: o}
"#;

    fn fake_read(file: &str) -> anyhow::Result<Vec<u8>> {
        Ok(format!("contents of {file}").into_bytes())
    }

    #[test]
    fn only_the_current_context_is_kept_with_files_embedded() -> anyhow::Result<()> {
        let doc: Value = serde_saphyr::from_str(TWO_CONTEXTS)?;
        let out = minify_flatten(&doc, None, &fake_read)?;
        assert_eq!(out["current-context"], "provider");
        assert_eq!(out["clusters"].as_array().map(Vec::len), Some(1));
        assert_eq!(out["users"].as_array().map(Vec::len), Some(1));
        let cluster = &out["clusters"][0]["cluster"];
        assert!(cluster.get("certificate-authority").is_none());
        assert_eq!(
            cluster["certificate-authority-data"], "Y29udGVudHMgb2YgY2EucGVt",
            "base64 of the file"
        );
        let user = &out["users"][0]["user"];
        assert!(user["client-certificate-data"].is_string());
        assert_eq!(user["client-key-data"], "S0VZ", "embedded data is kept");
        assert_eq!(out["contexts"][0]["context"]["namespace"], "kbind");
        Ok(())
    }

    #[test]
    fn another_context_can_be_chosen() -> anyhow::Result<()> {
        let doc: Value = serde_saphyr::from_str(TWO_CONTEXTS)?;
        let out = minify_flatten(&doc, Some("other"), &fake_read)?;
        assert_eq!(out["clusters"][0]["name"], "other");
        assert_eq!(out["users"][0]["user"]["token"], "x");
        Ok(())
    }

    #[test]
    fn exec_plugins_are_refused_before_anything_is_stored() -> anyhow::Result<()> {
        let doc: Value = serde_saphyr::from_str(
            &TWO_CONTEXTS.replace("user: {token: x}", "user: {exec: {command: aws}}"),
        )?;
        assert!(minify_flatten(&doc, Some("other"), &fake_read).is_err());
        Ok(())
    }

    #[test]
    fn a_missing_context_is_an_error() -> anyhow::Result<()> {
        let doc: Value = serde_saphyr::from_str(TWO_CONTEXTS)?;
        assert!(minify_flatten(&doc, Some("nope"), &fake_read).is_err());
        Ok(())
    }
}
