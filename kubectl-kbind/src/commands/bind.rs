//! `kubectl kbind bind API... --connection NAME [-n NS | --cluster]`: creates a Binding (in a
//! namespace) or a ClusterBinding (every namespace) and waits until it is `Ready`. It checks
//! first that the Connection exists and, once it has discovered its exports, that it exports
//! every API asked for, so a typo fails at once instead of at `--timeout`.

use anyhow::{Context as _, bail};
use kube::Api;
use kube::api::PostParams;

use konnector::api::{
    ApiReference, Binding, BindingSpec, ClusterBinding, ConditionType, ConflictPolicy, Connection,
    ConnectionReference, RelatedResource,
};

use crate::args::{OutputArgs, WaitArgs, parse_related};
use crate::binding::{BindingObject, conditions, kind};
use crate::client::ClientArgs;
use crate::exit::{NotReady, UsageError};
use crate::hints;
use crate::marks::FIELD_MANAGER;
use crate::output::{self, progress};
use crate::wait::{self, Check, Outcome};

/// Flags of `bind`.
#[derive(clap::Args, Debug)]
pub struct BindArgs {
    /// Exported APIs to bind, as `<plural>.<group>` (e.g. widgets.example.org).
    #[arg(required = true, value_name = "API")]
    pub apis: Vec<String>,
    /// The Connection whose provider serves the APIs.
    #[arg(long, value_name = "NAME")]
    pub connection: String,
    /// Create a ClusterBinding (every namespace and cluster-scoped objects) instead of a
    /// Binding in the namespace.
    #[arg(long)]
    pub cluster: bool,
    /// What to do with a provider object that exists without this consumer's markers.
    #[arg(long, value_enum, default_value_t = Policy::Fail)]
    pub conflict_policy: Policy,
    /// A related kind to copy: `secrets|configmaps:FromProvider|FromConsumer[:names=a,b]
    /// [:labels=k=v,k2=v2]`; repeatable. Without names or labels every object in scope is
    /// copied (avoid that for Secrets).
    #[arg(long, value_parser = parse_related, value_name = "SPEC")]
    pub related: Vec<RelatedResource>,
    /// Name of the binding (default: the first API's plural).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Waiting.
    #[command(flatten)]
    pub wait: WaitArgs,
    /// Output.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `--conflict-policy` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Policy {
    /// Leave a foreign provider object untouched and report a conflict.
    #[value(name = "Fail", alias = "fail")]
    Fail,
    /// Take a provider object that carries no ownership markers at all.
    #[value(name = "Adopt", alias = "adopt")]
    Adopt,
}

/// Where a binding lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// A Binding in this namespace.
    Namespace(String),
    /// A ClusterBinding.
    Cluster,
}

/// The scope `-n` and `--cluster` describe; both together are a usage error.
pub fn scope(
    cluster: bool,
    namespace_flag: Option<&str>,
    default: &str,
) -> Result<Scope, UsageError> {
    match (cluster, namespace_flag) {
        (true, Some(ns)) => Err(UsageError(format!(
            "-n {ns} and --cluster exclude each other: a ClusterBinding has no namespace"
        ))),
        (true, None) => Ok(Scope::Cluster),
        (false, ns) => Ok(Scope::Namespace(ns.unwrap_or(default).to_string())),
    }
}

/// Runs `bind`.
pub async fn run(client: &ClientArgs, args: BindArgs) -> anyhow::Result<()> {
    for api in &args.apis {
        if !api.contains('.') {
            return Err(UsageError(format!(
                "API {api:?} is not <plural>.<group> (e.g. widgets.example.org)"
            ))
            .into());
        }
    }
    let target = client.connect().await?;
    let scope = scope(args.cluster, client.namespace.as_deref(), &target.namespace)?;
    let consumer = target.client;
    check_exported(&consumer, &args).await?;
    let name = args.name.clone().unwrap_or_else(|| {
        args.apis[0]
            .split('.')
            .next()
            .unwrap_or_default()
            .to_string()
    });
    let spec = BindingSpec {
        connection_ref: ConnectionReference {
            name: args.connection.clone(),
        },
        apis: args
            .apis
            .iter()
            .map(|a| ApiReference { name: a.clone() })
            .collect(),
        conflict_policy: match args.conflict_policy {
            Policy::Fail => ConflictPolicy::Fail,
            Policy::Adopt => ConflictPolicy::Adopt,
        },
        related_resources: args.related.clone(),
    };
    match scope {
        Scope::Namespace(ns) => {
            konnector::k8s::ensure_namespace(&consumer, &ns).await?;
            let api = Api::<Binding>::namespaced(consumer, &ns);
            let mut binding = Binding::new(&name, spec.clone());
            binding.metadata.namespace = Some(ns);
            create_and_wait(&api, binding, &spec, &args).await
        }
        Scope::Cluster => {
            let api = Api::<ClusterBinding>::all(consumer);
            let binding = ClusterBinding::new(&name, spec.clone().into());
            create_and_wait(&api, binding, &spec, &args).await
        }
    }
}

/// Fails when the Connection is missing or has discovered exports that lack an API asked for.
async fn check_exported(consumer: &kube::Client, args: &BindArgs) -> anyhow::Result<()> {
    let connection = Api::<Connection>::all(consumer.clone())
        .get_opt(&args.connection)
        .await?
        .with_context(|| {
            format!(
                "Connection {} not found: create it first (kubectl kbind connect {} --provider-kubeconfig FILE)",
                args.connection, args.connection
            )
        })?;
    let exported: Vec<&str> = connection
        .status
        .iter()
        .flat_map(|s| s.exported_apis.iter().map(|a| a.name.as_str()))
        .collect();
    if exported.is_empty() {
        return Ok(());
    }
    let missing: Vec<&String> = args
        .apis
        .iter()
        .filter(|a| !exported.contains(&a.as_str()))
        .collect();
    if !missing.is_empty() {
        bail!(
            "Connection {} does not export {}; it exports: {}",
            args.connection,
            missing
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            exported.join(", ")
        );
    }
    Ok(())
}

async fn create_and_wait<B: BindingObject>(
    api: &Api<B>,
    binding: B,
    spec: &BindingSpec,
    args: &BindArgs,
) -> anyhow::Result<()> {
    let name = binding.meta().name.clone().unwrap_or_default();
    let resource = format!("{}.core.kbind.io/{name}", kind::<B>().to_lowercase());
    match api.get_opt(&name).await? {
        Some(existing) if existing.binding_spec() == spec => {
            progress(format!("{resource} unchanged"))
        }
        Some(_) => bail!(
            "{} {name} exists with another spec; editing a binding is not a cleanup transaction: unbind it first (kubectl kbind unbind {name}) or use --name",
            kind::<B>()
        ),
        None => {
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..PostParams::default()
            };
            api.create(&params, &binding)
                .await
                .with_context(|| format!("creating {} {name}", kind::<B>()))?;
            progress(format!("{resource} created"));
        }
    }
    if !args.wait.wait {
        return print_binding(&api.get(&name).await?, args.output);
    }
    let outcome = wait::until(args.wait.timeout, || async {
        let b = api.get(&name).await?;
        let conds = conditions(&b);
        if conds.is_empty() {
            return Ok(Check::Waiting(
                "no status yet (is the konnector running?)".into(),
            ));
        }
        if output::is_true(conds, ConditionType::Ready) {
            return Ok(Check::Done(b));
        }
        if let Some(reason) = hints::blocking_reason(conds) {
            return Ok(Check::Failed(reason.to_string()));
        }
        // Every listed API must sync: one that failed definitively (its own boundAPIs entry
        // says so) does not come by waiting, even while the others sync.
        if let Some(failed) = failed_api(&b) {
            return Ok(Check::Failed(failed));
        }
        Ok(Check::Waiting(output::summary(conds, ConditionType::Ready)))
    })
    .await?;
    match outcome {
        Outcome::Done(b) => print_binding(&b, args.output),
        Outcome::Failed(_) | Outcome::TimedOut(_) => {
            let b = api.get(&name).await?;
            let conds = conditions(&b);
            Err(NotReady(if conds.is_empty() {
                format!("{} {name} has no status: is the konnector running? (kubectl -n kbind-system get deploy,pods)", kind::<B>())
            } else {
                format!("{} {name} is not Ready:\n{}", kind::<B>(), hints::explain(conds))
            })
            .into())
        }
    }
}

/// The first listed API whose `boundAPIs` entry says it failed definitively, with its reason.
fn failed_api<B: BindingObject>(b: &B) -> Option<String> {
    let entries = b
        .binding_status()
        .map(|s| s.bound_apis.as_slice())
        .unwrap_or_default();
    entries
        .iter()
        .find(|e| e.state == Some(konnector::api::ApiState::Failed))
        .map(|e| format!("{}: {}", e.name, e.reason.as_deref().unwrap_or("Failed")))
}

fn print_binding<B: BindingObject>(b: &B, output: OutputArgs) -> anyhow::Result<()> {
    if let Some(format) = output.output {
        return output::print(format, b);
    }
    let name = b.meta().name.clone().unwrap_or_default();
    let apis: Vec<&str> = b
        .binding_spec()
        .apis
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    println!(
        "{}.core.kbind.io/{name} {}: {} via Connection {}",
        kind::<B>().to_lowercase(),
        output::summary(conditions(b), ConditionType::Ready),
        apis.join(", "),
        b.binding_spec().connection_ref.name
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use konnector::api::{RelatedDirection, RelatedResourceKind, RelatedSelector};

    #[test]
    fn a_binding_is_either_namespaced_or_cluster_wide() {
        assert!(scope(true, Some("a"), "default").is_err());
        assert_eq!(scope(true, None, "default").ok(), Some(Scope::Cluster));
        assert_eq!(
            scope(false, None, "ctx-ns").ok(),
            Some(Scope::Namespace("ctx-ns".into())),
            "the context's namespace without -n"
        );
        assert_eq!(
            scope(false, Some("team-a"), "ctx-ns").ok(),
            Some(Scope::Namespace("team-a".into()))
        );
    }

    #[test]
    fn related_entries_parse_kind_direction_names_and_labels() -> Result<(), String> {
        let r = parse_related("secrets:FromProvider:names=a,b:labels=app=web,tier=db")?;
        assert_eq!(r.resource, RelatedResourceKind::Secrets);
        assert_eq!(r.direction, RelatedDirection::FromProvider);
        assert_eq!(r.selector.names, vec!["a", "b"]);
        let labels = r
            .selector
            .label_selector
            .and_then(|s| s.match_labels)
            .unwrap_or_default();
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(labels.get("tier").map(String::as_str), Some("db"));
        let all = parse_related("configmaps:FromConsumer")?;
        assert_eq!(
            all.selector,
            RelatedSelector::default(),
            "empty selector: everything in scope"
        );
        Ok(())
    }

    #[test]
    fn policies_are_spelled_as_in_the_api() -> anyhow::Result<()> {
        use crate::cli::{Cli, Command};
        use clap::Parser;
        let cli = Cli::try_parse_from([
            "kubectl-kbind",
            "bind",
            "w.x",
            "--connection",
            "p",
            "--conflict-policy",
            "Adopt",
        ])?;
        let Command::Bind(args) = cli.command else {
            anyhow::bail!("parsed another command");
        };
        assert!(matches!(args.conflict_policy, Policy::Adopt));
        assert!(args.wait.wait, "bind waits by default");
        Ok(())
    }

    #[test]
    fn unsupported_related_kinds_and_directions_are_refused() {
        assert!(parse_related("pods:FromProvider").is_err());
        assert!(parse_related("secrets:Both").is_err());
        assert!(parse_related("secrets:FromProvider:names").is_err());
        assert!(parse_related("secrets:FromProvider:labels=novalue").is_err());
    }
}
