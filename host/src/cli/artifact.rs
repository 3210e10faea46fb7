//! `konnector policy push`, `pull` and `inspect`: a policy module's way into and out of an
//! OCI registry, by the same Wasm artifact conventions as wasm-pkg-tools (an
//! `application/wasm` layer, a `application/vnd.wasm.config.v0+json` config). `push` checks
//! the module against its role's world before anything is sent, and embeds its metadata (name,
//! version, role, source) in the module and the manifest's annotations; `pull` checks every
//! digest; `inspect` says what a reference resolves to and what the module says it is.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::ValueEnum as _;
use serde_json::{Value, json};

use crate::artifact::{
    Credentials, Fetcher, FetcherConfig, ModuleMetadata, OciRef, PolicyRef, PushMeta, metadata,
    sha256_digest,
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

impl RegistryArgs {
    /// A fetcher without a disk cache.
    fn fetcher(&self) -> anyhow::Result<Fetcher> {
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
