//! Where signatures live: cosign v3's layout of Sigstore bundles in a registry. A bundle is a
//! blob, named by a manifest whose `artifactType` is the bundle media type and whose `subject`
//! is the signed module's manifest. A registry with the OCI referrers API lists it there; for
//! one without it, the referrers tag scheme's index (tag `sha256-<hex>` of the subject)
//! lists it. `oci-client` asks the API and falls back to the tag on a 404; attaching writes the
//! tag's index when the API did not list the new signature.

use std::collections::BTreeMap;

use oci_client::manifest::{
    ImageIndexEntry, OCI_IMAGE_INDEX_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciDescriptor,
    OciImageIndex, OciImageManifest,
};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};

use super::digest::sha256_digest;
use super::error::FetchError;
use super::reference::OciRef;
use super::verify::BUNDLE_MEDIA_TYPE;
use super::wire::{client_reference, pull_blob};

/// The largest bundle read.
const MAX_BUNDLE_BYTES: u64 = 1024 * 1024;
/// At most this many signatures of one module are read.
const MAX_BUNDLES: usize = 16;
/// The OCI empty descriptor's media type and content: a bundle manifest's config.
const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
const EMPTY_CONFIG: &[u8] = b"{}";

/// The Sigstore bundles attached to the manifest `digest` of `reference`'s repository.
pub async fn bundles(
    client: &Client,
    auth: &RegistryAuth,
    reference: &OciRef,
    digest: &str,
) -> Result<Vec<Vec<u8>>, FetchError> {
    let subject = reference.pinned(digest);
    let image = client_reference(&subject);
    // Registers the credentials for the repository (the referrers call reuses them).
    client
        .auth(&image, auth, RegistryOperation::Pull)
        .await
        .map_err(|e| FetchError::from_client(reference, "listing signatures of", e))?;
    let index = client
        .pull_referrers(&image, Some(BUNDLE_MEDIA_TYPE))
        .await
        .map_err(|e| FetchError::from_client(reference, "listing signatures of", e))?;
    let mut found = Vec::new();
    for entry in index
        .manifests
        .iter()
        .filter(|e| e.artifact_type.as_deref() == Some(BUNDLE_MEDIA_TYPE))
        .take(MAX_BUNDLES)
    {
        let at = subject.pinned(&entry.digest);
        let (bytes, _) = client
            .pull_manifest_raw(&client_reference(&at), auth, &[OCI_IMAGE_MEDIA_TYPE])
            .await
            .map_err(|e| FetchError::from_client(&at, "pulling a signature manifest", e))?;
        if sha256_digest(&bytes) != entry.digest {
            // A referrer that is not what its index says is skipped, not trusted.
            continue;
        }
        let Ok(manifest) = serde_json::from_slice::<OciImageManifest>(&bytes) else {
            continue;
        };
        for layer in manifest
            .layers
            .iter()
            .filter(|l| l.media_type == BUNDLE_MEDIA_TYPE)
        {
            found.push(pull_blob(client, &at, layer, "signature", MAX_BUNDLE_BYTES).await?);
        }
    }
    Ok(found)
}

/// Attaches `bundle` to the manifest `digest` (of `size` bytes) of `reference`'s repository;
/// returns the digest of the signature's manifest.
pub async fn attach(
    client: &Client,
    auth: &RegistryAuth,
    reference: &OciRef,
    (digest, size): (&str, usize),
    bundle: &[u8],
) -> Result<String, FetchError> {
    let subject = reference.pinned(digest);
    let image = client_reference(&subject);
    let failed = |e| FetchError::from_client(reference, "attaching a signature to", e);
    client
        .auth(&image, auth, RegistryOperation::Push)
        .await
        .map_err(failed)?;
    let size_of = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let bundle_digest = sha256_digest(bundle);
    let empty_digest = sha256_digest(EMPTY_CONFIG);
    let created = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let annotations = BTreeMap::from([
        (
            "dev.sigstore.bundle.content".to_owned(),
            "message-signature".to_owned(),
        ),
        ("org.opencontainers.image.created".to_owned(), created),
    ]);
    let manifest = OciImageManifest {
        schema_version: 2,
        media_type: Some(OCI_IMAGE_MEDIA_TYPE.to_owned()),
        artifact_type: Some(BUNDLE_MEDIA_TYPE.to_owned()),
        config: OciDescriptor {
            media_type: EMPTY_MEDIA_TYPE.to_owned(),
            digest: empty_digest.clone(),
            size: size_of(EMPTY_CONFIG.len()),
            ..OciDescriptor::default()
        },
        layers: vec![OciDescriptor {
            media_type: BUNDLE_MEDIA_TYPE.to_owned(),
            digest: bundle_digest.clone(),
            size: size_of(bundle.len()),
            annotations: Some(BTreeMap::from([(
                "org.opencontainers.image.title".to_owned(),
                format!("{}.sigstore.json", bundle_digest.replace(':', "-")),
            )])),
            ..OciDescriptor::default()
        }],
        subject: Some(OciDescriptor {
            media_type: OCI_IMAGE_MEDIA_TYPE.to_owned(),
            digest: digest.to_owned(),
            size: size_of(size),
            ..OciDescriptor::default()
        }),
        annotations: Some(annotations.clone()),
    };
    let manifest = serde_json::to_vec(&manifest).map_err(|e| FetchError::NotAModule {
        reference: reference.to_string(),
        message: format!("encoding a signature manifest: {e}"),
    })?;
    let manifest_digest = sha256_digest(&manifest);
    client
        .push_blob(&image, EMPTY_CONFIG.to_vec(), &empty_digest)
        .await
        .map_err(failed)?;
    client
        .push_blob(&image, bundle.to_vec(), &bundle_digest)
        .await
        .map_err(failed)?;
    let at = client_reference(&subject.pinned(&manifest_digest));
    client
        .push_manifest_raw(
            &at,
            manifest.clone(),
            http::HeaderValue::from_static(OCI_IMAGE_MEDIA_TYPE),
        )
        .await
        .map_err(failed)?;
    let listed = client
        .pull_referrers(&image, None)
        .await
        .map_err(failed)?
        .manifests
        .iter()
        .any(|e| e.digest == manifest_digest);
    if !listed {
        // No referrers API: the tag scheme's index lists the signature.
        let entry = ImageIndexEntry {
            media_type: OCI_IMAGE_MEDIA_TYPE.to_owned(),
            digest: manifest_digest.clone(),
            size: size_of(manifest.len()),
            platform: None,
            annotations: Some(annotations),
            artifact_type: Some(BUNDLE_MEDIA_TYPE.to_owned()),
        };
        push_tag_index(client, auth, &image, reference, digest, entry).await?;
    }
    Ok(manifest_digest)
}

/// Adds `entry` to the referrers tag scheme's index of the subject `digest`.
async fn push_tag_index(
    client: &Client,
    auth: &RegistryAuth,
    image: &Reference,
    reference: &OciRef,
    digest: &str,
    entry: ImageIndexEntry,
) -> Result<(), FetchError> {
    let failed = |e| FetchError::from_client(reference, "attaching a signature to", e);
    let tag = Reference::with_tag(
        image.registry().to_owned(),
        image.repository().to_owned(),
        digest.replace(':', "-"),
    );
    let mut index = match client
        .pull_manifest_raw(&tag, auth, &[OCI_IMAGE_INDEX_MEDIA_TYPE])
        .await
    {
        Ok((bytes, _)) => serde_json::from_slice::<OciImageIndex>(&bytes).ok(),
        Err(_) => None,
    }
    .unwrap_or(OciImageIndex {
        schema_version: 2,
        media_type: Some(OCI_IMAGE_INDEX_MEDIA_TYPE.to_owned()),
        manifests: Vec::new(),
        artifact_type: None,
        annotations: None,
    });
    index.manifests.retain(|e| e.digest != entry.digest);
    index.manifests.push(entry);
    let bytes = serde_json::to_vec(&index).map_err(|e| FetchError::NotAModule {
        reference: reference.to_string(),
        message: format!("encoding the referrers index: {e}"),
    })?;
    client
        .push_manifest_raw(
            &tag,
            bytes,
            http::HeaderValue::from_static(OCI_IMAGE_INDEX_MEDIA_TYPE),
        )
        .await
        .map_err(failed)?;
    Ok(())
}
