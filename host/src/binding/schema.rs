//! Schema installation for `schema.pullPolicy: Bound`: a binding that lists an API gets its
//! consumer CRD installed (pulled from the provider CRD or synthesised from OpenAPI by the
//! schema module), honouring `updatePolicy`, pinned to the Connection, Established.
//!
//! ```text
//! Binding lists API ──▶ exported? served by this Connection? ──▶ schema::ensure_installed
//!                                                                 (pull or synthesise, SSA,
//!                                                                  wait for Established)
//! ```
//!
//! A failed refresh of a CRD that is installed, Established and pinned to this Connection
//! does not make the binding unready: the installed schema keeps serving and instances keep
//! syncing (a provider hiccup must not stop sync). A binding that loses the "one Connection
//! per API" rule never installs anything: the CRD would otherwise be re-pinned to the loser.
//! `pullPolicy: All` is the Connection controller's job, `None` leaves CRDs to whoever
//! manages them.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, ResourceExt};
use tracing::{info, warn};

use crate::api::names::CONNECTION_ANNOTATION;
use crate::api::{Connection, PullPolicy, Reason, SchemaSource};
use crate::provider::limits::ReadError;
use crate::registry::Engagement;
use crate::schema::is_established;
use crate::schema::{Refusal, SchemaError, Target, as_applied, ensure_installed};

use super::Context;

/// What installing a binding's CRDs came to.
#[derive(Default)]
pub(super) struct Installs {
    /// The failures per API, as readiness reasons.
    pub problems: BTreeMap<String, (Reason, String)>,
    /// The CRDs this pass wrote or read from the cluster, per API: newer than the watched
    /// copies until the watch catches up, so readiness judges these.
    pub crds: BTreeMap<String, Arc<CustomResourceDefinition>>,
}

/// Installs the consumer CRDs of `apis` (those this binding's Connection serves) when the
/// Connection's pull policy is Bound.
pub(super) async fn install_bound(
    ctx: &Context,
    connection: Option<&Connection>,
    engagement: &Engagement,
    apis: &[&str],
) -> Installs {
    let mut installs = Installs::default();
    let Some(connection) = connection else {
        return installs;
    };
    let policy = &connection.spec.schema;
    if policy.pull_policy != PullPolicy::Bound {
        return installs;
    }
    let source = active_source(connection);
    for name in apis {
        let Some(api) = engagement.exported.iter().find(|e| e.name == *name) else {
            continue;
        };
        let target = Target {
            connection: &engagement.connection,
            api,
            source,
            update: policy.update_policy,
            revision: engagement.schema_revisions.get(*name).map(String::as_str),
            provider_uid: Some(&engagement.provider_uid),
        };
        // The CRD as last watched, when it needs nothing written, needs nothing read either.
        if ctx
            .crds
            .established(name)
            .is_some_and(|cached| as_applied(&ctx.applied_schemas, &target, &cached))
        {
            continue;
        }
        match ensure_installed(
            &ctx.shared.consumer,
            &engagement.provider,
            &ctx.shared.policies,
            &ctx.applied_schemas,
            &target,
            ctx.settings.schema_wait,
        )
        .await
        {
            Ok(installed) => {
                info!(api = %name, hash = %installed.hash, "consumer CRD installed");
                installs
                    .crds
                    .insert((*name).to_string(), Arc::new(installed.crd));
            }
            Err(error) if still_serving(ctx, name, &engagement.connection, &error).await => {
                // Refreshing an installed schema failed (provider briefly unreachable, say):
                // the installed CRD keeps serving, so sync goes on; the next reconcile retries.
                warn!(api = %name, %error, "consumer CRD not refreshed; the installed one stays");
            }
            Err(error) => {
                warn!(api = %name, %error, "consumer CRD not installed");
                installs
                    .problems
                    .insert((*name).to_string(), (reason(&error), error.to_string()));
            }
        }
    }
    installs
}

/// Whether a failed installation left a usable CRD behind: the failure was in reading or
/// writing a newer schema, and the consumer CRD is Established and pinned to `connection`.
async fn still_serving(ctx: &Context, name: &str, connection: &str, error: &SchemaError) -> bool {
    let refresh_failure = matches!(
        error,
        SchemaError::ProviderRead { .. }
            | SchemaError::Read { .. }
            | SchemaError::OpenApi { .. }
            | SchemaError::NotPublished { .. }
            | SchemaError::Synthesis { .. }
            | SchemaError::Unacceptable { .. }
            | SchemaError::ConsumerDiscovery { .. }
            | SchemaError::Apply { .. }
    );
    if !refresh_failure {
        return false;
    }
    let crds: Api<CustomResourceDefinition> = Api::all(ctx.shared.consumer.clone());
    match crds.get_opt(name).await {
        Ok(Some(crd)) => {
            is_established(&crd)
                && crd
                    .annotations()
                    .get(CONNECTION_ANNOTATION)
                    .map(String::as_str)
                    == Some(connection)
        }
        _ => false,
    }
}

/// The schema source the Connection resolved (`status.activeSchemaSource`), else its spec.
fn active_source(connection: &Connection) -> SchemaSource {
    let resolved = connection
        .status
        .as_ref()
        .and_then(|s| s.active_schema_source.as_deref());
    match resolved {
        Some(s) if s == SchemaSource::OpenApi.as_str() => SchemaSource::OpenApi,
        Some(s) if s == SchemaSource::Crd.as_str() => SchemaSource::Crd,
        _ => connection.spec.schema.source,
    }
}

/// Which readiness reason a schema failure gives.
fn reason(error: &SchemaError) -> Reason {
    match error {
        SchemaError::Refused(Refusal::BoundElsewhere { .. }) => Reason::APIBoundElsewhere,
        SchemaError::Refused(Refusal::PinnedConnectionGone { .. }) => Reason::PinnedConnectionGone,
        SchemaError::Refused(Refusal::NotManaged { .. } | Refusal::ProtectedGroup { .. }) => {
            Reason::CRDNotManaged
        }
        SchemaError::NotEstablished { .. } => Reason::SchemaNotEstablished,
        // Published a moment later: waiting, retried, not a failure of the API.
        SchemaError::NotPublished { .. } => Reason::Pending,
        SchemaError::NameCollision { .. } => Reason::NameCollision,
        SchemaError::Read {
            source: ReadError::TooLarge { .. },
            ..
        } => Reason::ResponseTooLarge,
        SchemaError::ProviderRead { .. }
        | SchemaError::Read { .. }
        | SchemaError::OpenApi { .. }
        | SchemaError::Synthesis { .. }
        | SchemaError::Unacceptable { .. }
        | SchemaError::ConsumerDiscovery { .. }
        | SchemaError::Apply { .. } => Reason::SchemaInstallFailed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ConnectionSpec, ConnectionStatus, SchemaPolicy, SecretReference};

    fn connection(spec_source: SchemaSource, active: Option<&str>) -> Connection {
        let mut c = Connection::new(
            "p",
            ConnectionSpec {
                kubeconfig_secret_ref: SecretReference {
                    namespace: "kbind".into(),
                    name: "s".into(),
                    key: "kubeconfig".into(),
                },
                schema: SchemaPolicy {
                    source: spec_source,
                    ..SchemaPolicy::default()
                },
                auto_bind: false,
                binding_namespace_selector: None,
                isolation: Default::default(),
                policies: None,
            },
        );
        c.status = Some(ConnectionStatus {
            active_schema_source: active.map(str::to_string),
            ..ConnectionStatus::default()
        });
        c
    }

    #[test]
    fn the_resolved_source_wins_over_the_spec() {
        assert_eq!(
            active_source(&connection(SchemaSource::Auto, Some("OpenAPI"))),
            SchemaSource::OpenApi
        );
        assert_eq!(
            active_source(&connection(SchemaSource::Auto, Some("CRD"))),
            SchemaSource::Crd
        );
        assert_eq!(
            active_source(&connection(SchemaSource::OpenApi, None)),
            SchemaSource::OpenApi
        );
    }

    #[test]
    fn schema_failures_map_to_the_reason_an_operator_acts_on() {
        let elsewhere = SchemaError::Refused(Refusal::BoundElsewhere {
            crd: "w".into(),
            other: "q".into(),
        });
        assert_eq!(reason(&elsewhere), Reason::APIBoundElsewhere);
        let unmanaged = SchemaError::Refused(Refusal::NotManaged {
            crd: "w".into(),
            connection: "p".into(),
        });
        assert_eq!(reason(&unmanaged), Reason::CRDNotManaged);
        let protected = SchemaError::Refused(Refusal::ProtectedGroup {
            api: "clusterbindings.core.kbind.io".into(),
            group: "core.kbind.io".into(),
        });
        assert_eq!(reason(&protected), Reason::CRDNotManaged);
        let unacceptable = SchemaError::Unacceptable {
            api: "w".into(),
            detail: "spec.scope".into(),
        };
        assert_eq!(reason(&unacceptable), Reason::SchemaInstallFailed);
        let waiting = SchemaError::NotEstablished {
            crd: "w".into(),
            waited: std::time::Duration::from_secs(1),
            detail: String::new(),
        };
        assert_eq!(reason(&waiting), Reason::SchemaNotEstablished);
        let collision = SchemaError::NameCollision {
            api: "configmaps.collide.example.org".into(),
            field: "plural",
            name: "configmaps".into(),
            holder: "configmaps".into(),
        };
        assert_eq!(reason(&collision), Reason::NameCollision);
        let unpublished = SchemaError::NotPublished {
            api: "widgets.new.example.org".into(),
            group_version: "new.example.org/v1".into(),
        };
        assert_eq!(reason(&unpublished), Reason::Pending);
        assert_eq!(
            unpublished.to_string(),
            "waiting for the provider to publish the OpenAPI document of new.example.org/v1 (for widgets.new.example.org) in /openapi/v3"
        );
    }
}
