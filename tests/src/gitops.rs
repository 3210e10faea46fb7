//! A GitOps tool's writes on the consumer, made by the real kubectl (the kube binary's, built
//! from `k8s.io/kubectl` with the control plane): server-side apply under the tool's own field
//! manager, as Argo CD and Flux apply, and client-side `kubectl apply` with its
//! `kubectl.kubernetes.io/last-applied-configuration` annotation and three-way merge patch.
//! And what `managedFields` says each writer owns, to show who writes what on one object.

use anyhow::{Context as _, bail};
use konnector::api::names::SYNCER_FINALIZER;
use kube::api::DynamicObject;
use serde_json::Value;
use tokio::io::AsyncWriteExt as _;
use tokio::process::Command;

use crate::testenv::{Cluster, kube_binary};

/// The field manager Argo CD applies with.
pub const ARGO_MANAGER: &str = "argocd-controller";
/// The field manager `kubectl apply` (client-side) records for what it writes.
pub const KUBECTL_CLIENT_SIDE_MANAGER: &str = "kubectl-client-side-apply";
/// The annotation client-side apply keeps the last applied manifest in.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Runs `kubectl <args>` against `cluster` as its admin with `stdin` as input; its stdout, or
/// an error carrying its stderr.
pub async fn kubectl(cluster: &Cluster, args: &[&str], stdin: &str) -> anyhow::Result<String> {
    let binary = kube_binary()?;
    let kubeconfig = cluster.admin().kubeconfig_path();
    let mut child = Command::new(&binary)
        .arg("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {} kubectl", binary.display()))?;
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin.as_bytes()).await?;
    }
    let output = child.wait_with_output().await?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        bail!(
            "kubectl {} failed ({}): {}{}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr),
            stdout
        );
    }
    Ok(stdout)
}

/// Server-side applies `manifest` as field manager `manager`, without `--force-conflicts`: a
/// field another manager owns with another value fails the apply, as it fails a GitOps sync.
pub async fn apply_server_side(
    cluster: &Cluster,
    manager: &str,
    manifest: &Value,
) -> anyhow::Result<String> {
    let manager = format!("--field-manager={manager}");
    let args = ["apply", "--server-side", &manager, "-f", "-"];
    kubectl(cluster, &args, &serde_json::to_string(manifest)?).await
}

/// Client-side applies `manifest` (`kubectl apply -f -`): the last-applied annotation and a
/// three-way merge patch.
pub async fn apply_client_side(cluster: &Cluster, manifest: &Value) -> anyhow::Result<String> {
    kubectl(
        cluster,
        &["apply", "-f", "-"],
        &serde_json::to_string(manifest)?,
    )
    .await
}

/// What `managedFields` says writers other than `gitops_manager` own on `obj` beyond what the
/// konnector may write on a consumer object (its finalizer, `core.kbind.io/` annotations, and
/// status through the status subresource), as `manager: field` lines: empty when nobody
/// fights the GitOps tool over its fields.
pub fn fields_beyond_konnector(obj: &DynamicObject, gitops_manager: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in obj.metadata.managed_fields.iter().flatten() {
        let manager = entry.manager.as_deref().unwrap_or("");
        if manager == gitops_manager || entry.subresource.as_deref() == Some("status") {
            continue;
        }
        let Some(fields) = entry.fields_v1.as_ref().map(|f| &f.0) else {
            continue;
        };
        for path in leaf_paths(fields, String::new()) {
            if !konnector_may_write(&path) {
                found.push(format!("{manager}: {path}"));
            }
        }
    }
    found
}

/// Which managers `managedFields` lists on `obj`, with the operation and subresource of each
/// entry (`manager Apply|Update [status]`).
pub fn managers(obj: &DynamicObject) -> Vec<String> {
    obj.metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|e| {
            let manager = e.manager.as_deref().unwrap_or("");
            let operation = e.operation.as_deref().unwrap_or("");
            match e.subresource.as_deref() {
                Some(sub) if !sub.is_empty() => format!("{manager} {operation} {sub}"),
                _ => format!("{manager} {operation}"),
            }
        })
        .collect()
}

fn konnector_may_write(path: &str) -> bool {
    path == format!("f:metadata.f:finalizers.v:\"{SYNCER_FINALIZER}\"")
        || path.starts_with("f:metadata.f:annotations.f:core.kbind.io/")
}

/// The leaves of a `fieldsV1` tree as dotted paths (`f:spec.f:replicas`); `.` entries (the
/// map itself) are not leaves.
fn leaf_paths(fields: &Value, prefix: String) -> Vec<String> {
    let Some(map) = fields.as_object() else {
        return vec![prefix];
    };
    let children: Vec<_> = map.iter().filter(|(k, _)| k.as_str() != ".").collect();
    if children.is_empty() {
        return vec![prefix];
    }
    children
        .into_iter()
        .flat_map(|(key, value)| {
            let path = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            leaf_paths(value, path)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn leaf_paths_name_each_owned_field() {
        let fields = json!({
            "f:metadata": { "f:finalizers": { ".": {}, "v:\"core.kbind.io/syncer\"": {} } },
            "f:spec": { "f:a": {}, "f:b": { "f:c": {} } },
        });
        let mut paths = leaf_paths(&fields, String::new());
        paths.sort();
        assert_eq!(
            paths,
            [
                "f:metadata.f:finalizers.v:\"core.kbind.io/syncer\"",
                "f:spec.f:a",
                "f:spec.f:b.f:c"
            ]
        );
        assert!(konnector_may_write(&paths[0]));
        assert!(!konnector_may_write(&paths[1]));
    }
}
