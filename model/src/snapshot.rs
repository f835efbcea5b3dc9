//! The snapshot: one whole picture of the lab at one instant, the only thing the console, `lab status`
//! and the drill engine read.
//!
//! The telemetry collector builds one about once a second from the runtime's status and the scraped
//! metrics. Every figure is what was measured; a missing measurement is `None`, never a made-up zero.

use serde::{Deserialize, Serialize};

use crate::ChangeRecord;
use crate::status::LabStatus;

/// One of the four golden signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GoldenSignal {
    /// A dependency (a storage server) answers slowly.
    Latency,
    /// The job trains fewer samples per second than its baseline.
    Throughput,
    /// Reads or collectives fail.
    Errors,
    /// A rank is CPU-throttled, or ranks spend their time waiting at the collective.
    Saturation,
}

impl std::fmt::Display for GoldenSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GoldenSignal::Latency => "latency",
            GoldenSignal::Throughput => "throughput",
            GoldenSignal::Errors => "errors",
            GoldenSignal::Saturation => "saturation",
        })
    }
}

/// An alert that is firing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    pub signal: GoldenSignal,
    /// The rule's name, the same as the alert in the Prometheus rule file (e.g. `LabStorageReadLatencyHigh`).
    pub rule: String,
    /// What it fires for: `storage-1`, `rank-1`, or `job`.
    pub target: String,
    /// When the condition first held, in ms since the Unix epoch.
    pub since_ms: u64,
    /// The measured value that made it fire, in the rule's unit.
    pub value: f64,
    /// One line for a person, e.g. `storage-1 read p50 488 ms (siblings 3 ms)`.
    pub summary: String,
}

/// The job's baseline, learned after warm-up.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub samples_per_s: f64,
    pub step_seconds: f64,
    /// When it was learned, ms since the Unix epoch.
    pub learned_at_ms: u64,
}

/// The training view: the job's own signals.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Training {
    pub baseline: Option<Baseline>,
    /// Samples per second over the recent window (summed over ranks).
    pub samples_per_s: Option<f64>,
    /// Steps per second of the job over the recent window.
    pub steps_per_s: Option<f64>,
    /// Median step time over the recent window.
    pub step_seconds: Option<f64>,
    /// Throughput now as a percentage of the baseline: over the last 3 s, the window the baseline was
    /// learned on and the throughput alert compares (`samples_per_s` is over 10 s, steadier and slower).
    pub pct_of_baseline: Option<f64>,
    /// Throughput (samples/s) per tick, oldest first, bounded; for sparklines.
    pub history: Vec<f64>,
    /// The highest step any rank reports.
    pub step: u64,
    /// Loss of the last step (rank 0's, else the first rank that reports one).
    pub loss: Option<f64>,
    /// Steps lost to restarts, summed over the job's life.
    pub steps_lost: u64,
    /// The step of the last checkpoint.
    pub checkpoint_step: Option<u64>,
    /// When rank 0 last wrote a checkpoint, ms since the Unix epoch (periodic or asked for; absent before
    /// its first since it started).
    #[serde(default)]
    pub checkpoint_at_ms: Option<u64>,
    /// The world size the ranks report.
    pub world_size: Option<u32>,
}

/// Per-rank view: where the rank's time goes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankView {
    pub rank: u32,
    pub name: String,
    /// The storage server this rank reads from (from the metrics' `server` label).
    pub server: Option<String>,
    /// Whether the last scrape of this rank succeeded.
    pub up: bool,
    /// Seconds per second spent in each phase over the recent window (sums to about 1 while training).
    pub read: Option<f64>,
    pub compute: Option<f64>,
    pub wait: Option<f64>,
    pub transfer: Option<f64>,
    /// Median step time of this rank over the window.
    pub step_seconds: Option<f64>,
    /// p50 of this rank's storage reads over the window, in seconds.
    pub read_p50: Option<f64>,
    /// Share of CFS periods throttled over the window (0..1).
    pub throttled: Option<f64>,
    /// The CPU limit the rank's cgroup enforces, in cores.
    pub cpu_limit_cores: Option<f64>,
    /// True while the rank waits at rendezvous for peers that have not joined.
    pub waiting_for_peers: bool,
    pub step: Option<u64>,
}

/// Per-storage-server view.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StorageView {
    pub index: u32,
    pub name: String,
    /// Read latency as the ranks see it over the window, seconds.
    pub client_p50: Option<f64>,
    pub client_p99: Option<f64>,
    /// Request latency as SeaweedFS itself reports it, seconds.
    pub server_p50: Option<f64>,
    pub server_p99: Option<f64>,
    /// The server's own latency, seconds: requests sent straight to it, bypassing the path the ranks
    /// use (median over the window). It rises when the node itself is slow (slow-disk) and stays flat when
    /// only the path is (slow-storage). The one place this evidence lives.
    #[serde(default)]
    pub own_probe: Option<f64>,
    /// The baseline client p50, learned after warm-up.
    pub baseline_p50: Option<f64>,
    /// Client p50 per tick, seconds, oldest first, bounded; for sparklines.
    pub history: Vec<f64>,
    pub reads_per_s: Option<f64>,
    pub errors_per_s: Option<f64>,
    /// True when this server's latency stands out from its siblings'.
    pub outlier: bool,
    /// The ranks that read from it (from the metrics' `server` label).
    pub readers: Vec<String>,
    /// Reads per second the server itself served over the window (SeaweedFS's own GET count), whoever
    /// asked: the ranks, jobs of other teams, anything else.
    #[serde(default)]
    pub served_per_s: Option<f64>,
    /// Reads per second by client over the window, busiest first: each rank and each foreign job that
    /// reports its reads, and `other` for what the server served beyond them (a client the lab cannot
    /// name). Which client loads a server is the evidence that tells a competing job from the other
    /// causes of slow storage (`docs/evidence.md`).
    #[serde(default)]
    pub clients: Vec<ClientReads>,
}

/// One client's reads from one storage server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientReads {
    /// `rank-1`, a foreign job's name, or `other`.
    pub client: String,
    /// `rank`, `job` (a job of another team), or `other`.
    pub kind: String,
    pub reads_per_s: f64,
}

/// An active fault as the ledger knows it (for the console's keys; not part of an incident bundle).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveFault {
    pub id: String,
    pub kind: String,
    pub target: String,
    pub phase: String,
}

/// One whole picture of the lab.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// When it was taken, ms since the Unix epoch.
    pub at_ms: u64,
    pub status: LabStatus,
    pub training: Training,
    pub ranks: Vec<RankView>,
    pub storage: Vec<StorageView>,
    pub alerts: Vec<Alert>,
    pub changes: Vec<ChangeRecord>,
    pub faults: Vec<ActiveFault>,
    /// Targets that could not be scraped on the last tick, with the reason.
    pub scrape_errors: Vec<String>,
    /// The optional database's writer, by its own signals (absent without `lab up --database`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<DatabaseView>,
}

impl Snapshot {
    /// A picture of the lab `status` at `at_ms` with nothing else seen yet: no training, ranks, storage,
    /// alerts, changes or faults.
    pub fn new(at_ms: u64, status: LabStatus) -> Self {
        Self {
            at_ms,
            status,
            training: Training::default(),
            ranks: vec![],
            storage: vec![],
            alerts: vec![],
            changes: vec![],
            faults: vec![],
            scrape_errors: vec![],
            database: None,
        }
    }
}

/// The database writer's golden signals, as it exports them (each over its own last 10 s).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DatabaseView {
    pub commits_per_s: f64,
    pub reads_per_s: f64,
    /// Commit latency, seconds; a commit still waiting counts with its age.
    pub commit_p50_s: f64,
    pub commit_p99_s: f64,
    /// How long the commit in flight has waited, seconds.
    pub commit_waiting_s: f64,
}

/// The job's step time over the recent window: one over its steps per second, the mean wall time of a
/// step. (The step-duration histogram's median is quantised by its buckets: a step time that crosses a
/// bucket boundary would jump by half a bucket.) `None` while the job takes no steps.
pub fn step_time(s: &Snapshot) -> Option<f64> {
    match s.training.steps_per_s {
        Some(v) if v > 0.0 && v.is_finite() => Some(1.0 / v),
        Some(_) => None,
        None => s.training.step_seconds,
    }
}

/// The job's step: the highest any rank reports, `None` when no rank reports one.
pub fn job_step(s: &Snapshot) -> Option<u64> {
    s.ranks.iter().filter_map(|r| r.step).max()
}
