//! The schema phases: which exported APIs kbind may not install for this Connection (a
//! consumer CRD it does not manage), and, under `pullPolicy: All`, installing the others;
//! SchemaInSync says what failed or was refused.

use std::collections::BTreeMap;

use futures::StreamExt as _;
use futures::future::{BoxFuture, FutureExt as _};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::Api;

use super::{Steps, Stop};
use crate::api::names::EXPORTED_LABEL;
use crate::api::{ConditionType, ExportedApi, PullPolicy, Reason};
use crate::conditions::Desired;
use crate::connection::{Context, Error, Result};
use crate::provider::discovery::Discovered;
use crate::provider::kubeconfig::ProviderCredentials;
use crate::schema::handover::{self, Handover};
use crate::schema::versions::left_out_note;
use crate::schema::{self, Refusal, SchemaError, Target, managed};

/// How many consumer CRDs `pullPolicy: All` installs at once.
const INSTALL_PARALLELISM: usize = 4;

impl Steps<'_> {
    /// Which exported APIs kbind may not install for this Connection (a consumer CRD it does
    /// not manage); only needed where the Connection itself installs or binds.
    pub(super) async fn refused_installs(
        &self,
        discovered: &Discovered,
    ) -> Result<BTreeMap<String, Refusal>, Stop> {
        let spec = &self.connection.spec;
        if !spec.auto_bind && spec.schema.pull_policy != PullPolicy::All {
            return Ok(BTreeMap::new());
        }
        refused_installs(
            &self.ctx.shared.consumer,
            &self.connection.name_any(),
            self.status.remote_cluster_uid.as_deref(),
            &discovered.apis,
        )
        .await
        .map_err(Stop::Fail)
    }

    /// `pullPolicy: All` installs every exported schema now (except the refused ones); Bound
    /// and None install nothing. SchemaInSync also reports what kbind refused: labelled
    /// provider CRDs of protected groups, and exported APIs whose consumer CRD it may not touch.
    pub(super) async fn install_schemas(
        &mut self,
        credentials: &ProviderCredentials,
        discovered: &Discovered,
        refused: &BTreeMap<String, Refusal>,
    ) {
        let policy = &self.connection.spec.schema;
        let name = self.connection.name_any();
        let mut failures = Vec::new();
        let mut notes = Vec::new();
        if policy.pull_policy == PullPolicy::All {
            let targets: Vec<Target<'_>> = discovered
                .apis
                .iter()
                .filter(|api| !refused.contains_key(&api.name))
                .map(|api| Target {
                    connection: &name,
                    api,
                    source: discovered.source,
                    update: policy.update_policy,
                    revision: discovered.revisions.get(&api.name).map(String::as_str),
                    provider_uid: self.status.remote_cluster_uid.as_deref(),
                })
                .collect();
            // A few at a time, in order: most of an install is waiting for the consumer to
            // establish the CRD, and a provider exporting dozens of large CRDs would otherwise
            // take one wait after another.
            let ctx: &Context = self.ctx;
            // Boxed: the futures' types name lifetimes that the controller's `Send` bound
            // cannot see through in an iterator adapter.
            let installs: Vec<BoxFuture<'_, _>> = targets
                .iter()
                .map(|target| install(ctx, &credentials.client, target).boxed())
                .collect();
            let installed: Vec<_> = futures::stream::iter(installs)
                .buffered(INSTALL_PARALLELISM)
                .collect()
                .await;
            for (target, installed) in targets.iter().zip(installed) {
                let api = target.api;
                match installed {
                    Ok(installed) => notes.extend(
                        left_out_note(&installed.crd).map(|note| format!("{}: {note}", api.name)),
                    ),
                    Err(error) => failures.push((failure_reason(&error), error.to_string())),
                }
            }
        }
        let refusals: Vec<String> = discovered
            .ignored
            .iter()
            .map(|api| {
                format!(
                    "the provider labels {api} exported, but its group belongs to kbind or Kubernetes itself: ignored; ask the provider to remove the {EXPORTED_LABEL} label"
                )
            })
            .chain(refused.values().map(|refusal| {
                format!("{refusal} (left out of schema installation and autoBind)")
            }))
            .collect();
        // Warning Events follow from SchemaInSync changing state (see `super::events`).
        if let Some((reason, _)) = failures.first() {
            let message = failures
                .iter()
                .map(|(_, message)| message)
                .chain(&refusals)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ");
            self.set(Desired::falsy(
                ConditionType::SchemaInSync,
                *reason,
                message,
            ));
        } else if !refusals.is_empty() {
            self.set(Desired::falsy(
                ConditionType::SchemaInSync,
                Reason::CRDNotManaged,
                refusals.join("; "),
            ));
        } else {
            let message = match policy.pull_policy {
                PullPolicy::None => {
                    "pullPolicy None: consumer CRDs are managed outside kbind".to_string()
                }
                PullPolicy::Bound => {
                    "pullPolicy Bound: schemas are installed when a binding lists the API"
                        .to_string()
                }
                PullPolicy::All => std::iter::once(format!(
                    "{} exported schema(s) installed and Established",
                    discovered.apis.len()
                ))
                .chain(notes)
                .collect::<Vec<_>>()
                .join("; "),
            };
            self.set(Desired::truthy(
                ConditionType::SchemaInSync,
                Reason::AsExpected,
                message,
            ));
        }
    }
}

/// Installs one consumer CRD of `pullPolicy: All`.
async fn install<'a>(
    ctx: &'a Context,
    provider: &'a kube::Client,
    target: &'a Target<'a>,
) -> Result<schema::Installed, SchemaError> {
    schema::ensure_installed(
        &ctx.shared.consumer,
        provider,
        &ctx.shared.policies,
        &ctx.applied_schemas,
        target,
        ctx.config.schema_wait,
    )
    .await
}

/// The SchemaInSync reason of a failed install: a name collision is its own case (the
/// provider must rename the API), everything else is a failed install.
fn failure_reason(error: &SchemaError) -> Reason {
    match error {
        SchemaError::NameCollision { .. } => Reason::NameCollision,
        _ => Reason::SchemaInstallFailed,
    }
}

/// The exported APIs whose consumer CRD kbind may not install or update for `connection`
/// (`schema::managed`), each with the reason. A CRD pinned to a Connection that no longer
/// exists is first offered to this one, reaching `provider_uid` ([`handover`]): taken over
/// when it was installed from the same provider cluster, else refused with the steps to hand
/// it over by hand. A failed read stops the reconcile (retried) rather than refuse: a refusal
/// takes the API out of the autoBind ClusterBinding.
async fn refused_installs(
    consumer: &kube::Client,
    connection: &str,
    provider_uid: Option<&str>,
    apis: &[ExportedApi],
) -> Result<BTreeMap<String, Refusal>> {
    let crds: Api<CustomResourceDefinition> = Api::all(consumer.clone());
    let mut refused = BTreeMap::new();
    for api in apis {
        let existing = crds
            .get_opt(&api.name)
            .await
            .map_err(|e| Error::ReadCrd(api.name.clone(), e))?;
        let refusal = match managed::check(&api.name, existing.as_ref(), connection) {
            Ok(()) => continue,
            Err(refusal @ Refusal::BoundElsewhere { .. }) => match (&existing, provider_uid) {
                (Some(crd), Some(uid)) => {
                    match handover::take_over(consumer, crd, connection, uid).await? {
                        Handover::TakeOver => continue,
                        Handover::Keep => refusal,
                        Handover::Refused(message) => Refusal::PinnedConnectionGone {
                            crd: api.name.clone(),
                            message,
                        },
                    }
                }
                _ => refusal,
            },
            Err(refusal) => refusal,
        };
        refused.insert(api.name.clone(), refusal);
    }
    Ok(refused)
}
