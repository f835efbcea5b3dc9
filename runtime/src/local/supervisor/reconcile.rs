//! The supervisor's state and its reconciler: the lab's desired state ([`LocalSpec`]) against the
//! instances that run, brought in line the way a kubelet and a StatefulSet controller would. It starts
//! what is missing, restarts what exited (with backoff, counting restarts), gives each rank a counted GPU
//! slot or leaves it Pending, and replaces ranks when their configuration changes. It starts processes
//! through a [`Launcher`] and reads the time it is given, so a test drives it without real processes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lab_model::names;
use nix::sys::signal::Signal;

use super::commands::role_command;
use super::launch::{Launcher, Process};
use super::log;
use crate::local::procs::{self, ProcRecord};
use crate::local::proto::{Request, Response};
use crate::local::spec::{LocalConfig, LocalSpec, Paths, PortAllocator, RankPorts};
use crate::state;

const BACKOFF_START: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// How long a process asked to stop has before it is killed.
pub(super) const TERMINATION_GRACE: Duration = Duration::from_secs(3);
const SEEDER_ATTEMPTS: u32 = 6;
/// A process that ran this long before it exited starts its backoff afresh.
const BACKOFF_RESET_AFTER: Duration = Duration::from_secs(60);

/// One instance of a role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Master,
    Volume(u32),
    Proxy(u32),
    Seeder,
    Rank(u32),
}

/// The instance's name: its key, its log file and its process record.
pub(crate) fn inst_name(kind: Kind) -> String {
    match kind {
        Kind::Master => names::STORAGE_MASTER.to_string(),
        Kind::Volume(i) => names::storage(i),
        Kind::Proxy(i) => format!("{}-proxy", names::storage(i)),
        Kind::Seeder => "seeder".to_string(),
        Kind::Rank(r) => names::rank(r),
    }
}

#[derive(Debug)]
pub(super) struct Running {
    pub process: Box<dyn Process>,
    pub started: Instant,
    /// Set when the lab itself stopped it (scale down, replacement, shutdown): not a crash.
    pub terminating: Option<Instant>,
}

#[derive(Debug)]
pub(super) struct Inst {
    pub kind: Kind,
    pub running: Option<Running>,
    pub restarts: u32,
    pub backoff: Duration,
    pub not_before: Option<Instant>,
    pub ready: bool,
    pub last_exit: Option<String>,
    pub succeeded: bool,
    pub failed: bool,
    pub generation: u64,
    /// Replace instead of restart when the current process ends (a new pod: restarts start from 0).
    pub replace: bool,
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

/// The supervisor's state.
#[derive(Debug)]
pub(super) struct Sup {
    pub cfg: LocalConfig,
    pub spec: LocalSpec,
    pub paths: Paths,
    pub insts: BTreeMap<String, Inst>,
    /// rank → GPU slot.
    pub slots: BTreeMap<u32, u32>,
    pub me: Option<ProcRecord>,
    pub shutting_down: bool,
    pub launcher: Box<dyn Launcher>,
}

/// Asks `inst`'s process to stop, once; [`Sup::reap`] kills it if it outlives the grace period.
pub(super) fn terminate(inst: &mut Inst, now: Instant) {
    if let Some(run) = inst.running.as_mut()
        && run.terminating.is_none()
    {
        run.process.signal(Signal::SIGTERM);
        run.terminating = Some(now);
    }
}

impl Sup {
    /// The state of a supervisor that has started nothing yet.
    pub fn new(cfg: LocalConfig, spec: LocalSpec, paths: Paths, launcher: Box<dyn Launcher>) -> Self {
        Sup {
            cfg,
            spec,
            paths,
            insts: BTreeMap::new(),
            slots: BTreeMap::new(),
            me: None,
            shutting_down: false,
            launcher,
        }
    }

    pub fn save_spec(&self) {
        if let Ok(b) = serde_json::to_vec_pretty(&self.spec) {
            let _ = state::write_atomic(&self.paths.spec(), &b);
        }
    }

    pub fn save_procs(&self) {
        let mut table: Vec<ProcRecord> = self.me.iter().cloned().collect();
        table.extend(
            self.insts
                .values()
                .filter_map(|i| i.running.as_ref().map(|r| r.process.record().clone())),
        );
        let _ = procs::write_table(&self.paths.procs(), &table);
    }

    /// Answers a request that changes or reads the desired state (the socket server answers the others).
    pub fn request(&mut self, req: Request, now: Instant) -> Response {
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
                if ranks == 0 || ranks > crate::local::MAX_RANKS {
                    return err(format!("ranks must be between 1 and {}", crate::local::MAX_RANKS));
                }
                self.spec.ranks = ranks;
                self.save_spec();
                Response::Ok
            }
            Request::WorldSize { world_size } => {
                if world_size == 0 || world_size > crate::local::MAX_RANKS {
                    return err(format!(
                        "world size must be between 1 and {}",
                        crate::local::MAX_RANKS
                    ));
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
                    terminate(i, now);
                }
                Response::Ok
            }
            Request::SetStorageCpu { server, cpu } => self.set_storage_cpu(server, cpu),
            Request::SetDelay { .. } | Request::Shutdown => err("handled elsewhere".into()),
        }
    }

    fn new_generation(&mut self) {
        self.spec.generation += 1;
        self.spec.cpu_live.clear();
    }

    /// Brings the processes in line with the spec. Called every tick and after every request.
    pub fn reconcile(&mut self, now: Instant) {
        if self.shutting_down {
            return;
        }
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
                terminate(inst, now);
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
            match self.start(kind, now) {
                Ok(running) => {
                    log(&format!("started {name} (pid {})", running.process.record().pid));
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

    /// Collects exited processes, and kills those that outlived their grace period. Returns true if any
    /// exited.
    pub fn reap(&mut self, now: Instant) -> bool {
        let mut any = false;
        for (name, inst) in self.insts.iter_mut() {
            let Some(run) = inst.running.as_mut() else {
                continue;
            };
            if let Some(t) = run.terminating
                && now.duration_since(t) > TERMINATION_GRACE
            {
                run.process.signal(Signal::SIGKILL);
            }
            let status = match run.process.try_wait() {
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
            if now.duration_since(run.started) > BACKOFF_RESET_AFTER {
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

    /// Rank `r`'s ports, kept across its restarts; handed out on its first start.
    fn rank_ports(&mut self, r: u32) -> std::io::Result<RankPorts> {
        if let Some(p) = self.spec.rank_ports.get(&r) {
            return Ok(*p);
        }
        let mut alloc = PortAllocator::new(None);
        alloc.avoid(self.spec.rank_ports.values().flat_map(|p| [p.listen, p.metrics]));
        let p = RankPorts {
            listen: alloc.take().map_err(std::io::Error::other)?,
            metrics: alloc.take().map_err(std::io::Error::other)?,
        };
        self.spec.rank_ports.insert(r, p);
        self.save_spec();
        Ok(p)
    }

    fn start(&mut self, kind: Kind, now: Instant) -> std::io::Result<Running> {
        if let Kind::Rank(r) = kind {
            self.rank_ports(r)?;
        }
        let cmd = role_command(kind, &self.cfg, &self.spec, &self.paths).ok_or_else(|| {
            std::io::Error::other(format!("{} is not in the lab's configuration", inst_name(kind)))
        })?;
        let process = self.launcher.launch(&cmd)?;
        Ok(Running {
            process,
            started: now,
            terminating: None,
        })
    }
}
