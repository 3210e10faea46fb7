//! Handing freed heap back to the system, so that the konnector's RSS follows what it holds
//! rather than the peak of its initial sync.
//!
//! ```text
//! initial sync: list pages, watch buffers, reconciles in flight ──▶ heap peak
//! afterwards: the caches stay, the rest is freed ──▶ free pages inside glibc's arenas
//! every TRIM_INTERVAL: malloc_trim(0) ──▶ those pages go back to the kernel (RSS drops)
//! ```
//!
//! glibc returns memory to the kernel on its own only from the top of an arena; pages freed
//! below live allocations stay resident. `malloc_trim(0)` releases every whole free page in
//! every arena. The static (musl) build runs mimalloc, which returns memory itself; there, and
//! on any other allocator, this does nothing.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::debug;

/// How often freed heap is handed back: often enough that RSS follows the end of a large sync
/// within a scrape interval or two, rare enough to cost nothing measurable at idle.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(30);

/// Hands freed heap back every [`TRIM_INTERVAL`] until `shutdown`.
pub async fn trim_periodically(shutdown: CancellationToken) {
    let mut ticks = tokio::time::interval(TRIM_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate; there is nothing to hand back at start-up.
    ticks.tick().await;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        // The walk over the arenas holds their locks: off the async workers.
        if let Ok(Some((before, after))) = tokio::task::spawn_blocking(trim).await {
            debug!(
                rss_before = before,
                rss_after = after,
                "freed heap handed back"
            );
        }
    }
}

/// Releases the allocator's free pages; the process's RSS in bytes before and after, where
/// there is an allocator to ask and a `/proc` to read.
pub fn trim() -> Option<(u64, u64)> {
    let before = resident_bytes();
    if !release_free_pages() {
        return None;
    }
    Some((before?, resident_bytes()?))
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[expect(
    unsafe_code,
    reason = "the one FFI call of the konnector: glibc's malloc_trim"
)]
fn release_free_pages() -> bool {
    // SAFETY: malloc_trim takes no pointer and walks glibc's own arenas under their locks.
    unsafe { libc::malloc_trim(0) };
    true
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_pages() -> bool {
    false
}

/// The process's resident set in bytes, from the `VmRSS` line of `/proc/self/status`.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib * 1024)
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    #[test]
    fn freed_heap_below_live_allocations_goes_back_to_the_system() {
        // 64 MiB in 4 KiB blocks, then every block but one in 64 freed: the survivors pin
        // the arena's top, so only a trim can give the freed pages back.
        let mut blocks: Vec<Vec<u8>> = (0..16_384).map(|_| vec![1u8; 4096]).collect();
        let survivors: Vec<Vec<u8>> = blocks
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| i % 64 == 63)
            .map(|(_, b)| std::mem::take(b))
            .collect();
        drop(blocks);
        let Some((before, after)) = trim() else {
            panic!("a glibc build on Linux trims and reads its RSS");
        };
        assert!(
            before > after + 32 * 1024 * 1024,
            "RSS {before} → {after}: less than 32 MiB handed back"
        );
        assert_eq!(survivors.len(), 256);
        assert!(survivors.iter().all(|b| b.len() == 4096));
    }
}
