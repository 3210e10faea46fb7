//! Warm instances: a role's instantiated module kept with its store between calls, so a
//! decision costs a call into Wasm, not a new store, WASI context and instantiation.
//!
//! ```text
//!  call ──▶ take an idle instance, or instantiate a fresh one
//!        ──▶ arm the store for this call (deadline, output bound)
//!        ──▶ answer checked by the host
//!        ──▶ give it back only when the whole call succeeded, it has served fewer than
//!            `reuse` calls, its memory stays under half the cap and its output buffers
//!            have room; otherwise it is dropped and the next call starts clean
//! ```
//!
//! A trap, a timeout, a limit hit or an invalid answer always retires the instance, and a
//! healthy one is recycled after a fixed number of calls, so whatever state a module keeps
//! between calls lives only briefly. A pool never holds more than [`MAX_IDLE`] instances.

use std::sync::{Arc, Mutex};

use wasmtime::Store;

use super::runtime::HostState;

/// Idle instances kept per role; more concurrent calls instantiate extra ones, dropped after.
pub(crate) const MAX_IDLE: usize = 8;

/// Calls one instance serves before it is recycled, unless configured otherwise.
pub const DEFAULT_REUSE: u32 = 1000;

/// An instantiated module and the store it lives in.
pub(crate) struct Warm<I> {
    pub(crate) store: Store<HostState>,
    pub(crate) instance: I,
    pub(crate) calls: u32,
}

/// The idle instances of one role's module.
pub(crate) struct Pool<I> {
    idle: Mutex<Vec<Warm<I>>>,
}

impl<I> Pool<I> {
    /// An empty pool.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            idle: Mutex::new(Vec::new()),
        })
    }

    /// An idle instance, if any.
    pub(crate) fn take(&self) -> Option<Warm<I>> {
        self.idle.lock().ok()?.pop()
    }

    /// Returns a healthy instance for the next call; `reuse` is how many calls one
    /// instance may serve in all.
    pub(crate) fn give_back(&self, warm: Warm<I>, reuse: u32, memory_cap: usize) {
        let state = warm.store.data();
        let worn = warm.calls >= reuse
            || state.memory_in_use() > memory_cap / 2
            || state.output_nearly_full();
        if worn {
            return;
        }
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < MAX_IDLE
        {
            idle.push(warm);
        }
    }

    /// How many instances are idle (for tests).
    #[cfg(test)]
    pub(crate) fn idle(&self) -> usize {
        self.idle.lock().map(|v| v.len()).unwrap_or(0)
    }
}
