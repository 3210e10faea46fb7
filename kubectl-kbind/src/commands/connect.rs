//! `kubectl kbind connect NAME --provider-kubeconfig FILE`: stores the provider kubeconfig in
//! a Secret in the konnector's designated namespace (a Connection may only reference Secrets
//! there, under key `kubeconfig` unless told otherwise), creates the Connection and waits for
//! `Ready`. On failure it prints the condition's reason and what to do, and exits 1.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};

use konnector::api::names::{DEFAULT_KUBECONFIG_KEY, DEFAULT_SECRET_NAMESPACE};
use konnector::api::{
    ConditionType, Connection, ConnectionSpec, Isolation, PullPolicy, SchemaPolicy, SchemaSource,
    SecretReference, UpdatePolicy,
};

use crate::args::{IsolationArg, OutputArgs, Pull, Source, Update, WaitArgs};
use crate::client::ClientArgs;
use crate::exit::NotReady;
use crate::hints;
use crate::marks::{CREATED_BY_LABEL, FIELD_MANAGER};
use crate::output::{self, progress};
use crate::wait::{self, Check, Outcome};

/// Flags of `connect`.
#[derive(clap::Args, Debug)]
pub struct ConnectArgs {
    /// Name of the Connection (cluster-scoped).
    pub name: String,
    /// The provider kubeconfig file; its current context is stored, files embedded.
    #[arg(long, value_name = "FILE")]
    pub provider_kubeconfig: PathBuf,
    /// The context of the provider kubeconfig to use (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub provider_context: Option<String>,
    /// Maintain a ClusterBinding named after the Connection listing every exported API.
    #[arg(long)]
    pub auto_bind: bool,
    /// Where exported APIs and their schemas are read from.
    #[arg(long, value_enum, default_value_t = Source::Auto)]
    pub schema_source: Source,
    /// When schemas are installed on this cluster.
    #[arg(long, value_enum, default_value_t = Pull::Bound)]
    pub pull_policy: Pull,
    /// Whether installed schemas follow provider changes.
    #[arg(long, value_enum, default_value_t = Update::Always)]
    pub update_policy: Update,
    /// Where this cluster's copies go on a provider shared by many consumers: `Namespaced`
    /// (namespace `<prefix>-<namespace>`, names kept), `Prefixed` (names `<prefix>-<name>`),
    /// or `None` (namespaces and names unchanged).
    #[arg(long, value_enum, default_value_t = IsolationArg::None)]
    pub isolation: IsolationArg,
    /// The consumer prefix of `--isolation` (default: derived from this cluster's UID).
    #[arg(long, value_name = "PREFIX")]
    pub prefix: Option<String>,
    /// The konnector's designated credential namespace (its --secret-namespace).
    #[arg(long, default_value = DEFAULT_SECRET_NAMESPACE, value_name = "NS")]
    pub secret_namespace: String,
    /// Name of the credential Secret (default: NAME-kubeconfig).
    #[arg(long, value_name = "NAME")]
    pub secret_name: Option<String>,
    /// Replace the Secret's kubeconfig when it exists with other contents.
    #[arg(long)]
    pub overwrite_secret: bool,
    /// Waiting.
    #[command(flatten)]
    pub wait: WaitArgs,
    /// Output.
    #[command(flatten)]
    pub output: OutputArgs,
}

impl ConnectArgs {
    fn secret_name(&self) -> String {
        self.secret_name
            .clone()
            .unwrap_or_else(|| format!("{}-kubeconfig", self.name))
    }

    /// The Connection spec the flags describe.
    pub fn spec(&self) -> ConnectionSpec {
        ConnectionSpec {
            kubeconfig_secret_ref: SecretReference {
                namespace: self.secret_namespace.clone(),
                name: self.secret_name(),
                key: DEFAULT_KUBECONFIG_KEY.to_string(),
            },
            schema: SchemaPolicy {
                source: match self.schema_source {
                    Source::Auto => SchemaSource::Auto,
                    Source::Crd => SchemaSource::Crd,
                    Source::OpenApi => SchemaSource::OpenApi,
                },
                pull_policy: match self.pull_policy {
                    Pull::Bound => PullPolicy::Bound,
                    Pull::All => PullPolicy::All,
                    Pull::None => PullPolicy::None,
                },
                update_policy: match self.update_policy {
                    Update::Always => UpdatePolicy::Always,
                    Update::Once => UpdatePolicy::Once,
                },
            },
            auto_bind: self.auto_bind,
            binding_namespace_selector: None,
            isolation: Isolation {
                strategy: self.isolation.into(),
                prefix: self.prefix.clone(),
            },
            policies: None,
        }
    }
}

/// Runs `connect`.
pub async fn run(client: &ClientArgs, args: ConnectArgs) -> anyhow::Result<()> {
    let kubeconfig =
        crate::kubeconfig::prepare(&args.provider_kubeconfig, args.provider_context.as_deref())?;
    let target = client.connect().await?;
    let consumer = target.client;
    if let Some(admin) = crate::admin_check::check(&kubeconfig).await {
        progress(crate::admin_check::warning(&admin, &args.name));
    }
    store_secret(&consumer, &args, kubeconfig.into_bytes()).await?;
    let connections = Api::<Connection>::all(consumer.clone());
    let spec = args.spec();
    match connections.get_opt(&args.name).await? {
        Some(existing) if existing.spec == spec => {
            progress(format!("connection.core.kbind.io/{} unchanged", args.name));
        }
        Some(_) => bail!(
            "Connection {} exists with another spec; its credential reference is immutable: `kubectl kbind disconnect {}` first, or choose another name",
            args.name,
            args.name
        ),
        None => {
            let connection = Connection::new(&args.name, spec);
            connections
                .create(&post_params(), &connection)
                .await
                .with_context(|| format!("creating Connection {}", args.name))?;
            progress(format!("connection.core.kbind.io/{} created", args.name));
        }
    }
    if !args.wait.wait {
        return print_connection(&connections.get(&args.name).await?, args.output);
    }
    let name = args.name.clone();
    let outcome = wait::until(args.wait.timeout, || check_ready(&connections, &name)).await?;
    match outcome {
        Outcome::Done(connection) => print_connection(&connection, args.output),
        Outcome::Failed(_) | Outcome::TimedOut(_) => {
            let connection = connections.get(&args.name).await?;
            Err(not_ready(&connection, args.wait.timeout).into())
        }
    }
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PostParams::default()
    }
}

fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// Creates the credential Secret, or checks an existing one holds the same kubeconfig.
async fn store_secret(
    consumer: &Client,
    args: &ConnectArgs,
    kubeconfig: Vec<u8>,
) -> anyhow::Result<()> {
    let ns = &args.secret_namespace;
    let name = args.secret_name();
    konnector::k8s::ensure_namespace(consumer, ns)
        .await
        .with_context(|| format!("creating namespace {ns}"))?;
    let secrets = Api::<Secret>::namespaced(consumer.clone(), ns);
    let data = BTreeMap::from([(DEFAULT_KUBECONFIG_KEY.to_string(), ByteString(kubeconfig))]);
    match secrets.get_opt(&name).await? {
        Some(existing) if existing.data.as_ref() == Some(&data) => {
            progress(format!("secret/{name} unchanged (namespace {ns})"));
        }
        Some(_) if !args.overwrite_secret => bail!(
            "Secret {ns}/{name} exists with other contents: pass --overwrite-secret to replace them (every Connection using it then reconnects; credentials for another cluster are refused with ClusterIdentityChanged), or --secret-name for a new one"
        ),
        Some(_) => {
            let patch = serde_json::json!({ "data": data });
            secrets
                .patch(&name, &patch_params(), &Patch::Merge(&patch))
                .await
                .with_context(|| format!("replacing Secret {ns}/{name}"))?;
            progress(format!("secret/{name} configured (namespace {ns})"));
        }
        None => {
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(ns.clone()),
                    labels: Some(BTreeMap::from([(
                        CREATED_BY_LABEL.to_string(),
                        FIELD_MANAGER.to_string(),
                    )])),
                    ..ObjectMeta::default()
                },
                data: Some(data),
                type_: Some("Opaque".to_string()),
                ..Secret::default()
            };
            secrets
                .create(&post_params(), &secret)
                .await
                .with_context(|| format!("creating Secret {ns}/{name}"))?;
            progress(format!("secret/{name} created (namespace {ns})"));
        }
    }
    Ok(())
}

/// The Connection's conditions (empty before the konnector wrote a status).
fn connection_conditions(connection: &Connection) -> &[Condition] {
    let status = connection.status.as_ref();
    status.map(|s| s.conditions.as_slice()).unwrap_or_default()
}

/// One look at the Connection while waiting for Ready.
async fn check_ready(
    connections: &Api<Connection>,
    name: &str,
) -> anyhow::Result<Check<Connection>> {
    let connection = connections.get(name).await?;
    let conditions = connection_conditions(&connection);
    if conditions.is_empty() {
        return Ok(Check::Waiting(
            "no status yet (is the konnector running? kubectl -n kbind-system get deploy)".into(),
        ));
    }
    if output::is_true(conditions, ConditionType::Ready) {
        return Ok(Check::Done(connection));
    }
    if let Some(reason) = hints::blocking_reason(conditions) {
        return Ok(Check::Failed(reason.to_string()));
    }
    Ok(Check::Waiting(output::summary(
        conditions,
        ConditionType::Ready,
    )))
}

/// The message of a Connection that did not become Ready: every problem condition with what
/// to do.
fn not_ready(connection: &Connection, timeout: std::time::Duration) -> NotReady {
    let name = connection.metadata.name.as_deref().unwrap_or_default();
    let conditions = connection_conditions(connection);
    if conditions.is_empty() {
        return NotReady(format!(
            "Connection {name} has no status after {}: is the konnector running and watching this cluster? (kubectl -n kbind-system get deploy,pods)",
            humantime::format_duration(timeout)
        ));
    }
    NotReady(format!(
        "Connection {name} is not Ready:\n{}",
        hints::explain(conditions)
    ))
}

fn print_connection(connection: &Connection, output: OutputArgs) -> anyhow::Result<()> {
    if let Some(format) = output.output {
        return output::print(format, connection);
    }
    let name = connection.metadata.name.as_deref().unwrap_or_default();
    let status = connection.status.clone().unwrap_or_default();
    let apis: Vec<&str> = status
        .exported_apis
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    println!(
        "connection.core.kbind.io/{name} {}: {} exported API(s) from {}{}{}",
        output::summary(&status.conditions, ConditionType::Ready),
        apis.len(),
        status.active_schema_source.as_deref().unwrap_or("?"),
        if apis.is_empty() { "" } else { ": " },
        apis.join(", ")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn parse(args: &[&str]) -> anyhow::Result<ConnectArgs> {
        let mut argv = vec!["kubectl-kbind", "connect"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv)?.command {
            Command::Connect(args) => Ok(args),
            other => anyhow::bail!("parsed {other:?}"),
        }
    }

    #[test]
    fn the_secret_lives_in_the_designated_namespace_under_key_kubeconfig() -> anyhow::Result<()> {
        let spec = parse(&["provider", "--provider-kubeconfig", "p.kubeconfig"])?.spec();
        assert_eq!(
            spec.kubeconfig_secret_ref,
            SecretReference {
                namespace: DEFAULT_SECRET_NAMESPACE.into(),
                name: "provider-kubeconfig".into(),
                key: DEFAULT_KUBECONFIG_KEY.into(),
            }
        );
        assert_eq!(spec.schema, SchemaPolicy::default(), "the API defaults");
        assert!(!spec.auto_bind);
        Ok(())
    }

    #[test]
    fn flags_choose_schema_policies_auto_bind_and_the_secret() -> anyhow::Result<()> {
        let spec = parse(&[
            "p",
            "--provider-kubeconfig",
            "f",
            "--auto-bind",
            "--schema-source",
            "OpenAPI",
            "--pull-policy",
            "All",
            "--update-policy",
            "Once",
            "--secret-namespace",
            "creds",
            "--secret-name",
            "p-creds",
        ])?
        .spec();
        assert!(spec.auto_bind);
        assert_eq!(spec.schema.source, SchemaSource::OpenApi);
        assert_eq!(spec.schema.pull_policy, PullPolicy::All);
        assert_eq!(spec.schema.update_policy, UpdatePolicy::Once);
        assert_eq!(spec.kubeconfig_secret_ref.namespace, "creds");
        assert_eq!(spec.kubeconfig_secret_ref.name, "p-creds");
        Ok(())
    }
}
