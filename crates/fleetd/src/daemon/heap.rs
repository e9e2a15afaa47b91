//! fleetd's use of glibc's allocator: one shared malloc arena, and freed heap pages handed back to the kernel once
//! a burst of work (a start or destroy of many units) is over.
//!
//! Why: glibc returns memory to the kernel only from the top of the heap. After a burst, the live data is small but
//! scattered, so the heap keeps its high-water mark resident (measured: 11 of 12.7 MiB anonymous memory of an idle
//! fleetd with 333 units was heap, most of it free). `malloc_trim(0)` also releases the free pages in the middle of
//! the heap. It is cheap (one walk of the free lists) but holds the arena lock, so it runs only when the allocator
//! holds enough free memory to be worth it, checked every [`CHECK_PERIOD`]; correctness never depends on it.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How often the free memory the allocator holds is looked at.
pub const CHECK_PERIOD: Duration = Duration::from_secs(5);
/// Free heap memory below this is left alone (trimming it would gain less than a trim costs). At 1 MiB an idle
/// fleetd with 1,000 units kept 0.96 MB free in its heap untrimmed (mallinfo2), a tenth of its resident memory.
pub const TRIM_THRESHOLD: usize = 256 * 1024;
/// How much the heap must have changed since the last trim before another one can gain anything.
pub const CHANGE_THRESHOLD: usize = 64 * 1024;

/// What the allocator holds, in bytes (glibc's `mallinfo2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeapStats {
    /// Bytes in chunks handed out and not freed.
    pub in_use: usize,
    /// Bytes in free chunks.
    pub free: usize,
    /// Free bytes at the top of the heap, which glibc trims by itself.
    pub top_free: usize,
}

/// Whether a trim is worth it: enough free memory that glibc would not release by itself, and the heap changed
/// since the last trim (a trim releases pages, not chunks, so it leaves these figures as they were: an idle
/// fleetd is trimmed once, not every period).
pub fn worth_trimming(now: HeapStats, after_last_trim: Option<HeapStats>) -> bool {
    let changed = after_last_trim
        .is_none_or(|last| now.in_use.abs_diff(last.in_use) + now.free.abs_diff(last.free) >= CHANGE_THRESHOLD);
    changed && now.free.saturating_sub(now.top_free) >= TRIM_THRESHOLD
}

/// Limits glibc to one malloc arena. Called before the runtime starts any thread: fleetd's few threads allocate
/// small, short-lived buffers, and per-thread arenas mostly hold freed memory that is never returned.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn limit_arenas() {
    // SAFETY: mallopt only sets an allocator tunable.
    let applied = unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
    if applied != 1 {
        tracing::debug!("mallopt(M_ARENA_MAX) was refused; keeping glibc's default arenas");
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn limit_arenas() {}

/// The allocator's figures now.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn stats() -> Option<HeapStats> {
    // SAFETY: mallinfo2 only reads the allocator's bookkeeping (under its lock).
    let info = unsafe { libc::mallinfo2() };
    Some(HeapStats { in_use: info.uordblks, free: info.fordblks, top_free: info.keepcost })
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn stats() -> Option<HeapStats> {
    None
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: malloc_trim releases free pages under the allocator's lock; no memory in use is touched.
    unsafe { libc::malloc_trim(0) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}

/// Hands free heap pages back to the kernel whenever the allocator holds more than [`TRIM_THRESHOLD`] of them,
/// until `stop` is cancelled.
pub async fn trim_freed_memory(stop: CancellationToken) {
    let mut tick = tokio::time::interval(CHECK_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut after_last_trim = None;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Some(before) = stats() else { return };
        if !worth_trimming(before, after_last_trim) {
            continue;
        }
        trim();
        after_last_trim = stats();
        tracing::debug!(in_use = before.in_use, free = before.free, "returned freed heap memory to the kernel");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_only_free_memory_glibc_keeps_below_the_top() {
        let mib = 1024 * 1024;
        let stats = |free, top_free| HeapStats { in_use: 2 * mib, free, top_free };
        assert!(worth_trimming(stats(3 * mib, mib), None), "2 MiB free below the top is worth a trim");
        assert!(!worth_trimming(stats(3 * mib, 3 * mib), None), "free memory at the top is glibc's own to trim");
        assert!(worth_trimming(stats(mib / 2, 0), None), "half a MiB is a twentieth of an idle fleetd");
        assert!(!worth_trimming(stats(mib / 8, 0), None), "an eighth of a MiB is not worth the arena lock");
        assert!(!worth_trimming(stats(0, mib), None), "inconsistent figures never underflow");
    }

    #[test]
    fn an_unchanged_heap_is_not_trimmed_again() {
        let mib = 1024 * 1024;
        let trimmed = HeapStats { in_use: 2 * mib, free: 3 * mib, top_free: 0 };
        assert!(!worth_trimming(trimmed, Some(trimmed)), "nothing changed since the last trim");
        let idle = HeapStats { in_use: trimmed.in_use + 1024, free: trimmed.free - 1024, ..trimmed };
        assert!(!worth_trimming(idle, Some(trimmed)), "an idle fleetd's few allocations are no reason");
        let burst = HeapStats { in_use: trimmed.in_use - mib, free: trimmed.free + mib, ..trimmed };
        assert!(worth_trimming(burst, Some(trimmed)), "a burst freed another MiB");
    }

    /// Resident anonymous memory of this process, in KiB.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn rss_anon_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_trim_hands_back_freed_pages_between_live_blocks() {
        // 8 MiB of small blocks, 15 of every 16 freed: the live ones pin the heap's top, so glibc keeps the
        // freed pages resident by itself.
        let blocks: Vec<Vec<u8>> = (0..4096).map(|i| vec![i as u8; 2048]).collect();
        let kept: Vec<Vec<u8>> = blocks.into_iter().enumerate().filter(|(i, _)| i % 16 == 0).map(|(_, b)| b).collect();
        let before = rss_anon_kib();
        assert!(worth_trimming(stats().unwrap(), None), "7.5 MiB freed between live blocks: {:?}", stats());
        trim();
        let after = rss_anon_kib();
        assert!(before - after.min(before) >= 3 * 1024, "resident anonymous memory {before} KiB -> {after} KiB");
        assert!(kept.iter().enumerate().all(|(i, b)| b.iter().all(|x| *x == (i * 16) as u8)), "live blocks intact");
    }
}
