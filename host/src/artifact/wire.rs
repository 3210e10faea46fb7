//! The Wasm OCI artifact conventions (those of wasm-pkg-tools and the CNCF TAG Runtime's
//! Wasm artifact guidance) spoken through `oci-client`: an image manifest with one module
//! layer (`application/wasm`, or Kubewarden's older
//! `application/vnd.wasm.content.layer.v1+wasm`) and a `application/vnd.wasm.config.v0+json`
//! config. Every byte read is checked here against the digest that named it, whatever the
//! client library did already: the manifest against the reference's digest, each blob
//! against its descriptor.

use std::collections::BTreeMap;

use futures::StreamExt as _;
use oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
use serde_json::json;

use super::digest::sha256_digest;
use super::error::FetchError;
use super::reference::OciRef;

/// The module layer's media type.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// Kubewarden's (and older oci-wasm tools') module layer media type, still accepted.
pub const LEGACY_WASM_LAYER_MEDIA_TYPE: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// The config's media type.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";

/// The largest module layer pulled; a larger one is refused before it is read.
pub const MAX_MODULE_BYTES: u64 = 64 * 1024 * 1024;
/// The largest config blob pulled.
const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// The registry-side reference (`oci-client`'s type) of an [`OciRef`].
pub fn client_reference(reference: &OciRef) -> Reference {
    let (registry, repository) = (reference.registry.clone(), reference.repository.clone());
    match (&reference.tag, &reference.digest) {
        (Some(tag), Some(digest)) => {
            Reference::with_tag_and_digest(registry, repository, tag.clone(), digest.clone())
        }
        (None, Some(digest)) => Reference::with_digest(registry, repository, digest.clone()),
        (tag, None) => Reference::with_tag(
            registry,
            repository,
            tag.clone().unwrap_or_else(|| "latest".to_owned()),
        ),
    }
}

/// A manifest as pulled: its bytes (checked) and what they say.
pub struct PulledManifest {
    /// The manifest digest: what the reference resolved to.
    pub digest: String,
    /// The raw bytes, as the digest covers them.
    pub bytes: Vec<u8>,
    /// Parsed.
    pub manifest: OciImageManifest,
}

/// Pulls and checks the manifest `reference` names.
pub async fn pull_manifest(
    client: &Client,
    auth: &RegistryAuth,
    reference: &OciRef,
) -> Result<PulledManifest, FetchError> {
    let image = client_reference(reference);
    let (bytes, _) = client
        .pull_manifest_raw(&image, auth, &[OCI_IMAGE_MEDIA_TYPE])
        .await
        .map_err(|e| FetchError::from_client(reference, "pulling the manifest", e))?;
    let bytes = bytes.to_vec();
    let digest = sha256_digest(&bytes);
    if let Some(expected) = &reference.digest
        && *expected != digest
    {
        return Err(FetchError::DigestMismatch {
            reference: reference.to_string(),
            what: "manifest".to_owned(),
            expected: expected.clone(),
            actual: digest,
        });
    }
    let manifest = parse_manifest(reference, &bytes)?;
    Ok(PulledManifest {
        digest,
        bytes,
        manifest,
    })
}

/// Parses a manifest and checks it is a Wasm module artifact.
pub fn parse_manifest(reference: &OciRef, bytes: &[u8]) -> Result<OciImageManifest, FetchError> {
    let manifest: OciImageManifest =
        serde_json::from_slice(bytes).map_err(|e| FetchError::NotAModule {
            reference: reference.to_string(),
            message: format!("its manifest is not an OCI image manifest: {e}"),
        })?;
    module_layer(reference, &manifest)?;
    Ok(manifest)
}

/// The manifest's one module layer.
pub fn module_layer<'m>(
    reference: &OciRef,
    manifest: &'m OciImageManifest,
) -> Result<&'m OciDescriptor, FetchError> {
    let modules: Vec<&OciDescriptor> = manifest
        .layers
        .iter()
        .filter(|l| {
            l.media_type == WASM_LAYER_MEDIA_TYPE || l.media_type == LEGACY_WASM_LAYER_MEDIA_TYPE
        })
        .collect();
    match modules.as_slice() {
        [one] => Ok(one),
        [] => Err(FetchError::NotAModule {
            reference: reference.to_string(),
            message: format!(
                "it has no layer of media type {WASM_LAYER_MEDIA_TYPE} (layers: {})",
                manifest
                    .layers
                    .iter()
                    .map(|l| l.media_type.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }),
        more => Err(FetchError::NotAModule {
            reference: reference.to_string(),
            message: format!(
                "it has {} module layers; a policy artifact holds one",
                more.len()
            ),
        }),
    }
}

/// Pulls the blob `descriptor` names, at most `limit` bytes, and checks it against the
/// descriptor's digest.
pub async fn pull_blob(
    client: &Client,
    reference: &OciRef,
    descriptor: &OciDescriptor,
    what: &str,
    limit: u64,
) -> Result<Vec<u8>, FetchError> {
    let too_large = || FetchError::TooLarge {
        reference: reference.to_string(),
        what: what.to_owned(),
        limit,
    };
    if u64::try_from(descriptor.size).unwrap_or(u64::MAX) > limit {
        return Err(too_large());
    }
    let image = client_reference(reference);
    let mut stream = client
        .pull_blob_stream(&image, descriptor)
        .await
        .map_err(|e| FetchError::from_client(reference, "pulling a blob", e))?
        .stream;
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(chunk) => chunk,
            // The library checks the digest too, and says so with an error at the end: the
            // check below names the mismatch.
            Err(e) if is_digest_error(&e) => break,
            Err(e) => return Err(FetchError::unreachable(reference, "reading a blob", &e)),
        };
        bytes.extend_from_slice(&chunk);
        if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > limit {
            return Err(too_large());
        }
    }
    let actual = sha256_digest(&bytes);
    if actual != descriptor.digest {
        return Err(FetchError::DigestMismatch {
            reference: reference.to_string(),
            what: what.to_owned(),
            expected: descriptor.digest.clone(),
            actual,
        });
    }
    Ok(bytes)
}

/// Whether a stream error is the client library's own digest check failing.
fn is_digest_error(error: &std::io::Error) -> bool {
    error
        .get_ref()
        .is_some_and(|inner| inner.is::<oci_client::errors::DigestError>())
}

/// Pulls the module layer.
pub async fn pull_module(
    client: &Client,
    reference: &OciRef,
    manifest: &OciImageManifest,
) -> Result<(String, Vec<u8>), FetchError> {
    let layer = module_layer(reference, manifest)?;
    let bytes = pull_blob(client, reference, layer, "module", MAX_MODULE_BYTES).await?;
    Ok((layer.digest.clone(), bytes))
}

/// Pulls the config blob (for `inspect`).
pub async fn pull_config(
    client: &Client,
    reference: &OciRef,
    manifest: &OciImageManifest,
) -> Result<Vec<u8>, FetchError> {
    pull_blob(
        client,
        reference,
        &manifest.config,
        "config",
        MAX_CONFIG_BYTES,
    )
    .await
}

/// What a push sends besides the module: the world it exports and the manifest's annotations.
#[derive(Debug, Clone, Default)]
pub struct PushMeta {
    /// The WIT world the module implements (the config's `component.exports`).
    pub world: Option<String>,
    /// Manifest annotations (`org.opencontainers.image.*`, `io.kbind.policy.role`).
    pub annotations: BTreeMap<String, String>,
}

/// Pushes `module` as `reference` (which names a tag) by the Wasm artifact conventions;
/// returns the manifest digest.
pub async fn push(
    client: &Client,
    auth: &RegistryAuth,
    reference: &OciRef,
    module: &[u8],
    meta: &PushMeta,
) -> Result<String, FetchError> {
    let image = client_reference(reference);
    let failed = |e| FetchError::from_client(reference, "pushing", e);
    client
        .auth(&image, auth, RegistryOperation::Push)
        .await
        .map_err(failed)?;
    let layer_digest = sha256_digest(module);
    let config = json!({
        "created": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
        "component": {
            "exports": meta.world.iter().collect::<Vec<_>>(),
            "imports": [],
        },
    });
    let config = serde_json::to_vec(&config).map_err(|e| FetchError::NotAModule {
        reference: reference.to_string(),
        message: format!("encoding its config: {e}"),
    })?;
    let config_digest = sha256_digest(&config);
    let size = |bytes: &[u8]| i64::try_from(bytes.len()).unwrap_or(i64::MAX);
    let manifest = OciImageManifest {
        schema_version: 2,
        media_type: Some(OCI_IMAGE_MEDIA_TYPE.to_owned()),
        config: OciDescriptor {
            media_type: WASM_CONFIG_MEDIA_TYPE.to_owned(),
            digest: config_digest.clone(),
            size: size(&config),
            ..OciDescriptor::default()
        },
        layers: vec![OciDescriptor {
            media_type: WASM_LAYER_MEDIA_TYPE.to_owned(),
            digest: layer_digest.clone(),
            size: size(module),
            ..OciDescriptor::default()
        }],
        annotations: Some(meta.annotations.clone()).filter(|a| !a.is_empty()),
        ..OciImageManifest::default()
    };
    let manifest = serde_json::to_vec(&manifest).map_err(|e| FetchError::NotAModule {
        reference: reference.to_string(),
        message: format!("encoding its manifest: {e}"),
    })?;
    client
        .push_blob(&image, module.to_vec(), &layer_digest)
        .await
        .map_err(failed)?;
    client
        .push_blob(&image, config, &config_digest)
        .await
        .map_err(failed)?;
    client
        .push_manifest_raw(
            &image,
            manifest.clone(),
            http::HeaderValue::from_static(OCI_IMAGE_MEDIA_TYPE),
        )
        .await
        .map_err(failed)?;
    Ok(sha256_digest(&manifest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference() -> OciRef {
        OciRef {
            registry: "r.example".into(),
            repository: "acme/conflict".into(),
            tag: Some("v1".into()),
            digest: None,
        }
    }

    fn manifest(layers: &[&str]) -> OciImageManifest {
        OciImageManifest {
            layers: layers
                .iter()
                .map(|media_type| OciDescriptor {
                    media_type: (*media_type).to_owned(),
                    digest: sha256_digest(media_type.as_bytes()),
                    size: 1,
                    ..OciDescriptor::default()
                })
                .collect(),
            ..OciImageManifest::default()
        }
    }

    #[test]
    fn the_module_layer_is_found_under_either_wasm_media_type() {
        for media_type in [WASM_LAYER_MEDIA_TYPE, LEGACY_WASM_LAYER_MEDIA_TYPE] {
            let manifest = manifest(&[media_type]);
            let layer = module_layer(&reference(), &manifest).map(|l| l.media_type.clone());
            assert_eq!(layer.ok().as_deref(), Some(media_type));
        }
    }

    #[test]
    fn an_artifact_without_exactly_one_module_layer_is_not_a_module() {
        for layers in [
            &["application/vnd.oci.image.layer.v1.tar+gzip"][..],
            &[WASM_LAYER_MEDIA_TYPE, LEGACY_WASM_LAYER_MEDIA_TYPE],
            &[],
        ] {
            let refused = module_layer(&reference(), &manifest(layers)).map(|_| ());
            assert!(
                matches!(&refused, Err(e @ FetchError::NotAModule { .. }) if e.to_string().contains("konnector policy push")),
                "{layers:?}: {refused:?}"
            );
        }
    }

    #[test]
    fn a_reference_names_the_registry_side_by_tag_or_digest() {
        let digest = sha256_digest(b"m");
        assert_eq!(client_reference(&reference()).tag(), Some("v1"));
        let pinned = client_reference(&reference().pinned(&digest));
        assert_eq!(pinned.digest(), Some(digest.as_str()));
    }
}
