//! `kubectl kbind provider-setup`: the provider identity a konnector uses, made in one command
//! on the provider, and rotated later without downtime.
//!
//! ```text
//! provider (admin kubeconfig)                            consumer (--rotate only)
//! ServiceAccount <sa> in <ns> ◀── RBAC of provider-rbac
//! Secret <sa>-token-xxxxx (anchor) ◀── TokenRequest bound to it
//!        │ token                                         Connection ─▶ its Secret
//!        ▼                                                              │ kubeconfig key
//! kubeconfig (server + CA of the admin's, token, namespace <ns>) ──────┘ replaced
//! old anchors deleted ─▶ old tokens refused (revoked)
//! ```
//!
//! The token is a TokenRequest token bound to an anchor Secret: the apiserver accepts it only
//! while that Secret exists with the UID it was issued for, so deleting the anchor revokes
//! exactly that token (a TokenRequest token cannot be revoked on its own, and deleting the
//! ServiceAccount would revoke every token at once, the new one too). Unlike a legacy
//! `kubernetes.io/service-account-token` Secret it expires (`--token-duration`, capped by the
//! apiserver's `--service-account-max-token-expiration`) and needs no token controller.
//!
//! A rotation issues the new token first, proves it works against the provider, replaces the
//! kubeconfig in the Connection's Secret, waits until the konnector has had the new Secret
//! for `--revoke-after` while the Connection stays Ready, and only then deletes the old
//! anchors and checks that the old token is refused.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::ObjectMeta;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use konnector::api::names::DEFAULT_HEARTBEAT_NAMESPACE;
use konnector::api::{ConditionType, Connection, RelatedResource};

use crate::args::{IsolationArg, Source};
use crate::client::ClientArgs;
use crate::commands::provider_rbac::{self, RbacArgs, SubjectKind};
use crate::exit::{NotReady, UsageError};
use crate::marks::FIELD_MANAGER;
use crate::output::{is_true, progress, summary};

/// Label on an anchor Secret naming the ServiceAccount whose token it anchors.
pub const TOKEN_OF_LABEL: &str = "core.kbind.io/token-of";

/// Flags of `provider-setup`.
#[derive(clap::Args, Debug)]
pub struct ProviderSetupArgs {
    /// Kubeconfig of a provider identity that may create ServiceAccounts, RBAC and tokens.
    #[arg(long, value_name = "PATH")]
    pub provider_kubeconfig: PathBuf,
    /// Context of --provider-kubeconfig to use (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub provider_context: Option<String>,
    /// Name of the provider ServiceAccount the konnector authenticates as.
    #[arg(long, default_value = "konnector", value_name = "NAME")]
    pub service_account: String,
    /// Provider namespace of the ServiceAccount, its token anchors and the heartbeat Lease
    /// (the written kubeconfig's context namespace).
    #[arg(long, default_value = DEFAULT_HEARTBEAT_NAMESPACE, value_name = "NS")]
    pub lease_namespace: String,
    /// An exported API the konnector syncs, `<plural>.<group>`; repeatable.
    #[arg(long = "api", value_name = "API", required_unless_present = "rotate")]
    pub apis: Vec<String>,
    /// A related kind and direction, as for `bind --related`; repeatable.
    #[arg(long, value_parser = crate::args::parse_related, value_name = "SPEC")]
    pub related: Vec<RelatedResource>,
    /// The Connection's schema source (decides CRD and OpenAPI discovery access).
    #[arg(long, value_enum, default_value_t = Source::Auto)]
    pub schema_source: Source,
    /// The provider is kcp: allow reading the logical cluster identity.
    #[arg(long)]
    pub kcp: bool,
    /// Name of the ClusterRole, Role and their bindings.
    #[arg(long, default_value = "kbind-konnector", value_name = "NAME")]
    pub rbac_name: String,
    /// How long the token is valid, e.g. `720h` (the apiserver may cap it).
    #[arg(long, default_value = "8760h", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub token_duration: Duration,
    /// Where to write the konnector's kubeconfig (mode 0600); `-` prints it.
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Rotate: issue a new token, put it into the Secret of --connection on the consumer
    /// (cluster flags: --kubeconfig, --context), then revoke the ServiceAccount's older tokens.
    #[arg(long, requires = "connection")]
    pub rotate: bool,
    /// The consumer Connection whose credential Secret --rotate updates.
    #[arg(long, value_name = "NAME")]
    pub connection: Option<String>,
    /// How long the Connection must stay Ready on the new Secret before old tokens are revoked.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub revoke_after: Duration,
    /// How long to wait for the Connection and for the revocation to take effect.
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
}

/// What a setup or rotation issued.
#[derive(Debug)]
pub struct Issued {
    /// The kubeconfig for the konnector, as YAML.
    pub kubeconfig: String,
    /// The anchor Secret the token is bound to.
    pub anchor: String,
    /// When the token expires, as the apiserver reported it.
    pub expires: Option<String>,
}

/// Runs `provider-setup`; `consumer` are the global cluster flags (used by `--rotate`).
pub async fn run(consumer: &ClientArgs, args: ProviderSetupArgs) -> anyhow::Result<()> {
    if args.output.is_none() && !args.rotate {
        return Err(UsageError(
            "--output PATH (or -o -) is needed to hand over the kubeconfig".into(),
        )
        .into());
    }
    let admin_yaml =
        crate::kubeconfig::prepare(&args.provider_kubeconfig, args.provider_context.as_deref())?;
    let provider = client_of(&admin_yaml)
        .await
        .context("connecting to the provider")?;
    let (ns, sa) = (&args.lease_namespace, &args.service_account);
    if args.rotate {
        let accounts = Api::<ServiceAccount>::namespaced(provider.clone(), ns);
        if accounts.get_opt(sa).await?.is_none() {
            bail!(
                "ServiceAccount {ns}/{sa} does not exist on the provider: run provider-setup without --rotate first"
            );
        }
    } else {
        apply_identity(&provider, &args).await?;
    }
    let issued = issue(&provider, &admin_yaml, &args).await?;
    let new_client = client_of(&issued.kubeconfig).await?;
    prove(&new_client, args.timeout).await?;
    progress(format!(
        "token issued for ServiceAccount {ns}/{sa}, bound to Secret {ns}/{}{}",
        issued.anchor,
        issued
            .expires
            .as_deref()
            .map(|e| format!(", expires {e}"))
            .unwrap_or_default()
    ));
    if let Some(output) = &args.output {
        write_kubeconfig(output, &issued.kubeconfig)?;
    }
    if !args.rotate {
        if let Some(path) = args.output.as_ref().filter(|p| p.as_os_str() != "-") {
            progress(format!(
                "next, on the consumer: kubectl kbind connect <name> --provider-kubeconfig {}",
                path.display()
            ));
        }
        return Ok(());
    }
    let connection = args
        .connection
        .as_deref()
        .context("--rotate needs --connection")?;
    let target = consumer.connect().await?;
    let old = replace_secret(&target.client, connection, &issued.kubeconfig).await?;
    progress(format!(
        "Secret of Connection {connection} now holds the new kubeconfig"
    ));
    stay_ready(&target.client, connection, args.revoke_after, args.timeout).await?;
    let revoked = revoke_others(&provider, ns, sa, &issued.anchor).await?;
    progress(format!(
        "revoked: deleted anchor Secret(s) {}",
        revoked.join(", ")
    ));
    if let Some(old) = old {
        refused(&old, args.timeout).await?;
        progress("the previous token is refused by the provider");
    }
    Ok(())
}

/// The ServiceAccount and the RBAC `provider-rbac` prints for it, applied on the provider.
async fn apply_identity(provider: &Client, args: &ProviderSetupArgs) -> anyhow::Result<()> {
    let rbac = RbacArgs {
        subject_kind: SubjectKind::ServiceAccount,
        subject: args.service_account.clone(),
        apis: args.apis.clone(),
        related: args.related.clone(),
        schema_source: args.schema_source,
        lease_namespace: args.lease_namespace.clone(),
        kcp: args.kcp,
        name: args.rbac_name.clone(),
        isolation: IsolationArg::None,
        prefix: None,
        consumer_namespaces: Vec::new(),
    };
    for api in &rbac.apis {
        if api
            .split_once('.')
            .is_none_or(|(plural, group)| plural.is_empty() || group.is_empty())
        {
            return Err(UsageError(format!("--api {api:?} is not <plural>.<group>")).into());
        }
    }
    let subject = provider_rbac::subject(
        SubjectKind::ServiceAccount,
        &args.service_account,
        Some(&args.lease_namespace),
    )?;
    let mut documents = provider_rbac::generate(&rbac, subject, None);
    // The Namespace comes first in `generate`; the ServiceAccount goes right after it.
    let account = json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": args.service_account, "namespace": args.lease_namespace,
                     "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER, "app.kubernetes.io/part-of": "kbind"}},
    });
    documents.insert(1.min(documents.len()), account);
    for document in &documents {
        apply(provider, document).await?;
    }
    progress(format!(
        "applied on the provider: ServiceAccount {}/{} and its RBAC ({} objects)",
        args.lease_namespace,
        args.service_account,
        documents.len()
    ));
    Ok(())
}

/// Server-side applies one object of the kinds `provider-rbac` prints.
async fn apply(client: &Client, document: &Value) -> anyhow::Result<()> {
    let kind = document["kind"].as_str().unwrap_or_default();
    let resource = match kind {
        "Namespace" => ApiResource::erase::<Namespace>(&()),
        "ServiceAccount" => ApiResource::erase::<ServiceAccount>(&()),
        "ClusterRole" => ApiResource::erase::<ClusterRole>(&()),
        "ClusterRoleBinding" => ApiResource::erase::<ClusterRoleBinding>(&()),
        "Role" => ApiResource::erase::<Role>(&()),
        "RoleBinding" => ApiResource::erase::<RoleBinding>(&()),
        other => bail!("provider-setup does not apply {other:?} objects"),
    };
    let name = document["metadata"]["name"].as_str().unwrap_or_default();
    let api: Api<DynamicObject> = match document["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(name, &params, &Patch::Apply(document))
        .await
        .with_context(|| format!("applying {kind} {name} on the provider"))?;
    Ok(())
}

/// Creates a new anchor Secret and a token bound to it; returns the konnector's kubeconfig.
async fn issue(
    provider: &Client,
    admin_yaml: &str,
    args: &ProviderSetupArgs,
) -> anyhow::Result<Issued> {
    let (ns, sa) = (&args.lease_namespace, &args.service_account);
    let secrets = Api::<Secret>::namespaced(provider.clone(), ns);
    let anchor = Secret {
        metadata: ObjectMeta {
            generate_name: Some(format!("{sa}-token-")),
            labels: Some(BTreeMap::from([
                (
                    "app.kubernetes.io/managed-by".to_string(),
                    FIELD_MANAGER.to_string(),
                ),
                (TOKEN_OF_LABEL.to_string(), sa.clone()),
            ])),
            annotations: Some(BTreeMap::from([(
                "kubernetes.io/description".to_string(),
                format!(
                    "Deleting this Secret revokes the token of ServiceAccount {sa} bound to it"
                ),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        ..Secret::default()
    };
    let anchor = secrets
        .create(&PostParams::default(), &anchor)
        .await
        .with_context(|| format!("creating a token anchor Secret in {ns} on the provider"))?;
    let anchor_name = anchor.name_any();
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Secret".into()),
                name: Some(anchor_name.clone()),
                uid: anchor.metadata.uid.clone(),
            }),
            expiration_seconds: Some(i64::try_from(args.token_duration.as_secs())?),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let accounts = Api::<ServiceAccount>::namespaced(provider.clone(), ns);
    let issued = accounts
        .create_token_request(sa, &PostParams::default(), &request)
        .await
        .with_context(|| format!("requesting a token for ServiceAccount {ns}/{sa}"))?;
    let status = issued.status.unwrap_or_default();
    let Some(token) = status.token.filter(|t| !t.is_empty()) else {
        bail!("the TokenRequest for {ns}/{sa} was answered without a token");
    };
    let kubeconfig = token_kubeconfig(admin_yaml, ns, sa, &token)?;
    Ok(Issued {
        kubeconfig,
        anchor: anchor_name,
        expires: status.expiration_timestamp.map(|t| t.0.to_string()),
    })
}

/// The admin's (minified, flattened) kubeconfig with its user replaced by the token of
/// `namespace/account`, and the context's namespace set to `namespace` (where the konnector
/// renews its heartbeat Lease).
pub fn token_kubeconfig(
    admin_yaml: &str,
    namespace: &str,
    account: &str,
    token: &str,
) -> anyhow::Result<String> {
    let admin: Value = serde_saphyr::from_str(admin_yaml)?;
    let cluster = admin["clusters"][0].clone();
    let cluster_name = cluster["name"]
        .as_str()
        .context("the kubeconfig names no cluster")?;
    let user = format!("{account}@{cluster_name}");
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": cluster_name, "user": user, "namespace": namespace}}],
        "current-context": user,
    });
    Ok(serde_saphyr::to_string(&doc)?)
}

/// A client for a kubeconfig given as YAML.
async fn client_of(kubeconfig: &str) -> anyhow::Result<Client> {
    let parsed = Kubeconfig::from_yaml(kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// Waits until the new identity can do the first thing a konnector does (read the provider's
/// identity, Namespace `kube-system`): RBAC reaches the authorizer within moments.
async fn prove(client: &Client, timeout: Duration) -> anyhow::Result<()> {
    let namespaces = Api::<Namespace>::all(client.clone());
    let start = Instant::now();
    loop {
        match namespaces.get("kube-system").await {
            Ok(_) => return Ok(()),
            Err(e) if start.elapsed() < timeout => {
                say_waiting_once(&e);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => bail!("the new token cannot read Namespace kube-system on the provider: {e}"),
        }
    }
}

/// Progress while the new identity is not authorised yet (printed once per kind of answer).
fn say_waiting_once(error: &kube::Error) {
    static SAID: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    if SAID.set(()).is_ok() {
        progress(format!(
            "  … waiting for the new token to be accepted ({error})"
        ));
    }
}

/// Writes the kubeconfig to `path` readable by its owner only, or prints it for `-`.
fn write_kubeconfig(path: &Path, kubeconfig: &str) -> anyhow::Result<()> {
    if path.as_os_str() == "-" {
        print!("{kubeconfig}");
        return Ok(());
    }
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    file.write_all(kubeconfig.as_bytes())?;
    progress(format!("kubeconfig written to {}", path.display()));
    Ok(())
}

/// Puts `kubeconfig` into the Connection's credential Secret; returns the kubeconfig it held.
async fn replace_secret(
    consumer: &Client,
    connection: &str,
    kubeconfig: &str,
) -> anyhow::Result<Option<String>> {
    let found = Api::<Connection>::all(consumer.clone())
        .get_opt(connection)
        .await?
        .with_context(|| format!("Connection {connection} does not exist on the consumer"))?;
    let reference = &found.spec.kubeconfig_secret_ref;
    let secrets = Api::<Secret>::namespaced(consumer.clone(), &reference.namespace);
    let secret = secrets.get_opt(&reference.name).await?.with_context(|| {
        format!(
            "Secret {}/{} does not exist",
            reference.namespace, reference.name
        )
    })?;
    let old = secret
        .data
        .as_ref()
        .and_then(|d| d.get(&reference.key))
        .and_then(|v| String::from_utf8(v.0.clone()).ok());
    let mut data = BTreeMap::new();
    data.insert(
        reference.key.clone(),
        ByteString(kubeconfig.as_bytes().to_vec()),
    );
    // Under the resourceVersion read: a concurrent edit fails this instead of being lost.
    let patch = json!({
        "metadata": {"resourceVersion": secret.resource_version()},
        "data": serde_json::to_value(&data)?,
    });
    secrets
        .patch(
            &reference.name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .with_context(|| format!("updating Secret {}/{}", reference.namespace, reference.name))?;
    Ok(old)
}

/// Waits until the Connection has been Ready for `hold` without a break after the Secret
/// changed (the konnector re-reads its Secret on every change of it).
async fn stay_ready(
    consumer: &Client,
    connection: &str,
    hold: Duration,
    timeout: Duration,
) -> anyhow::Result<()> {
    let connections = Api::<Connection>::all(consumer.clone());
    let start = Instant::now();
    let mut ready_since: Option<Instant> = None;
    loop {
        let current = connections.get(connection).await?;
        let conditions = current.status.map(|s| s.conditions).unwrap_or_default();
        if is_true(&conditions, ConditionType::Ready) {
            let since = *ready_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= hold {
                return Ok(());
            }
        } else {
            ready_since = None;
        }
        if start.elapsed() >= timeout + hold {
            return Err(NotReady(format!(
                "Connection {connection} is {} on the new credentials; the previous token was kept (not revoked)",
                summary(&conditions, ConditionType::Ready)
            ))
            .into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Deletes every anchor Secret of the ServiceAccount but `keep`: their tokens stop working.
async fn revoke_others(
    provider: &Client,
    namespace: &str,
    account: &str,
    keep: &str,
) -> anyhow::Result<Vec<String>> {
    let secrets = Api::<Secret>::namespaced(provider.clone(), namespace);
    let anchors = secrets
        .list(&ListParams::default().labels(&format!("{TOKEN_OF_LABEL}={account}")))
        .await?;
    let mut deleted = Vec::new();
    for anchor in anchors {
        let name = anchor.name_any();
        if name == keep {
            continue;
        }
        secrets.delete(&name, &DeleteParams::default()).await?;
        deleted.push(name);
    }
    Ok(deleted)
}

/// Waits until the provider refuses the previous kubeconfig's token (the apiserver caches a
/// token's authentication for a few seconds).
async fn refused(old_kubeconfig: &str, timeout: Duration) -> anyhow::Result<()> {
    let Ok(client) = client_of(old_kubeconfig).await else {
        return Ok(()); // not a kubeconfig we can use: nothing to check
    };
    let namespaces = Api::<Namespace>::all(client);
    let start = Instant::now();
    loop {
        match namespaces.get("kube-system").await {
            Err(kube::Error::Api(status)) if status.code == 401 => return Ok(()),
            _ if start.elapsed() >= timeout => {
                bail!(
                    "the previous token still authenticates after {timeout:?}: was it bound to an anchor Secret?"
                )
            }
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADMIN: &str = "apiVersion: v1
kind: Config
clusters:
- name: provider
  cluster: {server: 'https://127.0.0.1:6443', certificate-authority-data: Q0E=}
users:
- name: admin
  user: {client-certificate-data: Y2VydA==, client-key-data: a2V5}
contexts:
- name: admin@provider
  context: {cluster: provider, user: admin}
current-context: admin@provider
";

    fn parse(args: &[&str]) -> Result<crate::cli::Cli, clap::Error> {
        use clap::Parser as _;
        let argv = [
            "kubectl-kbind",
            "provider-setup",
            "--provider-kubeconfig",
            "p.kubeconfig",
        ];
        crate::cli::Cli::try_parse_from(argv.iter().chain(args))
    }

    #[test]
    fn a_setup_needs_an_api_and_a_rotation_needs_a_connection() {
        assert!(parse(&["-o", "k"]).is_err(), "no --api");
        assert!(parse(&["--api", "widgets.example.org", "-o", "k"]).is_ok());
        assert!(
            parse(&["--rotate"]).is_err(),
            "--rotate without --connection"
        );
        assert!(parse(&["--rotate", "--connection", "provider"]).is_ok());
    }

    #[test]
    fn the_konnector_kubeconfig_keeps_the_cluster_and_carries_only_the_token() -> anyhow::Result<()>
    {
        let written = token_kubeconfig(ADMIN, "kbind", "konnector", "t0ken")?;
        let doc: Value = serde_saphyr::from_str(&written)?;
        assert_eq!(
            doc["clusters"][0]["cluster"]["server"],
            "https://127.0.0.1:6443"
        );
        assert_eq!(
            doc["clusters"][0]["cluster"]["certificate-authority-data"],
            "Q0E="
        );
        assert_eq!(doc["users"][0]["user"], json!({"token": "t0ken"}));
        assert_eq!(doc["contexts"][0]["context"]["namespace"], "kbind");
        assert_eq!(doc["current-context"], "konnector@provider");
        assert!(!written.contains("client-key"), "{written}");
        Ok(())
    }
}
