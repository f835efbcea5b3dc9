//! Whether this process is reading from a storage server right now, from which, and for how long: the
//! live figure behind `lab_storage_read_waiting_seconds`, read by the metrics thread at every scrape.
//!
//! The read histogram is added to when a read ends, so a server that takes seconds to answer shows in it
//! only seconds later, one read at a time (each rank reads once per step, and every step waits for the
//! slowest read). This clock shows the read while it waits. A read counts only while the thread that made
//! it is waiting on the socket or running: a thread frozen (the cgroup freezer) or held in a ptrace stop
//! in the middle of a read is not waiting for the server, and a slow server must not be blamed for it.

use std::sync::Mutex;
use std::time::Instant;

/// The read in flight: the server it asked, when it began, and the thread that waits for it.
struct InFlight {
    server: String,
    since: Instant,
    tid: i32,
}

static CURRENT: Mutex<Option<InFlight>> = Mutex::new(None);

/// Called by the reading thread before it sends a read to `server`.
pub(crate) fn start(server: &str) {
    let f = InFlight {
        server: server.to_string(),
        since: Instant::now(),
        tid: nix::unistd::gettid().as_raw(),
    };
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = Some(f);
}

/// Called when the read ends, however it ends.
pub(crate) fn end() {
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

/// The server of the read in flight and the seconds it has waited; `None` outside a read, or while the
/// reading thread is neither waiting nor running (frozen, stopped, gone).
pub fn current() -> Option<(String, f64)> {
    let g = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
    let f = g.as_ref()?;
    let stat = std::fs::read_to_string(format!("/proc/self/task/{}/stat", f.tid)).ok()?;
    matches!(thread_state(&stat), Some('S' | 'R'))
        .then(|| (f.server.clone(), f.since.elapsed().as_secs_f64()))
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

    /// One test: the clock is the process's own.
    #[test]
    fn a_read_counts_while_its_thread_waits_or_runs() {
        end();
        assert!(current().is_none());
        start("storage-1");
        std::thread::sleep(std::time::Duration::from_millis(30));
        // This thread is running (it reads its own state), so the read counts.
        let (server, s) = current().expect("a read in flight");
        assert_eq!(server, "storage-1");
        assert!((0.02..5.0).contains(&s), "{s}");
        end();
        assert!(current().is_none());
        // A read whose thread is gone does not count.
        std::thread::spawn(|| start("storage-2"))
            .join()
            .expect("reader thread");
        assert!(current().is_none(), "the reading thread is gone");
        end();
    }
}
