//! One call path for the four roles: each role only says how its input becomes WIT, which
//! export it calls and how its answer is checked ([`RoleModule`], in `role_module`); [`call`]
//! does the rest the same way for all of them.
//!
//! ```text
//! input ──(size bound)──▶ a permit (at most N calls in flight) ──▶ WIT input ──▶ warm instance (or a fresh one) ──▶ export
//!       ──(trap / timeout / limit / bad lift ──▶ PolicyError, instance dropped)
//!       ──▶ answer ──(module refused ──▶ PolicyRejected; host check fails ──▶ InvalidOutput)
//!       ──▶ decision; the instance goes back to its pool
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Semaphore, SemaphorePermit};

use super::error::PolicyError;
use super::limits::{self, PolicyLimits};
use super::load::Slot;
use super::role_module::{Refusal, RoleModule};
use super::runtime::{self, runtime, within_deadline};
use super::warm::Warm;

/// Runs one call of a role's module; `reuse` is how many calls one instance may serve.
///
/// A warm instance that traps or runs out of memory is retried once on a fresh instance, so
/// state a module kept from earlier calls (a bump allocator that never frees, say) cannot
/// turn into an error a fresh instance would not give.
#[tracing::instrument(level = "debug", skip_all, fields(role = %P::ROLE, origin = %slot.origin))]
pub(crate) async fn call<P: RoleModule>(
    slot: &Slot<P>,
    bound: &CallBound,
    limits: PolicyLimits,
    reuse: u32,
    input: &P::Input,
) -> Result<P::Output, PolicyError> {
    let role = P::ROLE;
    limits::check_input(role, input, limits)?;
    // Held until the call (and its store) is done: the bound on calls in flight, and so on
    // the Wasm memory they hold together.
    let _entered = bound.enter().await;
    let wit_input = P::wit_input(input);
    let taken = slot.pool.take();
    let was_warm = taken.is_some();
    let (warm, answer) = match attempt(slot, limits, taken, &wit_input).await {
        Err(e) if was_warm && e.is_instance_fault() => {
            attempt(slot, limits, None, &wit_input).await?
        }
        other => other?,
    };
    let origin = || slot.origin.to_string();
    let output = P::finish(answer, input).map_err(|refusal| match refusal {
        Refusal::Rejected(message) => PolicyError::PolicyRejected {
            role,
            origin: origin(),
            message,
        },
        Refusal::Invalid(message) => PolicyError::InvalidOutput {
            role,
            origin: origin(),
            message,
        },
    })?;
    slot.pool.give_back(warm, reuse, limits.memory_bytes);
    Ok(output)
}

/// The bound on policy calls in flight at once, shared by every role and every copy of the
/// loaded policies: a semaphore, and a count of the most calls ever seen in flight together.
#[derive(Debug)]
pub(crate) struct CallBound {
    permits: Semaphore,
    max: usize,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
}

/// One call's place in the bound, given back when dropped.
pub(crate) struct Entered<'a> {
    _permit: Option<SemaphorePermit<'a>>,
    in_flight: &'a AtomicUsize,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl CallBound {
    /// At most `max` (at least one) calls in flight.
    pub(crate) fn new(max: usize) -> Self {
        let max = max.max(1);
        Self {
            permits: Semaphore::new(max),
            max,
            in_flight: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        }
    }

    /// Waits for a free place.
    pub(crate) async fn enter(&self) -> Entered<'_> {
        // The semaphore is never closed, so a permit always comes.
        let permit = self.permits.acquire().await.ok();
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        Entered {
            _permit: permit,
            in_flight: &self.in_flight,
        }
    }

    /// How many calls may be in flight at once.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// The most calls seen in flight at once.
    pub(crate) fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

/// One call on `warm` (or on a fresh instance), under the call's deadline.
async fn attempt<P: RoleModule>(
    slot: &Slot<P>,
    limits: PolicyLimits,
    warm: Option<Warm<P::Instance>>,
    input: &P::WitInput,
) -> Result<(Warm<P::Instance>, P::WitOutput), PolicyError> {
    let (mut store, instance, calls) = match warm {
        Some(w) => (w.store, Some(w.instance), w.calls),
        None => (runtime()?.store(limits), None, 0),
    };
    runtime::arm(&mut store, limits);
    let outcome = within_deadline(limits, async {
        let instance = match instance {
            Some(instance) => instance,
            None => slot.pre.instantiate(&mut store).await?,
        };
        let answer = P::invoke(&instance, &mut store, input).await?;
        Ok((instance, answer))
    })
    .await;
    let settled = store
        .data_mut()
        .settle(outcome, P::ROLE, &slot.origin, limits);
    let (instance, answer) = settled?;
    store.data_mut().drain_output(P::ROLE, &slot.origin);
    let warm = Warm {
        store,
        instance,
        calls: calls.saturating_add(1),
    };
    Ok((warm, answer))
}
