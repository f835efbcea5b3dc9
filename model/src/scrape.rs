//! Where telemetry reads from: a metrics endpoint of a rank or a storage server, as a runtime names it.

use serde::{Deserialize, Serialize};

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
    /// A foreign job's `/metrics` (a job of another team on the same storage).
    Job,
    /// The database writer's `/metrics` (`lab-writer`, beside the lab's optional database).
    Writer,
}
