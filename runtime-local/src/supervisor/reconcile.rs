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
use super::instance::{Kind, inst_name};
use super::launch::{Launcher, Process};
use super::log;
use crate::procs::{self, ProcRecord};
use crate::proto::{Request, Response};
use crate::spec::{ForeignJobSpec, LocalConfig, LocalSpec, Paths, PortAllocator, RankPorts};
use lab_runtime::state;

const BACKOFF_START: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// How long a process asked to stop has before it is killed.
pub(super) const TERMINATION_GRACE: Duration = Duration::from_secs(3);
const SEEDER_ATTEMPTS: u32 = 6;
/// A process that ran this long before it exited starts its backoff afresh.
const BACKOFF_RESET_AFTER: Duration = Duration::from_secs(60);

/// A process the supervisor started beside a rank.
#[derive(Debug)]
pub(crate) struct Beside {
    pub rank: u32,
    pub process: Box<dyn Process>,
    pub terminating: Option<Instant>,
}

/// Thaws rank `rank`'s frozen training thread, if any (nothing to do otherwise).
pub(super) fn thaw(cfg: &LocalConfig, rank: u32) {
    if let Ok(g) = crate::freezer::group(cfg.cgroups.as_ref(), &cfg.name, &names::rank(rank))
        && g.exists()
        && let Err(e) = crate::freezer::thaw(&g)
    {
        log(&e);
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
    /// Readiness probes failed in a row since the last one that passed.
    pub probe_failures: u32,
    pub last_exit: Option<String>,
    /// The exit code of the last exit it was restarted after (none when killed by a signal).
    pub last_exit_code: Option<i32>,
    pub succeeded: bool,
    pub failed: bool,
    pub generation: u64,
    /// The world size its process was started with: its pod's revision of the job's configuration. A
    /// process that exits and restarts in the same instance keeps it during a rolling change.
    pub world_size: u32,
    /// Replace instead of restart when the current process ends (a new pod: restarts start from 0).
    pub replace: bool,
}

/// Failed readiness probes in a row that make a Ready instance not Ready: Kubernetes' default
/// `failureThreshold`, and the one every manifest of the lab sets.
pub(super) const PROBE_FAILURE_THRESHOLD: u32 = 3;

impl Inst {
    /// Records one readiness probe's outcome, as a kubelet does: one pass makes it Ready, and a Ready
    /// instance turns not Ready only after [`PROBE_FAILURE_THRESHOLD`] failures in a row.
    pub fn probed(&mut self, ok: bool) {
        if ok {
            self.ready = true;
            self.probe_failures = 0;
        } else {
            self.probe_failures = self.probe_failures.saturating_add(1);
            if self.probe_failures >= PROBE_FAILURE_THRESHOLD {
                self.ready = false;
            }
        }
    }

    fn new(kind: Kind, generation: u64, world_size: u32) -> Self {
        Inst {
            kind,
            running: None,
            restarts: 0,
            backoff: BACKOFF_START,
            not_before: None,
            ready: false,
            probe_failures: 0,
            last_exit: None,
            last_exit_code: None,
            succeeded: false,
            failed: false,
            generation,
            world_size,
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
    /// Processes started beside a rank, in its cgroup (the slow-compute fault's CPU hogs).
    pub beside: Vec<Beside>,
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
            beside: Vec::new(),
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
        table.extend(self.beside.iter().map(|b| b.process.record().clone()));
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
                if ranks == 0 || ranks > crate::MAX_RANKS {
                    return err(format!("ranks must be between 1 and {}", crate::MAX_RANKS));
                }
                self.spec.ranks = ranks;
                self.save_spec();
                Response::Ok
            }
            Request::WorldSize { world_size } => {
                if world_size == 0 || world_size > crate::MAX_RANKS {
                    return err(format!("world size must be between 1 and {}", crate::MAX_RANKS));
                }
                if world_size != self.spec.world_size {
                    self.spec.world_size = world_size;
                    self.new_generation();
                }
                self.save_spec();
                Response::Ok
            }
            Request::Rollout { ranks, world_size } => {
                let max = crate::MAX_RANKS;
                if ranks == 0 || ranks > max || world_size == 0 || world_size > max {
                    return err(format!("ranks and world size must be between 1 and {max}"));
                }
                // Like `kubectl apply` of a StatefulSet with new replicas and a new template under a
                // RollingUpdate strategy: nothing restarts now; `reconcile` replaces one rank at a time.
                self.spec.ranks = ranks;
                self.spec.world_size = world_size;
                self.spec.rolling = true;
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
                // A new pod comes from the template: an in-place change does not survive it. A frozen
                // thread does not act on SIGKILL, so it is thawed first, as a container runtime does.
                self.spec.cpu_live.remove(&rank);
                self.save_spec();
                self.thaw_rank(rank);
                if let Some(i) = self.insts.get_mut(&names::rank(rank)) {
                    i.replace = true;
                    terminate(i, now);
                }
                Response::Ok
            }
            Request::Freeze { rank, frozen } => self.freeze(rank, frozen),
            Request::Frozen { rank } => self.frozen(rank),
            Request::RankProcs { rank } => self.rank_procs(rank),
            Request::StartHog { rank } => self.start_hog(rank),
            Request::StopBeside { rank, pid } => self.stop_beside(rank, pid, now),
            Request::RankEnv { rank } => Response::Env {
                env: self.spec.rank_env.get(&rank).cloned().unwrap_or_default(),
            },
            Request::SetRankEnv { rank, name, value } => {
                if rank >= self.spec.ranks {
                    return err(format!(
                        "rank-{rank} does not exist (ranks 0..{})",
                        self.spec.ranks
                    ));
                }
                if let Err(why) = lab_model::actions::check_rank_env_name(&name) {
                    return err(why);
                }
                let device_fails = lab_model::actions::fails_device_now(&name, value.as_deref());
                let env = self.spec.rank_env.entry(rank).or_default();
                let changed = match value {
                    Some(v) => env.insert(name, v.clone()).as_ref() != Some(&v),
                    None => env.remove(&name).is_some(),
                };
                if env.is_empty() {
                    self.spec.rank_env.remove(&rank);
                }
                self.save_spec();
                if changed {
                    self.thaw_rank(rank);
                    if let Some(i) = self.insts.get_mut(&names::rank(rank)) {
                        if device_fails {
                            // A device fault comes in as the device's first failure, as on Kubernetes: the
                            // rank exits with the device's code (SIGUSR1), a crash restarted in the same
                            // instance, which starts with the setting and keeps its scratch folder.
                            if let Some(run) = i.running.as_ref().filter(|r| r.terminating.is_none()) {
                                run.process.signal(Signal::SIGUSR1);
                            }
                        } else {
                            // Like a pod whose environment changed: the rank is replaced to pick it up.
                            i.replace = true;
                            terminate(i, now);
                        }
                    }
                }
                Response::Ok
            }
            Request::RunJob { job } => match self.run_job(job) {
                Ok(()) => Response::Ok,
                Err(m) => err(m),
            },
            Request::StopJob { name } => {
                if self.spec.foreign_jobs.remove(&name).is_none() {
                    return err(self.no_such_job(&name));
                }
                self.save_spec();
                Response::Ok
            }
            Request::SetStorageCpu { server, cpu } => self.set_storage_cpu(server, cpu),
            Request::DbTemplate { node_selector } => match self.set_db_template(node_selector) {
                Ok(()) => Response::Ok,
                Err(m) => err(m),
            },
            Request::DeletePod { name } => match self.delete_pod(&name, now) {
                Ok(()) => Response::Ok,
                Err(m) => err(m),
            },
            Request::SetDelay { .. } | Request::Shutdown => err("handled elsewhere".into()),
        }
    }

    /// `lab job stop/throttle` of something that is not a foreign job: say what it is instead.
    fn no_such_job(&self, name: &str) -> String {
        if lab_model::jobs::is_training_name(name) {
            return format!(
                "{name} is the training job (or one of its ranks), not a foreign job: `lab job` acts only on \
                 jobs of other teams"
            );
        }
        let known: Vec<&str> = self.spec.foreign_jobs.keys().map(String::as_str).collect();
        if known.is_empty() {
            format!("no foreign job named {name:?}: none runs on this lab")
        } else {
            format!(
                "no foreign job named {name:?}: this lab runs {}",
                known.join(", ")
            )
        }
    }

    /// Adds a foreign job, or changes the one of that name.
    fn run_job(&mut self, job: lab_model::jobs::ForeignJob) -> Result<(), String> {
        use lab_model::jobs;
        jobs::validate_job_name(&job.name)?;
        if job.name == crate::cgroup::SVC_GROUP {
            return Err(format!("job name {:?} is taken by the lab itself", job.name));
        }
        if job.server >= self.cfg.storage_servers {
            return Err(format!(
                "storage-{} does not exist: this lab has storage-0 to storage-{}",
                job.server,
                self.cfg.storage_servers.saturating_sub(1)
            ));
        }
        if job.threads == 0 || job.threads > jobs::MAX_THREADS {
            return Err(format!("threads must be between 1 and {}", jobs::MAX_THREADS));
        }
        if let Some(r) = job.rate
            && !(r.is_finite() && r > 0.0 && r <= jobs::MAX_READ_RATE)
        {
            return Err(format!(
                "read rate {r} must be more than 0 and at most {} reads/s",
                jobs::MAX_READ_RATE
            ));
        }
        if let Some(cur) = self.spec.foreign_jobs.get_mut(&job.name) {
            if cur.job.server != job.server {
                return Err(format!(
                    "job {} already reads from storage-{}: stop it first",
                    job.name, cur.job.server
                ));
            }
            if cur.job != job {
                cur.job = job;
                cur.generation += 1;
            }
        } else {
            if self.spec.foreign_jobs.len() >= jobs::MAX_FOREIGN_JOBS {
                return Err(format!(
                    "this lab already runs {} foreign jobs, the most it runs",
                    jobs::MAX_FOREIGN_JOBS
                ));
            }
            let mut alloc = PortAllocator::new(None);
            alloc.avoid(
                self.spec
                    .rank_ports
                    .values()
                    .flat_map(|p| [p.listen, p.metrics])
                    .chain(self.spec.foreign_jobs.values().map(|j| j.metrics_port)),
            );
            let port = alloc.take().map_err(|e| e.to_string())?;
            let id = self.spec.next_job_id;
            self.spec.next_job_id += 1;
            self.spec.foreign_jobs.insert(
                job.name.clone(),
                ForeignJobSpec {
                    id,
                    job,
                    metrics_port: port,
                    generation: 1,
                },
            );
        }
        self.save_spec();
        Ok(())
    }

    /// The generation an instance of `kind` must have been started under.
    fn wanted_generation(&self, kind: Kind) -> Option<u64> {
        match kind {
            Kind::Rank(_) => Some(self.spec.generation),
            Kind::Job(id) => self
                .spec
                .foreign_jobs
                .values()
                .find(|j| j.id == id)
                .map(|j| j.generation),
            _ => None,
        }
    }

    fn new_generation(&mut self) {
        self.spec.generation += 1;
        self.spec.cpu_live.clear();
        for r in 0..crate::MAX_RANKS {
            self.thaw_rank(r);
        }
        // A change applied to every rank at once ends any rolling change under way.
        self.spec.rolling = false;
    }

    /// During a rolling change, the rank to replace now: the highest ordinal whose world size is not the
    /// configuration's, and only when every wanted rank is available (placed, running, Ready, not being
    /// stopped), as a StatefulSet rolling update waits. `None` when the rollout cannot or need not go on.
    pub(super) fn next_to_roll(&self) -> Option<u32> {
        if !self.spec.rolling {
            return None;
        }
        let available = |r: u32| {
            self.slots.contains_key(&r)
                && self.insts.get(&names::rank(r)).is_some_and(|i| {
                    i.ready && i.running.as_ref().is_some_and(|run| run.terminating.is_none())
                })
        };
        if !(0..self.spec.ranks).all(available) {
            return None;
        }
        (0..self.spec.ranks).rev().find(|r| {
            self.insts
                .get(&names::rank(*r))
                .is_some_and(|i| i.world_size != self.spec.world_size)
        })
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
        let master_ready = self.is_ready(Kind::Master);
        let storage_ready = master_ready
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
        // Foreign jobs: once the storage they read is up.
        if storage_ready {
            wanted.extend(self.spec.foreign_jobs.values().map(|j| Kind::Job(j.id)));
        }
        self.want_database(&mut wanted);

        // Stop what is no longer wanted, or was started under an older configuration: every such rank at
        // once, or during a rolling change the one whose turn it is.
        let generation = self.spec.generation;
        let world_size = self.spec.world_size;
        let rolled = self.next_to_roll();
        if let Some(r) = rolled {
            log(&format!("rolling {} to world size {world_size}", names::rank(r)));
        }
        let wanted_gen: BTreeMap<String, u64> = self
            .insts
            .iter()
            .filter_map(|(n, i)| self.wanted_generation(i.kind).map(|g| (n.clone(), g)))
            .collect();
        for (name, inst) in self.insts.iter_mut() {
            let stale = match inst.kind {
                Kind::Rank(r) => inst.generation != generation || rolled == Some(r),
                Kind::Job(_) => wanted_gen.get(name).is_some_and(|g| inst.generation != *g),
                _ => false,
            };
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
        // A seeder that finished is kept while storage is briefly not Ready (a starved volume server misses a
        // probe): running it again would rewrite a dataset that `lab storage drain` moved on purpose.
        self.insts.retain(|_, i| {
            i.running.is_some()
                || i.kind == Kind::Seeder && i.succeeded
                || wanted.contains(&i.kind)
                    && !(i.replace
                        && matches!(
                            i.kind,
                            Kind::Rank(_) | Kind::Job(_) | Kind::DbPrimary | Kind::DbStandby
                        ))
        });

        for kind in wanted {
            let name = inst_name(kind);
            let generation = self.wanted_generation(kind).unwrap_or(generation);
            let inst = self
                .insts
                .entry(name.clone())
                .or_insert_with(|| Inst::new(kind, generation, world_size));
            if inst.running.is_some() || inst.succeeded || inst.failed {
                continue;
            }
            if inst.not_before.is_some_and(|t| now < t) {
                continue;
            }
            // A volume server that finds no master at start sleeps 1.79 s before it asks again: start it
            // once the master answers.
            if matches!(kind, Kind::Volume(_)) && !master_ready {
                continue;
            }
            inst.generation = generation;
            // Outside a rolling change a restart takes the configuration as it is; during one, a rank
            // keeps its pod's revision until its turn comes.
            if !self.spec.rolling {
                inst.world_size = world_size;
            }
            let ws = inst.world_size;
            let new_pod = inst.restarts == 0;
            match self.start(kind, ws, new_pod, now) {
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
        let mut any = self.reap_beside(now);
        let world_size = self.spec.world_size;
        for (name, inst) in self.insts.iter_mut() {
            let Some(run) = inst.running.as_mut() else {
                continue;
            };
            if let Some(t) = run.terminating
                && now.duration_since(t) > TERMINATION_GRACE
            {
                // A frozen thread would not act on the SIGKILL.
                if let Kind::Rank(r) = inst.kind {
                    thaw(&self.cfg, r);
                }
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
                    // A new pod, from the template as it is now.
                    inst.replace = false;
                    inst.restarts = 0;
                    inst.last_exit_code = None;
                    inst.backoff = BACKOFF_START;
                    inst.world_size = world_size;
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
            inst.last_exit_code = status.code();
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

    /// Starts one process of `kind`; `new_pod` when it is the first of its instance since it was made or
    /// replaced (a rank's scratch folder starts empty then, as a new pod's emptyDir does).
    fn start(
        &mut self,
        kind: Kind,
        world_size: u32,
        new_pod: bool,
        now: Instant,
    ) -> std::io::Result<Running> {
        if let Kind::Rank(r) = kind {
            self.rank_ports(r)?;
            let scratch = super::commands::rank_scratch(&self.paths, r);
            if new_pod && scratch.exists() {
                std::fs::remove_dir_all(&scratch)?;
            }
        }
        let mut spec = self.spec.clone();
        spec.world_size = world_size;
        let cmd = role_command(kind, &self.cfg, &spec, &self.paths).ok_or_else(|| {
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
