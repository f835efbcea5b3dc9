//! Where the lab runs, as a contract: what a backend offers, in six capability traits ([`Lab`], [`Scrape`],
//! [`Storage`], [`Ranks`], [`Neighbours`], [`Database`]) that [`Runtime`] gathers, and what the backends share. The backends are
//! crates of their own (`lab-runtime-local`, `lab-runtime-kube`); the façade opens a lab on its backend.
//!
//! A runtime stands the lab up and down, reports every role instance in the shared status model, hands
//! telemetry the metrics endpoints to scrape, and offers the small set of actions that faults and
//! remediation commands are made of (set a storage delay, resize a rank in place, scale, set the world
//! size, restart a rank). Faults, telemetry, the console and drills see only these traits; each backend
//! implements every group, so no method refuses by default.

pub mod db;
pub mod error;
pub mod lifecycle;
pub mod logs;
pub mod state;
pub mod storage;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod wait;

use std::time::Duration;

use async_trait::async_trait;
use lab_model::Millicores;
use lab_model::checkpoint::CheckpointState;
use lab_model::jobs::ForeignJob;
use lab_model::status::{LabStatus, RuntimeKind};

pub use error::RuntimeError;
// The values the actions speak belong to the model, which every crate shares; named here too, as before.
pub use lab_model::actions::{CpuLimits, Delay, DelayPath};
pub use lab_model::scrape::{ScrapeTarget, TargetKind};
pub use lifecycle::{Progress, UpOptions};
pub use logs::{LogLines, LogRequest};

/// One process beside a rank: in its cgroup (local) or its pod, the rank's own process included.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BesideProcess {
    pub pid: u32,
    /// Its command line, as `/proc/<pid>/cmdline` has it.
    pub command: String,
    /// CPU time it used since it started (user + system), seconds.
    pub cpu_seconds: f64,
    /// True for the rank's own process (which `stop_beside` refuses).
    pub rank_itself: bool,
}

/// A result whose error is a [`RuntimeError`].
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// The lab as a whole: what it is, its status, its logs and versions.
#[async_trait]
pub trait Lab: Send + Sync + std::fmt::Debug {
    /// Which kind of runtime this is.
    fn kind(&self) -> RuntimeKind;

    /// The lab's name.
    fn name(&self) -> &str;

    /// Every role instance in the shared status model, and the job's configuration.
    ///
    /// # Errors
    /// When the runtime cannot be reached (the supervisor or the API server is gone).
    async fn status(&self) -> Result<LabStatus>;

    /// The versions of SeaweedFS, kind and Kubernetes this lab runs, where they can be read (a part that
    /// does not answer is left unknown: this never fails).
    async fn versions(&self) -> lab_model::version::Parts;

    /// The lab's components whose logs [`Lab::logs`] reads (every process or pod, by name), in order.
    ///
    /// # Errors
    /// When the runtime cannot be reached, or keeps no logs it can read.
    async fn log_components(&self) -> Result<Vec<String>>;

    /// Component `component`'s log as `request` asks: its last lines, then, following, each new one.
    ///
    /// # Errors
    /// [`RuntimeError::InvalidInput`] naming the components there are, for a name that is not one; the
    /// runtime's error when the log cannot be read.
    async fn logs(&self, component: &str, request: LogRequest) -> Result<LogLines>;
}

/// Where telemetry reads the lab: the metrics endpoints and a read of one.
#[async_trait]
pub trait Scrape: Send + Sync + std::fmt::Debug {
    /// The metrics endpoints of the ranks and storage servers that exist now.
    ///
    /// # Errors
    /// When the runtime cannot be reached.
    async fn scrape_targets(&self) -> Result<Vec<ScrapeTarget>>;

    /// Fetches one target's metrics text, within `timeout`.
    ///
    /// # Errors
    /// When the endpoint does not answer in time or answers with an error.
    async fn fetch_metrics(&self, target: &ScrapeTarget, timeout: Duration) -> Result<String>;
}

/// The storage servers: the delay on their path, their own CPU, probes, volumes.
#[async_trait]
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// The delay currently added on the path to storage server `server` (`None`: no delay).
    ///
    /// # Errors
    /// When the server does not exist or its path cannot be inspected.
    async fn storage_delay(&self, server: u32) -> Result<Option<Delay>>;

    /// Adds (`Some`) or removes (`None`) a delay on the path to storage server `server`.
    ///
    /// # Errors
    /// When the server does not exist or the delay cannot be applied.
    async fn set_storage_delay(&self, server: u32, delay: Option<Delay>) -> Result<DelayPath>;

    /// Times `samples` small reads through the same path the ranks use to reach storage server `server`,
    /// and returns their median.
    ///
    /// # Errors
    /// When the server does not answer.
    async fn probe_storage(&self, server: u32, samples: usize) -> Result<Duration>;

    /// Times `samples` small requests straight to storage server `server`, bypassing the path the ranks
    /// use (no proxy, no delay on it), and returns their median: the server's own latency.
    ///
    /// # Errors
    /// When the server does not answer, or this runtime cannot reach it directly.
    async fn probe_storage_own(&self, server: u32, samples: usize) -> Result<Duration>;

    /// The CPU limit on storage server `server`'s own process (`None`: none): the slow-disk fault's
    /// actuator. A runtime without it refuses with the reason.
    ///
    /// # Errors
    /// When the server does not exist, or this runtime cannot limit a storage server.
    async fn storage_cpu(&self, server: u32) -> Result<Option<Millicores>>;

    /// Holds storage server `server`'s own process to CPU limit `cpu` (`None`: lifts it). The path to it
    /// (proxy or network) is left alone, so the server's own request latency rises, not only the path's.
    ///
    /// # Errors
    /// When the server does not exist, or this runtime cannot limit a storage server.
    async fn set_storage_cpu(&self, server: u32, cpu: Option<Millicores>) -> Result<()>;

    /// The ids of the volumes storage server `server` holds now, as the master knows them.
    ///
    /// # Errors
    /// When the server does not exist or the master cannot be read.
    async fn storage_volumes(&self, server: u32) -> Result<Vec<u32>>;

    /// Moves volume `volume` from storage server `from` to `to` with SeaweedFS's own tools; afterwards the
    /// master answers lookups with `to`, and `from` no longer holds it.
    ///
    /// # Errors
    /// When either server does not exist, `from` does not hold the volume, or a SeaweedFS step fails.
    async fn move_volume(&self, volume: u32, from: u32, to: u32) -> Result<()>;
}

/// The training job's ranks: their limits, template, count, world size, settings and checkpoints.
#[async_trait]
pub trait Ranks: Send + Sync + std::fmt::Debug {
    /// Rank `rank`'s CPU limits.
    ///
    /// # Errors
    /// When the rank does not exist or is not running.
    async fn cpu_limits(&self, rank: u32) -> Result<CpuLimits>;

    /// Changes rank `rank`'s CPU limit in place, leaving the template alone.
    ///
    /// # Errors
    /// When the rank does not exist, is not running, or the resize is refused.
    async fn resize_rank(&self, rank: u32, cpu: Millicores) -> Result<()>;

    /// Re-applies the workload template with CPU limit `cpu`. Like `kubectl apply` of a StatefulSet, this
    /// changes the template only: running ranks keep whatever limit they have.
    ///
    /// # Errors
    /// When the runtime cannot be reached.
    async fn apply_template(&self, cpu: Millicores) -> Result<()>;

    /// Sets the number of ranks (StatefulSet replicas). New ranks beyond the GPU capacity stay Pending.
    ///
    /// # Errors
    /// When `ranks` is zero or the runtime cannot be reached.
    async fn scale_ranks(&self, ranks: u32) -> Result<()>;

    /// Sets the world size every rank is told to expect; the running ranks restart to pick it up.
    ///
    /// # Errors
    /// When `world_size` is zero or the runtime cannot be reached.
    async fn set_world_size(&self, world_size: u32) -> Result<()>;

    /// Sets the rank count and the world size in the ranks' template in one change, and lets the change
    /// roll out as a StatefulSet rolling update does: one rank at a time, highest ordinal first, never
    /// while any rank is unavailable (Pending, not yet Ready, or being replaced). Unlike
    /// [`Ranks::set_world_size`] nothing is restarted at once: while a rank stays Pending, the running
    /// ranks keep the configuration they started with.
    ///
    /// # Errors
    /// When `ranks` or `world_size` is zero or the runtime cannot be reached.
    async fn rollout_ranks(&self, ranks: u32, world_size: u32) -> Result<()>;

    /// Restarts rank `rank` (deletes the pod, or kills the process), which comes back from its template.
    ///
    /// # Errors
    /// When the rank does not exist.
    async fn restart_rank(&self, rank: u32) -> Result<()>;

    /// Whether rank `rank`'s training thread is frozen (its process lives and answers its probes).
    ///
    /// # Errors
    /// When the rank does not exist or the runtime cannot freeze a thread.
    async fn rank_frozen(&self, rank: u32) -> Result<bool>;

    /// Freezes (`true`) or thaws (`false`) rank `rank`'s training thread only: its process, its metrics
    /// endpoint and its readiness stay as they are. A restarted rank comes back thawed.
    ///
    /// # Errors
    /// When the rank does not exist or is not running, or the runtime cannot freeze a thread (with why).
    async fn freeze_rank(&self, rank: u32, frozen: bool) -> Result<()>;

    /// The settings of rank `rank` alone (`LAB_*` environment variables beside its template's).
    ///
    /// # Errors
    /// When the runtime cannot be reached, or has no per-rank settings (with why).
    async fn rank_env(&self, rank: u32) -> Result<std::collections::BTreeMap<String, String>>;

    /// Sets (`Some`) or removes (`None`) setting `name` of rank `rank` alone; the rank is replaced to pick
    /// it up, and keeps it across later restarts (it is the job's configuration for that rank).
    ///
    /// # Errors
    /// [`RuntimeError::InvalidInput`] for an unknown rank or a name that is not a `LAB_*` setting; the
    /// runtime's error, or why it has no per-rank settings.
    async fn set_rank_env(&self, rank: u32, name: &str, value: Option<String>) -> Result<()>;

    /// Rank 0's checkpoint state, read from its own endpoint; with `save`, rank 0 is first asked to save
    /// a checkpoint after the step it is in (this returns as soon as it counted the request; the state's
    /// `requested` is the request's number, which the checkpoint that answers it carries).
    ///
    /// # Errors
    /// When rank 0 is not running or does not answer within `timeout`, or the runtime cannot reach it.
    async fn checkpoint(&self, save: bool, timeout: Duration) -> Result<CheckpointState>;
}

/// What shares the job's resources: processes beside a rank, jobs of other teams on its storage.
#[async_trait]
pub trait Neighbours: Send + Sync + std::fmt::Debug {
    /// Every process beside rank `rank` (sharing its CPU limit), its own included, with its CPU use.
    ///
    /// # Errors
    /// When the rank does not exist or is not running.
    async fn rank_processes(&self, rank: u32) -> Result<Vec<BesideProcess>>;

    /// Starts a CPU-bound process beside rank `rank`, inside its CPU limit; returns its pid. Neither the
    /// rank's spec nor the template changes.
    ///
    /// # Errors
    /// When the rank does not exist or is not running, or the runtime cannot place a process beside it.
    async fn start_hog(&self, rank: u32) -> Result<u32>;

    /// Stops process `pid` beside rank `rank`. The rank's own process is refused (restart the rank for
    /// that), and so is a pid that is not beside it.
    ///
    /// # Errors
    /// [`RuntimeError::InvalidInput`] for those refusals; the runtime's error otherwise.
    async fn stop_beside(&self, rank: u32, pid: u32) -> Result<()>;

    /// The jobs of other teams running on the lab's storage (never the training job).
    ///
    /// # Errors
    /// When the runtime cannot be reached.
    async fn foreign_jobs(&self) -> Result<Vec<ForeignJob>>;

    /// Runs a job of another team that reads from one storage server in its own process and cgroup (its
    /// own pod), or changes the one of that name: its process is replaced with the new settings, as a
    /// Deployment rolls its pod.
    ///
    /// # Errors
    /// [`RuntimeError::InvalidInput`] for a bad name, server, rate or thread count (nothing changed);
    /// [`RuntimeError::InvalidInput`] too where the runtime cannot run one, saying why.
    async fn run_foreign_job(&self, job: &ForeignJob) -> Result<()>;

    /// Stops the foreign job `name`.
    ///
    /// # Errors
    /// [`RuntimeError::InvalidInput`] when no foreign job has that name (a rank or the training job is
    /// not one).
    async fn stop_foreign_job(&self, name: &str) -> Result<()>;
}

/// The optional database beside the job (`lab up --database`).
#[async_trait]
pub trait Database: Send + Sync + std::fmt::Debug {
    /// The optional database beside the job (`lab up --database`), with the primary's
    /// `synchronous_standby_names` as it reads it now.
    ///
    /// # Errors
    /// [`RuntimeError::InvalidInput`] when the lab has none, or the runtime cannot run one (saying why).
    async fn database(&self) -> Result<lab_model::db::DbStatus>;

    /// Sets the standby StatefulSet's template (its node selector), as `kubectl apply` does: pods that
    /// exist keep the version they were made from, a Pending one included.
    ///
    /// # Errors
    /// [`RuntimeError::InvalidInput`] for a selector that is not labels, or a lab without a database.
    async fn set_db_template(&self, node_selector: std::collections::BTreeMap<String, String>) -> Result<()>;

    /// Deletes a database pod by name (`db-1`); it is made again from its template as it is now.
    ///
    /// # Errors
    /// [`RuntimeError::InvalidInput`] for a name that is not a database pod, or a lab without a database.
    async fn delete_pod(&self, name: &str) -> Result<()>;

    /// Sets the primary's `synchronous_standby_names` (`""`: commits wait for no standby) and reloads its
    /// configuration.
    ///
    /// # Errors
    /// When the primary does not answer, or the lab has no database.
    async fn set_synchronous_standby_names(&self, names: &str) -> Result<()>;
}

/// The lab, wherever it runs: every capability a backend offers, in groups (each backend implements each
/// group; a test's fake may refuse what it does not model, saying so).
///
/// Every method acts on the lab as it is now; none of them blocks longer than its own deadline. Actions
/// are idempotent: setting what is already set succeeds and changes nothing.
pub trait Runtime: Lab + Scrape + Storage + Ranks + Neighbours + Database {}

impl<T: Lab + Scrape + Storage + Ranks + Neighbours + Database> Runtime for T {}

/// The refusal of an action this runtime does not offer.
pub fn unsupported(kind: RuntimeKind, what: &str) -> RuntimeError {
    RuntimeError::InvalidInput(format!(
        "{what} is not available on the {kind} runtime yet: use --runtime local"
    ))
}

/// The median of `samples` timed probes (at least one) sent `spacing` apart without waiting for answers, so
/// a server held to a CPU budget per period is caught mid-period too. A probe that times out counts as
/// `timeout`; any other error is the answer.
///
/// # Errors
/// The first error of a probe other than a timeout.
pub async fn median_probe<F, Fut>(
    samples: usize,
    spacing: std::time::Duration,
    timeout: std::time::Duration,
    probe: F,
) -> Result<std::time::Duration>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let n = u32::try_from(samples.max(1)).unwrap_or(u32::MAX);
    let one = |i: u32| {
        let p = probe();
        async move {
            tokio::time::sleep(spacing * i).await;
            let t = std::time::Instant::now();
            match p.await {
                Ok(()) => Ok(t.elapsed()),
                Err(RuntimeError::Timeout { .. }) => Ok(timeout),
                Err(e) => Err(e),
            }
        }
    };
    let mut times = futures::future::join_all((0..n).map(one))
        .await
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    times.sort();
    Ok(times[times.len() / 2])
}

/// Rank 0's metrics target, the endpoint its checkpoint control is on.
///
/// # Errors
/// [`RuntimeError::InvalidInput`] when rank 0 has no endpoint now (it is not running).
pub fn rank0_target(targets: Vec<ScrapeTarget>) -> Result<ScrapeTarget> {
    targets
        .into_iter()
        .find(|t| t.kind == TargetKind::Rank && t.index == 0)
        .ok_or_else(|| {
            RuntimeError::InvalidInput(
                "rank-0 is not running, so the job cannot save a checkpoint now: `lab status` shows why"
                    .into(),
            )
        })
}

/// The checkpoint control's address beside a metrics address (`…/metrics` → `…/checkpoint`).
pub fn checkpoint_address(metrics: &str) -> String {
    let base = metrics.strip_suffix("/metrics").unwrap_or(metrics);
    format!("{base}{}", lab_model::checkpoint::PATH)
}

/// Reads rank 0's answer.
///
/// # Errors
/// [`RuntimeError::Other`] when it is not a checkpoint state.
pub fn parse_checkpoint(body: &str) -> Result<CheckpointState> {
    serde_json::from_str(body).map_err(|e| {
        RuntimeError::Other(format!(
            "rank-0's checkpoint control answered something else ({e}): {}",
            body.trim().chars().take(200).collect::<String>()
        ))
    })
}
