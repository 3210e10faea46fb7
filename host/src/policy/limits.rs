//! The bounds of one policy call, and the resource limiter that holds a store to them.
//!
//! ```text
//! input  ──(JSON size ≤ max_input_bytes, checked before the call)──▶ guest
//! guest  ──(one store: Σ linear memories ≤ memory_bytes, ≤ MAX_MEMORIES memories,
//!           ≤ MAX_TABLES tables of ≤ MAX_TABLE_ELEMENTS, ≤ MAX_INSTANCES instances)
//!        ──(wall clock ≤ timeout, host waits included)
//! answer ──(bytes lifted into the host ≤ max_output_bytes)──▶ host checks ──▶ controller
//! ```
//!
//! wasmtime's own `StoreLimits` caps each linear memory separately; a module declaring many
//! memories would multiply the cap. [`StoreCap`] keeps one running total for the whole store
//! instead, and remembers which bound it refused so the error can say so.

use std::io;
use std::time::Duration;

use serde::Serialize;
use wasmtime::ResourceLimiter;

use super::error::PolicyError;
use super::role::PolicyRole;
use super::sandbox::{MAX_INSTANCES, MAX_MEMORIES, MAX_TABLE_ELEMENTS, MAX_TABLES};

/// Time, memory and data bounds of one policy call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyLimits {
    /// Wall-clock budget of one call, instantiation and host waits (a WASI sleep) included.
    pub timeout: Duration,
    /// Cap on the total of a store's linear memories, in bytes.
    pub memory_bytes: usize,
    /// Largest input, measured as its JSON encoding, handed to a module; larger inputs are
    /// refused before the call.
    pub max_input_bytes: usize,
    /// Most bytes of strings and lists the host copies out of a module's answer.
    pub max_output_bytes: usize,
}

impl PolicyLimits {
    /// The defaults of the `konnector run` flags.
    pub const DEFAULT: Self = Self {
        timeout: Duration::from_secs(2),
        memory_bytes: 128 * 1024 * 1024,
        max_input_bytes: 16 * 1024 * 1024,
        max_output_bytes: 4 * 1024 * 1024,
    };
}

impl Default for PolicyLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Refuses an input whose JSON encoding is larger than the bound, before any module sees it.
/// The encoding is only counted, and counting stops at the bound, so a huge input costs no
/// more than the bound to refuse.
pub(crate) fn check_input(
    role: PolicyRole,
    input: &impl Serialize,
    limits: PolicyLimits,
) -> Result<(), PolicyError> {
    let mut counter = ByteCounter {
        count: 0,
        limit: limits.max_input_bytes,
    };
    match serde_json::to_writer(&mut counter, input) {
        Ok(()) => Ok(()),
        // Over the bound, or not encodable at all: either way the module is not asked.
        Err(e) if e.is_io() => Err(PolicyError::InputTooLarge {
            role,
            limit_bytes: limits.max_input_bytes,
        }),
        Err(e) => Err(PolicyError::EncodeInput {
            role,
            message: e.to_string(),
        }),
    }
}

/// A writer that only counts, and fails once past its limit.
struct ByteCounter {
    count: usize,
    limit: usize,
}

impl io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.count = self.count.saturating_add(buf.len());
        if self.count > self.limit {
            return Err(io::Error::other("input over the limit"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Holds one store to the call's memory total and table sizes, and remembers what it
/// refused. Counts of instances, memories and tables are handed to wasmtime through the
/// trait's getters, read once when the limiter is installed.
#[derive(Debug)]
pub(crate) struct StoreCap {
    limit: usize,
    total: usize,
    /// The growth allowed last, undone if the allocation then fails.
    pending: usize,
    /// Memory growth was refused for the total.
    pub(crate) memory_hit: bool,
    /// Table growth was refused.
    pub(crate) table_hit: bool,
}

impl StoreCap {
    /// A limiter for `limit` bytes of linear memory in total.
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            total: 0,
            pending: 0,
            memory_hit: false,
            table_hit: false,
        }
    }

    /// Bytes of linear memory the store holds now.
    pub(crate) fn total(&self) -> usize {
        self.total
    }
}

impl ResourceLimiter for StoreCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Called for every memory of the store: with current 0 when it is created, then on
        // each growth; the sum of the deltas is the store's total.
        let delta = desired.saturating_sub(current);
        match self.total.checked_add(delta) {
            Some(total) if total <= self.limit => {
                self.total = total;
                self.pending = delta;
                Ok(true)
            }
            _ => {
                self.memory_hit = true;
                Ok(false)
            }
        }
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        self.total = self.total.saturating_sub(self.pending);
        self.pending = 0;
        Ok(())
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > MAX_TABLE_ELEMENTS {
            self.table_hit = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1024 * 1024;

    #[test]
    fn input_within_the_bound_is_accepted() {
        let limits = PolicyLimits {
            max_input_bytes: 10,
            ..PolicyLimits::DEFAULT
        };
        // `"abcdefgh"` is exactly 10 bytes of JSON.
        assert!(check_input(PolicyRole::ConflictPolicy, &"abcdefgh", limits).is_ok());
    }

    #[test]
    fn input_over_the_bound_is_refused_before_the_call() {
        let limits = PolicyLimits {
            max_input_bytes: 10,
            ..PolicyLimits::DEFAULT
        };
        let err = check_input(PolicyRole::SchemaSynthesis, &"abcdefghi", limits);
        let Err(
            e @ PolicyError::InputTooLarge {
                limit_bytes: 10, ..
            },
        ) = err
        else {
            panic!("expected InputTooLarge, got {err:?}");
        };
        assert!(
            e.to_string().starts_with(
                "the input for the schema-synthesis policy is larger than the limit of 10 bytes"
            ),
            "{e}"
        );
    }

    #[test]
    fn a_placement_input_is_bounded_like_any_other() {
        let input = crate::policy::PlacementInput {
            consumer_cluster_uid: "c".into(),
            connection: "provider".into(),
            api: crate::policy::PlacementApi {
                group: "example.org".into(),
                resource: "widgets".into(),
                kind: "Widget".into(),
                scope: crate::api::ResourceScope::Cluster,
            },
            namespace: None,
            name: "w".repeat(300),
            isolation: crate::api::IsolationInForce::default(),
        };
        let limits = |max_input_bytes| PolicyLimits {
            max_input_bytes,
            ..PolicyLimits::DEFAULT
        };
        assert!(check_input(PolicyRole::Placement, &input, limits(1024)).is_ok());
        let err = check_input(PolicyRole::Placement, &input, limits(256));
        assert!(
            err.as_ref().is_err_and(|e| e.to_string().starts_with(
                "the input for the placement-policy policy is larger than the limit of 256 bytes"
            )),
            "{err:?}"
        );
    }

    #[test]
    fn memory_cap_is_the_total_of_every_memory() {
        let mut cap = StoreCap::new(16 * MIB);
        // Two memories of 6 MiB each fit, a third does not, though each alone would.
        assert!(matches!(cap.memory_growing(0, 6 * MIB, None), Ok(true)));
        assert!(matches!(cap.memory_growing(0, 6 * MIB, None), Ok(true)));
        assert!(matches!(cap.memory_growing(0, 6 * MIB, None), Ok(false)));
        assert!(cap.memory_hit);
    }

    #[test]
    fn growth_counts_only_the_difference() {
        let mut cap = StoreCap::new(16 * MIB);
        assert!(matches!(cap.memory_growing(0, 4 * MIB, None), Ok(true)));
        assert!(matches!(
            cap.memory_growing(4 * MIB, 16 * MIB, None),
            Ok(true)
        ));
        assert!(matches!(
            cap.memory_growing(16 * MIB, 17 * MIB, None),
            Ok(false)
        ));
    }

    #[test]
    fn failed_growth_is_not_counted() {
        let mut cap = StoreCap::new(16 * MIB);
        assert!(matches!(cap.memory_growing(0, 10 * MIB, None), Ok(true)));
        assert!(cap.memory_grow_failed(wasmtime::Error::msg("no")).is_ok());
        assert!(matches!(cap.memory_growing(0, 16 * MIB, None), Ok(true)));
        assert!(!cap.memory_hit);
    }

    #[test]
    fn tables_are_capped_per_table() {
        let mut cap = StoreCap::new(MIB);
        assert!(matches!(
            cap.table_growing(0, MAX_TABLE_ELEMENTS, None),
            Ok(true)
        ));
        assert!(matches!(
            cap.table_growing(0, MAX_TABLE_ELEMENTS + 1, None),
            Ok(false)
        ));
        assert!(cap.table_hit);
    }
}
