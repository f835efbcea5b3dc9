//! Where the lab runs: the [`Runtime`] trait, and its local, kind and existing-cluster implementations.
//!
//! A runtime stands the lab up and down, reports every role instance in the shared status model, hands
//! telemetry the metrics endpoints to scrape, and offers the small set of actions that faults and
//! remediation commands are made of (set a storage delay, resize a rank in place, scale, set the world
//! size, restart a rank). Faults, telemetry, the console and drills see only this trait.

pub mod error;
pub mod kube;
pub mod lifecycle;
pub mod local;
pub mod open;
pub mod source;
pub mod state;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

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
pub use source::RuntimeSource;

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

/// The lab, wherever it runs.
///
/// Every method acts on the lab as it is now; none of them blocks longer than its own deadline. Actions
/// are idempotent: setting what is already set succeeds and changes nothing.
#[async_trait]
pub trait Runtime: Send + Sync + std::fmt::Debug {
    /// Which kind of runtime this is.
    fn kind(&self) -> RuntimeKind;

    /// The lab's name.
    fn name(&self) -> &str;

    /// Every role instance in the shared status model, and the job's configuration.
    ///
    /// # Errors
    /// When the runtime cannot be reached (the supervisor or the API server is gone).
    async fn status(&self) -> Result<LabStatus>;

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
    /// [`Runtime::set_world_size`] nothing is restarted at once: while a rank stays Pending, the running
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
    async fn checkpoint(&self, save: bool, timeout: Duration) -> Result<CheckpointState> {
        let _ = (save, timeout);
        Err(RuntimeError::InvalidInput(format!(
            "the {} runtime cannot reach rank 0's checkpoint control",
            self.kind()
        )))
    }

    /// The jobs of other teams running on the lab's storage (never the training job).
    ///
    /// # Errors
    /// When the runtime cannot be reached.
    async fn foreign_jobs(&self) -> Result<Vec<ForeignJob>> {
        Ok(Vec::new())
    }

    /// Runs a job of another team that reads from one storage server in its own process and cgroup (its
    /// own pod), or changes the one of that name: its process is replaced with the new settings, as a
    /// Deployment rolls its pod.
    ///
    /// # Errors
    /// [`RuntimeError::InvalidInput`] for a bad name, server, rate or thread count (nothing changed);
    /// [`RuntimeError::InvalidInput`] too where the runtime cannot run one, saying why.
    async fn run_foreign_job(&self, job: &ForeignJob) -> Result<()> {
        let _ = job;
        Err(RuntimeError::InvalidInput(format!(
            "the {} runtime does not run jobs of other teams yet (the competing-job fault and `lab job` \
             need the local runtime)",
            self.kind()
        )))
    }

    /// Stops the foreign job `name`.
    ///
    /// # Errors
    /// [`RuntimeError::InvalidInput`] when no foreign job has that name (a rank or the training job is
    /// not one).
    async fn stop_foreign_job(&self, name: &str) -> Result<()> {
        Err(RuntimeError::InvalidInput(format!(
            "no foreign job named {name:?}: the {} runtime runs none",
            self.kind()
        )))
    }
}

/// Rank 0's metrics target, the endpoint its checkpoint control is on.
///
/// # Errors
/// [`RuntimeError::InvalidInput`] when rank 0 has no endpoint now (it is not running).
pub(crate) fn rank0_target(targets: Vec<ScrapeTarget>) -> Result<ScrapeTarget> {
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
pub(crate) fn checkpoint_address(metrics: &str) -> String {
    let base = metrics.strip_suffix("/metrics").unwrap_or(metrics);
    format!("{base}{}", lab_model::checkpoint::PATH)
}

/// Reads rank 0's answer.
///
/// # Errors
/// [`RuntimeError::Other`] when it is not a checkpoint state.
pub(crate) fn parse_checkpoint(body: &str) -> Result<CheckpointState> {
    serde_json::from_str(body).map_err(|e| {
        RuntimeError::Other(format!(
            "rank-0's checkpoint control answered something else ({e}): {}",
            body.trim().chars().take(200).collect::<String>()
        ))
    })
}
