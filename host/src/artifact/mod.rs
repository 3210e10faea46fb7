//! Policy modules shipped like software: a reference ([`PolicyRef`]) names a module built
//! in, on disk, or in an OCI registry; the [`Fetcher`] resolves a registry reference to a
//! manifest digest, pulls the module by the Wasm artifact conventions, checks every byte
//! against its digest, and keeps it in a disk cache by digest.
//!
//! ```text
//! oci://REG/REPO:TAG ─▶ pinned by digest and cached? ─yes─▶ cache (checked) ─┐
//!                          │ no                                              │
//!                          ▼                                                 ▼
//!                 registry: manifest ─▶ module layer (digests checked) ─▶ Fetched {digest, module}
//!                          │ no answer (down, timeout, 5xx)                  ▲
//!                          └─▶ the tag's last digest in the cache ───────────┘
//!                              none: Unavailable (the caller fails closed)
//! ```
//!
//! With verification configured ([`Verification`]), every module fetched (pulled, or read
//! from the cache) must carry a Sigstore bundle that verifies ([`verify`], found by
//! [`signature`]) before it is handed on; a bundle that verified is cached beside the module,
//! so a restart with the registry down verifies the cached copy again, offline.
//!
//! A tag is resolved when asked (at start-up, or when its reference changes), never on a
//! timer. The registry's definitive answers (a missing tag, a refused credential, a tampered
//! blob) are errors even when the cache holds an older copy: only an unreachable registry
//! lets the cache stand in.

mod cache;
mod credentials;
mod digest;
mod error;
pub mod metadata;
mod reference;
pub mod sign;
mod signature;
pub mod verify;
mod wire;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use oci_client::Client;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::OciImageManifest;
use tracing::warn;

pub use cache::{Cache, CacheError};
pub use credentials::{Credentials, CredentialsError, DOCKER_CONFIG_JSON_KEY, from_pull_secret};
pub use digest::sha256_digest;
pub use error::FetchError;
pub use metadata::ModuleMetadata;
pub use reference::{BUILTIN, OCI_SCHEME, OciRef, PolicyRef, ReferenceError, valid_digest};
pub use verify::{Verification, VerifyConfigError};
pub use wire::{
    LEGACY_WASM_LAYER_MEDIA_TYPE, MAX_MODULE_BYTES, PushMeta, WASM_CONFIG_MEDIA_TYPE,
    WASM_LAYER_MEDIA_TYPE,
};

/// How long connecting to a registry may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a registry may stay silent in the middle of an answer.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How the fetcher reaches registries and where it caches.
#[derive(Debug, Clone, Default)]
pub struct FetcherConfig {
    /// The disk cache directory; none keeps pulled modules in memory only (a restart with
    /// the registry down then fails closed).
    pub cache_dir: Option<PathBuf>,
    /// Registries (`host:port`) spoken to over plain HTTP; every other one over TLS.
    pub plain_http: Vec<String>,
    /// Credentials per registry.
    pub credentials: Credentials,
    /// Who may sign modules; nothing configured: modules are not verified.
    pub verification: Verification,
}

/// Where a fetched module's bytes came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchedFrom {
    /// Pulled from the registry just now.
    Registry,
    /// Read from the disk cache (pinned and cached, or the registry unreachable).
    Cache,
}

/// A module resolved, pulled and checked.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The reference as asked.
    pub reference: OciRef,
    /// The manifest digest it resolved to: what `@sha256:` pins.
    pub digest: String,
    /// The module layer's digest.
    pub module_digest: String,
    /// The component bytes.
    pub module: Vec<u8>,
    /// The manifest bytes (what a signature covers).
    pub manifest: Vec<u8>,
    /// The manifest's annotations (`org.opencontainers.image.*`, `io.kbind.policy.*`).
    pub annotations: BTreeMap<String, String>,
    /// Registry or cache.
    pub from: FetchedFrom,
    /// The digest the cache had for the tag before this pull, when it had one: a different
    /// one means the tag moved.
    pub previous_digest: Option<String>,
}

impl Fetched {
    /// The reference pinned to what it resolved to (`oci://REG/REPO:TAG@sha256:...`).
    pub fn pinned(&self) -> OciRef {
        self.reference.pinned(&self.digest)
    }
}

/// Pulls modules from registries through the disk cache.
pub struct Fetcher {
    client: Client,
    credentials: Credentials,
    cache: Option<Cache>,
    verification: Verification,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher")
            .field("credentials", &self.credentials)
            .field("cache", &self.cache.as_ref().map(Cache::path))
            .field("verification", &self.verification)
            .finish()
    }
}

impl Fetcher {
    /// A fetcher with `config`; opens (creating) the cache directory.
    pub fn new(config: FetcherConfig) -> Result<Self, FetchError> {
        // The registry client's TLS uses the process's rustls provider: ring, the one the
        // Kubernetes clients use. Already installed is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let protocol = if config.plain_http.is_empty() {
            ClientProtocol::Https
        } else {
            ClientProtocol::HttpsExcept(config.plain_http.clone())
        };
        let client = Client::try_from(ClientConfig {
            protocol,
            connect_timeout: Some(CONNECT_TIMEOUT),
            read_timeout: Some(READ_TIMEOUT),
            ..ClientConfig::default()
        })
        .map_err(|e| FetchError::Client(e.to_string()))?;
        let cache = config.cache_dir.as_deref().map(Cache::open).transpose()?;
        Ok(Self {
            client,
            credentials: config.credentials,
            cache,
            verification: config.verification,
        })
    }

    /// A value that changes when this fetcher's credentials do (never the credentials).
    pub fn credentials_fingerprint(&self) -> u64 {
        self.credentials.fingerprint()
    }

    /// Resolves and pulls `reference` (see the module docs for when the cache stands in);
    /// with verification configured, only a module whose signature verifies is returned. A
    /// registry refusing authentication is answered with whose credentials were sent.
    pub async fn fetch(&self, reference: &OciRef) -> Result<Fetched, FetchError> {
        let fetched = self
            .fetch_unverified(reference)
            .await
            .map_err(|e| e.with_credentials(|| self.credentials.describe(&reference.registry)))?;
        if self.verification.is_enabled() {
            self.verify(&fetched).await?;
        }
        Ok(fetched)
    }

    /// Checks that a bundle attached to `fetched`'s manifest verifies: from the registry, or
    /// (the registry unreachable) the bundle that verified before, kept in the cache.
    async fn verify(&self, fetched: &Fetched) -> Result<(), FetchError> {
        let auth = self.credentials.for_registry(&fetched.reference.registry);
        let remembered = format!("signature of {}", fetched.digest);
        let bundles = match signature::bundles(
            &self.client,
            &auth,
            &fetched.reference,
            &fetched.digest,
        )
        .await
        {
            Ok(bundles) => bundles,
            Err(e) if e.is_transient() => {
                let cached = match &self.cache {
                    Some(cache) => match cache.tag(&remembered)? {
                        Some(digest) => cache.blob(&digest)?,
                        None => None,
                    },
                    None => None,
                };
                match cached {
                    Some(bundle) => vec![bundle],
                    None => {
                        return Err(FetchError::Unavailable {
                            reference: fetched.reference.to_string(),
                            cause: Box::new(e),
                        });
                    }
                }
            }
            Err(e) => return Err(e),
        };
        if bundles.is_empty() {
            return Err(FetchError::Unsigned {
                reference: fetched.pinned().to_string(),
                trusted: self.verification.describe(),
            });
        }
        let mut reasons = Vec::new();
        for bundle in &bundles {
            match self
                .verification
                .verify_bundle(&fetched.manifest, bundle)
                .await
            {
                Ok(()) => {
                    if let Some(cache) = &self.cache {
                        let digest = sha256_digest(bundle);
                        if let Err(e) = cache
                            .put_blob(&digest, bundle)
                            .and_then(|()| cache.record_tag(&remembered, &digest))
                        {
                            warn!(reference = %fetched.reference, error = %e, "the policy cache could not keep a signature");
                        }
                    }
                    return Ok(());
                }
                Err(reason) => reasons.push(reason),
            }
        }
        Err(FetchError::Unverified {
            reference: fetched.pinned().to_string(),
            reasons: reasons.join(" | "),
        })
    }

    /// Signs the module `reference` names with `key` and attaches the bundle to it; returns
    /// the pinned reference that was signed.
    pub async fn sign(
        &self,
        reference: &OciRef,
        key: &sign::KeyPair,
    ) -> Result<OciRef, FetchError> {
        self.sign_with(reference, |manifest| {
            sign::message_bundle(key, manifest).map_err(|e| e.to_string())
        })
        .await
    }

    /// Attaches the bundle `make_bundle` makes over the manifest `reference` names (a key
    /// signature, or a keyless one made by a Fulcio elsewhere); returns the pinned reference
    /// that was signed.
    pub async fn sign_with(
        &self,
        reference: &OciRef,
        make_bundle: impl FnOnce(&[u8]) -> Result<Vec<u8>, String>,
    ) -> Result<OciRef, FetchError> {
        let auth = self.credentials.for_registry(&reference.registry);
        let pulled = wire::pull_manifest(&self.client, &auth, reference).await?;
        let bundle = make_bundle(&pulled.bytes).map_err(FetchError::Sign)?;
        signature::attach(
            &self.client,
            &auth,
            reference,
            (&pulled.digest, pulled.bytes.len()),
            &bundle,
        )
        .await?;
        Ok(reference.pinned(&pulled.digest))
    }

    async fn fetch_unverified(&self, reference: &OciRef) -> Result<Fetched, FetchError> {
        if let Some(digest) = &reference.digest
            && let Some(cached) = self.cached(reference, digest)?
        {
            return Ok(cached);
        }
        match self.pull(reference).await {
            Ok(mut fetched) => {
                fetched.previous_digest = match (&self.cache, reference.tagged()) {
                    (Some(cache), Some(tagged)) => cache.tag(&tagged).ok().flatten(),
                    _ => None,
                };
                self.store(&fetched);
                Ok(fetched)
            }
            Err(e) if e.is_transient() => {
                let remembered = match (&reference.digest, reference.tagged(), &self.cache) {
                    (Some(digest), _, _) => Some(digest.clone()),
                    (None, Some(tagged), Some(cache)) => cache.tag(&tagged)?,
                    _ => None,
                };
                let cached = match remembered {
                    Some(digest) => self.cached(reference, &digest)?,
                    None => None,
                };
                match cached {
                    Some(fetched) => {
                        warn!(reference = %reference, digest = %fetched.digest, error = %e,
                            "registry unreachable: using the cached module this reference last resolved to");
                        Ok(fetched)
                    }
                    None => Err(FetchError::Unavailable {
                        reference: reference.to_string(),
                        cause: Box::new(e),
                    }),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Pulls from the registry, checking every digest.
    async fn pull(&self, reference: &OciRef) -> Result<Fetched, FetchError> {
        let auth = self.credentials.for_registry(&reference.registry);
        let pulled = wire::pull_manifest(&self.client, &auth, reference).await?;
        let (module_digest, module) =
            wire::pull_module(&self.client, reference, &pulled.manifest).await?;
        if let Some(cache) = &self.cache
            && let Err(e) = cache.put_blob(&pulled.digest, &pulled.bytes)
        {
            warn!(error = %e, "the policy cache could not keep a manifest");
        }
        Ok(Fetched {
            reference: reference.clone(),
            digest: pulled.digest,
            module_digest,
            module,
            manifest: pulled.bytes,
            annotations: pulled.manifest.annotations.unwrap_or_default(),
            from: FetchedFrom::Registry,
            previous_digest: None,
        })
    }

    /// Keeps a pulled module (and where its tag pointed) in the cache; a failure only costs
    /// the ability to start with the registry down, so it is logged, not returned.
    fn store(&self, fetched: &Fetched) {
        let Some(cache) = &self.cache else { return };
        let mut stored = cache.put_blob(&fetched.module_digest, &fetched.module);
        if let (Ok(()), Some(tagged)) = (&stored, fetched.reference.tagged()) {
            stored = cache.record_tag(&tagged, &fetched.digest);
        }
        if let Err(e) = stored {
            warn!(reference = %fetched.reference, error = %e, "the policy cache could not keep a module");
        }
    }

    /// The module `digest` names, from the cache (every blob checked), if it is there whole.
    fn cached(&self, reference: &OciRef, digest: &str) -> Result<Option<Fetched>, FetchError> {
        let Some(cache) = &self.cache else {
            return Ok(None);
        };
        let Some(manifest_bytes) = cache.blob(digest)? else {
            return Ok(None);
        };
        let manifest: OciImageManifest = wire::parse_manifest(reference, &manifest_bytes)?;
        let layer = wire::module_layer(reference, &manifest)?;
        let Some(module) = cache.blob(&layer.digest)? else {
            return Ok(None);
        };
        Ok(Some(Fetched {
            reference: reference.clone(),
            digest: digest.to_owned(),
            module_digest: layer.digest.clone(),
            module,
            manifest: manifest_bytes,
            annotations: manifest.annotations.unwrap_or_default(),
            from: FetchedFrom::Cache,
            previous_digest: None,
        }))
    }

    /// Pushes `module` as `reference` (which must name a tag); returns the manifest digest.
    pub async fn push(
        &self,
        reference: &OciRef,
        module: &[u8],
        meta: &PushMeta,
    ) -> Result<String, FetchError> {
        let auth = self.credentials.for_registry(&reference.registry);
        wire::push(&self.client, &auth, reference, module, meta).await
    }

    /// The manifest and config of `reference` as the registry has them (for `inspect`).
    pub async fn describe(&self, reference: &OciRef) -> Result<Description, FetchError> {
        let auth = self.credentials.for_registry(&reference.registry);
        let pulled = wire::pull_manifest(&self.client, &auth, reference).await?;
        let config = wire::pull_config(&self.client, reference, &pulled.manifest).await?;
        Ok(Description {
            digest: pulled.digest,
            manifest: serde_json::from_slice(&pulled.bytes).unwrap_or_default(),
            config: serde_json::from_slice(&config).unwrap_or_default(),
        })
    }
}

/// A registry artifact's manifest and config, as JSON.
#[derive(Debug, Clone)]
pub struct Description {
    /// The manifest digest.
    pub digest: String,
    /// The manifest.
    pub manifest: serde_json::Value,
    /// The config blob.
    pub config: serde_json::Value,
}
