//! How the CLI prints: everything on stdout through [`write`] (a closed pipe ends the output quietly), one
//! line per lifecycle step with ✓ or ✗ and its time, errors with their causes, JSON with its format.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lab_session::{Lab, Progress, Snapshot};

/// Prints steps to stderr: `… name` while it runs (on a terminal), then `✓ name  1.2s`; keeps each finished
/// step for a `--json` document.
#[derive(Debug)]
pub struct Steps {
    tty: bool,
    open: Mutex<Option<String>>,
    done: Mutex<Vec<StepTime>>,
}

/// A finished step, as `lab up --json` and `lab down --json` list it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StepTime {
    pub step: String,
    pub ok: bool,
    pub seconds: f64,
}

impl Steps {
    pub fn new() -> Self {
        Steps {
            tty: std::io::stderr().is_terminal(),
            open: Mutex::new(None),
            done: Mutex::new(Vec::new()),
        }
    }

    /// The steps finished so far, in the order they finished.
    pub fn finished(&self) -> Vec<StepTime> {
        self.done.lock().expect("progress").clone()
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
        self.done.lock().expect("progress").push(StepTime {
            step: step.to_string(),
            ok,
            seconds: elapsed.as_secs_f64(),
        });
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
        && let Some(s) = lab.live_snapshot()
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

/// Set once stdout is found closed by its reader.
static CLOSED: AtomicBool = AtomicBool::new(false);
/// Set once writing to stdout failed for another reason (a full disk).
static FAILED: AtomicBool = AtomicBool::new(false);

/// Writes to stdout: every line the CLI prints comes through here (clippy.toml forbids `print!` and
/// `println!` in this crate), flushed at once so a closed reader is noticed at the write it closed on.
///
/// Why not SIGPIPE's default action, as C tools have it: this process also writes to the supervisor's
/// socket and to the pipes of remediation commands and agents, and a peer that dies there must be an
/// error the fault engine answers (a rollback, a cleanup), not a signal that kills the CLI with half a
/// fault injected. So only stdout's EPIPE is special: it marks the output closed, later output is
/// dropped, the command finishes what it changes (a drill still cleans up; a follow loop asks
/// [`closed`] and stops), and the process exits quietly with 141, the status a shell shows for a process
/// a closed pipe ended ([`crate::exit::Exit::BrokenPipe`]).
pub fn write(args: std::fmt::Arguments<'_>) {
    if CLOSED.load(Ordering::Relaxed) || FAILED.load(Ordering::Relaxed) {
        return;
    }
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_fmt(args).and_then(|()| o.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            CLOSED.store(true, Ordering::Relaxed);
        } else if !FAILED.swap(true, Ordering::Relaxed) {
            eprintln!("error: cannot write the output: {e}");
        }
    }
}

/// True once stdout's reader is gone: a command that would print forever (`lab logs -f`) stops.
pub fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// The status the process ends with: the command's own, unless it succeeded while its output could not
/// all be written.
pub fn finish(status: crate::exit::Exit) -> crate::exit::Exit {
    use crate::exit::Exit;
    match status {
        Exit::Passed if FAILED.load(Ordering::Relaxed) => Exit::Error,
        Exit::Passed if CLOSED.load(Ordering::Relaxed) => Exit::BrokenPipe,
        s => s,
    }
}

/// `print!` through [`write`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::write(format_args!($($arg)*))
    };
}

/// `println!` through [`write`].
macro_rules! outln {
    () => {
        $crate::out::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {out, outln};

/// Prints `v` (a struct or map) as pretty JSON on stdout, with `format` (e.g. `straggler-lab.status/v1`,
/// one of [`crate::formats`]) as its first field, beside the value's own fields in their order.
pub fn json<T: serde::Serialize>(format: &str, v: &T) -> anyhow::Result<()> {
    #[derive(serde::Serialize)]
    struct Doc<'a, T> {
        format: &'a str,
        #[serde(flatten)]
        body: &'a T,
    }
    print_json(&Doc { format, body: v })
}

/// Prints a list as pretty JSON on stdout: `{"format": FORMAT, KEY: [...]}`, so a list too says which
/// shape it is and can grow fields beside its items.
pub fn json_list<T: serde::Serialize>(format: &str, key: &str, items: &[T]) -> anyhow::Result<()> {
    struct Doc<'a, T> {
        format: &'a str,
        key: &'a str,
        items: &'a [T],
    }
    impl<T: serde::Serialize> serde::Serialize for Doc<'_, T> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeMap;
            let mut m = s.serialize_map(Some(2))?;
            m.serialize_entry("format", self.format)?;
            m.serialize_entry(self.key, self.items)?;
            m.end()
        }
    }
    print_json(&Doc { format, key, items })
}

/// Prints a value that carries its own `format` (the incident bundle, a replay) as pretty JSON.
pub fn print_json<T: serde::Serialize>(v: &T) -> anyhow::Result<()> {
    outln!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}
