//! Whether this process is blocked at an all-reduce right now, and for how long: the live figure behind
//! `lab_collective_wait_seconds`, read by the metrics thread at every scrape.
//!
//! The phase counters (`lab_phase_seconds_total`) are added to when a step ends, so while a job is
//! stalled every rank's counters stand still, the rank that holds the job and the ranks that wait for it
//! alike. This clock tells them apart: a thread blocked in `poll` for a peer beats it every time it
//! polls (at least once a second), and a wait counts only while the beats are fresh. A rank whose
//! training thread is frozen (or stuck anywhere outside `poll`) does not beat, so it is not waiting, even
//! when it froze inside an all-reduce.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A wait counts while its last beat is younger than this (the pollers wake at least every second).
pub const FRESH: Duration = Duration::from_secs(2);

static EPOCH: OnceLock<Instant> = OnceLock::new();
/// When the current operation first blocked, ms since [`EPOCH`] plus one; 0 outside a wait.
static SINCE: AtomicU64 = AtomicU64::new(0);
/// The last beat, in the same unit.
static BEAT: AtomicU64 = AtomicU64::new(0);

fn now_ms() -> u64 {
    let epoch = *EPOCH.get_or_init(Instant::now);
    epoch.elapsed().as_millis() as u64 + 1
}

/// Called by a poller about to block on a peer.
pub(crate) fn beat() {
    let now = now_ms();
    let _ = SINCE.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
    BEAT.store(now, Ordering::Relaxed);
}

/// Called when an all-reduce ends, however it ends.
pub(crate) fn clear() {
    SINCE.store(0, Ordering::Relaxed);
}

/// Seconds the current all-reduce has been blocked on a peer, from its first block; 0 when no all-reduce
/// is blocked, or when its poller has not beaten within [`FRESH`].
pub fn seconds() -> f64 {
    let since = SINCE.load(Ordering::Relaxed);
    let beat = BEAT.load(Ordering::Relaxed);
    if since == 0 {
        return 0.0;
    }
    let now = now_ms();
    if now.saturating_sub(beat) > FRESH.as_millis() as u64 {
        return 0.0;
    }
    now.saturating_sub(since) as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_counts_while_its_beats_are_fresh() {
        clear();
        assert_eq!(seconds(), 0.0);
        beat();
        std::thread::sleep(Duration::from_millis(30));
        beat();
        let s = seconds();
        assert!((0.02..1.0).contains(&s), "{s}");
        clear();
        assert_eq!(seconds(), 0.0);
        // A stale beat: the waiter is stuck, not waiting.
        beat();
        BEAT.store(1, Ordering::Relaxed);
        assert_eq!(seconds(), 0.0);
        clear();
    }
}
