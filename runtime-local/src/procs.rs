//! Processes the lab started, recorded so that `lab down` can stop them even when the supervisor that
//! started them was killed: each record holds the pid and the kernel's start time of that pid, so a pid
//! that was reused by an unrelated process is never signalled.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

/// The environment variable every process of a lab carries, naming the lab and its folder
/// (`<name>@<folder>`, see [`lab_env_value`]): `lab down` and leak checks look for it, and two labs of the
/// same name in different state folders never mistake each other's processes.
pub const LAB_ENV: &str = "STRAGGLER_LAB";

/// The value of [`LAB_ENV`] for the lab whose folder is `dir`.
pub fn lab_env_value(name: &str, dir: &std::path::Path) -> String {
    format!("{name}@{}", dir.display())
}

/// One process the lab started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcRecord {
    /// The instance it belongs to (`rank-1`, `storage-0`, `proxy-0`, `supervisor`).
    pub name: String,
    pub pid: u32,
    /// Field 22 of `/proc/<pid>/stat`: clock ticks after boot when the process started.
    pub start_ticks: u64,
    /// True when the process leads its own process group (children of it are stopped with it).
    pub group_leader: bool,
}

impl ProcRecord {
    /// A record of a running process, reading its start time now.
    pub fn of(name: &str, pid: u32, group_leader: bool) -> Option<ProcRecord> {
        Some(ProcRecord {
            name: name.to_string(),
            pid,
            start_ticks: start_ticks(pid)?,
            group_leader,
        })
    }

    /// True if this very process (same pid and start time) is still alive and not a zombie.
    pub fn alive(&self) -> bool {
        start_ticks(self.pid) == Some(self.start_ticks) && !is_zombie(self.pid)
    }

    /// Sends `sig` to the process (and its group, when it leads one), only if it is still the same process.
    pub fn signal(&self, sig: Signal) {
        if start_ticks(self.pid) != Some(self.start_ticks) {
            return;
        }
        let pid = Pid::from_raw(self.pid as i32);
        if self.group_leader {
            let _ = killpg(pid, sig);
        }
        let _ = kill(pid, sig);
    }
}

/// The start time of `pid` from `/proc/<pid>/stat`, or `None` when there is no such process.
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn is_zombie(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with('Z')))
        .unwrap_or(false)
}

/// Stops every recorded process: SIGTERM, then SIGKILL for those still alive after `grace`.
/// Returns the names of processes that survived even SIGKILL (should be none).
pub fn stop_all(records: &[ProcRecord], grace: Duration) -> Vec<String> {
    for r in records {
        r.signal(Signal::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && records.iter().any(ProcRecord::alive) {
        std::thread::sleep(Duration::from_millis(50));
    }
    for r in records.iter().filter(|r| r.alive()) {
        r.signal(Signal::SIGKILL);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && records.iter().any(ProcRecord::alive) {
        std::thread::sleep(Duration::from_millis(20));
    }
    records
        .iter()
        .filter(|r| r.alive())
        .map(|r| format!("{} (pid {})", r.name, r.pid))
        .collect()
}

/// Reads a process table file written by [`write_table`]; a missing or unreadable file is empty.
pub fn read_table(path: &Path) -> Vec<ProcRecord> {
    fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Writes a process table atomically.
///
/// # Errors
/// The state error when the file cannot be written.
pub fn write_table(path: &Path, records: &[ProcRecord]) -> lab_runtime::Result<()> {
    let bytes =
        serde_json::to_vec_pretty(records).map_err(|e| lab_runtime::RuntimeError::Other(e.to_string()))?;
    lab_runtime::state::write_atomic(path, &bytes)
}

/// Every live process that carries `STRAGGLER_LAB=<lab>@<its folder>` in its environment: everything a lab started,
/// found without trusting any record (the supervisor may have died before writing one).
pub fn lab_processes(lab: &str) -> Vec<ProcRecord> {
    let value = lab_env_value(lab, &lab_runtime::state::lab_dir(lab));
    let needle = format!("{}={value}", LAB_ENV);
    let me = std::process::id();
    let Ok(rd) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/environ"))
                .map(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
                .unwrap_or(false)
        })
        .filter_map(|pid| {
            let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            ProcRecord::of(comm.trim(), pid, false)
        })
        .filter(|r| !is_zombie(r.pid))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_a_changed_start_time_is_not() {
        let me = std::process::id();
        let r = ProcRecord::of("me", me, false).unwrap();
        assert!(r.alive());
        let other = ProcRecord {
            start_ticks: r.start_ticks + 1,
            ..r
        };
        assert!(!other.alive(), "a reused pid must not count as ours");
    }

    #[test]
    fn stops_a_real_child() {
        use std::os::unix::process::CommandExt;
        let child = std::process::Command::new("sleep")
            .arg("60")
            .process_group(0)
            .spawn()
            .unwrap();
        let r = ProcRecord::of("sleep", child.id(), true).unwrap();
        // Reap in the background so the child does not linger as a zombie.
        let mut c = child;
        let reaper = std::thread::spawn(move || c.wait());
        assert!(stop_all(std::slice::from_ref(&r), Duration::from_secs(2)).is_empty());
        reaper.join().unwrap().unwrap();
        assert!(!r.alive());
    }
}
