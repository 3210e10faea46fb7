//! `kubectl kbind disconnect NAME`: the documented teardown of a Connection. Explicit
//! bindings must go first (the Connection never deletes them and would wait with
//! `DrainingBindings`): without `--cascade` their unbind commands are printed and nothing is
//! deleted; with it they are unbound in order. Then the Connection is deleted and followed
//! until its finalizer is released, then its credential Secret, unless another Connection
//! still uses it or `connect` did not create it (a Secret somebody made by hand is theirs).
//! A plan whose bindings' teardown deletes a consumer CRD (the autoBind ClusterBinding the
//! Connection deletes included) needs `--yes`; `--dry-run` prints the plan and what it deletes.

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, ResourceExt};

use konnector::api::names::CLEANUP_FINALIZER;
use konnector::api::{ConditionType, Connection};

use crate::args::WaitArgs;
use crate::client::ClientArgs;
use crate::commands::unbind::{crds_deleted, list_bindings, name_crds, teardown};
use crate::exit::NotReady;
use crate::hints;
use crate::marks::{CREATED_BY_LABEL, FIELD_MANAGER, created_by_connect};
use crate::output::{self, progress};
use crate::plan::teardown::{DisconnectInput, Step, deleted_by, describe, plan_disconnect};
use crate::wait::{self, Check, Outcome};

/// Flags of `disconnect`.
#[derive(clap::Args, Debug)]
pub struct DisconnectArgs {
    /// Name of the Connection.
    pub name: String,
    /// Unbind the Connection's explicit bindings first (Bindings, then ClusterBindings).
    #[arg(long)]
    pub cascade: bool,
    /// Confirm deleting consumer CRDs that the plan's ClusterBindings take with them (a
    /// cascaded unbind, or the autoBind ClusterBinding the Connection deletes).
    #[arg(long)]
    pub yes: bool,
    /// Leave the credential Secret in place.
    #[arg(long)]
    pub keep_secret: bool,
    /// Succeed when the Connection does not exist.
    #[arg(long)]
    pub ignore_not_found: bool,
    /// Print the plan (its steps in order, and the consumer CRDs it deletes) and change
    /// nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Waiting.
    #[command(flatten)]
    pub wait: WaitArgs,
}

/// Runs `disconnect`.
pub async fn run(client: &ClientArgs, args: DisconnectArgs) -> anyhow::Result<()> {
    let target = client.connect().await?;
    let consumer = target.client;
    let connections = Api::<Connection>::all(consumer.clone());
    let all_connections = connections.list(&ListParams::default()).await?.items;
    let Some(connection) = all_connections.iter().find(|c| c.name_any() == args.name) else {
        if args.ignore_not_found {
            return Ok(());
        }
        bail!("Connection {} not found", args.name);
    };
    let secret = &connection.spec.kubeconfig_secret_ref;
    let secret_users: Vec<String> = all_connections
        .iter()
        .filter(|c| c.name_any() != args.name && c.metadata.deletion_timestamp.is_none())
        .filter(|c| {
            c.spec.kubeconfig_secret_ref.namespace == secret.namespace
                && c.spec.kubeconfig_secret_ref.name == secret.name
        })
        .map(|c| c.name_any())
        .collect();
    let bindings = list_bindings(&consumer).await?;
    let input = DisconnectInput {
        connection: &args.name,
        auto_bind: connection.spec.auto_bind,
        secret: (&secret.namespace, &secret.name),
        bindings: &bindings,
        secret_users: &secret_users,
        cascade: args.cascade,
        keep_secret: args.keep_secret,
    };
    let plan = plan_disconnect(&input).map_err(|blocked| NotReady(blocked.to_string()))?;
    // Asked of every binding the plan deletes: one already deleting was not this command's
    // decision, but whether the CRD survives it still depends on the others.
    let deleted = deleted_by(&input, &plan);
    let removed = crds_deleted(&consumer, &deleted).await?;
    // Only the deletions this command starts need confirming.
    let confirm: Vec<&String> = removed
        .iter()
        .filter(|(_, b)| !b.deleting)
        .map(|(api, _)| api)
        .collect();
    if args.dry_run {
        println!("dry run, nothing changed; the plan:");
        for line in describe(&plan) {
            println!("  {line}");
        }
        super::unbind::print_crds_deleted(&removed);
        return Ok(());
    }
    if !args.yes && !confirm.is_empty() {
        return Err(NotReady(format!(
            "disconnecting deletes the consumer CRDs of {} and every instance of them ({}). Pass --yes to go ahead, or --dry-run to see the plan.",
            confirm.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
            name_crds(&removed)
        ))
        .into());
    }
    for step in &plan {
        execute(&consumer, step, args.wait).await?;
    }
    Ok(())
}

async fn execute(consumer: &Client, step: &Step, wait: WaitArgs) -> anyhow::Result<()> {
    match step {
        Step::Unbind(binding) => teardown(consumer, binding, wait).await,
        Step::DeleteConnection(name) => delete_connection(consumer, name, wait).await,
        Step::KeepSecret {
            namespace,
            name,
            used_by,
        } => {
            progress(format!(
                "secret/{name} (namespace {namespace}) kept: still used by Connection(s) {}",
                used_by.join(", ")
            ));
            Ok(())
        }
        Step::DeleteSecret { namespace, name } => {
            delete_secret(consumer, namespace, name, wait).await
        }
    }
}

async fn delete_connection(consumer: &Client, name: &str, wait: WaitArgs) -> anyhow::Result<()> {
    let api = Api::<Connection>::all(consumer.clone());
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(e) if konnector::k8s::ApiErrorExt::is_not_found(&e) => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("deleting Connection {name}")),
    }
    progress(format!("connection.core.kbind.io/{name} deleting"));
    if !wait.wait {
        return Ok(());
    }
    let outcome = wait::until(wait.timeout, || async {
        Ok(match api.get_opt(name).await? {
            None => Check::Done(()),
            Some(c) => {
                let conds = c.status.map(|s| s.conditions).unwrap_or_default();
                Check::Waiting(format!(
                    "{}; finalizers left: {}",
                    output::summary(&conds, ConditionType::Ready),
                    c.metadata.finalizers.unwrap_or_default().join(", ")
                ))
            }
        })
    })
    .await?;
    match outcome {
        Outcome::Done(()) => {
            println!("connection.core.kbind.io/{name} deleted");
            Ok(())
        }
        Outcome::Failed(last) | Outcome::TimedOut(last) => {
            let conds = api
                .get_opt(name)
                .await?
                .and_then(|c| c.status)
                .map(|s| s.conditions)
                .unwrap_or_default();
            Err(NotReady(format!(
                "Connection {name} is still being deleted ({last}):\n{}",
                if conds.is_empty() {
                    format!("  the konnector has not reported: is it running? Nothing else releases {CLEANUP_FINALIZER}\n")
                } else {
                    hints::explain(&conds)
                }
            ))
            .into())
        }
    }
}

async fn delete_secret(
    consumer: &Client,
    namespace: &str,
    name: &str,
    wait: WaitArgs,
) -> anyhow::Result<()> {
    let api = Api::<Secret>::namespaced(consumer.clone(), namespace);
    match api.get_opt(name).await? {
        None => return Ok(()),
        Some(secret) if !created_by_connect(&secret) => {
            progress(format!(
                "secret/{name} (namespace {namespace}) kept: `kubectl kbind connect` did not create it (no label {CREATED_BY_LABEL}={FIELD_MANAGER}); delete it yourself once no Connection uses it"
            ));
            return Ok(());
        }
        Some(_) => {}
    }
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(e) if konnector::k8s::ApiErrorExt::is_not_found(&e) => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("deleting Secret {namespace}/{name}")),
    }
    progress(format!("secret/{name} (namespace {namespace}) deleting"));
    if !wait.wait {
        return Ok(());
    }
    let outcome = wait::until(wait.timeout, || async {
        Ok(match api.get_opt(name).await? {
            None => Check::Done(()),
            Some(s) => Check::Waiting(format!("finalizers left: {}", s.finalizers().join(", "))),
        })
    })
    .await?;
    match outcome {
        Outcome::Done(()) => {
            println!("secret/{name} deleted");
            Ok(())
        }
        Outcome::Failed(last) | Outcome::TimedOut(last) => Err(NotReady(format!(
            "Secret {namespace}/{name} is still there ({last}): the last Connection using it releases {CLEANUP_FINALIZER} when its teardown ends; finish those Connections first"
        ))
        .into()),
    }
}
