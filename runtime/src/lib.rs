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
pub mod state;

use std::time::Duration;

use async_trait::async_trait;
use lab_model::Millicores;
use lab_model::status::{LabStatus, RuntimeKind};
use serde::{Deserialize, Serialize};

pub use error::RuntimeError;
pub use lifecycle::{Progress, UpOptions};

/// A result whose error is a [`RuntimeError`].
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// Where a metrics endpoint lives, and what it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrapeTarget {
    /// The instance the metrics belong to: `rank-1`, `storage-0`.
    pub instance: String,
    /// `rank` or `storage`.
    pub kind: TargetKind,
    /// The rank or server index.
    pub index: u32,
    /// How to reach it: an `http://` URL on the local runtime, or a pod-proxy path on Kubernetes.
    pub address: String,
}

/// What a scrape target is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TargetKind {
    /// A training rank's `/metrics`.
    Rank,
    /// A SeaweedFS volume server's `-metricsPort` `/metrics`.
    Storage,
}

/// An added delay on the network path to one storage server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delay {
    /// Added to every request (and, over a proxy, to every response).
    #[serde(with = "duration_ms")]
    pub delay: Duration,
    /// Uniform jitter, plus or minus.
    #[serde(with = "duration_ms")]
    pub jitter: Duration,
}

/// How a delay reached the path to a storage server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DelayPath {
    /// The lab's userspace latency proxy in front of the server.
    Proxy,
    /// `tc netem` in the server's network namespace.
    Netem,
}

impl std::fmt::Display for DelayPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DelayPath::Proxy => "latency proxy",
            DelayPath::Netem => "tc netem",
        })
    }
}

/// A rank's CPU limit: in force now, in its own spec, and in the workload's template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuLimits {
    pub live: Option<Millicores>,
    pub spec: Option<Millicores>,
    pub template: Millicores,
}

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

    /// Restarts rank `rank` (deletes the pod, or kills the process), which comes back from its template.
    ///
    /// # Errors
    /// When the rank does not exist.
    async fn restart_rank(&self, rank: u32) -> Result<()>;
}

mod duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64() * 1000.0)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let ms = f64::deserialize(d)?;
        Duration::try_from_secs_f64(ms / 1000.0).map_err(serde::de::Error::custom)
    }
}
