//! A fake [`Runtime`] for unit tests of the engines above it (faults, drills, the façade): the lab as a
//! few numbers in memory, acting at once, with every call logged and any action made to fail on demand.
//! No processes, no network.
//!
//! The model it keeps is the one the real runtimes report: ranks beyond the GPU capacity are Pending
//! (`Insufficient gpu`), a rank's live CPU limit may drift from its template, a storage server's probe
//! answers in its base latency plus the delay on its path, and each running rank's metrics report the
//! world size.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use lab_model::checkpoint::{CheckpointState, SavedCheckpoint};
use lab_model::status::{LabStatus, Phase, PodStatus, Role, RuntimeKind};
use lab_model::{Millicores, metrics, names};

use crate::{
    BesideProcess, CpuLimits, Database, Delay, DelayPath, Lab, Neighbours, Ranks, Result, RuntimeError,
    Scrape, ScrapeTarget, Storage, TargetKind,
};

/// The fake lab's state; tests read it with [`FakeRuntime::state`] and change it with [`FakeRuntime::update`].
#[derive(Debug, Clone, PartialEq)]
pub struct FakeLab {
    pub ranks: u32,
    pub world_size: u32,
    pub gpus: u32,
    pub storage_servers: u32,
    /// Each server's latency without a delay.
    pub base_latency: Duration,
    pub delays: BTreeMap<u32, Delay>,
    /// Live CPU limits by rank; a rank missing here runs at the template.
    pub cpu_live: BTreeMap<u32, Millicores>,
    pub template: Millicores,
    /// When false, a delay set on a path does not show in its probe (a path that ignores it).
    pub delays_take_effect: bool,
    /// The world size the running ranks were started with, when a rolling change held back by a Pending
    /// rank left them on the previous one; `None`: they run the configuration's.
    pub running_world_size: Option<u32>,
    /// Ranks whose training thread is frozen.
    pub frozen: std::collections::BTreeSet<u32>,
    /// Pids of the processes started beside each rank.
    pub beside: BTreeMap<u32, Vec<u32>>,
    /// The next pid handed out.
    pub next_pid: u32,
    /// CPU seconds each process beside a rank has used; every listing adds half a second (they burn).
    pub beside_cpu: BTreeMap<u32, f64>,
    /// Each running rank's step counter, advanced by every status read unless the rank is frozen.
    pub steps: BTreeMap<u32, u64>,
    /// Settings of one rank alone.
    pub rank_env: BTreeMap<u32, BTreeMap<String, String>>,
    /// Restarts of each rank; a rank with `LAB_DEVICE_FAULT_AFTER` set counts one more at every status read
    /// (it crashes in a loop).
    pub restarts: BTreeMap<u32, u32>,
    /// CPU limits on storage servers' own processes (the slow-disk fault).
    pub storage_cpu: BTreeMap<u32, Millicores>,
    /// The volumes each storage server holds.
    pub volumes: BTreeMap<u32, Vec<u32>>,
    /// Rank 0's checkpoint control: a request is answered at the next read while rank 0 runs unfrozen
    /// (between two steps), with the step it is at.
    pub checkpoint: CheckpointState,
    /// Extra latency each of a server's next probes sees, in order (none left: none): a moment of load,
    /// or a delay that landed on the wrong server.
    pub probe_noise: BTreeMap<u32, std::collections::VecDeque<Duration>>,
    /// The optional database (`None`: the lab has none); `set_db_template` changes its template.
    pub database: Option<lab_model::db::DbStatus>,
}

impl Default for FakeLab {
    fn default() -> Self {
        FakeLab {
            ranks: 4,
            world_size: 4,
            gpus: 4,
            storage_servers: 3,
            base_latency: Duration::from_millis(2),
            delays: BTreeMap::new(),
            cpu_live: BTreeMap::new(),
            template: Millicores(400),
            delays_take_effect: true,
            running_world_size: None,
            frozen: Default::default(),
            beside: BTreeMap::new(),
            next_pid: 5000,
            beside_cpu: BTreeMap::new(),
            steps: BTreeMap::new(),
            rank_env: BTreeMap::new(),
            restarts: BTreeMap::new(),
            storage_cpu: BTreeMap::new(),
            volumes: (0..3).map(|s| (s, vec![2 * s + 1, 2 * s + 2])).collect(),
            checkpoint: CheckpointState::default(),
            probe_noise: BTreeMap::new(),
            database: None,
        }
    }
}

/// A [`Runtime`] over a [`FakeLab`].
#[derive(Debug, Clone, Default)]
pub struct FakeRuntime {
    lab: Arc<Mutex<FakeLab>>,
    calls: Arc<Mutex<Vec<String>>>,
    /// Actions (by method name) that fail until taken out.
    failing: Arc<Mutex<Vec<&'static str>>>,
    /// Actions that never return (an interrupted call).
    hanging: Arc<Mutex<Vec<&'static str>>>,
    /// Actions that take this long (on tokio's clock) before they act.
    slow: Arc<Mutex<Vec<(&'static str, Duration)>>>,
}

impl FakeRuntime {
    /// A fake lab of 4 ranks on 4 GPUs and 3 storage servers, every rank at 400m.
    pub fn new() -> Self {
        FakeRuntime::default()
    }

    /// A copy of the fake lab's state as it is now.
    pub fn state(&self) -> FakeLab {
        self.lab().clone()
    }

    /// Changes the fake lab's state, as something outside the runtime would (a rank replaced, a path that
    /// ignores delays).
    pub fn update(&self, change: impl FnOnce(&mut FakeLab)) {
        change(&mut self.lab());
    }

    // Held only within one call: a guard that reached a test could be held across a second lock.
    fn lab(&self) -> MutexGuard<'_, FakeLab> {
        self.lab.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every call so far, as `method(args)`, in order.
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Makes `method` (`set_storage_delay`, `resize_rank`, ...) fail from now on.
    pub fn fail(&self, method: &'static str) {
        self.failing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(method);
    }

    /// Makes `method` never return from now on, as a call that hangs until the caller gives up.
    pub fn hang(&self, method: &'static str) {
        self.hanging
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(method);
    }

    /// Makes `method` take `by` (on tokio's clock, so a test with a paused clock does not wait) before it
    /// acts, from now on.
    pub fn slow(&self, method: &'static str, by: Duration) {
        self.slow
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((method, by));
    }

    /// Lets `method` succeed (and return) again, at once.
    pub fn heal(&self, method: &'static str) {
        self.slow
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(m, _)| *m != method);
        self.failing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|m| *m != method);
        self.hanging
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|m| *m != method);
    }

    fn check_server(lab: &FakeLab, server: u32) -> Result<()> {
        if server >= lab.storage_servers {
            return Err(RuntimeError::NoSuchInstance(names::storage(server)));
        }
        Ok(())
    }

    async fn call(&self, method: &'static str, args: String) -> Result<()> {
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(format!("{method}({args})"));
        if self
            .failing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&method)
        {
            return Err(RuntimeError::Other(format!("{method} fails in this test")));
        }
        if self
            .hanging
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&method)
        {
            std::future::pending::<()>().await;
        }
        let by = self
            .slow
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(m, _)| *m == method)
            .map(|(_, by)| *by);
        if let Some(by) = by {
            tokio::time::sleep(by).await;
        }
        Ok(())
    }

    fn rank_running(lab: &FakeLab, rank: u32) -> bool {
        rank < lab.ranks && rank < lab.gpus
    }
}

/// What the fake refuses: the parts of a lab it does not model.
fn not_modelled(what: &str) -> RuntimeError {
    RuntimeError::InvalidInput(format!("the fake runtime does not model {what}"))
}

#[async_trait]
impl Lab for FakeRuntime {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Local
    }

    fn name(&self) -> &str {
        "fake"
    }

    async fn status(&self) -> Result<LabStatus> {
        self.call("status", String::new()).await?;
        let mut lab = self.lab();
        let crashing: Vec<u32> = lab
            .rank_env
            .iter()
            .filter(|(_, e)| e.contains_key("LAB_DEVICE_FAULT_AFTER"))
            .map(|(r, _)| *r)
            .collect();
        for r in crashing {
            *lab.restarts.entry(r).or_default() += 1;
        }
        let mut pods = Vec::new();
        for i in 0..lab.ranks {
            let mut p = PodStatus::new(names::rank(i), Role::Rank, Some(i));
            p.resources.gpus = 1;
            p.resources.cpu_template = Some(lab.template);
            if Self::rank_running(&lab, i) {
                p.phase = Phase::Running;
                p.ready = true;
                let live = lab.cpu_live.get(&i).copied().unwrap_or(lab.template);
                p.resources.cpu_live = Some(live);
                p.resources.cpu_spec = Some(live);
                p.restarts = lab.restarts.get(&i).copied().unwrap_or(0);
                if p.restarts > 0 {
                    let own = lab_model::actions::DEVICE_FAULT_EXIT;
                    p.message = Some(format!("exit code {own}"));
                    p.last_exit_code = Some(i32::from(own));
                }
            } else {
                p.reason = Some("Insufficient gpu".into());
            }
            pods.push(p);
        }
        for s in 0..lab.storage_servers {
            let mut p = PodStatus::new(names::storage(s), Role::StorageServer, Some(s));
            p.phase = Phase::Running;
            p.ready = true;
            pods.push(p);
        }
        Ok(LabStatus {
            lab: "fake".into(),
            runtime: RuntimeKind::Local,
            pods,
            gpus_capacity: lab.gpus,
            gpu_resource: "lab.dev/gpu".into(),
            ranks_desired: lab.ranks,
            world_size: lab.world_size,
            storage_servers: lab.storage_servers,
            delay_path: "proxy".into(),
            notes: Vec::new(),
        })
    }

    async fn versions(&self) -> lab_model::version::Parts {
        lab_model::version::Parts::default()
    }

    async fn log_components(&self) -> Result<Vec<String>> {
        Err(not_modelled("logs"))
    }

    async fn logs(&self, component: &str, _request: crate::LogRequest) -> Result<crate::LogLines> {
        Err(not_modelled(&format!("{component}'s log")))
    }
}

#[async_trait]
impl Scrape for FakeRuntime {
    async fn scrape_targets(&self) -> Result<Vec<ScrapeTarget>> {
        self.call("scrape_targets", String::new()).await?;
        let lab = self.lab();
        Ok((0..lab.ranks)
            .filter(|r| Self::rank_running(&lab, *r))
            .map(|r| ScrapeTarget {
                instance: names::rank(r),
                kind: TargetKind::Rank,
                index: r,
                address: format!("fake://rank-{r}"),
            })
            .collect())
    }

    async fn fetch_metrics(&self, target: &ScrapeTarget, _timeout: Duration) -> Result<String> {
        self.call("fetch_metrics", target.instance.clone()).await?;
        let mut lab = self.lab();
        let ws = lab.running_world_size.unwrap_or(lab.world_size);
        let frozen = lab.frozen.contains(&target.index);
        let step = lab.steps.entry(target.index).or_insert(100);
        if !frozen {
            *step += 5;
        }
        let step = *step;
        Ok(format!(
            "{} {ws}\n{} {step}\n",
            metrics::WORLD_SIZE,
            metrics::STEP
        ))
    }
}

#[async_trait]
impl Storage for FakeRuntime {
    async fn storage_delay(&self, server: u32) -> Result<Option<Delay>> {
        self.call("storage_delay", server.to_string()).await?;
        Ok(self.lab().delays.get(&server).copied())
    }

    async fn set_storage_delay(&self, server: u32, delay: Option<Delay>) -> Result<DelayPath> {
        self.call("set_storage_delay", format!("{server}, {delay:?}"))
            .await?;
        let mut lab = self.lab();
        if server >= lab.storage_servers {
            return Err(RuntimeError::Other(format!("no storage-{server}")));
        }
        match delay {
            Some(d) => lab.delays.insert(server, d),
            None => lab.delays.remove(&server),
        };
        Ok(DelayPath::Proxy)
    }

    async fn probe_storage(&self, server: u32, _samples: usize) -> Result<Duration> {
        self.call("probe_storage", server.to_string()).await?;
        let mut lab = self.lab();
        let added = match lab.delays.get(&server) {
            Some(d) if lab.delays_take_effect => d.delay,
            _ => Duration::ZERO,
        };
        let noise = lab
            .probe_noise
            .get_mut(&server)
            .and_then(std::collections::VecDeque::pop_front)
            .unwrap_or_default();
        Ok(lab.base_latency + added + noise)
    }

    /// The base latency, plus 200 ms on a server held under 100m of CPU: a starved server is slow to
    /// itself, whatever is on the path to it.
    async fn probe_storage_own(&self, server: u32, _samples: usize) -> Result<Duration> {
        self.call("probe_storage_own", server.to_string()).await?;
        let lab = self.lab();
        Self::check_server(&lab, server)?;
        let starved = lab.storage_cpu.get(&server).is_some_and(|c| c.0 < 100);
        Ok(lab.base_latency
            + if starved {
                Duration::from_millis(200)
            } else {
                Duration::ZERO
            })
    }

    async fn storage_cpu(&self, server: u32) -> Result<Option<Millicores>> {
        self.call("storage_cpu", server.to_string()).await?;
        let lab = self.lab();
        Self::check_server(&lab, server)?;
        Ok(lab.storage_cpu.get(&server).copied())
    }

    async fn set_storage_cpu(&self, server: u32, cpu: Option<Millicores>) -> Result<()> {
        self.call("set_storage_cpu", format!("{server}, {cpu:?}")).await?;
        let mut lab = self.lab();
        Self::check_server(&lab, server)?;
        match cpu {
            Some(c) => lab.storage_cpu.insert(server, c),
            None => lab.storage_cpu.remove(&server),
        };
        Ok(())
    }

    async fn storage_volumes(&self, server: u32) -> Result<Vec<u32>> {
        self.call("storage_volumes", server.to_string()).await?;
        let lab = self.lab();
        Self::check_server(&lab, server)?;
        Ok(lab.volumes.get(&server).cloned().unwrap_or_default())
    }

    async fn move_volume(&self, volume: u32, from: u32, to: u32) -> Result<()> {
        self.call("move_volume", format!("{volume}, {from}, {to}"))
            .await?;
        let mut lab = self.lab();
        Self::check_server(&lab, from)?;
        Self::check_server(&lab, to)?;
        let held = lab.volumes.entry(from).or_default();
        let Some(at) = held.iter().position(|v| *v == volume) else {
            return Err(RuntimeError::InvalidInput(format!(
                "storage-{from} does not hold volume {volume}"
            )));
        };
        held.remove(at);
        lab.volumes.entry(to).or_default().push(volume);
        Ok(())
    }
}

#[async_trait]
impl Ranks for FakeRuntime {
    async fn cpu_limits(&self, rank: u32) -> Result<CpuLimits> {
        self.call("cpu_limits", rank.to_string()).await?;
        let lab = self.lab();
        if !Self::rank_running(&lab, rank) {
            return Err(RuntimeError::Other(format!("rank-{rank} is not running")));
        }
        let live = lab.cpu_live.get(&rank).copied().unwrap_or(lab.template);
        Ok(CpuLimits {
            live: Some(live),
            spec: Some(live),
            template: lab.template,
        })
    }

    async fn resize_rank(&self, rank: u32, cpu: Millicores) -> Result<()> {
        self.call("resize_rank", format!("{rank}, {cpu}")).await?;
        let mut lab = self.lab();
        if !Self::rank_running(&lab, rank) {
            return Err(RuntimeError::Other(format!("rank-{rank} is not running")));
        }
        lab.cpu_live.insert(rank, cpu);
        Ok(())
    }

    async fn apply_template(&self, cpu: Millicores) -> Result<()> {
        self.call("apply_template", cpu.to_string()).await?;
        self.lab().template = cpu;
        Ok(())
    }

    async fn scale_ranks(&self, ranks: u32) -> Result<()> {
        self.call("scale_ranks", ranks.to_string()).await?;
        if ranks == 0 {
            return Err(RuntimeError::Other("ranks must be at least 1".into()));
        }
        let mut lab = self.lab();
        lab.ranks = ranks;
        // A rolling change held back by a Pending rank goes on once no rank is Pending.
        if ranks <= lab.gpus {
            lab.running_world_size = None;
        }
        Ok(())
    }

    async fn set_world_size(&self, world_size: u32) -> Result<()> {
        self.call("set_world_size", world_size.to_string()).await?;
        if world_size == 0 {
            return Err(RuntimeError::Other("world size must be at least 1".into()));
        }
        let mut lab = self.lab();
        lab.world_size = world_size;
        lab.running_world_size = None;
        Ok(())
    }

    async fn rollout_ranks(&self, ranks: u32, world_size: u32) -> Result<()> {
        self.call("rollout_ranks", format!("{ranks} {world_size}"))
            .await?;
        if ranks == 0 || world_size == 0 {
            return Err(RuntimeError::Other(
                "ranks and world size must be at least 1".into(),
            ));
        }
        let mut lab = self.lab();
        let running = lab.running_world_size.unwrap_or(lab.world_size);
        lab.ranks = ranks;
        lab.world_size = world_size;
        // The rollout completes at once unless a rank is Pending, which holds every running rank back.
        lab.running_world_size = (ranks > lab.gpus && running != world_size).then_some(running);
        Ok(())
    }

    async fn restart_rank(&self, rank: u32) -> Result<()> {
        self.call("restart_rank", rank.to_string()).await?;
        // A new rank comes back from its template, and thawed.
        let mut lab = self.lab();
        lab.cpu_live.remove(&rank);
        lab.frozen.remove(&rank);
        Ok(())
    }

    async fn rank_frozen(&self, rank: u32) -> Result<bool> {
        self.call("rank_frozen", rank.to_string()).await?;
        Ok(self.lab().frozen.contains(&rank))
    }

    async fn freeze_rank(&self, rank: u32, frozen: bool) -> Result<()> {
        self.call("freeze_rank", format!("{rank}, {frozen}")).await?;
        let mut lab = self.lab();
        if !Self::rank_running(&lab, rank) {
            return Err(RuntimeError::NoSuchInstance(names::rank(rank)));
        }
        if frozen {
            lab.frozen.insert(rank);
        } else {
            lab.frozen.remove(&rank);
        }
        Ok(())
    }

    async fn rank_env(&self, rank: u32) -> Result<BTreeMap<String, String>> {
        self.call("rank_env", rank.to_string()).await?;
        Ok(self.lab().rank_env.get(&rank).cloned().unwrap_or_default())
    }

    async fn set_rank_env(&self, rank: u32, name: &str, value: Option<String>) -> Result<()> {
        self.call("set_rank_env", format!("{rank}, {name}, {value:?}"))
            .await?;
        lab_model::actions::check_rank_env_name(name).map_err(RuntimeError::InvalidInput)?;
        let mut lab = self.lab();
        if rank >= lab.ranks {
            return Err(RuntimeError::InvalidInput(format!("rank-{rank} does not exist")));
        }
        let env = lab.rank_env.entry(rank).or_default();
        match value {
            Some(v) => env.insert(name.to_string(), v),
            None => env.remove(name),
        };
        if env.is_empty() {
            lab.rank_env.remove(&rank);
        }
        // Replaced to pick it up: a new process, restarts from zero.
        lab.restarts.remove(&rank);
        Ok(())
    }

    async fn checkpoint(&self, save: bool, _timeout: Duration) -> Result<CheckpointState> {
        self.call("checkpoint", save.to_string()).await?;
        let mut lab = self.lab();
        if !Self::rank_running(&lab, 0) {
            return Err(RuntimeError::InvalidInput("rank-0 is not running".into()));
        }
        let step = lab.steps.get(&0).copied().unwrap_or(0);
        let frozen = lab.frozen.contains(&0);
        let c = &mut lab.checkpoint;
        c.step = step;
        c.training = !frozen;
        if save {
            c.requested += 1;
        } else if !frozen && c.requested > c.last.map_or(0, |l| l.request) {
            c.last = Some(SavedCheckpoint {
                step,
                at_ms: crate::state::now_ms(),
                request: c.requested,
            });
        }
        Ok(c.clone())
    }
}

#[async_trait]
impl Neighbours for FakeRuntime {
    async fn rank_processes(&self, rank: u32) -> Result<Vec<BesideProcess>> {
        self.call("rank_processes", rank.to_string()).await?;
        let mut lab = self.lab();
        if !Self::rank_running(&lab, rank) {
            return Err(RuntimeError::NoSuchInstance(names::rank(rank)));
        }
        let mut out = vec![BesideProcess {
            pid: 1000 + rank,
            command: format!("lab-rank --rank={rank}"),
            cpu_seconds: 1.0,
            rank_itself: true,
        }];
        for pid in lab.beside.get(&rank).cloned().unwrap_or_default() {
            let cpu = lab.beside_cpu.entry(pid).or_insert(0.0);
            *cpu += 0.5;
            out.push(BesideProcess {
                pid,
                command: "/bin/sh -c while :; do :; done".into(),
                cpu_seconds: *cpu,
                rank_itself: false,
            });
        }
        Ok(out)
    }

    async fn start_hog(&self, rank: u32) -> Result<u32> {
        self.call("start_hog", rank.to_string()).await?;
        let mut lab = self.lab();
        if !Self::rank_running(&lab, rank) {
            return Err(RuntimeError::NoSuchInstance(names::rank(rank)));
        }
        let pid = lab.next_pid;
        lab.next_pid += 1;
        lab.beside.entry(rank).or_default().push(pid);
        Ok(pid)
    }

    async fn stop_beside(&self, rank: u32, pid: u32) -> Result<()> {
        self.call("stop_beside", format!("{rank}, {pid}")).await?;
        let mut lab = self.lab();
        if pid == 1000 + rank {
            return Err(RuntimeError::InvalidInput(format!(
                "pid {pid} is rank-{rank} itself"
            )));
        }
        let list = lab.beside.entry(rank).or_default();
        if !list.contains(&pid) {
            return Err(RuntimeError::InvalidInput(format!(
                "pid {pid} is not beside rank-{rank}"
            )));
        }
        list.retain(|p| *p != pid);
        Ok(())
    }

    async fn foreign_jobs(&self) -> Result<Vec<lab_model::jobs::ForeignJob>> {
        Ok(Vec::new())
    }

    async fn run_foreign_job(&self, job: &lab_model::jobs::ForeignJob) -> Result<()> {
        Err(not_modelled(&format!("jobs of other teams ({})", job.name)))
    }

    async fn stop_foreign_job(&self, name: &str) -> Result<()> {
        Err(RuntimeError::InvalidInput(format!(
            "no foreign job named {name:?}"
        )))
    }
}

#[async_trait]
impl Database for FakeRuntime {
    async fn database(&self) -> Result<lab_model::db::DbStatus> {
        self.call("database", String::new()).await?;
        self.lab()
            .database
            .clone()
            .ok_or_else(|| RuntimeError::InvalidInput("this lab has no database".into()))
    }

    async fn set_db_template(&self, node_selector: BTreeMap<String, String>) -> Result<()> {
        self.call("set_db_template", format!("{node_selector:?}")).await?;
        let mut lab = self.lab();
        let db = lab
            .database
            .as_mut()
            .ok_or_else(|| RuntimeError::InvalidInput("this lab has no database".into()))?;
        db.template.node_selector = node_selector;
        db.template.revision += 1;
        Ok(())
    }

    async fn delete_pod(&self, name: &str) -> Result<()> {
        Err(not_modelled(&format!("deleting {name}")))
    }

    async fn set_synchronous_standby_names(&self, _names: &str) -> Result<()> {
        Err(not_modelled("the primary's standby settings"))
    }
}
