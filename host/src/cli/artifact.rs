//! `konnector policy push`, `pull` and `inspect`: a policy module's way into and out of an
//! OCI registry, by the same Wasm artifact conventions as wasm-pkg-tools (an
//! `application/wasm` layer, a `application/vnd.wasm.config.v0+json` config). `push` checks
//! the module against its role's world before anything is sent, and embeds its metadata (name,
//! version, role, source) in the module and the manifest's annotations; `pull` checks every
//! digest; `inspect` says what a reference resolves to and what the module says it is;
//! `generate-key`, `sign` and `verify` make, attach and check Sigstore signatures (cosign v3's
//! bundle layout, so `cosign sign` and `cosign verify` interoperate).

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::ValueEnum as _;
use serde_json::{Value, json};

use crate::artifact::sign::KeyPair;
use crate::artifact::{
    Credentials, Fetcher, FetcherConfig, ModuleMetadata, OciRef, PolicyRef, PushMeta, Verification,
    metadata, sha256_digest,
};
use crate::policy::{Policies, PolicyRole, builtin, read_file};

/// How the commands reach registries.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RegistryArgs {
    /// A registry (`host:port`) reached over plain HTTP instead of TLS; repeat for more.
    #[arg(long = "plain-http-registry", value_name = "HOST:PORT")]
    pub plain_http: Vec<String>,
    /// A docker config file (`~/.docker/config.json`, or a pull Secret's
    /// `.dockerconfigjson`) with the registries' credentials; anonymous without it.
    #[arg(long, value_name = "FILE")]
    pub registry_config: Option<PathBuf>,
}

/// Who may sign policy modules: the konnector refuses a registry module whose signature does
/// not verify against one of these (none given: modules are not verified).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct VerifyArgs {
    /// A PEM public key (cosign.pub) whose signatures are trusted; repeat for more.
    #[arg(long = "policy-verify-key", visible_alias = "key", value_name = "FILE")]
    pub keys: Vec<PathBuf>,
    /// Keyless: the OIDC issuer of the signer's certificate (with --policy-verify-subject
    /// and --policy-trust-root).
    #[arg(
        long = "policy-verify-issuer",
        visible_alias = "certificate-oidc-issuer",
        value_name = "URL"
    )]
    pub issuer: Option<String>,
    /// Keyless: the signer's identity (the certificate's email or URI).
    #[arg(
        long = "policy-verify-subject",
        visible_alias = "certificate-identity",
        value_name = "IDENTITY"
    )]
    pub subject: Option<String>,
    /// Keyless: the Sigstore trust root (trusted_root.json: Fulcio CAs, CT log and
    /// transparency log keys).
    #[arg(
        long = "policy-trust-root",
        visible_alias = "trusted-root",
        value_name = "FILE"
    )]
    pub trust_root: Option<PathBuf>,
}

impl VerifyArgs {
    /// The verification these flags describe.
    pub fn verification(&self) -> anyhow::Result<Verification> {
        let mut verification = Verification::default();
        for path in &self.keys {
            let pem = read_file(path).with_context(|| format!("reading {}", path.display()))?;
            verification = verification.with_key(&path.display().to_string(), &pem)?;
        }
        match (&self.issuer, &self.subject, &self.trust_root) {
            (None, None, None) => {}
            (Some(issuer), Some(subject), Some(path)) => {
                let json =
                    read_file(path).with_context(|| format!("reading {}", path.display()))?;
                verification = verification.with_keyless(
                    issuer,
                    subject,
                    &path.display().to_string(),
                    &json,
                )?;
            }
            _ => return Err(crate::artifact::VerifyConfigError::IncompleteKeyless.into()),
        }
        Ok(verification)
    }
}

impl RegistryArgs {
    /// A fetcher without a disk cache.
    fn fetcher(&self) -> anyhow::Result<Fetcher> {
        self.verifying_fetcher(Verification::default())
    }

    /// A fetcher without a disk cache, verifying as `verification` says.
    fn verifying_fetcher(&self, verification: Verification) -> anyhow::Result<Fetcher> {
        let credentials = match &self.registry_config {
            None => Credentials::default(),
            Some(path) => Credentials::from_docker_config(
                &read_file(path).with_context(|| format!("reading {}", path.display()))?,
            )?,
        };
        Ok(Fetcher::new(FetcherConfig {
            cache_dir: None,
            plain_http: self.plain_http.clone(),
            credentials,
            verification,
        })?)
    }
}

/// What `push` writes into the module's metadata (flags win over what it carries already).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct MetadataArgs {
    /// The module's name (default: what it carries, else the file's name).
    #[arg(long)]
    pub name: Option<String>,
    /// The module's version (default: what it carries).
    #[arg(long)]
    pub version: Option<String>,
    /// Where its source lives, a repository URL (default: what it carries).
    #[arg(long)]
    pub source: Option<String>,
}

/// A registry reference from a [`PolicyRef`], or an error saying one is needed.
fn oci(reference: &PolicyRef) -> anyhow::Result<&OciRef> {
    match reference {
        PolicyRef::Oci(oci) => Ok(oci),
        other => bail!("{other} is not a registry reference (oci://REGISTRY/REPOSITORY:TAG)"),
    }
}

/// `konnector policy push`: checks, stamps and pushes; prints the pinned reference.
pub async fn push(
    role: PolicyRole,
    file: &std::path::Path,
    reference: &PolicyRef,
    meta: &MetadataArgs,
    registry: &RegistryArgs,
) -> anyhow::Result<String> {
    let target = oci(reference)?;
    if target.tag.is_none() || target.digest.is_some() {
        bail!("push to a tag (oci://REGISTRY/REPOSITORY:TAG); the digest is what the push returns");
    }
    let module = read_file(file).with_context(|| format!("reading {}", file.display()))?;
    // The same check as the konnector's at load: compiled, and implementing the role's world.
    Policies::builtin()?.with_module(role, &module, &file.display().to_string())?;
    let carried = metadata::read(&module).unwrap_or_default();
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stamped = ModuleMetadata {
        name: meta
            .name
            .clone()
            .or(Some(carried.name).filter(|n| !n.is_empty()))
            .unwrap_or(stem),
        version: meta.version.clone().unwrap_or(carried.version),
        role: role.name().to_owned(),
        source: meta.source.clone().unwrap_or(carried.source),
    };
    let module = metadata::embed(&module, &stamped)?;
    let digest = registry
        .fetcher()?
        .push(
            target,
            &module,
            &PushMeta {
                world: Some(role.world().to_owned()),
                annotations: stamped.annotations(),
            },
        )
        .await?;
    Ok(target.pinned(&digest).to_string())
}

/// `konnector policy pull`: the module, every digest checked, written to `output`; prints the
/// pinned reference.
pub async fn pull(
    reference: &PolicyRef,
    output: &std::path::Path,
    registry: &RegistryArgs,
) -> anyhow::Result<String> {
    let fetched = registry.fetcher()?.fetch(oci(reference)?).await?;
    std::fs::write(output, &fetched.module)
        .with_context(|| format!("writing {}", output.display()))?;
    Ok(fetched.pinned().to_string())
}

/// `konnector policy inspect`: what a reference resolves to and what its module says it is,
/// as JSON.
pub async fn inspect(
    reference: &PolicyRef,
    role: Option<PolicyRole>,
    registry: &RegistryArgs,
) -> anyhow::Result<Value> {
    let (module, mut report) = match reference {
        PolicyRef::Builtin => {
            let role = role.context("inspecting a built-in module needs --role")?;
            let module = builtin::component(role).to_vec();
            let report = json!({ "reference": reference.to_string() });
            (module, report)
        }
        PolicyRef::File(path) => {
            let module = read_file(path).with_context(|| format!("reading {}", path.display()))?;
            (module, json!({ "reference": reference.to_string() }))
        }
        PolicyRef::Oci(oci) => {
            let fetcher = registry.fetcher()?;
            let described = fetcher.describe(oci).await?;
            let fetched = fetcher.fetch(&oci.pinned(&described.digest)).await?;
            let report = json!({
                "reference": oci.to_string(),
                "digest": described.digest,
                "annotations": described.manifest.get("annotations").cloned().unwrap_or(Value::Null),
                "config": described.config,
            });
            (fetched.module, report)
        }
    };
    let carried = metadata::read(&module);
    let role = role.or_else(|| {
        let named = carried.as_ref().map(|m| m.role.as_str())?;
        PolicyRole::from_str(named, true).ok()
    });
    let implements = match role {
        None => Value::Null,
        Some(role) => match Policies::builtin()?.with_module(role, &module, "the module") {
            Ok(_) => json!({ "world": role.world(), "implemented": true }),
            Err(e) => json!({ "world": role.world(), "implemented": false, "why": e.to_string() }),
        },
    };
    if let Value::Object(fields) = &mut report {
        fields.insert("moduleDigest".into(), sha256_digest(&module).into());
        fields.insert("moduleBytes".into(), module.len().into());
        fields.insert("metadata".into(), serde_json::to_value(carried)?);
        fields.insert("role".into(), implements);
    }
    Ok(report)
}

/// `konnector policy generate-key`: a new ECDSA P-256 key pair written to `PREFIX.key`
/// (private, PEM PKCS#8, mode 0600) and `PREFIX.pub`; returns the two paths.
pub fn generate_key(prefix: &std::path::Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let key = KeyPair::generate()?;
    let private = prefix.with_extension("key");
    let public = prefix.with_extension("pub");
    if private.exists() {
        bail!("{} exists; not overwriting a key", private.display());
    }
    write_private(&private, key.private_pem()?.as_bytes())?;
    std::fs::write(&public, key.public_pem()?)
        .with_context(|| format!("writing {}", public.display()))?;
    Ok((private, public))
}

fn write_private(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(bytes)
        .with_context(|| format!("writing {}", path.display()))
}

/// `konnector policy sign`: signs the module a reference names with the key in `key_file`
/// (a cosign-encrypted key is opened with COSIGN_PASSWORD) and attaches the bundle; prints
/// the pinned reference signed.
pub async fn sign(
    reference: &PolicyRef,
    key_file: &std::path::Path,
    registry: &RegistryArgs,
) -> anyhow::Result<String> {
    let pem = read_file(key_file).with_context(|| format!("reading {}", key_file.display()))?;
    let password = std::env::var("COSIGN_PASSWORD").ok();
    let key = KeyPair::from_pem(&pem, password.as_deref().map(str::as_bytes))?;
    let signed = registry.fetcher()?.sign(oci(reference)?, &key).await?;
    Ok(signed.to_string())
}

/// `konnector policy verify`: pulls the module a reference names and checks its signatures
/// as the konnector would; prints the pinned reference verified, or fails saying why.
pub async fn verify(
    reference: &PolicyRef,
    verify: &VerifyArgs,
    registry: &RegistryArgs,
) -> anyhow::Result<String> {
    let verification = verify.verification()?;
    if !verification.is_enabled() {
        bail!(
            "say who may sign: --key FILE, or --certificate-identity, --certificate-oidc-issuer and --trusted-root"
        );
    }
    let fetched = registry
        .verifying_fetcher(verification)?
        .fetch(oci(reference)?)
        .await?;
    Ok(fetched.pinned().to_string())
}
