//! What runs beside a rank inside its own container, for runtimes that reach the container only through
//! `exec` (Kubernetes): list the processes that share the container's CPU limit, start a CPU hog there,
//! hold the rank's training thread still, and signal one of them. The `lab-beside` binary maps its
//! subcommands onto these functions; the rank image carries it, so nothing here needs a shell.
//!
//! A process started through `exec` lives in the container's cgroup and PID namespace, so a hog started
//! here shares the rank's CPU limit exactly as the local runtime's hog shares its cgroup. The helpers
//! that must outlive the `exec` (the hog, the holder) are started detached: their own process group, no
//! standard streams, so the `exec` session ends as soon as the launcher has printed their pid.
//!
//! Holding the training thread: a stop signal stops every thread of a process, the metrics thread too,
//! and then the rank's readiness probe fails and its liveness probe restarts it: not a hang that stays
//! Ready. A ptrace stop is per thread: the holder seizes the rank's main thread (the training loop; its
//! tid is the pid) and interrupts it, so only that thread stops while `/metrics` and `/readyz` keep
//! answering. The thread runs on as soon as the holder is gone (the kernel detaches a dead tracer's
//! tracees), which is how the fault is cleared; a restarted rank is a new process, never held.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::ptrace;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

/// The rank's own program, as its command line starts.
pub const RANK_PROGRAM: &str = "lab-rank";
/// The subcommand a hog runs (`lab-beside spin`).
pub const SPIN: &str = "spin";
/// The subcommand a holder runs (`lab-beside hold-run PID`).
pub const HOLD_RUN: &str = "hold-run";

/// What a process beside the rank is, from its command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The rank's own process.
    Rank,
    /// A CPU hog this program started.
    Hog,
    /// A holder of the rank's training thread this program started.
    Hold,
    /// Anything else.
    Other,
}

/// One process in this container's cgroup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proc {
    pub pid: u32,
    /// Its command line, arguments separated by spaces.
    pub command: String,
    /// CPU time it used since it started (user + system), seconds.
    pub cpu_seconds: f64,
    /// True for the rank's own process.
    pub rank_itself: bool,
    pub role: Role,
    /// The state letter of its main thread (`R`, `S`, `t` for a ptrace stop, `T` for a stop signal...).
    pub state: String,
    /// The pid tracing its main thread (0: none).
    pub tracer: u32,
}

impl Proc {
    /// Whether its main thread is stopped (a ptrace stop or a stop signal) while the process lives.
    pub fn stopped(&self) -> bool {
        self.state == "t" || self.state == "T"
    }
}

/// Errors of `lab-beside`, each saying what failed.
#[derive(Debug, thiserror::Error)]
pub enum BesideError {
    #[error("no process {0} here")]
    NoSuchProcess(u32),
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}")]
    Sys {
        what: String,
        #[source]
        source: nix::Error,
    },
    #[error("{0}")]
    Refused(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BesideError {
    let what = what.into();
    move |source| BesideError::Io { what, source }
}

/// The fields of `/proc/<pid>/stat` after the command name: state first.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let rest = &stat[stat.rfind(')')? + 2..];
    Some(rest.split_whitespace().collect())
}

/// State letter and CPU seconds from a `/proc/<pid>/stat` line (`/proc` counts in USER_HZ, 100 on Linux).
pub fn parse_stat(stat: &str) -> Option<(String, f64)> {
    let f = stat_fields(stat)?;
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    Some((f.first()?.to_string(), (ticks(11) + ticks(12)) / 100.0))
}

/// `TracerPid` from a `/proc/<pid>/status` text.
pub fn parse_tracer(status: &str) -> u32 {
    status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// What a command line (`/proc/<pid>/cmdline`, NUL-separated) is.
pub fn role_of(args: &[String]) -> Role {
    let base = |s: &String| s.rsplit('/').next().unwrap_or(s).to_string();
    match (args.first().map(base).as_deref(), args.get(1).map(String::as_str)) {
        (Some(RANK_PROGRAM), _) => Role::Rank,
        (Some("lab-beside"), Some(SPIN)) => Role::Hog,
        (Some("lab-beside"), Some(HOLD_RUN)) => Role::Hold,
        _ => Role::Other,
    }
}

fn read_proc(pid: u32) -> Option<Proc> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (state, cpu_seconds) = parse_stat(&stat)?;
    let args: Vec<String> = std::fs::read(format!("/proc/{pid}/cmdline"))
        .ok()?
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let tracer = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|s| parse_tracer(&s))
        .unwrap_or(0);
    let role = role_of(&args);
    Some(Proc {
        pid,
        command: args.join(" "),
        cpu_seconds,
        rank_itself: role == Role::Rank,
        role,
        state,
        tracer,
    })
}

/// Every live process in this process's cgroup (its container), itself left out; zombies (a stopped hog
/// not yet reaped by the container's first process) are gone for every purpose here.
///
/// # Errors
/// When `/proc` cannot be read.
pub fn list() -> Result<Vec<Proc>, BesideError> {
    let own_group = std::fs::read_to_string("/proc/self/cgroup").map_err(io("reading /proc/self/cgroup"))?;
    let me = std::process::id();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").map_err(io("reading /proc"))? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        // Read per process: one may end between the listing and the read.
        if std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .ok()
            .as_deref()
            != Some(&own_group)
        {
            continue;
        }
        if let Some(p) = read_proc(pid).filter(|p| p.state != "Z" && p.state != "X") {
            out.push(p);
        }
    }
    out.sort_by_key(|p| p.pid);
    Ok(out)
}

/// One live process of this container.
///
/// # Errors
/// [`BesideError::NoSuchProcess`] when it is not here.
pub fn find(pid: u32) -> Result<Proc, BesideError> {
    list()?
        .into_iter()
        .find(|p| p.pid == pid)
        .ok_or(BesideError::NoSuchProcess(pid))
}

fn this_program() -> Result<PathBuf, BesideError> {
    std::env::current_exe().map_err(io("finding this program"))
}

/// Starts `lab-beside <args>` detached from the caller: its own process group, no terminal, no streams
/// but (optionally) stderr, so it outlives the `exec` that started it.
fn detached(args: &[&str], stderr: Stdio) -> Result<std::process::Child, BesideError> {
    use std::os::unix::process::CommandExt;
    Command::new(this_program()?)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .process_group(0)
        .spawn()
        .map_err(io(format!("starting lab-beside {}", args.join(" "))))
}

/// Starts a CPU hog beside the rank; returns its pid.
///
/// # Errors
/// When it cannot be started.
pub fn start_hog() -> Result<u32, BesideError> {
    Ok(detached(&[SPIN], Stdio::null())?.id())
}

/// Burns CPU until killed.
pub fn spin() -> ! {
    let mut x: u64 = 0;
    loop {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

/// Starts a holder of process `pid`'s main thread and waits (up to `within`) until that thread is in a
/// ptrace stop with the holder as its tracer; returns the holder's pid.
///
/// # Errors
/// [`BesideError::Refused`] when `pid` is not the rank or is held already, or the kernel refused the
/// holder (with its own message: a node forbidding ptrace between processes of one user, a seccomp profile).
pub fn hold(pid: u32, within: Duration) -> Result<u32, BesideError> {
    let target = find(pid)?;
    if !target.rank_itself {
        return Err(BesideError::Refused(format!(
            "pid {pid} is not the rank ({}): only the rank's training thread is held",
            target.command
        )));
    }
    if target.tracer != 0 {
        return Err(BesideError::Refused(format!(
            "pid {pid} is held already (by pid {})",
            target.tracer
        )));
    }
    let mut child = detached(&[HOLD_RUN, &pid.to_string()], Stdio::piped())?;
    let holder = child.id();
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().map_err(io("waiting for the holder"))? {
            let mut why = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut why);
            }
            return Err(BesideError::Refused(format!(
                "the holder of pid {pid} ended ({status}): {}",
                why.trim()
            )));
        }
        if let Some(p) = read_proc(pid)
            && p.tracer == holder
            && p.state == "t"
        {
            return Ok(holder);
        }
        if Instant::now() > deadline {
            let _ = kill(Pid::from_raw(holder as i32), Signal::SIGKILL);
            return Err(BesideError::Refused(format!(
                "pid {pid}'s main thread was not held within {:.0} s",
                within.as_secs_f64()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The holder itself: seizes `pid`'s main thread, stops it, and keeps it stopped until this process
/// ends (killed by the clear, or the rank is gone). Never returns while the hold lasts.
///
/// # Errors
/// When the kernel refuses the seize or the interrupt.
pub fn hold_run(pid: u32) -> Result<(), BesideError> {
    let p = Pid::from_raw(i32::try_from(pid).map_err(|_| BesideError::NoSuchProcess(pid))?);
    ptrace::seize(p, ptrace::Options::empty()).map_err(|source| BesideError::Sys {
        what: format!("ptrace(PTRACE_SEIZE) of pid {pid} was refused"),
        source,
    })?;
    ptrace::interrupt(p).map_err(|source| BesideError::Sys {
        what: format!("ptrace(PTRACE_INTERRUPT) of pid {pid} was refused"),
        source,
    })?;
    // Every later stop (a signal for the thread, a group stop) leaves it stopped: it is not resumed.
    loop {
        match waitpid(p, Some(WaitPidFlag::__WALL)) {
            Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => return Ok(()),
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => {}
            Err(nix::errno::Errno::ECHILD) => return Ok(()),
            Err(source) => {
                return Err(BesideError::Sys {
                    what: format!("waiting on pid {pid}"),
                    source,
                });
            }
        }
    }
}

/// Sends `signal` to `pid`, which must be a live process of this container.
///
/// # Errors
/// When it is not here or the signal cannot be sent.
pub fn signal(pid: u32, signal: Signal) -> Result<(), BesideError> {
    find(pid)?;
    kill(Pid::from_raw(pid as i32), signal).map_err(|source| BesideError::Sys {
        what: format!("sending {signal} to pid {pid}"),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_give_the_state_and_cpu_seconds() {
        // A command name with spaces and a parenthesis: the fields start after the last ')'.
        let stat = "42 (lab rank) x) t 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1 2 3";
        assert_eq!(parse_stat(stat), Some(("t".into(), 3.0)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn the_tracer_is_read_from_the_status() {
        assert_eq!(
            parse_tracer("Name:\tlab-rank\nState:\tt (tracing stop)\nTracerPid:\t77\n"),
            77
        );
        assert_eq!(parse_tracer("Name:\tx\n"), 0);
    }

    #[test]
    fn roles_come_from_the_command_line() {
        let v = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        assert_eq!(
            role_of(&v("/usr/local/bin/lab-rank --rank-from-hostname")),
            Role::Rank
        );
        assert_eq!(role_of(&v("/usr/local/bin/lab-beside spin")), Role::Hog);
        assert_eq!(role_of(&v("lab-beside hold-run 1")), Role::Hold);
        assert_eq!(role_of(&v("sleep 9")), Role::Other);
        assert_eq!(role_of(&[]), Role::Other);
    }

    /// The kernel's side, on this machine: a seized and interrupted process reads as state `t` with its
    /// tracer, and runs again once detached.
    #[test]
    fn a_ptrace_stop_reads_as_held_and_ends_with_the_tracer() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let p = Pid::from_raw(pid as i32);
        let holder = std::thread::spawn(move || {
            ptrace::seize(p, ptrace::Options::empty()).unwrap();
            ptrace::interrupt(p).unwrap();
            let _ = waitpid(p, Some(WaitPidFlag::__WALL));
            let st = read_proc(pid).unwrap();
            assert_eq!(st.state, "t", "{st:?}");
            assert!(st.stopped());
            assert_eq!(st.tracer, nix::unistd::gettid().as_raw() as u32, "{st:?}");
            ptrace::detach(p, None).unwrap();
        });
        holder.join().unwrap();
        let st = read_proc(pid).unwrap();
        assert_eq!(st.tracer, 0, "{st:?}");
        assert!(!st.stopped(), "{st:?}");
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
