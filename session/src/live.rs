//! The lab watching itself between commands. `lab up` starts a watcher (`lab __watch`) that keeps the
//! telemetry and the golden-signal rules running, as Prometheus does beside a real job, and writes each
//! snapshot to the lab's folder; `lab status` reads the latest at once, with every alert's since-time from
//! the continuous evaluation, instead of watching the job for its own window. `lab down` stops the
//! watcher first; it also ends by itself when the lab's folder is gone.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use lab_drills::history::{Recent, SteadyPoint};
use lab_model::Snapshot;
use lab_runtime::state;
use lab_runtime_local::procs::{self, ProcRecord};
use lab_runtime_local::supervisor::{LAB_ENV, lab_env_value};
use lab_telemetry::Driver;
use tokio::sync::watch;

use crate::{Lab, Result};

/// The latest snapshot, rewritten about once a second.
pub const SNAPSHOT_FILE: &str = "live-snapshot.json";
/// The last minute of moments as a drill's steady-state window sees them, rewritten with each snapshot.
pub const HISTORY_FILE: &str = "live-history.json";
/// The watcher's process record (pid and start time, so a reused pid is never signalled).
pub const WATCHER_FILE: &str = "watcher.json";
/// The watcher's own log (what it writes to stderr), in the lab's folder.
pub const WATCH_LOG: &str = "watch.log";
/// A snapshot older than this is stale: the watcher is not keeping up, or is gone.
pub const FRESH: Duration = Duration::from_secs(3);

fn snapshot_path(name: &str) -> PathBuf {
    state::lab_dir(name).join(SNAPSHOT_FILE)
}

/// Where the watcher keeps the lab's recent past (a drill's baseline may start from it).
pub fn history_path(name: &str) -> PathBuf {
    state::lab_dir(name).join(HISTORY_FILE)
}

/// Where the watcher of lab `name` answers PromQL queries over the series it holds (`lab mcp`'s `query`
/// tool): a Unix socket in the lab's folder, one JSON query per connection, one JSON answer back.
pub fn query_socket(name: &str) -> PathBuf {
    state::lab_dir(name).join(QUERY_SOCKET)
}

const QUERY_SOCKET: &str = "query.sock";

/// The longest query line the watcher reads.
const MAX_QUERY_BYTES: u64 = 64 * 1024;

/// Answers queries on `path` until the task is dropped; a socket that cannot be made leaves the lab
/// without live queries and says so in the watcher's log.
async fn serve_queries(path: PathBuf, tx: tokio::sync::mpsc::Sender<lab_telemetry::Query>) {
    let _ = std::fs::remove_file(&path);
    let listener = match tokio::net::UnixListener::bind(&path) {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "the watcher answers no queries: cannot listen on {}: {e}",
                path.display()
            );
            return;
        }
    };
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors or the like: a pause, not a spin.
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let tx = tx.clone();
        tokio::spawn(async move {
            let _ = answer_query(stream, tx).await;
        });
    }
}

/// One connection: a query line in, an answer line out (`{"status":"success","data":…}` as Prometheus'
/// HTTP API writes it, or `{"status":"error","error":…}`).
async fn answer_query(
    stream: tokio::net::UnixStream,
    tx: tokio::sync::mpsc::Sender<lab_telemetry::Query>,
) -> std::io::Result<()> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let (r, mut w) = stream.into_split();
    let mut line = String::new();
    BufReader::new(r.take(MAX_QUERY_BYTES))
        .read_line(&mut line)
        .await?;
    let stopped = || "the lab's watcher is stopping".to_string();
    let reply = match serde_json::from_str::<lab_telemetry::QueryAsk>(&line) {
        Err(e) => Err(format!("not a query: {e}")),
        Ok(ask) => {
            let (reply, answer) = tokio::sync::oneshot::channel();
            match tx.send(lab_telemetry::Query { ask, reply }).await {
                Err(_) => Err(stopped()),
                Ok(()) => answer.await.unwrap_or_else(|_| Err(stopped())),
            }
        }
    };
    let body = match reply {
        Ok(data) => serde_json::json!({"status": "success", "data": data}),
        Err(e) => serde_json::json!({"status": "error", "error": e}),
    };
    let mut out = serde_json::to_vec(&body).unwrap_or_default();
    out.push(b'\n');
    w.write_all(&out).await?;
    w.shutdown().await
}

fn watcher_path(name: &str) -> PathBuf {
    state::lab_dir(name).join(WATCHER_FILE)
}

/// Starts the watcher of lab `name`: `program` with `args` (the CLI's own `lab __watch`), detached in its
/// own session, its output to `watch.log` in the lab's folder. It carries the lab's process marker, so a
/// local `lab down` that finds no record still stops it.
///
/// # Errors
/// [`crate::SessionError::Runtime`] when it cannot be started or recorded.
pub fn start(name: &str, program: &Path, args: &[&str]) -> Result<u32> {
    use std::os::unix::process::CommandExt;
    let dir = state::lab_dir(name);
    let log = std::fs::File::create(dir.join(WATCH_LOG))
        .map_err(|e| state::state_err(&dir, "create watch.log", e))?;
    let child = Command::new(program)
        .args(args)
        .env(LAB_ENV, lab_env_value(name, &dir))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(|e| state::state_err(program, "start the watcher", e))?;
    let pid = child.id();
    // Not waited for: it outlives this command. The record is what stops it.
    drop(child);
    let rec = ProcRecord::of("watcher", pid, true).ok_or_else(|| {
        lab_runtime::RuntimeError::Other(format!("the watcher (pid {pid}) exited at once; see watch.log"))
    })?;
    procs::write_table(&watcher_path(name), &[rec])?;
    Ok(pid)
}

/// Whether the watcher of lab `name` runs.
pub fn running(name: &str) -> bool {
    procs::read_table(&watcher_path(name))
        .iter()
        .any(ProcRecord::alive)
}

/// Stops the watcher of lab `name` if one runs. Returns whether one was stopped.
pub fn stop(name: &str) -> bool {
    let recs: Vec<ProcRecord> = procs::read_table(&watcher_path(name))
        .into_iter()
        .filter(ProcRecord::alive)
        .collect();
    if recs.is_empty() {
        return false;
    }
    procs::stop_all(&recs, Duration::from_secs(2));
    let _ = std::fs::remove_file(watcher_path(name));
    let _ = std::fs::remove_file(snapshot_path(name));
    let _ = std::fs::remove_file(history_path(name));
    true
}

/// The latest snapshot the watcher wrote, if it is fresh at `now_ms` and its watcher still runs.
pub fn read_fresh(name: &str, now_ms: u64) -> Option<Snapshot> {
    if !running(name) {
        return None;
    }
    read_snapshot(&snapshot_path(name)).filter(|s| fresh(s.at_ms, now_ms))
}

/// The snapshot in the file at `path`, if it is there and reads as one.
fn read_snapshot(path: &Path) -> Option<Snapshot> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Whether a snapshot taken at `at_ms` is within [`FRESH`] of `now_ms` (and not from the future).
pub fn fresh(at_ms: u64, now_ms: u64) -> bool {
    at_ms <= now_ms && now_ms - at_ms <= FRESH.as_millis() as u64
}

/// How often a follower looks whether the watcher wrote a new snapshot.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// Publishes the snapshots the watcher of lab `name` writes, each once, as soon as it is written (a look
/// at the file's modification time every [`FOLLOW_EVERY`]; it is read only when that changed). When no
/// watcher runs, or no fresh snapshot came for [`FRESH`], runs `driver` here instead, until every reader
/// is gone.
pub(crate) async fn follow(name: String, driver: Driver, tx: watch::Sender<Option<Snapshot>>) {
    let path = snapshot_path(&name);
    follow_file(&path, || running(&name), |tx| driver.run(tx), tx).await;
}

/// [`follow`], for the snapshot file at `path`, the watcher's liveness from `running` and `fallback` to
/// run when it is not keeping the file fresh.
async fn follow_file<F, Fut>(
    path: &Path,
    running: impl Fn() -> bool,
    fallback: F,
    tx: watch::Sender<Option<Snapshot>>,
) where
    F: FnOnce(watch::Sender<Option<Snapshot>>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let (mut last_at, mut last_modified) = (0u64, None);
    let mut stale_since: Option<std::time::Instant> = None;
    let mut every = tokio::time::interval(FOLLOW_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            () = tx.closed() => return,
        }
        let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        if modified.is_some() && modified != last_modified {
            last_modified = modified;
            if let Some(s) =
                read_snapshot(path).filter(|s| s.at_ms > last_at && fresh(s.at_ms, state::now_ms()))
            {
                last_at = s.at_ms;
                stale_since = None;
                tx.send_replace(Some(s));
                continue;
            }
        }
        if last_at > 0 && fresh(last_at, state::now_ms()) {
            continue;
        }
        let since = *stale_since.get_or_insert_with(std::time::Instant::now);
        if !running() || since.elapsed() >= FRESH {
            fallback(tx).await;
            return;
        }
    }
}

/// Ends a task when the watcher's loop ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Lab {
    /// Runs the watcher: the lab's telemetry loop, each snapshot written to the lab's folder, and the
    /// clearing of faults whose lifetime is up ([`Lab::expire_faults`]), until the folder is gone (the
    /// lab was taken down) or the task is dropped.
    ///
    /// # Errors
    /// [`crate::SessionError::Runtime`] when a snapshot cannot be written while the folder still exists.
    pub async fn serve_snapshots(&self) -> Result<()> {
        let dir = state::lab_dir(&self.name);
        let path = snapshot_path(&self.name);
        let history = history_path(&self.name);
        let mut recent = Recent::default();
        // Faults with a lifetime are cleared beside the telemetry, so a slow clear never holds a snapshot.
        let expiry = {
            let lab = self.clone();
            tokio::spawn(async move { lab.expire_faults().await })
        };
        let _stop_expiry = AbortOnDrop(expiry);
        let (queries, asked) = tokio::sync::mpsc::channel(8);
        let _stop_queries = AbortOnDrop(tokio::spawn(serve_queries(query_socket(&self.name), queries)));
        let watch = crate::Watch::start_answering(self.driver(), asked);
        let mut rx = watch.subscribe();
        loop {
            let changed = tokio::time::timeout(Duration::from_secs(5), rx.changed()).await;
            if !dir.is_dir() {
                return Ok(());
            }
            match changed {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Ok(()),
                Err(_) => continue,
            }
            let Some(snap) = rx.borrow_and_update().clone() else {
                continue;
            };
            recent.push(SteadyPoint::of(&snap));
            let bytes = serde_json::to_vec(&snap).map_err(crate::SessionError::Encode)?;
            let past = serde_json::to_vec(&recent).map_err(crate::SessionError::Encode)?;
            let written =
                state::write_volatile(&path, &bytes).and_then(|()| state::write_volatile(&history, &past));
            if let Err(e) = written {
                if !dir.is_dir() {
                    return Ok(());
                }
                return Err(e.into());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use lab_model::status::{LabStatus, RuntimeKind};

    fn snap(at_ms: u64) -> Snapshot {
        Snapshot::new(at_ms, LabStatus::default_shape("t", RuntimeKind::Local))
    }

    fn write(path: &Path, s: &Snapshot) {
        state::write_volatile(path, &serde_json::to_vec(s).unwrap()).unwrap();
    }

    async fn next(rx: &mut watch::Receiver<Option<Snapshot>>) -> u64 {
        tokio::time::timeout(Duration::from_secs(5), rx.changed())
            .await
            .expect("a snapshot within 5 s")
            .expect("the follower is running");
        rx.borrow_and_update().as_ref().expect("a snapshot").at_ms
    }

    /// The follower publishes each snapshot the watcher writes once, and runs the lab's own loop (here a
    /// stand-in that publishes at_ms 1) once the watcher is gone and its last snapshot is stale; a
    /// stale snapshot is never published.
    #[tokio::test]
    async fn a_follower_reads_each_snapshot_once_and_falls_back_when_the_watcher_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SNAPSHOT_FILE);
        let alive = Arc::new(AtomicBool::new(true));
        let (tx, mut rx) = watch::channel(None);
        let watcher = alive.clone();
        let task = tokio::spawn(async move {
            follow_file(
                &path,
                move || watcher.load(Ordering::Relaxed),
                |tx: watch::Sender<Option<Snapshot>>| async move {
                    tx.send_replace(Some(snap(1)));
                    tx.closed().await;
                },
                tx,
            )
            .await;
        });
        let path = dir.path().join(SNAPSHOT_FILE);
        let t = state::now_ms();
        write(&path, &snap(t));
        assert_eq!(next(&mut rx).await, t);
        // Rewritten unchanged: not published again. A newer one is.
        write(&path, &snap(t));
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(!rx.has_changed().unwrap());
        write(&path, &snap(t + 500));
        assert_eq!(next(&mut rx).await, t + 500);
        // The watcher is gone and its last snapshot is stale: never published; the lab's own loop runs.
        alive.store(false, Ordering::Relaxed);
        write(&path, &snap(state::now_ms() - 4_000));
        assert_eq!(next(&mut rx).await, 1);
        drop(rx);
        tokio::time::timeout(Duration::from_secs(2), task)
            .await
            .expect("the follower ends with its last reader")
            .unwrap();
    }

    #[test]
    fn a_snapshot_is_fresh_for_three_seconds_and_never_from_the_future() {
        assert!(fresh(10_000, 10_000));
        assert!(fresh(10_000, 13_000));
        assert!(!fresh(10_000, 13_001));
        assert!(!fresh(10_000, 9_999));
    }
}
