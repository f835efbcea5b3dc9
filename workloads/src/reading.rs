//! Whether this process is reading from a storage server right now, from which, and for how long: the
//! live figure behind `lab_storage_read_waiting_seconds`, read by the metrics thread at every scrape.
//!
//! The read histogram is added to when a read ends, so a server that takes seconds to answer shows in it
//! only seconds later, one read at a time (each rank reads once per step, and every step waits for the
//! slowest read). This clock shows the read while it waits. A read counts only while the thread that made
//! it is waiting on the socket or running: a thread frozen (the cgroup freezer) or held in a ptrace stop
//! in the middle of a read is not waiting for the server, and a slow server must not be blamed for it.
//!
//! The same clock keeps `lab_storage_read_wait_seconds_total`: the seconds spent waiting on each server,
//! counted as they pass (at every scrape, and when a read ends), so a rate over a few seconds is the
//! share of the rank's time spent waiting on that server, whether its reads have ended or not. A look
//! that finds the reading thread frozen or stopped counts nothing since the look before, and the read's
//! end counts nothing since a look that found it so (it thawed at a moment nobody saw). Each step of the
//! count is at most [`MAX_STEP`]: a whole process paused between two scrapes is not waiting either.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The longest time counted at once: a little over the one-second scrape interval. A longer gap between
/// two looks at a read in flight is a process that was paused whole, or not scraped.
pub const MAX_STEP: Duration = Duration::from_millis(1250);

/// The read in flight: the server it asked, when it began, until when its wait was counted, whether the
/// last look found its thread waiting, and the thread that waits for it.
struct InFlight {
    server: String,
    since: Instant,
    counted_until: Instant,
    waiting: bool,
    tid: i32,
}

#[derive(Default)]
struct State {
    now: Option<InFlight>,
    /// Seconds waited, by server.
    waited: BTreeMap<String, f64>,
}

static STATE: Mutex<State> = Mutex::new(State {
    now: None,
    waited: BTreeMap::new(),
});

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Adds the wait from `f.counted_until` to `now` (at most [`MAX_STEP`]) to its server's total.
fn count(waited: &mut BTreeMap<String, f64>, f: &mut InFlight, now: Instant) {
    let step = now.saturating_duration_since(f.counted_until).min(MAX_STEP);
    f.counted_until = now;
    match waited.get_mut(&f.server) {
        Some(w) => *w += step.as_secs_f64(),
        None => {
            waited.insert(f.server.clone(), step.as_secs_f64());
        }
    }
}

/// Called by the reading thread before it sends a read to `server`.
pub(crate) fn start(server: &str) {
    let now = Instant::now();
    let f = InFlight {
        server: server.to_string(),
        since: now,
        counted_until: now,
        waiting: true,
        tid: nix::unistd::gettid().as_raw(),
    };
    state().now = Some(f);
}

/// Called by the reading thread when the read ends, however it ends. The time since the last look is
/// counted only if that look found the thread waiting: a thread found frozen then has thawed since, at a
/// moment nobody saw.
pub(crate) fn end() {
    let mut g = state();
    let st = &mut *g;
    if let Some(mut f) = st.now.take()
        && f.waiting
    {
        count(&mut st.waited, &mut f, Instant::now());
    }
}

/// What the scrape shows.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Seen {
    /// The server of the read in flight and the seconds it has waited; `None` outside a read, or while
    /// the reading thread is neither waiting nor running (frozen, stopped, gone).
    pub current: Option<(String, f64)>,
    /// Seconds waited on each server so far, this read's wait counted up to now.
    pub waited: BTreeMap<String, f64>,
}

/// Counts the wait of the read in flight up to now, if its thread is waiting or running (else the time
/// since the last look is not counted), and returns what the scrape shows.
pub fn look() -> Seen {
    let now = Instant::now();
    let mut g = state();
    let st = &mut *g;
    let mut current = None;
    if let Some(f) = st.now.as_mut() {
        let waiting = std::fs::read_to_string(format!("/proc/self/task/{}/stat", f.tid))
            .is_ok_and(|stat| matches!(thread_state(&stat), Some('S' | 'R')));
        f.waiting = waiting;
        if waiting {
            count(&mut st.waited, f, now);
            current = Some((f.server.clone(), now.duration_since(f.since).as_secs_f64()));
        } else {
            f.counted_until = now;
        }
    }
    Seen {
        current,
        waited: st.waited.clone(),
    }
}

/// The state letter of a `/proc/<pid>/task/<tid>/stat` line: the first field after the command name,
/// which is in parentheses and may itself hold spaces and parentheses.
fn thread_state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_letter_is_read_after_the_last_parenthesis() {
        assert_eq!(thread_state("42 (lab-rank) S 1 42"), Some('S'));
        assert_eq!(thread_state("42 (a) b (c)) t 1 42"), Some('t'));
        assert_eq!(thread_state("42 (x) D 1"), Some('D'));
        assert_eq!(thread_state("garbage"), None);
    }

    fn waited(server: &str) -> f64 {
        look().waited.get(server).copied().unwrap_or(0.0)
    }

    /// One test: the clock is the process's own.
    #[test]
    fn a_read_counts_while_its_thread_waits_or_runs() {
        end();
        assert!(look().current.is_none());
        let before = waited("storage-1");
        start("storage-1");
        std::thread::sleep(Duration::from_millis(30));
        // This thread is running (it reads its own state), so the read counts.
        let (server, s) = look().current.expect("a read in flight");
        assert_eq!(server, "storage-1");
        assert!((0.02..5.0).contains(&s), "{s}");
        let mid = waited("storage-1") - before;
        assert!((0.02..5.0).contains(&mid), "counted while in flight: {mid}");
        std::thread::sleep(Duration::from_millis(20));
        end();
        assert!(look().current.is_none());
        let all = waited("storage-1") - before;
        assert!(all >= mid + 0.02 && all < 5.0, "counted to the end: {all}");
        // A read whose thread is gone does not count, and the time it was not seen waiting is not added.
        let before = waited("storage-2");
        std::thread::spawn(|| start("storage-2"))
            .join()
            .expect("reader thread");
        assert!(look().current.is_none(), "the reading thread is gone");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(waited("storage-2"), before, "not waiting, not counted");
        std::thread::sleep(Duration::from_millis(20));
        end();
        assert_eq!(
            waited("storage-2"),
            before,
            "a read last seen not waiting adds nothing when it ends"
        );
    }

    #[test]
    fn a_long_gap_counts_at_most_one_step() {
        let mut waited = BTreeMap::new();
        let t0 = Instant::now();
        let mut f = InFlight {
            server: "storage-0".into(),
            since: t0,
            counted_until: t0,
            waiting: true,
            tid: 0,
        };
        count(&mut waited, &mut f, t0 + Duration::from_millis(400));
        count(&mut waited, &mut f, t0 + Duration::from_secs(60));
        assert_eq!(waited["storage-0"], 0.4 + MAX_STEP.as_secs_f64());
        assert_eq!(f.counted_until, t0 + Duration::from_secs(60));
    }
}
