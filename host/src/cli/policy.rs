//! `konnector policy eval` and `konnector policy test`: a policy author's loop without a
//! cluster (`push`, `pull` and `inspect`, the registry side, are in `artifact`). Both load the module the way the konnector does (same sandbox, same limits,
//! same world check) and speak the JSON shapes of [`crate::policy`]'s types.
//!
//! A fixture folder holds cases as file pairs: `<case>.input.json` (the role's input) and
//! `<case>.expected.json` (the expected output, or `{"expectError": "<substring>"}` when
//! the policy must fail with a message containing that text).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::artifact::{Credentials, Fetcher, PolicyRef};
use crate::policy::{Policies, PolicyArgs, PolicyError, PolicyRole, read_file};

/// `konnector policy ...`
#[derive(clap::Subcommand, Debug)]
pub enum PolicyCommand {
    /// Evaluate a policy module on one JSON input and print its output.
    Eval {
        #[command(flatten)]
        target: ModuleArgs,
        /// The input JSON file (`-` for stdin).
        #[arg(long, value_name = "FILE")]
        input: PathBuf,
    },
    /// Run a folder of fixture cases (`<case>.input.json` + `<case>.expected.json`).
    Test {
        #[command(flatten)]
        target: ModuleArgs,
        /// The fixture folder.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
        /// Run every case on one instance reused across the folder, twice (in name order,
        /// then in reverse), as the konnector reuses warm instances: an answer that depends
        /// on state left by earlier calls fails. Without it each case gets a fresh instance.
        #[arg(long)]
        reused: bool,
    },
    /// Push a module to an OCI registry: checked against the role's world, its metadata
    /// (name, version, role, source) embedded; prints the reference pinned to its digest.
    Push {
        /// The role the module plays.
        #[arg(long, value_enum)]
        role: PolicyRole,
        /// The component file.
        #[arg(value_name = "FILE.wasm")]
        module: PathBuf,
        /// Where to: `oci://REGISTRY/REPOSITORY:TAG`.
        #[arg(value_name = "REF")]
        reference: PolicyRef,
        #[command(flatten)]
        metadata: super::artifact::MetadataArgs,
        #[command(flatten)]
        registry: super::artifact::RegistryArgs,
    },
    /// Pull a module from an OCI registry (every digest checked) into a file; prints the
    /// reference pinned to its digest.
    Pull {
        /// `oci://REGISTRY/REPOSITORY:TAG` or `oci://...@sha256:DIGEST`.
        #[arg(value_name = "REF")]
        reference: PolicyRef,
        /// The file to write.
        #[arg(long, short = 'o', value_name = "FILE.wasm")]
        output: PathBuf,
        #[command(flatten)]
        registry: super::artifact::RegistryArgs,
    },
    /// Start a policy project for a role from its template: Cargo.toml, src/lib.rs, the
    /// konnector's WIT (no dependency on the kbind repository), built for wasm32-wasip2 by
    /// `cargo build --release`, its metadata embedded for `inspect`.
    New {
        /// The role the module will play.
        #[arg(long, value_enum)]
        role: PolicyRole,
        /// The package (and module) name.
        #[arg(long)]
        name: String,
        /// The repository URL of its source, embedded in the module.
        #[arg(long, default_value = "")]
        source: String,
        /// The directory to create.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Make an ECDSA P-256 key pair for signing modules: PREFIX.key (private) and PREFIX.pub.
    GenerateKey {
        /// Where to write (`PREFIX.key`, `PREFIX.pub`).
        #[arg(long, value_name = "PREFIX", default_value = "policy-signing")]
        output_key_prefix: PathBuf,
    },
    /// Sign a module in a registry with a key and attach the Sigstore bundle (cosign v3's
    /// layout: the referrers API, or the referrers tag scheme); prints the reference signed.
    Sign {
        /// `oci://REGISTRY/REPOSITORY:TAG` or `oci://...@sha256:DIGEST`.
        #[arg(value_name = "REF")]
        reference: PolicyRef,
        /// The private key (PEM PKCS#8, or cosign's encrypted key with COSIGN_PASSWORD).
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        #[command(flatten)]
        registry: super::artifact::RegistryArgs,
    },
    /// Check a module's signatures as the konnector does (by key, or keyless identity under
    /// a trust root); prints the reference verified, or fails saying why.
    Verify {
        /// `oci://REGISTRY/REPOSITORY:TAG` or `oci://...@sha256:DIGEST`.
        #[arg(value_name = "REF")]
        reference: PolicyRef,
        #[command(flatten)]
        verify: super::artifact::VerifyArgs,
        #[command(flatten)]
        registry: super::artifact::RegistryArgs,
    },
    /// Show what a reference resolves to (digest, annotations, config) and what its module
    /// says it is (metadata, and whether it implements its role's world), as JSON.
    Inspect {
        /// `oci://...`, a file, or `built-in` (with `--role`).
        #[arg(value_name = "REF")]
        reference: PolicyRef,
        /// The role to check it against (default: the role its metadata names).
        #[arg(long, value_enum)]
        role: Option<PolicyRole>,
        #[command(flatten)]
        registry: super::artifact::RegistryArgs,
    },
}

/// Which role and module to run.
#[derive(clap::Args, Debug)]
pub struct ModuleArgs {
    /// The role the module plays.
    #[arg(long, value_enum)]
    pub role: PolicyRole,
    /// The module for the role: a component file (.wasm), `oci://REGISTRY/REPO:TAG`,
    /// `oci://...@sha256:DIGEST` or `built-in` (the default).
    #[arg(long, value_name = "REF")]
    pub module: Option<PolicyRef>,
    #[command(flatten)]
    pub policies: PolicyArgs,
}

impl ModuleArgs {
    /// Loads the policies, with `--module` serving `--role` (pulled first when it is a
    /// registry reference).
    pub async fn load(&self) -> anyhow::Result<Policies> {
        let mut args = self.policies.clone();
        if let Some(module) = &self.module {
            args.set_module(self.role, Some(module.clone()));
        }
        if !args.pulls() {
            let policies = Policies::load(&args)?;
            // Each module type-checked and configured with its settings before any decision.
            policies.check().await?;
            return Ok(policies);
        }
        let fetcher = Fetcher::new(args.fetcher_config(Credentials::default()))?;
        Ok(Policies::resolve(&args, &fetcher).await?)
    }
}

/// Runs a `konnector policy` subcommand.
pub fn run(command: PolicyCommand) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    match command {
        PolicyCommand::Eval { target, input } => {
            let policies = rt.block_on(target.load())?;
            let text = if input == Path::new("-") {
                std::io::read_to_string(std::io::stdin()).context("reading stdin")?
            } else {
                let bytes =
                    read_file(&input).with_context(|| format!("reading {}", input.display()))?;
                String::from_utf8(bytes)
                    .with_context(|| format!("{} is not UTF-8", input.display()))?
            };
            let input: Value = serde_json::from_str(&text).context("the input is not JSON")?;
            let output = rt.block_on(evaluate(&policies, target.role, input))??;
            println!("{}", serde_json::to_string_pretty(&output)?);
            Ok(())
        }
        PolicyCommand::Test {
            target,
            dir,
            reused,
        } => {
            let policies = rt.block_on(target.load())?;
            let passes = if reused {
                Passes::Reused
            } else {
                Passes::Fresh
            };
            let report = rt.block_on(run_fixtures(&policies, target.role, &dir, passes))?;
            for case in &report.cases {
                match &case.failure {
                    None => println!("PASS {}", case.name),
                    Some(why) => println!("FAIL {}: {why}", case.name),
                }
            }
            println!("{} passed, {} failed", report.passed(), report.failed());
            if report.failed() > 0 {
                bail!(
                    "{} of {} fixture cases failed",
                    report.failed(),
                    report.cases.len()
                );
            }
            Ok(())
        }
        PolicyCommand::Push {
            role,
            module,
            reference,
            metadata,
            registry,
        } => {
            let pinned = rt.block_on(super::artifact::push(
                role, &module, &reference, &metadata, &registry,
            ))?;
            println!("{pinned}");
            Ok(())
        }
        PolicyCommand::Pull {
            reference,
            output,
            registry,
        } => {
            let pinned = rt.block_on(super::artifact::pull(&reference, &output, &registry))?;
            println!("{pinned}");
            Ok(())
        }
        PolicyCommand::New {
            role,
            name,
            source,
            dir,
        } => {
            for path in super::template::new_project(role, &name, &source, &dir)? {
                println!("{}", path.display());
            }
            Ok(())
        }
        PolicyCommand::GenerateKey { output_key_prefix } => {
            let (private, public) = super::artifact::generate_key(&output_key_prefix)?;
            println!(
                "private key: {}\npublic key: {}",
                private.display(),
                public.display()
            );
            Ok(())
        }
        PolicyCommand::Sign {
            reference,
            key,
            registry,
        } => {
            let signed = rt.block_on(super::artifact::sign(&reference, &key, &registry))?;
            println!("{signed}");
            Ok(())
        }
        PolicyCommand::Verify {
            reference,
            verify,
            registry,
        } => {
            let verified = rt.block_on(super::artifact::verify(&reference, &verify, &registry))?;
            println!("{verified}");
            Ok(())
        }
        PolicyCommand::Inspect {
            reference,
            role,
            registry,
        } => {
            let report = rt.block_on(super::artifact::inspect(&reference, role, &registry))?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(())
        }
    }
}

/// Runs a role's policy on JSON input. The outer error means the input does not fit the
/// role; the inner one is the policy's failure.
pub async fn evaluate(
    policies: &Policies,
    role: PolicyRole,
    input: Value,
) -> anyhow::Result<Result<Value, PolicyError>> {
    match role {
        PolicyRole::ConflictPolicy => {
            evaluate_as(role, input, async |i| policies.decide_conflict(i).await).await
        }
        PolicyRole::SchemaSynthesis => {
            evaluate_as(role, input, async |i| policies.synthesize_schema(i).await).await
        }
        PolicyRole::RelatedSelection => {
            evaluate_as(role, input, async |i| policies.select_related(i).await).await
        }
        PolicyRole::Placement => evaluate_as(role, input, async |i| policies.place(i).await).await,
    }
}

/// [`evaluate`] for one role: the input parsed as the role's type, the output as JSON.
async fn evaluate_as<I: DeserializeOwned, O: Serialize>(
    role: PolicyRole,
    input: Value,
    call: impl AsyncFnOnce(&I) -> Result<O, PolicyError>,
) -> anyhow::Result<Result<Value, PolicyError>> {
    let input: I = serde_json::from_value(input).with_context(|| format!("not a {role} input"))?;
    Ok(match call(&input).await {
        Ok(out) => Ok(serde_json::to_value(out)?),
        Err(e) => Err(e),
    })
}

/// The outcome of one fixture case.
#[derive(Debug)]
pub struct CaseResult {
    /// The case name (file name without `.input.json`).
    pub name: String,
    /// Why it failed, or `None` when it passed.
    pub failure: Option<String>,
}

/// The outcome of a fixture folder.
#[derive(Debug, Default)]
pub struct FixtureReport {
    /// Every case, in name order.
    pub cases: Vec<CaseResult>,
}

impl FixtureReport {
    /// Cases that passed.
    pub fn passed(&self) -> usize {
        self.cases.iter().filter(|c| c.failure.is_none()).count()
    }
    /// Cases that failed.
    pub fn failed(&self) -> usize {
        self.cases.len() - self.passed()
    }
}

/// How often and in which order a fixture folder's cases run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Passes {
    /// Once each, in name order.
    Fresh,
    /// Twice: in name order, then in reverse, so each case also runs after every other one;
    /// a case fails when either run fails.
    Reused,
}

/// Runs every case in `dir`. A folder without cases is an error (a typo in the path should
/// not pass).
pub async fn run_fixtures(
    policies: &Policies,
    role: PolicyRole,
    dir: &Path,
    passes: Passes,
) -> anyhow::Result<FixtureReport> {
    let folder = cap_std::fs::Dir::open_ambient_dir(dir, cap_std::ambient_authority())
        .with_context(|| format!("opening fixture folder {}", dir.display()))?;
    let mut names = Vec::new();
    for entry in folder.entries()? {
        let file = entry?.file_name();
        if let Some(name) = file.to_str().and_then(|f| f.strip_suffix(".input.json")) {
            names.push(name.to_owned());
        }
    }
    names.sort();
    if names.is_empty() {
        bail!("no fixture cases (*.input.json) in {}", dir.display());
    }
    // Fresh: one call per instance. Reused: one instance for the whole run (the calls are
    // sequential, so the pool hands the same instance back each time).
    let policies = &policies.with_instance_reuse(match passes {
        Passes::Fresh => 1,
        Passes::Reused => u32::MAX,
    });
    let total = names.len();
    // Reused: the second pass runs in reverse, so each case also runs after every other one.
    let order: Vec<usize> = match passes {
        Passes::Fresh => (0..total).collect(),
        Passes::Reused => (0..total).chain((0..total).rev()).collect(),
    };
    let mut failures: Vec<Option<String>> = vec![None; total];
    for (earlier, &i) in order.iter().enumerate() {
        let Err(e) = run_case(policies, role, &folder, &names[i]).await else {
            continue;
        };
        failures[i].get_or_insert(match passes {
            Passes::Reused if earlier > 0 => format!(
                "on a reused instance, after {earlier} earlier calls of this run (does it keep state between calls?): {e:#}"
            ),
            _ => format!("{e:#}"),
        });
    }
    let cases = names
        .into_iter()
        .zip(failures)
        .map(|(name, failure)| CaseResult { name, failure })
        .collect();
    Ok(FixtureReport { cases })
}

async fn run_case(
    policies: &Policies,
    role: PolicyRole,
    folder: &cap_std::fs::Dir,
    name: &str,
) -> anyhow::Result<()> {
    let read = |file: String| -> anyhow::Result<Value> {
        let text = folder
            .read_to_string(&file)
            .with_context(|| format!("reading {file}"))?;
        serde_json::from_str(&text).with_context(|| format!("{file} is not JSON"))
    };
    let input = read(format!("{name}.input.json"))?;
    let expected = read(format!("{name}.expected.json"))?;
    let actual = evaluate(policies, role, input).await?;
    match (expected.get("expectError").and_then(Value::as_str), actual) {
        (Some(want), Err(e)) if e.to_string().contains(want) => Ok(()),
        (Some(want), Err(e)) => bail!("expected an error containing {want:?}, got: {e}"),
        (Some(want), Ok(out)) => bail!("expected an error containing {want:?}, got output {out}"),
        (None, Err(e)) => bail!("{e}"),
        (None, Ok(out)) if out == expected => Ok(()),
        (None, Ok(out)) => {
            bail!("output differs from expected:\n  expected: {expected}\n  actual:   {out}")
        }
    }
}
