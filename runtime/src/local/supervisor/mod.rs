//! The supervisor: the long-lived process that owns every process of a local lab.
//!
//! It keeps the lab at its desired state ([`LocalSpec`]) the way a kubelet and a StatefulSet controller
//! would: it starts what is missing, restarts what exited (with backoff, counting restarts), gives each
//! rank a counted GPU slot or leaves it Pending with `Insufficient gpu`, replaces ranks when their
//! configuration changes, probes readiness, and answers requests on its control socket. It records every
//! process it starts so that `lab down` can stop them even if the supervisor itself was killed.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lab_model::names;
use lab_model::status::{LabStatus, Phase, PodStatus, Resources, Role, RuntimeKind};
use nix::sys::signal::Signal;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use super::cgroup::Cgroups;
use super::procs::{self, ProcRecord};
use super::proto::{LocalStatus, Request, Response};
use super::spec::{LocalConfig, LocalSpec, Paths, PortAllocator, RankPorts};
use crate::{Delay, Result, RuntimeError, ScrapeTarget, TargetKind, state};

/// The environment variable every process of a lab carries, naming the lab and its folder
/// (`<name>@<folder>`, see [`lab_env_value`]): `lab down` and leak checks look for it, and two labs of the
/// same name in different state folders never mistake each other's processes.
pub const LAB_ENV: &str = "STRAGGLER_LAB";

/// The value of [`LAB_ENV`] for the lab whose folder is `dir`.
pub fn lab_env_value(name: &str, dir: &Path) -> String {
    format!("{name}@{}", dir.display())
}
/// The cgroup that holds the lab's processes other than ranks (no limit; used to find them all).
const SVC_GROUP: &str = "svc";
const BACKOFF_START: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
const TERMINATION_GRACE: Duration = Duration::from_secs(3);
const SEEDER_ATTEMPTS: u32 = 6;

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Master,
    Volume(u32),
    Proxy(u32),
    Seeder,
    Rank(u32),
}

#[derive(Debug)]
struct Running {
    child: tokio::process::Child,
    record: ProcRecord,
    started: Instant,
    /// Set when the lab itself stopped it (scale down, replacement, shutdown): not a crash.
    terminating: Option<Instant>,
}

#[derive(Debug)]
struct Inst {
    kind: Kind,
    running: Option<Running>,
    restarts: u32,
    backoff: Duration,
    not_before: Option<Instant>,
    ready: bool,
    last_exit: Option<String>,
    succeeded: bool,
    failed: bool,
    generation: u64,
    /// Replace instead of restart when the current process ends (a new pod: restarts start from 0).
    replace: bool,
}

impl Inst {
    fn new(kind: Kind, generation: u64) -> Self {
        Inst {
            kind,
            running: None,
            restarts: 0,
            backoff: BACKOFF_START,
            not_before: None,
            ready: false,
            last_exit: None,
            succeeded: false,
            failed: false,
            generation,
            replace: false,
        }
    }
}

#[derive(Debug)]
struct Sup {
    cfg: LocalConfig,
    spec: LocalSpec,
    paths: Paths,
    insts: BTreeMap<String, Inst>,
    /// rank → GPU slot.
    slots: BTreeMap<u32, u32>,
    me: Option<ProcRecord>,
    shutting_down: bool,
}

fn inst_name(kind: Kind) -> String {
    match kind {
        Kind::Master => names::STORAGE_MASTER.to_string(),
        Kind::Volume(i) => names::storage(i),
        Kind::Proxy(i) => format!("{}-proxy", names::storage(i)),
        Kind::Seeder => "seeder".to_string(),
        Kind::Rank(r) => names::rank(r),
    }
}

async fn serve(dir: &Path) -> Result<()> {
    let paths = Paths::new(dir);
    let record = state::read_record_at(dir)?.ok_or_else(|| RuntimeError::NotRunning {
        name: dir.display().to_string(),
    })?;
    let cfg: LocalConfig = serde_json::from_value(record.config)
        .map_err(|e| RuntimeError::Other(format!("the lab's configuration is unreadable: {e}")))?;
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
    let sup = Arc::new(Mutex::new(Sup {
        cfg,
        spec,
        paths: paths.clone(),
        insts: BTreeMap::new(),
        slots: BTreeMap::new(),
        me,
        shutting_down: false,
    }));
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
                s.reconcile();
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

fn log(msg: &str) {
    eprintln!("{} supervisor: {msg}", state::now_ms());
}

async fn handle(sup: Arc<Mutex<Sup>>, stream: UnixStream, mut stopped: tokio::sync::watch::Receiver<bool>) {
    let (r, mut w) = stream.into_split();
    let mut line = String::new();
    if BufReader::new(r).read_line(&mut line).await.is_err() {
        return;
    }
    let resp = match serde_json::from_str::<Request>(&line) {
        Err(e) => Response::Error {
            message: format!("unreadable request: {e}"),
        },
        Ok(Request::SetDelay { server, delay }) => set_delay(&sup, server, delay).await,
        Ok(Request::Shutdown) => {
            sup.lock().expect("supervisor state").shutting_down = true;
            // The main loop stops everything; answer once it is done so the caller can rely on it.
            match stopped.wait_for(|s| *s).await {
                Ok(_) => Response::Ok,
                Err(_) => Response::Error {
                    message: "the supervisor stopped before confirming".into(),
                },
            }
        }
        Ok(req) => {
            let mut s = sup.lock().expect("supervisor state");
            let r = s.request(req);
            s.reconcile();
            r
        }
    };
    let mut out =
        serde_json::to_string(&resp).unwrap_or_else(|_| r#"{"result":"error","message":"?"}"#.into());
    out.push('\n');
    let _ = w.write_all(out.as_bytes()).await;
}

async fn set_delay(sup: &Arc<Mutex<Sup>>, server: u32, delay: Option<Delay>) -> Response {
    let control = {
        let s = sup.lock().expect("supervisor state");
        match s.cfg.storage.get(server as usize) {
            Some(p) => p.control,
            None => {
                return Response::Error {
                    message: format!(
                        "storage-{server} does not exist (servers 0..{})",
                        s.cfg.storage.len()
                    ),
                };
            }
        }
    };
    let body = super::proxy_body(delay);
    match super::http::put(
        &format!("http://127.0.0.1:{control}/delay"),
        body,
        Duration::from_secs(3),
    )
    .await
    {
        Ok(_) => {
            let mut s = sup.lock().expect("supervisor state");
            match delay {
                Some(d) => s.spec.delays.insert(server, d),
                None => s.spec.delays.remove(&server),
            };
            s.save_spec();
            Response::Ok
        }
        Err(e) => Response::Error {
            message: format!("cannot set the delay on storage-{server}'s proxy: {e}"),
        },
    }
}

impl Sup {
    fn save_spec(&self) {
        if let Ok(b) = serde_json::to_vec_pretty(&self.spec) {
            let _ = state::write_atomic(&self.paths.spec(), &b);
        }
    }

    fn save_procs(&self) {
        let mut table: Vec<ProcRecord> = self.me.iter().cloned().collect();
        table.extend(
            self.insts
                .values()
                .filter_map(|i| i.running.as_ref().map(|r| r.record.clone())),
        );
        let _ = procs::write_table(&self.paths.procs(), &table);
    }

    fn request(&mut self, req: Request) -> Response {
        let err = |m: String| Response::Error { message: m };
        match req {
            Request::Ping => Response::Ok,
            Request::Status => Response::Status {
                status: Box::new(self.status()),
            },
            Request::Seed => {
                self.spec.seed = true;
                self.save_spec();
                Response::Ok
            }
            Request::Scale { ranks } => {
                if ranks == 0 || ranks > super::MAX_RANKS {
                    return err(format!("ranks must be between 1 and {}", super::MAX_RANKS));
                }
                self.spec.ranks = ranks;
                self.save_spec();
                Response::Ok
            }
            Request::WorldSize { world_size } => {
                if world_size == 0 || world_size > super::MAX_RANKS {
                    return err(format!("world size must be between 1 and {}", super::MAX_RANKS));
                }
                if world_size != self.spec.world_size {
                    self.spec.world_size = world_size;
                    self.new_generation();
                }
                self.save_spec();
                Response::Ok
            }
            Request::ApplyTemplate { cpu } => {
                // Like re-applying a StatefulSet: an unchanged template changes nothing; a changed one rolls
                // every rank onto new pods.
                if cpu != self.spec.cpu_template {
                    self.spec.cpu_template = cpu;
                    self.new_generation();
                }
                self.save_spec();
                Response::Ok
            }
            Request::Resize { rank, cpu } => {
                if rank >= self.spec.ranks {
                    return err(format!(
                        "rank-{rank} does not exist (ranks 0..{})",
                        self.spec.ranks
                    ));
                }
                let name = names::rank(rank);
                if self.insts.get(&name).and_then(|i| i.running.as_ref()).is_none() {
                    return err(format!(
                        "rank-{rank} is not running, so it cannot be resized in place"
                    ));
                }
                let Some(cg) = &self.cfg.cgroups else {
                    return err(format!(
                        "CPU limits are not enforced on this machine ({}), so rank-{rank} cannot be resized",
                        self.cfg
                            .cpu_limit_note
                            .as_deref()
                            .unwrap_or("no writable cgroups")
                    ));
                };
                if let Err(e) = cg.set_limit(&name, cpu) {
                    return err(format!("cannot write rank-{rank}'s cgroup quota: {e}"));
                }
                self.spec.cpu_live.insert(rank, cpu);
                self.save_spec();
                Response::Ok
            }
            Request::Restart { rank } => {
                if rank >= self.spec.ranks {
                    return err(format!(
                        "rank-{rank} does not exist (ranks 0..{})",
                        self.spec.ranks
                    ));
                }
                // A new pod comes from the template: an in-place change does not survive it.
                self.spec.cpu_live.remove(&rank);
                self.save_spec();
                if let Some(i) = self.insts.get_mut(&names::rank(rank)) {
                    i.replace = true;
                    terminate(i);
                }
                Response::Ok
            }
            Request::SetDelay { .. } | Request::Shutdown => err("handled elsewhere".into()),
        }
    }

    fn new_generation(&mut self) {
        self.spec.generation += 1;
        self.spec.cpu_live.clear();
    }

    /// Brings the processes in line with the spec. Called every tick and after every request.
    fn reconcile(&mut self) {
        if self.shutting_down {
            return;
        }
        let now = Instant::now();
        let mut changed = self.reap(now);

        // Storage: the master, then each volume server behind its proxy.
        let mut wanted = vec![Kind::Master];
        for i in 0..self.cfg.storage_servers {
            wanted.push(Kind::Proxy(i));
            wanted.push(Kind::Volume(i));
        }
        let storage_ready = self.is_ready(Kind::Master)
            && (0..self.cfg.storage_servers)
                .all(|i| self.is_ready(Kind::Volume(i)) && self.is_ready(Kind::Proxy(i)));
        if self.spec.seed && storage_ready {
            wanted.push(Kind::Seeder);
        }
        // Ranks: each needs a GPU slot; those that get none stay Pending.
        self.slots.retain(|r, _| *r < self.spec.ranks);
        for r in 0..self.spec.ranks {
            if !self.slots.contains_key(&r) {
                let used: Vec<u32> = self.slots.values().copied().collect();
                if let Some(free) = (0..self.cfg.gpus).find(|s| !used.contains(s)) {
                    self.slots.insert(r, free);
                }
            }
            if self.slots.contains_key(&r) {
                wanted.push(Kind::Rank(r));
            }
        }

        // Stop what is no longer wanted, or was started under an older configuration.
        let generation = self.spec.generation;
        for (name, inst) in self.insts.iter_mut() {
            let stale = matches!(inst.kind, Kind::Rank(_)) && inst.generation != generation;
            if !wanted.contains(&inst.kind) || stale {
                if stale {
                    inst.replace = true;
                }
                if inst.running.is_some() {
                    log(&format!("stopping {name}"));
                }
                terminate(inst);
            }
        }
        self.insts.retain(|_, i| {
            i.running.is_some() || wanted.contains(&i.kind) && !(i.replace && matches!(i.kind, Kind::Rank(_)))
        });

        for kind in wanted {
            let name = inst_name(kind);
            let inst = self
                .insts
                .entry(name.clone())
                .or_insert_with(|| Inst::new(kind, generation));
            if inst.running.is_some() || inst.succeeded || inst.failed {
                continue;
            }
            if inst.not_before.is_some_and(|t| now < t) {
                continue;
            }
            inst.generation = generation;
            match self.spawn(kind) {
                Ok(running) => {
                    log(&format!("started {name} (pid {})", running.record.pid));
                    let inst = self.insts.get_mut(&name).expect("just inserted");
                    inst.running = Some(running);
                    inst.ready = false;
                    inst.not_before = None;
                    changed = true;
                }
                Err(e) => {
                    log(&format!("cannot start {name}: {e}"));
                    let inst = self.insts.get_mut(&name).expect("just inserted");
                    inst.last_exit = Some(format!("cannot start: {e}"));
                    inst.backoff = (inst.backoff * 2).min(BACKOFF_MAX);
                    inst.not_before = Some(now + inst.backoff);
                }
            }
        }
        if changed {
            self.save_procs();
        }
    }

    fn is_ready(&self, kind: Kind) -> bool {
        self.insts
            .get(&inst_name(kind))
            .is_some_and(|i| i.running.is_some() && i.ready)
    }

    /// Collects exited processes. Returns true if any did.
    fn reap(&mut self, now: Instant) -> bool {
        let mut any = false;
        for (name, inst) in self.insts.iter_mut() {
            let Some(run) = inst.running.as_mut() else {
                continue;
            };
            if let Some(t) = run.terminating
                && now.duration_since(t) > TERMINATION_GRACE
            {
                run.record.signal(Signal::SIGKILL);
            }
            let status = match run.child.try_wait() {
                Ok(Some(s)) => s,
                Ok(None) => continue,
                Err(_) => continue,
            };
            any = true;
            let run = inst.running.take().expect("checked above");
            inst.ready = false;
            let desc = match status.code() {
                Some(c) => format!("exit code {c}"),
                None => "killed by a signal".to_string(),
            };
            if run.terminating.is_some() {
                if inst.replace {
                    inst.replace = false;
                    inst.restarts = 0;
                    inst.backoff = BACKOFF_START;
                }
                inst.not_before = None;
                continue;
            }
            if inst.kind == Kind::Seeder && status.success() {
                inst.succeeded = true;
                log("seeder finished");
                continue;
            }
            log(&format!("{name} exited ({desc}); restarting"));
            inst.last_exit = Some(desc);
            inst.restarts += 1;
            if run.started.elapsed() > Duration::from_secs(60) {
                inst.backoff = BACKOFF_START;
            }
            inst.not_before = Some(now + inst.backoff);
            inst.backoff = (inst.backoff * 2).min(BACKOFF_MAX);
            if inst.kind == Kind::Seeder && inst.restarts >= SEEDER_ATTEMPTS {
                inst.failed = true;
            }
        }
        any
    }

    fn spawn(&mut self, kind: Kind) -> std::io::Result<Running> {
        let name = inst_name(kind);
        let cfg = &self.cfg;
        let lo = "127.0.0.1";
        let data = self.paths.data();
        let (program, args): (std::path::PathBuf, Vec<String>) = match kind {
            Kind::Master => {
                let mdir = data.join("master");
                fs::create_dir_all(&mdir)?;
                (
                    cfg.weed.clone(),
                    vec![
                        "master".into(),
                        format!("-ip={lo}"),
                        format!("-ip.bind={lo}"),
                        format!("-port={}", cfg.master_port),
                        format!("-port.grpc={}", cfg.master_grpc_port),
                        format!("-mdir={}", mdir.display()),
                        "-volumeSizeLimitMB=64".into(),
                        "-defaultReplication=000".into(),
                    ],
                )
            }
            Kind::Volume(i) => {
                let p = cfg.storage[i as usize];
                let vdir = data.join(names::storage(i));
                fs::create_dir_all(&vdir)?;
                (
                    cfg.weed.clone(),
                    vec![
                        "volume".into(),
                        format!("-ip={lo}"),
                        format!("-ip.bind={lo}"),
                        format!("-port={}", p.weed),
                        format!("-port.grpc={}", p.weed_grpc),
                        format!("-publicUrl={lo}:{}", p.proxy),
                        format!("-dir={}", vdir.display()),
                        "-max=32".into(),
                        // weed finds the master's gRPC port from `host:port.grpcPort`.
                        format!("-master={}.{}", cfg.master(), cfg.master_grpc_port),
                        format!("-rack={}", names::storage(i)),
                        "-dataCenter=lab".into(),
                        format!("-metricsIp={lo}"),
                        format!("-metricsPort={}", p.metrics),
                    ],
                )
            }
            Kind::Proxy(i) => {
                let p = cfg.storage[i as usize];
                let d = self.spec.delays.get(&i).copied();
                (
                    cfg.bin_dir.join("lab-proxy"),
                    vec![
                        format!("--listen={lo}:{}", p.proxy),
                        format!("--upstream={lo}:{}", p.weed),
                        format!("--control={lo}:{}", p.control),
                        format!(
                            "--delay-ms={}",
                            d.map(|d| d.delay.as_secs_f64() * 1000.0).unwrap_or(0.0)
                        ),
                        format!(
                            "--jitter-ms={}",
                            d.map(|d| d.jitter.as_secs_f64() * 1000.0).unwrap_or(0.0)
                        ),
                    ],
                )
            }
            Kind::Seeder => (
                cfg.bin_dir.join("lab-seeder"),
                vec![
                    format!("--master={}", cfg.master()),
                    format!("--ranks={}", self.spec.ranks.max(cfg.gpus).max(1)),
                    // Every server the lab started, not the seeder's default of three.
                    format!("--servers={}", cfg.storage_servers),
                    format!("--seed={}", cfg.seed),
                ],
            ),
            Kind::Rank(r) => {
                let ports = match self.spec.rank_ports.get(&r) {
                    Some(p) => *p,
                    None => {
                        let mut alloc = PortAllocator::new(None);
                        alloc.avoid(self.spec.rank_ports.values().flat_map(|p| [p.listen, p.metrics]));
                        let p = RankPorts {
                            listen: alloc.take().map_err(std::io::Error::other)?,
                            metrics: alloc.take().map_err(std::io::Error::other)?,
                        };
                        self.spec.rank_ports.insert(r, p);
                        self.save_spec();
                        p
                    }
                };
                let cfg = &self.cfg;
                (
                    cfg.bin_dir.join("lab-rank"),
                    vec![
                        format!("--rank={r}"),
                        format!("--world-size={}", self.spec.world_size),
                        format!("--master={}", cfg.master()),
                        format!("--rendezvous={lo}:{}", cfg.rendezvous_port),
                        format!("--listen={lo}:{}", ports.listen),
                        format!("--advertise={lo}"),
                        format!("--metrics-listen={lo}:{}", ports.metrics),
                        format!("--watchdog-timeout={}s", cfg.watchdog_secs),
                    ],
                )
            }
        };
        let log_file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.paths.log(&name))?;
        let mut cmd = tokio::process::Command::new(&program);
        cmd.args(&args)
            .env(LAB_ENV, lab_env_value(&self.cfg.name, &self.cfg.dir))
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .process_group(0)
            .kill_on_drop(false);
        if matches!(kind, Kind::Master | Kind::Volume(_)) {
            cmd.current_dir(&data);
        }
        let child = cmd
            .spawn()
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", program.display())))?;
        let pid = child.id().unwrap_or(0);
        if let (Kind::Rank(r), Some(cg)) = (kind, &self.cfg.cgroups) {
            cg.create_child(&name, self.spec.cpu_for(r))?;
            cg.add_process(&name, pid)?;
        }
        let record = ProcRecord::of(&name, pid, true).unwrap_or(ProcRecord {
            name: name.clone(),
            pid,
            start_ticks: 0,
            group_leader: true,
        });
        Ok(Running {
            child,
            record,
            started: Instant::now(),
            terminating: None,
        })
    }

    fn status(&self) -> LocalStatus {
        let cfg = &self.cfg;
        let spec = &self.spec;
        let mut pods = Vec::new();
        let inst = |k: Kind| self.insts.get(&inst_name(k));
        let pod_of =
            |name: String, role: Role, index: Option<u32>, parts: &[Option<&Inst>], containers: &[&str]| {
                let mut p = PodStatus::new(name, role, index);
                let all_running =
                    !parts.is_empty() && parts.iter().all(|i| i.is_some_and(|i| i.running.is_some()));
                p.phase = if all_running {
                    Phase::Running
                } else {
                    Phase::Pending
                };
                p.ready = all_running && parts.iter().all(|i| i.is_some_and(|i| i.ready));
                p.restarts = parts.iter().map(|i| i.map_or(0, |i| i.restarts)).sum();
                p.pid = parts
                    .first()
                    .and_then(|i| i.and_then(|i| i.running.as_ref().map(|r| r.record.pid)));
                if !all_running
                    && let Some(e) = parts.iter().find_map(|i| i.and_then(|i| i.last_exit.clone()))
                {
                    // Like a pod whose container keeps exiting: still Running, not Ready, backing off.
                    p.phase = Phase::Running;
                    p.reason = Some("CrashLoopBackOff".into());
                    p.message = Some(e);
                }
                p.node = Some("local".into());
                p.containers = containers.iter().map(|s| s.to_string()).collect();
                p
            };
        pods.push(pod_of(
            names::STORAGE_MASTER.into(),
            Role::StorageMaster,
            None,
            &[inst(Kind::Master)],
            &["weed-master"],
        ));
        for i in 0..cfg.storage_servers {
            pods.push(pod_of(
                names::storage(i),
                Role::StorageServer,
                Some(i),
                &[inst(Kind::Volume(i)), inst(Kind::Proxy(i))],
                &["weed-volume", "latency-proxy"],
            ));
        }
        if spec.seed {
            let mut p = pod_of(
                "seeder".into(),
                Role::Seeder,
                None,
                &[inst(Kind::Seeder)],
                &["lab-seeder"],
            );
            if let Some(s) = inst(Kind::Seeder) {
                if s.succeeded {
                    p.phase = Phase::Succeeded;
                    p.reason = None;
                    p.message = None;
                } else if s.failed {
                    p.phase = Phase::Failed;
                    p.reason = Some("BackoffLimitExceeded".into());
                }
            }
            pods.push(p);
        }
        let mut targets = Vec::new();
        for r in 0..spec.ranks {
            let name = names::rank(r);
            let mut p = pod_of(
                name.clone(),
                Role::Rank,
                Some(r),
                &[inst(Kind::Rank(r))],
                &["lab-rank"],
            );
            p.resources = Resources {
                cpu_live: cfg.cgroups.as_ref().and_then(|cg| {
                    if inst(Kind::Rank(r)).is_some_and(|i| i.running.is_some()) {
                        cg.limit(&name).ok().flatten()
                    } else {
                        None
                    }
                }),
                cpu_spec: Some(spec.cpu_for(r)),
                cpu_template: Some(spec.cpu_template),
                gpus: 1,
            };
            match self.slots.get(&r) {
                Some(slot) => p.node = Some(format!("local/gpu-{slot}")),
                None => {
                    p.phase = Phase::Pending;
                    p.ready = false;
                    p.node = None;
                    p.reason = Some("Insufficient gpu".into());
                    p.message = Some(format!(
                        "0/1 nodes are available: 1 Insufficient gpu ({} of {} counted GPUs in use)",
                        self.slots.len(),
                        cfg.gpus
                    ));
                }
            }
            if p.phase == Phase::Running
                && let Some(ports) = spec.rank_ports.get(&r)
            {
                targets.push(ScrapeTarget {
                    instance: name,
                    kind: TargetKind::Rank,
                    index: r,
                    address: format!("http://127.0.0.1:{}/metrics", ports.metrics),
                });
            }
            pods.push(p);
        }
        for (i, p) in cfg.storage.iter().enumerate() {
            targets.push(ScrapeTarget {
                instance: names::storage(i as u32),
                kind: TargetKind::Storage,
                index: i as u32,
                address: format!("http://127.0.0.1:{}/metrics", p.metrics),
            });
        }
        let mut notes = Vec::new();
        if let Some(n) = &cfg.cpu_limit_note {
            notes.push(n.clone());
        }
        LocalStatus {
            status: LabStatus {
                lab: cfg.name.clone(),
                runtime: RuntimeKind::Local,
                pods,
                gpus_capacity: cfg.gpus,
                gpu_resource: "gpu".into(),
                ranks_desired: spec.ranks,
                world_size: spec.world_size,
                storage_servers: cfg.storage_servers,
                delay_path: "proxy".into(),
                notes,
            },
            targets,
            delays: spec.delays.iter().map(|(k, v)| (*k, *v)).collect(),
            storage_paths: cfg
                .storage
                .iter()
                .map(|p| format!("127.0.0.1:{}", p.proxy))
                .collect(),
            supervisor_pid: std::process::id(),
        }
    }
}

fn terminate(inst: &mut Inst) {
    if let Some(run) = inst.running.as_mut()
        && run.terminating.is_none()
    {
        run.record.signal(Signal::SIGTERM);
        run.terminating = Some(Instant::now());
    }
}

fn probe_url(cfg: &LocalConfig, spec: &LocalSpec, kind: Kind) -> Option<String> {
    match kind {
        Kind::Master => Some(format!("http://{}/cluster/status", cfg.master())),
        Kind::Volume(i) => Some(format!(
            "http://127.0.0.1:{}/status",
            cfg.storage.get(i as usize)?.weed
        )),
        Kind::Proxy(i) => Some(format!(
            "http://127.0.0.1:{}/healthz",
            cfg.storage.get(i as usize)?.control
        )),
        Kind::Rank(r) => Some(format!(
            "http://127.0.0.1:{}/readyz",
            spec.rank_ports.get(&r)?.metrics
        )),
        Kind::Seeder => None,
    }
}

/// Probes every running instance's readiness endpoint once a second.
async fn probe_loop(sup: Arc<Mutex<Sup>>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let probes: Vec<(String, String)> = {
            let s = sup.lock().expect("supervisor state");
            if s.shutting_down {
                return;
            }
            s.insts
                .iter()
                .filter(|(_, i)| i.running.as_ref().is_some_and(|r| r.terminating.is_none()))
                .filter_map(|(n, i)| probe_url(&s.cfg, &s.spec, i.kind).map(|u| (n.clone(), u)))
                .collect()
        };
        let results = futures::future::join_all(probes.into_iter().map(|(name, url)| async move {
            let ok = super::http::get(&url, Duration::from_millis(800))
                .await
                .is_ok_and(|(code, _)| code == 200);
            (name, ok)
        }))
        .await;
        let mut s = sup.lock().expect("supervisor state");
        for (name, ok) in results {
            if let Some(i) = s.insts.get_mut(&name)
                && i.running.is_some()
            {
                i.ready = ok;
            }
        }
    }
}

/// Stops every process (ranks first, storage last) and removes the lab's cgroups.
async fn shutdown(sup: &Arc<Mutex<Sup>>) {
    let order: [fn(Kind) -> bool; 3] = [
        |k| matches!(k, Kind::Rank(_) | Kind::Seeder),
        |k| matches!(k, Kind::Volume(_) | Kind::Proxy(_)),
        |k| matches!(k, Kind::Master),
    ];
    for pick in order {
        {
            let mut s = sup.lock().expect("supervisor state");
            for i in s.insts.values_mut().filter(|i| pick(i.kind)) {
                terminate(i);
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
    if let Some(cg) = &s.cfg.cgroups {
        leave_cgroups(cg);
        if let Err(e) = cg.remove_all() {
            log(&e);
        }
    }
}

/// Moves the supervisor out of the lab's groups so they can be removed.
fn leave_cgroups(cg: &Cgroups) {
    if let Some(root) = cg.lab_root.parent() {
        let _ = fs::write(root.join("cgroup.procs"), std::process::id().to_string());
    }
}
