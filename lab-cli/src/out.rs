//! How the CLI prints: one line per lifecycle step with ✓ or ✗ and its time, errors with their causes.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::Duration;

use lab_model::Snapshot;
use lab_runtime::Progress;
use lab_session::Lab;

/// Prints steps to stderr: `… name` while it runs (on a terminal), then `✓ name  1.2s`.
#[derive(Debug)]
pub struct Steps {
    tty: bool,
    open: Mutex<Option<String>>,
}

impl Steps {
    pub fn new() -> Self {
        Steps {
            tty: std::io::stderr().is_terminal(),
            open: Mutex::new(None),
        }
    }
}

fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        format!("{s:.1}s")
    } else {
        format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

impl Progress for Steps {
    fn step_started(&self, step: &str) {
        if self.tty {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, " … {step}");
            let _ = e.flush();
            *self.open.lock().expect("progress") = Some(step.to_string());
        }
    }

    fn step_finished(&self, step: &str, ok: bool, elapsed: Duration, detail: Option<&str>) {
        let mut e = std::io::stderr().lock();
        if self.tty && self.open.lock().expect("progress").take().is_some() {
            let _ = write!(e, "\r\x1b[2K");
        }
        let mark = if ok { "✓" } else { "✗" };
        let _ = write!(e, " {mark} {step:<28} {:>6}", secs(elapsed));
        if let Some(d) = detail {
            let first = d.lines().next().unwrap_or("");
            let _ = write!(e, "  {first}");
        }
        let _ = writeln!(e);
    }

    fn note(&self, message: &str) {
        let mut e = std::io::stderr().lock();
        if self.tty && self.open.lock().expect("progress").is_some() {
            let _ = write!(e, "\r\x1b[2K");
        }
        let _ = writeln!(e, "   note: {message}");
    }
}

/// The `--name` flag to repeat in a suggested command: empty for the default lab.
pub fn name_flag(name: &str) -> String {
    if name == "lab" {
        String::new()
    } else {
        format!(" --name {name}")
    }
}

/// Watches the lab for `window` and returns the last snapshot. On a terminal, a line on stderr says how long
/// it watches, and is wiped before the answer.
/// How long a command watches when the lab has no fresh live snapshot (its rules' longest `for` is 5 s).
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(6);

/// The lab now: without `window`, the snapshot the lab's watcher keeps when it is fresh (at once, alerts
/// from the continuous evaluation), else watching for [`DEFAULT_WINDOW`]; with it, watching that long.
pub async fn current(lab: &Lab, window: Option<Duration>) -> Snapshot {
    if window.is_none()
        && let Some(s) = lab_session::live::read_fresh(lab.name(), lab_runtime::state::now_ms())
    {
        return s;
    }
    snapshot(lab, window.unwrap_or(DEFAULT_WINDOW)).await
}

pub async fn snapshot(lab: &Lab, window: Duration) -> Snapshot {
    let tty = std::io::stderr().is_terminal();
    if tty {
        eprint!(
            "watching lab {:?} for {} s (--window) …",
            lab.name(),
            lab_session::snapshot_ticks(window).saturating_sub(1)
        );
    }
    let snap = lab.snapshot(window).await;
    if tty {
        eprint!("\r\x1b[2K");
    }
    snap
}

/// Prints a value as pretty JSON on stdout.
pub fn json<T: serde::Serialize>(v: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}
