//! `kubectl kbind unbind NAME [-n NS | --cluster]`: deletes a Binding or ClusterBinding and
//! follows its drain (instances still carrying `core.kbind.io/syncer`, finalizers left on the
//! binding) until it is gone; after `--timeout` it says why it is stuck and what to do.
//!
//! Deleting the last ClusterBinding of an API deletes the consumer CRD and every instance of
//! it, so that needs `--yes`. Which CRDs a deletion deletes is the konnector's own teardown
//! rule, asked through [`crds_deleted`]: the CLI asks exactly when the controller will delete.
//! `--dry-run` prints what would be deleted and changes nothing.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context as _, bail};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, ResourceExt};

use konnector::api::names::{MANAGED_LABEL, SYNCER_FINALIZER};
use konnector::api::{Binding, ClusterBinding, ConditionType, Connection};

use crate::args::WaitArgs;
use crate::binding::{BindingObject, api_names, conditions};
use crate::client::ClientArgs;
use crate::commands::status::CrdCache;
use crate::exit::NotReady;
use crate::output::{self, progress};
use crate::plan::drain::{Blocker, DrainState};
use crate::plan::teardown::{BindingRef, Kind};
use crate::wait::{self, Check, Outcome};

/// Flags of `unbind`.
#[derive(clap::Args, Debug)]
pub struct UnbindArgs {
    /// Name of the Binding (or ClusterBinding with --cluster).
    pub name: String,
    /// Unbind a ClusterBinding.
    #[arg(long)]
    pub cluster: bool,
    /// Confirm deleting consumer CRDs (and every instance) that the last ClusterBinding of an
    /// API takes with it.
    #[arg(long)]
    pub yes: bool,
    /// Succeed when the binding does not exist.
    #[arg(long)]
    pub ignore_not_found: bool,
    /// Print what would be deleted (the binding, and the consumer CRDs its teardown takes
    /// with it) and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Waiting.
    #[command(flatten)]
    pub wait: WaitArgs,
}

/// The consumer CRDs (each with every instance of its API) that deleting `deleted` deletes,
/// each with the ClusterBinding whose teardown deletes it: the konnector's own teardown rule
/// over the bindings left, their per-API state, the CRDs' pins and the Connections that exist.
pub async fn crds_deleted(
    client: &Client,
    deleted: &[BindingRef],
) -> anyhow::Result<BTreeMap<String, BindingRef>> {
    let apis: BTreeSet<String> = deleted
        .iter()
        .flat_map(|b| b.apis.iter().cloned())
        .collect();
    let consumer = konnector::binding::read_teardown_facts(client, &apis)
        .await
        .context("reading the bindings, Connections and CRDs a teardown decides on")?;
    let keys = deleted.iter().map(BindingRef::key).collect();
    let by = |key: &konnector::registry::BindingKey| deleted.iter().find(|b| b.key() == *key);
    Ok(consumer
        .crds_deleted(&keys)
        .into_iter()
        .filter_map(|(api, key)| Some((api, by(&key)?.clone())))
        .collect())
}

/// "widgets.example.org (with ClusterBinding cb)" for each CRD in `crds`.
pub fn name_crds(crds: &BTreeMap<String, BindingRef>) -> String {
    crds.iter()
        .map(|(api, b)| format!("{api} (with {b})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The dry run's last line: which consumer CRDs (and so every instance of them) the plan
/// deletes.
pub fn print_crds_deleted(removed: &BTreeMap<String, BindingRef>) {
    if removed.is_empty() {
        println!("deletes no consumer CRD");
    } else {
        println!(
            "deletes the consumer CRDs, and every instance of them: {}",
            name_crds(removed)
        );
    }
}

fn reference<B: BindingObject>(b: &B, kind: Kind) -> BindingRef {
    BindingRef {
        kind,
        namespace: b.meta().namespace.clone(),
        name: b.name_any(),
        connection: b.binding_spec().connection_ref.name.clone(),
        apis: api_names(b),
        deleting: b.meta().deletion_timestamp.is_some(),
        managed: b.labels().get(MANAGED_LABEL).is_some_and(|v| v == "true"),
    }
}

/// Every Binding and ClusterBinding on the consumer.
pub async fn list_bindings(client: &Client) -> anyhow::Result<Vec<BindingRef>> {
    let lp = ListParams::default();
    let mut all: Vec<BindingRef> = Api::<Binding>::all(client.clone())
        .list(&lp)
        .await?
        .items
        .iter()
        .map(|b| reference(b, Kind::Binding))
        .collect();
    all.extend(
        Api::<ClusterBinding>::all(client.clone())
            .list(&lp)
            .await?
            .items
            .iter()
            .map(|b| reference(b, Kind::ClusterBinding)),
    );
    Ok(all)
}

/// Runs `unbind`.
pub async fn run(client: &ClientArgs, args: UnbindArgs) -> anyhow::Result<()> {
    if args.cluster && client.namespace.is_some() {
        return Err(crate::exit::UsageError(
            "-n and --cluster exclude each other: a ClusterBinding has no namespace".into(),
        )
        .into());
    }
    let target = client.connect().await?;
    let all = list_bindings(&target.client).await?;
    let (kind, namespace) = if args.cluster {
        (Kind::ClusterBinding, None)
    } else {
        (Kind::Binding, Some(target.namespace.clone()))
    };
    let Some(binding) = all
        .iter()
        .find(|b| b.kind == kind && b.namespace == namespace && b.name == args.name)
        .cloned()
    else {
        if args.ignore_not_found {
            return Ok(());
        }
        bail!(
            "{kind} {}{} not found",
            namespace.map(|ns| format!("{ns}/")).unwrap_or_default(),
            args.name
        );
    };
    let removed = if binding.deleting {
        BTreeMap::new()
    } else {
        crds_deleted(&target.client, std::slice::from_ref(&binding)).await?
    };
    if args.dry_run {
        println!("dry run, nothing changed: would delete {binding} and follow its teardown");
        print_crds_deleted(&removed);
        return Ok(());
    }
    if !removed.is_empty() {
        let names = removed.keys().cloned().collect::<Vec<_>>().join(", ");
        if !args.yes {
            return Err(NotReady(format!(
                "{binding} is the last binding of {names} that counts: its teardown deletes those consumer CRDs and every instance of them (their provider copies are drained first). Pass --yes to go ahead, --dry-run to see the plan, or bind them elsewhere first."
            ))
            .into());
        }
        progress(format!(
            "warning: deleting the consumer CRDs of {names} with {binding}"
        ));
    }
    teardown(&target.client, &binding, args.wait).await
}

/// Deletes `binding` and, with `--wait`, follows its drain until it is gone.
pub async fn teardown(client: &Client, binding: &BindingRef, wait: WaitArgs) -> anyhow::Result<()> {
    let params = DeleteParams::default();
    let deleted = match (binding.kind, &binding.namespace) {
        (Kind::Binding, Some(ns)) => Api::<Binding>::namespaced(client.clone(), ns)
            .delete(&binding.name, &params)
            .await
            .map(|_| ()),
        _ => Api::<ClusterBinding>::all(client.clone())
            .delete(&binding.name, &params)
            .await
            .map(|_| ()),
    };
    match deleted {
        Ok(()) => {}
        Err(e) if konnector::k8s::ApiErrorExt::is_not_found(&e) => {}
        Err(e) => return Err(e).with_context(|| format!("deleting {binding}")),
    }
    progress(format!("{binding} deleting"));
    if !wait.wait {
        return Ok(());
    }
    let outcome = wait::until(wait.timeout, || async {
        Ok(match drain_state(client, binding).await? {
            None => Check::Done(()),
            Some(state) => Check::Waiting(state.progress()),
        })
    })
    .await?;
    match outcome {
        Outcome::Done(()) => {
            println!("{binding} deleted");
            Ok(())
        }
        Outcome::Failed(why) | Outcome::TimedOut(why) => {
            let state = drain_state(client, binding).await?.unwrap_or_default();
            Err(NotReady(format!(
                "{binding} is still being torn down after {} ({why}). Why, and what to do:\n{}",
                humantime::format_duration(wait.timeout),
                state.explain_blocked()
            ))
            .into())
        }
    }
}

/// What the deleting binding still waits for, or `None` once it is gone.
async fn drain_state(client: &Client, binding: &BindingRef) -> anyhow::Result<Option<DrainState>> {
    let (finalizers, drained, teardown_failed) = match (binding.kind, &binding.namespace) {
        (Kind::Binding, Some(ns)) => match Api::<Binding>::namespaced(client.clone(), ns)
            .get_opt(&binding.name)
            .await?
        {
            None => return Ok(None),
            Some(b) => (b.finalizers().to_vec(), drained_false(&b), blocker(&b)),
        },
        _ => match Api::<ClusterBinding>::all(client.clone())
            .get_opt(&binding.name)
            .await?
        {
            None => return Ok(None),
            Some(b) => (b.finalizers().to_vec(), drained_false(&b), blocker(&b)),
        },
    };
    let connection_ready = Api::<Connection>::all(client.clone())
        .get_opt(&binding.connection)
        .await?
        .and_then(|c| c.status)
        .is_some_and(|s| output::is_true(&s.conditions, ConditionType::Ready));
    let mut crds = CrdCache::new(client);
    let mut state = DrainState {
        finalizers,
        connection_ready,
        drained_false: drained,
        teardown_failed,
        ..DrainState::default()
    };
    for api in &binding.apis {
        let items = crds
            .instances(api, binding.namespace.as_deref())
            .await?
            .unwrap_or_default();
        let held: Vec<_> = items
            .iter()
            .filter(|o| o.finalizers().iter().any(|f| f == SYNCER_FINALIZER))
            .collect();
        state
            .examples
            .extend(held.iter().take(3).map(|o| match o.namespace() {
                Some(ns) => format!("{ns}/{}", o.name_any()),
                None => o.name_any(),
            }));
        state.instances_left.push((api.clone(), held.len()));
    }
    Ok(Some(state))
}

fn drained_false<B: BindingObject>(b: &B) -> Option<String> {
    output::condition(conditions(b), ConditionType::Drained)
        .filter(|c| c.status == "False")
        .map(|c| c.reason.clone())
}

/// The binding's `TeardownFailed` condition while True: the step its last teardown attempt
/// failed at.
fn blocker<B: BindingObject>(b: &B) -> Option<Blocker> {
    output::condition(conditions(b), ConditionType::TeardownFailed)
        .filter(|c| c.status == "True")
        .map(|c| Blocker {
            reason: c.reason.clone(),
            message: c.message.clone(),
        })
}
