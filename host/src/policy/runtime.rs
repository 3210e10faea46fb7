//! The sandbox every policy call runs in.
//!
//! ```text
//!   one Engine (epoch interruption) ◀── ticker thread: increment_epoch() every TICK
//!                                        while a call runs (it sleeps while none does)
//!   one Linker: WASI p2, deny-by-default
//!        │
//!   Component (compiled once) ──▶ *Pre (type-checked against the role's world, cached)
//!        │
//!   Store { WASI ctx, StoreCap (memory total, counts), stdout/stderr pipes }
//!        │   kept warm between calls (see `warm`), dropped after any failure
//!   per call (see [`arm`]): hostcall fuel = output bound,
//!             epoch deadline: yield to tokio every tick, trap at the time limit,
//!             wall-clock timeout around the whole call (see [`within_deadline`])
//! ```
//!
//! A trapped instance is poisoned and dropped with its store. Modules get no
//! capabilities: no preopened directories, no environment or arguments, no sockets or name
//! lookups, empty stdin, frozen clocks and a deterministic random source; what they write to
//! stdout/stderr is captured (bounded) and forwarded to `tracing`.
//!
//! Two deadlines, because each covers what the other cannot: the epoch deadline interrupts
//! Wasm that computes without ever returning to the host (it also makes the call yield to
//! tokio every tick), but it only fires while Wasm runs; a guest parked in a host call (a
//! WASI `poll` on a `subscribe-duration` sleeps on a tokio timer, whatever the frozen clock
//! says) is cut off by the tokio timeout around the call, which drops the call's fiber.

use std::future::Future;
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store, Trap, UpdateDeadline};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{
    Deterministic, HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView,
    WasiView,
};

use super::error::{PolicyError, SettingsRefused, WorldMismatch};
use super::limits::{PolicyLimits, StoreCap};
use super::role::PolicyRole;
use super::sandbox::SandboxResource;

/// How often the epoch advances; also how often a running module yields to tokio.
const TICK: Duration = Duration::from_millis(5);
/// How much of a module's stdout/stderr is kept per call.
const OUTPUT_CAP: usize = 16 * 1024;

/// The process-wide engine and linker.
pub(crate) struct Runtime {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<HostState>,
}

static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

/// The one engine of the process, created (with its epoch ticker) on first use.
pub(crate) fn runtime() -> Result<&'static Runtime, PolicyError> {
    RUNTIME
        .get_or_init(|| Runtime::new().map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(|message| PolicyError::CreateEngine {
            message: message.clone(),
        })
}

impl Runtime {
    fn new() -> wasmtime::Result<Self> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        config.wasm_component_model(true);
        let engine = Engine::new(&config)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        let ticker = engine.clone();
        std::thread::Builder::new()
            .name("policy-epoch".into())
            .spawn(move || {
                loop {
                    TICKING.wait_for_a_call();
                    std::thread::sleep(TICK);
                    ticker.increment_epoch();
                }
            })
            .map_err(|e| wasmtime::Error::msg(format!("starting the epoch ticker: {e}")))?;
        Ok(Self { engine, linker })
    }

    /// Compiles a component for a role.
    pub(crate) fn compile(
        &self,
        role: PolicyRole,
        bytes: &[u8],
        origin: &str,
    ) -> Result<Component, PolicyError> {
        Component::new(&self.engine, bytes).map_err(|e| PolicyError::CompileModule {
            role,
            origin: origin.to_owned(),
            message: format!("{e:#}"),
        })
    }

    /// A fresh store with the sandbox's WASI context and the limits' memory cap; each call
    /// on it is armed with [`arm`] first.
    pub(crate) fn store(&self, limits: PolicyLimits) -> Store<HostState> {
        let stdout = MemoryOutputPipe::new(OUTPUT_CAP);
        let stderr = MemoryOutputPipe::new(OUTPUT_CAP);
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .wall_clock(FrozenClock)
            .monotonic_clock(FrozenClock)
            .secure_random(Deterministic::new(vec![0x6b, 0x62, 0x69, 0x6e, 0x64]))
            .insecure_random(Deterministic::new(vec![0x70, 0x6f, 0x6c]))
            .insecure_random_seed(0)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let state = HostState {
            wasi,
            table: ResourceTable::new(),
            cap: StoreCap::new(limits.memory_bytes),
            stdout,
            stderr,
            stdout_seen: 0,
            stderr_seen: 0,
            timed_out: false,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.cap);
        store
    }
}

/// Arms a store for one call: the call's time limit starts now, and its answer may lift at
/// most `max_output_bytes`.
pub(crate) fn arm(store: &mut Store<HostState>, limits: PolicyLimits) {
    store.data_mut().timed_out = false;
    // Every string and list the host lifts out of the module (its answer, or the arguments
    // of a WASI call) is charged against this, so a small answer cannot make the host
    // allocate a large one (a list whose entries all point at one big string).
    store.set_hostcall_fuel(limits.max_output_bytes);
    let started = Instant::now();
    let timeout = limits.timeout;
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |mut ctx| {
        if started.elapsed() >= timeout {
            ctx.data_mut().timed_out = true;
            Err(wasmtime::Error::msg("policy call deadline exceeded"))
        } else {
            // Let other tasks on this tokio worker run, then keep going.
            Ok(UpdateDeadline::Yield(1))
        }
    });
}

/// Per-call state of a store.
pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    cap: StoreCap,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
    /// How much of stdout/stderr earlier calls on this store already forwarded.
    stdout_seen: usize,
    stderr_seen: usize,
    timed_out: bool,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl HostState {
    /// Bytes of linear memory the store's instances hold.
    pub(crate) fn memory_in_use(&self) -> usize {
        self.cap.total()
    }

    /// Whether the output buffers are more than half full: an instance that prints a lot
    /// is recycled before its prints start to fail.
    pub(crate) fn output_nearly_full(&self) -> bool {
        self.stdout_seen.max(self.stderr_seen) > OUTPUT_CAP / 2
    }

    /// Forwards what the module printed during this call to `tracing` and returns the
    /// call's stderr.
    pub(crate) fn drain_output(&mut self, role: PolicyRole, origin: &str) -> String {
        let (stdout, seen) = unread(&self.stdout, self.stdout_seen);
        self.stdout_seen = seen;
        let (stderr, seen) = unread(&self.stderr, self.stderr_seen);
        self.stderr_seen = seen;
        if !stdout.trim().is_empty() {
            tracing::debug!(role = %role, origin, output = %stdout.trim_end(), "policy stdout");
        }
        if !stderr.trim().is_empty() {
            tracing::debug!(role = %role, origin, output = %stderr.trim_end(), "policy stderr");
        }
        stderr
    }

    /// Turns the outcome of a call (bounded by [`within_deadline`]) into its answer or the
    /// error that says what happened.
    pub(crate) fn settle<T>(
        &mut self,
        outcome: Result<wasmtime::Result<T>, tokio::time::error::Elapsed>,
        role: PolicyRole,
        origin: &str,
        limits: PolicyLimits,
    ) -> Result<T, PolicyError> {
        match outcome {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(self.classify(e, role, origin, limits)),
            Err(_elapsed) => {
                self.drain_output(role, origin);
                Err(PolicyError::PolicyTimeout {
                    role,
                    origin: origin.to_owned(),
                    limit: limits.timeout,
                })
            }
        }
    }

    /// Turns a failed call into the error that says what happened.
    fn classify(
        &mut self,
        err: wasmtime::Error,
        role: PolicyRole,
        origin: &str,
        limits: PolicyLimits,
    ) -> PolicyError {
        let stderr = self.drain_output(role, origin);
        let origin = origin.to_owned();
        if let Some(refused) = err.downcast_ref::<SettingsRefused>() {
            return PolicyError::SettingsRejected {
                role,
                origin,
                message: refused.0.clone(),
            };
        }
        if let Some(mismatch) = err.downcast_ref::<WorldMismatch>() {
            return PolicyError::WrongWorld {
                role,
                origin,
                message: mismatch.0.clone(),
            };
        }
        let count_limit = err
            .chain()
            .find_map(|cause| SandboxResource::from_wasmtime_message(&cause.to_string()));
        let output_too_large = err
            .chain()
            .any(|cause| cause.to_string().starts_with(HOSTCALL_FUEL_EXHAUSTED));
        if self.timed_out {
            PolicyError::PolicyTimeout {
                role,
                origin,
                limit: limits.timeout,
            }
        } else if self.cap.memory_hit {
            PolicyError::PolicyMemoryLimit {
                role,
                origin,
                limit_bytes: limits.memory_bytes,
            }
        } else if let Some(resource) = count_limit {
            PolicyError::PolicyResourceLimit {
                role,
                origin,
                resource,
            }
        } else if self.cap.table_hit {
            PolicyError::PolicyResourceLimit {
                role,
                origin,
                resource: SandboxResource::TableElements,
            }
        } else if output_too_large {
            PolicyError::OutputTooLarge {
                role,
                origin,
                limit_bytes: limits.max_output_bytes,
            }
        } else if err.downcast_ref::<Trap>().is_some() {
            PolicyError::PolicyTrap {
                role,
                origin,
                message: format!("{err:#}"),
                stderr,
            }
        } else {
            // Not a trap: the canonical ABI could not lift what the module returned
            // (a bad discriminant, a string out of bounds or not UTF-8...).
            PolicyError::InvalidOutput {
                role,
                origin,
                message: format!("{err:#}"),
            }
        }
    }
}

/// What a pipe holds past `seen`, and the new mark.
fn unread(pipe: &MemoryOutputPipe, seen: usize) -> (String, usize) {
    let contents = pipe.contents();
    let fresh = contents.get(seen..).unwrap_or_default();
    (String::from_utf8_lossy(fresh).into_owned(), contents.len())
}

/// How wasmtime says a lift ran out of hostcall fuel (its error type is private; a hostile
/// test pins the wording).
const HOSTCALL_FUEL_EXHAUSTED: &str =
    "too much data is being copied between the host and the guest";

/// Runs one call (instantiation and the export) under the call's wall-clock limit. Elapsing
/// drops the future, and with it the call's fiber, wherever the guest is: computing, or
/// parked in a host call such as a WASI sleep that the epoch deadline never sees.
pub(crate) async fn within_deadline<T>(
    limits: PolicyLimits,
    call: impl Future<Output = wasmtime::Result<T>>,
) -> Result<wasmtime::Result<T>, tokio::time::error::Elapsed> {
    // Every instantiation and call runs inside this future, so the epoch advances whenever
    // Wasm may run; dropping the future (a timeout, a cancelled reconcile) ends the count.
    let _ticking = Running::start();
    tokio::time::timeout(limits.timeout, call).await
}

/// How many calls are running, and the ticker's wake-up when the first one starts. An idle
/// konnector (every instance in sync: resyncs ask no module) would otherwise wake every
/// tick for nothing.
struct Ticking {
    running: Mutex<usize>,
    started: Condvar,
}

static TICKING: Ticking = Ticking {
    running: Mutex::new(0),
    started: Condvar::new(),
};

impl Ticking {
    /// Blocks the ticker thread until a call is running.
    fn wait_for_a_call(&self) {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        while *running == 0 {
            running = self
                .started
                .wait(running)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// One running call, counted from its start until it is dropped.
struct Running;

impl Running {
    fn start() -> Self {
        let mut running = TICKING
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *running += 1;
        if *running == 1 {
            TICKING.started.notify_one();
        }
        Self
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut running = TICKING
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *running = running.saturating_sub(1);
    }
}

/// A clock that always says the Unix epoch: modules get no time source.
struct FrozenClock;

impl HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}
