//! Why a schema could not be installed, one variant per step of installing it (provider
//! read, OpenAPI facts, synthesis, consumer discovery, name collision, apply, Established),
//! shared by the install path and the OpenAPI reader.

use std::time::Duration;

use super::managed::Refusal;
use crate::policy::PolicyError;

/// Why a schema could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// kbind may not install or update this consumer CRD for the Connection (a protected
    /// group, a CRD kbind did not install, or one pinned to another Connection).
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// Reading the provider's schema failed.
    #[error("reading the schema of {api} from the provider failed: {source}")]
    ProviderRead {
        /// The API.
        api: String,
        /// The client error.
        source: kube::Error,
    },
    /// A bounded read of the provider's discovery or `/openapi/v3` index failed (too large
    /// for its cap, broken off, not JSON, or refused).
    #[error("reading the schema of {api} from the provider failed: {source}")]
    Read {
        /// The API.
        api: String,
        /// What the bounded read said.
        source: crate::provider::limits::ReadError,
    },
    /// The provider's OpenAPI document lacks what synthesis needs.
    #[error("the provider's discovery or OpenAPI document for {api} is unusable: {detail}")]
    OpenApi {
        /// The API.
        api: String,
        /// What is wrong.
        detail: String,
    },
    /// Discovery serves the API's group-version, but `/openapi/v3` does not list its document
    /// yet: the provider publishes a new group's document a moment after serving it.
    #[error(
        "waiting for the provider to publish the OpenAPI document of {group_version} (for {api}) in /openapi/v3"
    )]
    NotPublished {
        /// The API.
        api: String,
        /// `<group>/<version>`.
        group_version: String,
    },
    /// The CRD the source gave (provider CRD or synthesis module) is not one for this API.
    #[error("the CRD the schema source gave for {api} is unacceptable: {detail}")]
    Unacceptable {
        /// The API.
        api: String,
        /// What is wrong with it.
        detail: String,
    },
    /// Reading the consumer's discovery (to keep the CRD's names from shadowing other
    /// resources) failed.
    #[error("reading the consumer's API discovery for {api} failed: {source}")]
    ConsumerDiscovery {
        /// The API.
        api: String,
        /// The client error.
        source: kube::Error,
    },
    /// The schema-synthesis policy failed.
    #[error("synthesizing a CRD for {api} failed: {source}")]
    Synthesis {
        /// The API.
        api: String,
        /// The policy error.
        source: PolicyError,
    },
    /// Writing the CRD to the consumer failed (including the API server rejecting it).
    #[error("installing CRD {crd} on the consumer failed: {source}")]
    Apply {
        /// The CRD name.
        crd: String,
        /// The client error.
        source: kube::Error,
    },
    /// The CRD's plural, singular or kind is a name a built-in or aggregated consumer resource
    /// already answers to: installing it would change what `kubectl get <name>` means.
    #[error(
        "{api} is not installed: its {field} {name:?} is a name the consumer already serves ({holder}), and a second resource answering to it would change what `kubectl get {name}` means; ask the provider to export it under another name, and remove {api} from the binding's apis"
    )]
    NameCollision {
        /// The API.
        api: String,
        /// Which of its names collides (`plural`, `singular`, `kind`).
        field: &'static str,
        /// The colliding name.
        name: String,
        /// The consumer resource answering to it.
        holder: String,
    },
    /// The CRD did not become Established in time.
    #[error("CRD {crd} is not Established on the consumer after {waited:?}: {detail}")]
    NotEstablished {
        /// The CRD name.
        crd: String,
        /// How long we waited.
        waited: Duration,
        /// The last condition message seen.
        detail: String,
    },
}
