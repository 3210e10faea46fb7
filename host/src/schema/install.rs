//! Applying a desired CRD to the consumer and waiting until it serves.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use sha2::{Digest, Sha256};
use tracing::debug;

use super::applied::AppliedSchemas;
use super::error::SchemaError;
use super::handover::recorded_provider;
use super::managed;
use super::openapi::fetch_facts;
use super::sanitize::{Versioning, consumer_crd};
use super::taken::{TakenNames, collision};
use super::versions::Conversion;
use crate::api::names::{FIELD_MANAGER, PROVIDER_CLUSTER_UID_ANNOTATION};
use crate::api::{ExportedApi, SchemaSource, UpdatePolicy};
use crate::policy::{Policies, SchemaInput};
use crate::provider::discovery::source_hash;
use crate::telemetry::{ApiLabels, metrics};

/// How often the Established condition is polled while waiting.
const ESTABLISHED_POLL: Duration = Duration::from_millis(200);

/// Which API to install, for which Connection, under which schema policy.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The Connection the CRD is pinned to.
    pub connection: &'a str,
    /// The exported API.
    pub api: &'a ExportedApi,
    /// The active schema source (CRD or OpenAPI).
    pub source: SchemaSource,
    /// Whether an installed CRD follows provider changes.
    pub update: UpdatePolicy,
    /// The provider schema's revision as discovery saw it, if known: an installed CRD applied
    /// from the same revision is left alone without reading the provider schema again.
    pub revision: Option<&'a str>,
    /// The provider cluster's UID the Connection is pinned to, recorded on the CRD so that a
    /// later Connection to the same cluster may take it over ([`super::handover`]).
    pub provider_uid: Option<&'a str>,
}

/// A consumer CRD that is installed and Established.
#[derive(Debug, Clone)]
pub struct Installed {
    /// The CRD as read back from the consumer.
    pub crd: CustomResourceDefinition,
    /// Hash of the consumer CRD's spec, reported in `boundAPIs[].crdHash`.
    pub hash: String,
}

/// Makes sure the consumer serves `api` with the provider's schema, pinned to `connection`.
///
/// With `UpdatePolicy::Once` an installed CRD is left as it is; with `Always` it is brought
/// up to date with the provider on every call (server-side apply is a no-op when equal).
///
/// A provider source unchanged since the last apply, over a consumer CRD untouched since and
/// Established, is not applied again (`applied` remembers).
pub async fn ensure_installed(
    consumer: &kube::Client,
    provider: &kube::Client,
    policies: &Policies,
    applied: &AppliedSchemas,
    target: &Target<'_>,
    wait: Duration,
) -> Result<Installed, SchemaError> {
    let Target {
        connection,
        api,
        source,
        update,
        revision,
        provider_uid,
    } = *target;
    let crds: Api<CustomResourceDefinition> = Api::all(consumer.clone());
    let apply_failed = |source| SchemaError::Apply {
        crd: api.name.clone(),
        source,
    };
    let existing = crds.get_opt(&api.name).await.map_err(apply_failed)?;
    // The host decides what may be touched, whatever the source: never a protected group,
    // never a CRD kbind did not install for this Connection.
    managed::check(&api.name, existing.as_ref(), connection)?;
    if let Some(existing) = &existing
        && as_applied(applied, target, existing)
    {
        return Ok(Installed {
            crd: existing.clone(),
            hash: schema_hash(existing),
        });
    }
    if existing.is_some() && update == UpdatePolicy::Once {
        return established(consumer, &api.name, wait).await;
    }
    let source = fetch_source(provider, api, source).await?;
    let source_hash = source.hash();
    if let Some(existing) = &existing
        && is_established(existing)
        && applied.unchanged(connection, &api.name, &source_hash, existing)
        && records_provider(existing, provider_uid)
    {
        // Same schema under a new revision (a label change, say): remember the revision.
        applied.record(connection, &api.name, &source_hash, revision, existing);
        return Ok(Installed {
            crd: existing.clone(),
            hash: schema_hash(existing),
        });
    }
    let stored = existing
        .as_ref()
        .and_then(|crd| crd.status.as_ref())
        .and_then(|status| status.stored_versions.clone())
        .unwrap_or_default();
    let mut desired = desired_crd(consumer, policies, connection, api, source, &stored).await?;
    if let Some(uid) = provider_uid {
        desired
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(PROVIDER_CLUSTER_UID_ANNOTATION.to_string(), uid.to_string());
    }
    // Optimistic lock on the CRD just judged: if it changed hands since (annotation removed
    // or re-pinned), the write fails with a conflict and the next reconcile judges again.
    desired.metadata.resource_version = existing.and_then(|crd| crd.metadata.resource_version);
    crds.patch(
        &api.name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&desired),
    )
    .await
    .map_err(apply_failed)?;
    metrics()
        .schema_applies
        .get_or_create(&ApiLabels {
            api: api.name.clone(),
        })
        .inc();
    let installed = established(consumer, &api.name, wait).await?;
    applied.record(
        connection,
        &api.name,
        &source_hash,
        revision,
        &installed.crd,
    );
    Ok(installed)
}

/// Whether `existing` is the consumer CRD the target wants with nothing to write: kbind's for
/// the target's Connection, Established, and either kept as installed (`updatePolicy: Once`)
/// or last applied from the provider's current revision and untouched since. Callers holding a
/// watched copy use it to skip the install path (and its reads) altogether.
pub fn as_applied(
    applied: &AppliedSchemas,
    target: &Target<'_>,
    existing: &CustomResourceDefinition,
) -> bool {
    let name = &target.api.name;
    managed::check(name, Some(existing), target.connection).is_ok()
        && is_established(existing)
        && (target.update == UpdatePolicy::Once
            || (records_provider(existing, target.provider_uid)
                && target.revision.is_some_and(|revision| {
                    applied.unchanged_revision(target.connection, name, revision, existing)
                })))
}

/// Whether `existing` records `provider_uid` (when known) as the cluster it was installed
/// from: a CRD installed before kbind recorded it is applied once more to record it, so that
/// it can be handed over later ([`super::handover`]).
fn records_provider(existing: &CustomResourceDefinition, provider_uid: Option<&str>) -> bool {
    provider_uid.is_none_or(|uid| recorded_provider(existing) == Some(uid))
}

/// Where a consumer CRD comes from: the provider's CRD, or the facts synthesis needs.
enum Source {
    Crd(Box<CustomResourceDefinition>),
    OpenApi(Box<SchemaInput>),
}

impl Source {
    /// Hash of what the provider gave, to tell a changed schema from an unchanged one.
    fn hash(&self) -> String {
        match self {
            Self::Crd(crd) => source_hash(&crd.spec),
            Self::OpenApi(input) => source_hash(input),
        }
    }
}

/// Reads the provider's side of `api`'s schema.
async fn fetch_source(
    provider: &kube::Client,
    api: &ExportedApi,
    source: SchemaSource,
) -> Result<Source, SchemaError> {
    match source {
        SchemaSource::OpenApi => {
            let facts = fetch_facts(provider, api).await?;
            Ok(Source::OpenApi(Box::new(facts.synthesis_input())))
        }
        SchemaSource::Crd | SchemaSource::Auto => {
            let crds: Api<CustomResourceDefinition> = Api::all(provider.clone());
            let crd = crds
                .get(&api.name)
                .await
                .map_err(|source| SchemaError::ProviderRead {
                    api: api.name.clone(),
                    source,
                })?;
            Ok(Source::Crd(Box::new(crd)))
        }
    }
}

/// The CRD the consumer should have for `api`: the source's CRD, cut down to what a
/// consumer needs (see [`super::sanitize`]), refused when one of its names is a built-in or
/// aggregated consumer resource's ([`super::taken`]). `stored` is the existing consumer CRD's
/// `status.storedVersions`.
async fn desired_crd(
    consumer: &kube::Client,
    policies: &Policies,
    connection: &str,
    api: &ExportedApi,
    source: Source,
    stored: &[String],
) -> Result<CustomResourceDefinition, SchemaError> {
    let (raw, conversion) = match source {
        Source::OpenApi(input) => {
            let policies = policies.for_connection(connection);
            let raw = policies.synthesize_schema(&input).await.map_err(|source| {
                SchemaError::Synthesis {
                    api: api.name.clone(),
                    source,
                }
            })?;
            // Whatever conversion the module's answer declares, OpenAPI does not say how the
            // provider converts between versions.
            (raw, Conversion::Unknown)
        }
        Source::Crd(crd) => {
            let conversion = Conversion::of_crd(&crd);
            (*crd, conversion)
        }
    };
    // Read whatever the source's names: the host checks them, not the module.
    let taken = TakenNames::discover(consumer, api)
        .await
        .map_err(|source| SchemaError::ConsumerDiscovery {
            api: api.name.clone(),
            source,
        })?;
    let versioning = Versioning { conversion, stored };
    let crd = consumer_crd(&raw, api, connection, &taken, versioning).map_err(|detail| {
        SchemaError::Unacceptable {
            api: api.name.clone(),
            detail,
        }
    })?;
    if let Some(found) = collision(&crd.spec.names, &taken) {
        return Err(SchemaError::NameCollision {
            api: api.name.clone(),
            field: found.field,
            name: found.name,
            holder: found.holder,
        });
    }
    let kept = &crd.spec.names;
    if kept.short_names != raw.spec.names.short_names
        || kept.categories != raw.spec.names.categories
    {
        debug!(
            api = %api.name,
            offered_short_names = ?raw.spec.names.short_names,
            kept_short_names = ?kept.short_names,
            offered_categories = ?raw.spec.names.categories,
            kept_categories = ?kept.categories,
            "short names or categories that shadow other consumer resources (or `all`) dropped"
        );
    }
    Ok(crd)
}

/// Waits until the consumer CRD `name` is Established, for at most `wait`.
pub async fn established(
    consumer: &kube::Client,
    name: &str,
    wait: Duration,
) -> Result<Installed, SchemaError> {
    let crds: Api<CustomResourceDefinition> = Api::all(consumer.clone());
    let deadline = tokio::time::Instant::now() + wait;
    let mut detail = String::from("no Established condition yet");
    loop {
        let crd = crds.get(name).await.map_err(|source| SchemaError::Apply {
            crd: name.to_string(),
            source,
        })?;
        if is_established(&crd) {
            let hash = schema_hash(&crd);
            return Ok(Installed { crd, hash });
        }
        let conditions = crd.status.as_ref().and_then(|s| s.conditions.as_ref());
        if let Some(condition) = conditions
            .into_iter()
            .flatten()
            .find(|c| c.type_ == "Established")
        {
            detail = condition.message.clone().unwrap_or_default();
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(SchemaError::NotEstablished {
                crd: name.to_string(),
                waited: wait,
                detail,
            });
        }
        tokio::time::sleep(ESTABLISHED_POLL).await;
    }
}

/// Whether a CRD's Established condition is True: the API server serves it.
pub fn is_established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

/// Short hash of a CRD's spec, stable across reads.
pub fn schema_hash(crd: &CustomResourceDefinition) -> String {
    let bytes = serde_json::to_vec(&crd.spec).unwrap_or_default();
    Sha256::digest(&bytes)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}
