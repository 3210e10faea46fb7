//! Loading a role's module: read the file (through cap-std), compile it once, and check it
//! against the role's world by building the generated `*Pre`, which type-checks the
//! component's exports and resolves its imports against the sandbox linker. A module that
//! fails here is refused at start-up with a message naming the role and the file.
//!
//! The built-in modules are compiled once per process and their `*Pre`s shared.

use std::path::Path;
use std::sync::Arc;

use crate::artifact::{Fetched, PolicyRef, sha256_digest};

use super::builtin;
use super::error::PolicyError;
use super::limits::PolicyLimits;
use super::role::PolicyRole;
use super::role_module::RoleModule;
use super::runtime::{self, runtime, within_deadline};
use super::settings::PolicySettings;
use super::warm::{Pool, Warm};

/// A role's pre-instantiated component, with where it came from and its warm instances.
pub(crate) struct Slot<P: RoleModule> {
    pub(crate) pre: P,
    /// `built-in`, the file path, or the registry reference pinned to its digest.
    pub(crate) origin: Arc<str>,
    /// The module's digest: of its bytes, or, for a registry module, of its manifest.
    pub(crate) digest: Arc<str>,
    pub(crate) pool: Arc<Pool<P::Instance>>,
}

impl<P: RoleModule> Slot<P> {
    /// A slot for a checked module.
    fn new(pre: P, origin: &str, digest: &str) -> Self {
        Self {
            pre,
            origin: Arc::from(origin),
            digest: Arc::from(digest),
            pool: Pool::new(),
        }
    }

    /// The same module sharing its warm instances (a swap of another role keeps them).
    pub(crate) fn shared(&self) -> Self {
        Self {
            pre: self.pre.clone(),
            origin: self.origin.clone(),
            digest: self.digest.clone(),
            pool: self.pool.clone(),
        }
    }

    /// The same module with no warm instances: instances made under other limits or
    /// another reuse count are not carried over.
    pub(crate) fn without_instances(&self) -> Self {
        Self {
            pre: self.pre.clone(),
            origin: self.origin.clone(),
            digest: self.digest.clone(),
            pool: Pool::new(),
        }
    }
}

/// The built-in module of a role (compiled on first use, then shared), with `settings`.
pub(crate) fn builtin<P: RoleModule>(settings: &PolicySettings) -> Result<Slot<P>, PolicyError> {
    let cached = P::builtin_cell().get_or_init(|| {
        from_bytes::<P>(builtin::component(P::ROLE), builtin::ORIGIN).map_err(|e| e.to_string())
    });
    match cached {
        Ok(pre) => Ok(Slot::new(
            pre.with_settings(settings.clone()),
            builtin::ORIGIN,
            builtin::digest(P::ROLE),
        )),
        // The embedded module is ours: failing to load it is a build problem, reported
        // with the original message.
        Err(message) => Err(PolicyError::CompileModule {
            role: P::ROLE,
            origin: builtin::ORIGIN.to_owned(),
            message: message.clone(),
        }),
    }
}

/// A module for a role from bytes (`origin` names it in errors and logs), with `settings`.
pub(crate) fn module<P: RoleModule>(
    bytes: &[u8],
    origin: &str,
    settings: &PolicySettings,
) -> Result<Slot<P>, PolicyError> {
    let digest = sha256_digest(bytes);
    let pre = from_bytes::<P>(bytes, origin)?.with_settings(settings.clone());
    Ok(Slot::new(pre, origin, &digest))
}

/// A module pulled from a registry, named by its reference pinned to the manifest digest.
pub(crate) fn fetched<P: RoleModule>(
    fetched: &Fetched,
    settings: &PolicySettings,
) -> Result<Slot<P>, PolicyError> {
    let origin = fetched.pinned().to_string();
    Ok(Slot::new(
        from_bytes::<P>(&fetched.module, &origin)?.with_settings(settings.clone()),
        &origin,
        &fetched.digest,
    ))
}

/// A checked module for a role from bytes.
fn from_bytes<P: RoleModule>(bytes: &[u8], origin: &str) -> Result<P, PolicyError> {
    let rt = runtime()?;
    let component = rt.compile(P::ROLE, bytes, origin)?;
    let wrong_world = |e: wasmtime::Error| PolicyError::WrongWorld {
        role: P::ROLE,
        origin: origin.to_owned(),
        message: format!("{e:#}"),
    };
    let pre = rt.linker.instantiate_pre(&component).map_err(wrong_world)?;
    P::new(pre).map_err(wrong_world)
}

/// Instantiates a loaded module once under `limits`: its export is type-checked against the
/// role's records and its settings handed to `configure`. A module that fails here is not
/// used; the instance, when healthy, is kept warm for the first call.
pub(crate) async fn check<P: RoleModule>(
    slot: &Slot<P>,
    limits: PolicyLimits,
    reuse: u32,
) -> Result<(), PolicyError> {
    let role = P::ROLE;
    let mut store = runtime()?.store(limits);
    runtime::arm(&mut store, limits);
    let outcome = within_deadline(limits, slot.pre.instantiate(&mut store)).await;
    let origin = slot.origin.to_string();
    let instance = store.data_mut().settle(outcome, role, &origin, limits)?;
    store.data_mut().drain_output(role, &origin);
    let warm = Warm {
        store,
        instance,
        calls: 0,
    };
    slot.pool.give_back(warm, reuse, limits.memory_bytes);
    Ok(())
}

/// A module for a role from its reference: the built-in one (also when none is given), a
/// file, or a registry module already fetched (`fetched`); a registry reference not fetched
/// is an error, never the built-in module in its place.
pub(crate) fn slot<P: RoleModule>(
    reference: Option<&PolicyRef>,
    fetched: Option<&Fetched>,
    settings: &PolicySettings,
) -> Result<Slot<P>, PolicyError> {
    match reference {
        None | Some(PolicyRef::Builtin) => builtin::<P>(settings),
        Some(PolicyRef::File(path)) => {
            let bytes = read_module(P::ROLE, path)?;
            module::<P>(&bytes, &path.display().to_string(), settings)
        }
        Some(PolicyRef::Oci(oci)) => match fetched {
            Some(f) if f.reference == *oci => self::fetched::<P>(f, settings),
            _ => Err(PolicyError::NotFetched {
                role: P::ROLE,
                reference: oci.to_string(),
            }),
        },
    }
}

/// Reads a module file through cap-std: the directory is opened with ambient authority
/// (the operator named it on the command line) and only that one file is read from it.
pub fn read_module(role: PolicyRole, path: &Path) -> Result<Vec<u8>, PolicyError> {
    read_file(path).map_err(|source| PolicyError::ReadModule {
        role,
        path: path.to_owned(),
        source,
    })
}

/// Reads a whole file through cap-std.
pub fn read_file(path: &Path) -> std::io::Result<Vec<u8>> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file path"))?;
    let dir = cap_std::fs::Dir::open_ambient_dir(parent, cap_std::ambient_authority())?;
    dir.read(name)
}
