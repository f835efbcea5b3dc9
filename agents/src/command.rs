//! Running a remediation command: `sh -c` in its own process group, with a timeout, its output streamed
//! line by line and kept (the end of it) for the report.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use crate::error::CommandError;

/// How much of each stream the report keeps.
pub const KEEP_BYTES: usize = 16 * 1024;

/// A command to run.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    pub command: String,
    pub timeout: Duration,
    /// Set in its environment (on top of this process's own).
    pub env: Vec<(String, String)>,
    /// Put first on its `PATH` (the folder of the `lab` running the drill, so `lab ...` is this lab).
    pub path_first: Option<PathBuf>,
}

/// How it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutcome {
    /// The exit code; `None` when it was ended by a signal.
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub duration: Duration,
    pub stdout: String,
    pub stderr: String,
}

impl CommandOutcome {
    /// Exited with 0 within its time.
    pub fn succeeded(&self) -> bool {
        !self.timed_out && self.exit_code == Some(0)
    }
}

/// Where a running command's process group is kept, so an interrupt can end it.
pub type GroupSlot = Arc<Mutex<Option<i32>>>;

/// Sees each line of output as it comes: `(line, is_stderr)`.
pub type LineSink = Arc<dyn Fn(&str, bool) + Send + Sync>;

/// Runs `spec`; `on_line(line, is_stderr)` sees every line as it comes.
///
/// # Errors
/// [`CommandError`] when `sh` cannot be started.
pub async fn run(
    spec: &CommandSpec,
    on_line: LineSink,
    group: &GroupSlot,
) -> Result<CommandOutcome, CommandError> {
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c").arg(&spec.command);
    run_prepared(cmd, spec, on_line, group).await
}

/// Runs `argv` as it is (no shell), with `spec`'s timeout, environment and `PATH`; `spec.command` names it
/// in errors. A first element without a `/` is looked up on the `PATH` (with `spec.path_first` first).
///
/// # Errors
/// [`CommandError`] when it cannot be started.
pub async fn run_argv(
    argv: &[String],
    spec: &CommandSpec,
    on_line: LineSink,
    group: &GroupSlot,
) -> Result<CommandOutcome, CommandError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(CommandError {
            what: "an empty command".into(),
            source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        });
    };
    let found = spec
        .path_first
        .as_ref()
        .map(|d| d.join(program))
        .filter(|p| !program.contains('/') && p.is_file());
    let mut cmd = tokio::process::Command::new(found.as_deref().unwrap_or(std::path::Path::new(program)));
    cmd.args(args);
    run_prepared(cmd, spec, on_line, group).await
}

async fn run_prepared(
    mut cmd: tokio::process::Command,
    spec: &CommandSpec,
    on_line: LineSink,
    group: &GroupSlot,
) -> Result<CommandOutcome, CommandError> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    if let Some(first) = &spec.path_first {
        let mut paths = vec![first.clone()];
        if let Some(p) = std::env::var_os("PATH") {
            paths.extend(std::env::split_paths(&p));
        }
        if let Ok(joined) = std::env::join_paths(paths) {
            cmd.env("PATH", joined);
        }
    }
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(CommandError::io(format!("cannot start `{}`", spec.command)))?;
    let pgid = child.id().and_then(|p| i32::try_from(p).ok());
    *group.lock().unwrap_or_else(|p| p.into_inner()) = pgid;
    let out = tokio::spawn(collect(child.stdout.take(), false, on_line.clone()));
    let err = tokio::spawn(collect(child.stderr.take(), true, on_line));
    let (status, timed_out) = match tokio::time::timeout(spec.timeout, child.wait()).await {
        Ok(s) => (s.ok(), false),
        Err(_) => {
            signal_group(pgid, Signal::SIGTERM);
            let s = match tokio::time::timeout(Duration::from_secs(3), child.wait()).await {
                Ok(s) => s.ok(),
                Err(_) => {
                    signal_group(pgid, Signal::SIGKILL);
                    child.wait().await.ok()
                }
            };
            (s, true)
        }
    };
    // Whatever the command left running in its group (a background job) ends with it: the drill started it.
    signal_group(pgid, Signal::SIGKILL);
    *group.lock().unwrap_or_else(|p| p.into_inner()) = None;
    let stdout = tokio::time::timeout(Duration::from_secs(2), out)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    let stderr = tokio::time::timeout(Duration::from_secs(2), err)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    Ok(CommandOutcome {
        exit_code: status.and_then(|s| s.code()),
        timed_out,
        duration: start.elapsed(),
        stdout,
        stderr,
    })
}

/// Sends `signal` to a process group, if there is one (it may be gone already).
pub fn signal_group(pgid: Option<i32>, signal: Signal) {
    if let Some(pg) = pgid.filter(|p| *p > 1) {
        let _ = killpg(Pid::from_raw(pg), signal);
    }
}

async fn collect(stream: Option<impl AsyncRead + Unpin>, is_err: bool, on_line: LineSink) -> String {
    let Some(stream) = stream else {
        return String::new();
    };
    let mut lines = BufReader::new(stream).lines();
    let mut kept = String::new();
    while let Ok(Some(line)) = lines.next_line().await {
        on_line(&line, is_err);
        kept.push_str(&line);
        kept.push('\n');
        if kept.len() > KEEP_BYTES * 2 {
            kept = tail(&kept, KEEP_BYTES);
        }
    }
    tail(&kept, KEEP_BYTES)
}

/// The last `max` bytes of `s` (on a character boundary), marked when cut.
fn tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut i = s.len() - max;
    while !s.is_char_boundary(i) {
        i += 1;
    }
    format!("[… earlier output cut]\n{}", &s[i..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(cmd: &str, timeout_ms: u64) -> CommandSpec {
        CommandSpec {
            command: cmd.into(),
            timeout: Duration::from_millis(timeout_ms),
            env: vec![("LAB_INCIDENT_BUNDLE".into(), "/nonexistent/bundle.json".into())],
            path_first: None,
        }
    }

    #[tokio::test]
    async fn output_exit_code_and_environment() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = lines.clone();
        let slot = GroupSlot::default();
        let o = run(
            &spec("echo out; echo \"$LAB_INCIDENT_BUNDLE\" >&2; exit 3", 10_000),
            Arc::new(move |s: &str, e| l.lock().unwrap().push((s.to_string(), e))),
            &slot,
        )
        .await
        .unwrap();
        assert_eq!(o.exit_code, Some(3));
        assert!(!o.timed_out && !o.succeeded());
        assert_eq!(o.stdout, "out\n");
        assert_eq!(o.stderr, "/nonexistent/bundle.json\n");
        assert_eq!(lines.lock().unwrap().len(), 2);
        assert!(slot.lock().unwrap().is_none());
    }

    #[tokio::test]
    async fn a_command_that_outlives_its_timeout_is_ended_with_its_children() {
        let slot = GroupSlot::default();
        let t = tempfile::tempdir().unwrap();
        let pidfile = t.path().join("child.pid");
        let cmd = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
        let o = run(&spec(&cmd, 500), Arc::new(|_: &str, _| {}), &slot)
            .await
            .unwrap();
        assert!(o.timed_out);
        assert!(o.duration < Duration::from_secs(5), "{:?}", o.duration);
        let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        // The background sleep was in the command's group: it is gone (or a zombie about to be reaped) once
        // the kill has been delivered.
        let gone = || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            stat.is_empty() || stat.rsplit(')').next().unwrap().trim_start().starts_with('Z')
        };
        let until = Instant::now() + Duration::from_secs(5);
        while !gone() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(gone(), "the command's background child {pid} outlived it");
    }

    #[test]
    fn long_output_keeps_its_end() {
        let s = "é".repeat(KEEP_BYTES);
        let t = tail(&s, 100);
        assert!(t.starts_with("[… earlier output cut]"));
        assert!(t.len() <= 100 + 30);
    }
}
