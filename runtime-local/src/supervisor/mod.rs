//! The supervisor: the long-lived process that owns every process of a local lab.
//!
//! It keeps the lab at its desired state ([`LocalSpec`]) the way a kubelet and a StatefulSet controller
//! would: it starts what is missing, restarts what exited (with backoff, counting restarts), gives each
//! rank a counted GPU slot or leaves it Pending with `Insufficient gpu`, replaces ranks when their
//! configuration changes, probes readiness, and answers requests on its control socket. It records every
//! process it starts so that `lab down` can stop them even if the supervisor itself was killed.
//!
//! This module runs the process: its main loop and its shutdown. The parts: `reconcile` (the state and
//! the reconciler), `commands` (each role's command line), `launch` (starting processes, behind a
//! trait), `probes` (readiness), `server` (the control socket) and `status` (the report).

mod beside;
mod commands;
mod db;
mod instance;
mod launch;
mod probes;
mod reconcile;
mod server;
mod status;
mod storage_cpu;
#[cfg(test)]
mod tests;

use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::UnixListener;

use self::instance::Kind;
use self::launch::Spawner;
use self::probes::probe_loop;
use self::reconcile::{Sup, TERMINATION_GRACE, terminate};
use self::server::handle;
use super::cgroup::{self, SVC_GROUP};
use super::procs::ProcRecord;
use super::spec::{LocalConfig, LocalSpec, Paths};
use lab_runtime::{Result, RuntimeError, state};

pub use super::procs::{LAB_ENV, lab_env_value};

/// Runs the supervisor of the lab in `dir` until it is asked to shut down.
///
/// # Errors
/// When the lab's configuration cannot be read or the control socket cannot be opened.
pub fn run(dir: &Path) -> Result<()> {
    // Leave the terminal's session so that closing it, or Ctrl-C there, does not reach the lab.
    let _ = nix::unistd::setsid();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| RuntimeError::io("starting the supervisor's runtime", e))?;
    rt.block_on(serve(dir))
}

async fn serve(dir: &Path) -> Result<()> {
    let paths = Paths::new(dir);
    let record = state::read_record_at(dir)?.ok_or_else(|| RuntimeError::NotRunning {
        name: dir.display().to_string(),
    })?;
    let mut cfg: LocalConfig = serde_json::from_value(record.config.clone())
        .map_err(|e| RuntimeError::Other(format!("the lab's configuration is unreadable: {e}")))?;
    if cfg.cgroups.is_none() && cfg.scope.is_some() {
        adopt_scope(&mut cfg);
        // `lab down` and every later command read the groups from the record: it says where they are now.
        let config = serde_json::to_value(&cfg).map_err(|e| RuntimeError::Other(e.to_string()))?;
        state::write_record(dir, &state::LabRecord { config, ..record })?;
    }
    let spec = match fs::read(paths.spec()) {
        Ok(b) => serde_json::from_slice(&b)
            .map_err(|e| RuntimeError::Other(format!("the lab's spec is unreadable: {e}")))?,
        Err(_) => LocalSpec::initial(lab_model::Millicores(400)),
    };
    fs::create_dir_all(paths.logs()).map_err(|e| RuntimeError::io("creating the log folder", e))?;
    fs::create_dir_all(paths.data()).map_err(|e| RuntimeError::io("creating the data folder", e))?;
    if let Some(cg) = &cfg.cgroups {
        // Every process the supervisor starts inherits this group, so `lab down` can find them all.
        let _ = fs::create_dir_all(cg.path(SVC_GROUP));
        let _ = cg.add_process(SVC_GROUP, std::process::id());
    }
    let me = ProcRecord::of("supervisor", std::process::id(), false);
    let launcher = Spawner {
        paths: paths.clone(),
        lab_env: lab_env_value(&cfg.name, &cfg.dir),
        cgroups: cfg.cgroups.clone(),
    };
    let mut sup = Sup::new(cfg, spec, paths.clone(), Box::new(launcher));
    sup.me = me;
    let sup = Arc::new(Mutex::new(sup));
    let _ = fs::remove_file(paths.socket());
    let listener = UnixListener::bind(paths.socket())
        .map_err(|e| RuntimeError::io("opening the supervisor's socket", e))?;
    log("supervisor started");

    // Set once every process is stopped, so a `Shutdown` request can answer before the supervisor exits.
    let (stopped_tx, stopped_rx) = tokio::sync::watch::channel(false);
    let probe_sup = sup.clone();
    tokio::spawn(async move { probe_loop(probe_sup).await });

    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| RuntimeError::io("installing the SIGTERM handler", e))?;
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let mut s = sup.lock().expect("supervisor state");
                if s.shutting_down { break; }
                s.reconcile(Instant::now());
            }
            conn = listener.accept() => {
                if let Ok((stream, _)) = conn {
                    let (sup, stopped) = (sup.clone(), stopped_rx.clone());
                    tokio::spawn(async move { handle(sup, stream, stopped).await });
                }
            }
            _ = term.recv() => {
                log("SIGTERM: shutting down");
                sup.lock().expect("supervisor state").shutting_down = true;
                break;
            }
        }
    }
    shutdown(&sup).await;
    let _ = stopped_tx.send(true);
    // Give a waiting `Shutdown` caller its answer before the process ends.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = fs::remove_file(paths.socket());
    log("supervisor stopped");
    Ok(())
}

/// Takes the systemd scope this supervisor was started in as the lab's groups, or records why it cannot
/// (the lab then runs without CPU limits, and its status says so).
fn adopt_scope(cfg: &mut LocalConfig) {
    let read = |p: &str| fs::read_to_string(p).unwrap_or_default();
    match cgroup::adopt_scope(
        &read("/proc/self/cgroup"),
        &read("/proc/self/mountinfo"),
        std::process::id(),
    ) {
        Ok(cg) => {
            log(&format!(
                "CPU limits in the delegated scope {}",
                cg.lab_root.display()
            ));
            cfg.cgroups = Some(cg);
            cfg.cpu_limit_note = None;
        }
        Err(cgroup::Unavailable(why)) => {
            log(&format!("no CPU limits: {why}"));
            cfg.cpu_limit_note = Some(cgroup::off_note(&why));
        }
    }
}

fn log(msg: &str) {
    tracing::info!(target: "supervisor", "{msg}");
}

/// Stops every process (ranks first, storage last) and removes the lab's cgroups.
async fn shutdown(sup: &Arc<Mutex<Sup>>) {
    let order: [fn(Kind) -> bool; 3] = [
        |k| matches!(k, Kind::Rank(_) | Kind::Seeder | Kind::Job(_) | Kind::Writer),
        |k| {
            matches!(
                k,
                Kind::Volume(_) | Kind::Proxy(_) | Kind::DbStandby | Kind::DbPrimary
            )
        },
        |k| matches!(k, Kind::Master),
    ];
    {
        let mut s = sup.lock().expect("supervisor state");
        s.stop_all_beside(Instant::now());
    }
    for pick in order {
        {
            let mut s = sup.lock().expect("supervisor state");
            for i in s.insts.values_mut().filter(|i| pick(i.kind)) {
                terminate(i, Instant::now());
            }
        }
        let deadline = Instant::now() + TERMINATION_GRACE + Duration::from_secs(3);
        loop {
            let done = {
                let mut s = sup.lock().expect("supervisor state");
                s.reap(Instant::now());
                s.insts
                    .values()
                    .filter(|i| pick(i.kind))
                    .all(|i| i.running.is_none())
            };
            if done || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let s = sup.lock().expect("supervisor state");
    s.save_procs();
    if let Some(cg) = &s.cfg.cgroups
        && let Err(e) = cg.release(std::process::id())
    {
        log(&e);
    }
}
