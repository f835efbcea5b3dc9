//! The names of every metric the lab's workloads export, in one place.
//!
//! The rank binary writes these, the telemetry library reads them, and the Prometheus rule file in
//! `manifests/` uses them. `docs/metrics.md` describes each one; keep the three in step.

/// Label naming the storage server a read went to (`storage-1`): the rank → server edge of the topology.
pub const LABEL_SERVER: &str = "server";
/// Label naming a phase of a training step.
pub const LABEL_PHASE: &str = "phase";
/// Label naming the kind of an error.
pub const LABEL_KIND: &str = "kind";

/// Counter: training steps this rank completed (each one a finished all-reduce and update).
pub const STEPS: &str = "lab_steps_total";
/// Counter: samples this rank trained on.
pub const SAMPLES: &str = "lab_samples_total";
/// Gauge: the step the job is at on this rank (resumes from the checkpoint after a restart).
pub const STEP: &str = "lab_step";
/// Histogram: wall time of one whole training step.
pub const STEP_DURATION: &str = "lab_step_duration_seconds";
/// Counter, label `phase` = `read` | `compute` | `wait` | `transfer`: seconds spent in each phase.
/// `wait` is time blocked at the collective for a peer; `transfer` is time moving gradient bytes.
pub const PHASE_SECONDS: &str = "lab_phase_seconds_total";
/// Histogram, label `server`: latency of one storage read as the rank sees it.
pub const STORAGE_READ_DURATION: &str = "lab_storage_read_duration_seconds";
/// Counter, labels `server` and `kind` = `connect` | `http` | `timeout` | `checksum`.
pub const STORAGE_READ_ERRORS: &str = "lab_storage_read_errors_total";
/// Counter, label `server`: payload bytes read.
pub const STORAGE_READ_BYTES: &str = "lab_storage_read_bytes_total";
/// Counter, label `kind` = `timeout` | `protocol` | `peer_closed` | `world_size` | `config` | `mismatch`:
/// errors at the collective or rendezvous (`world_size`: a rank announced another world size; `config`:
/// another dataset, model size or a rank number out of range; `mismatch`: a peer at another step, or models
/// that diverged).
pub const COLLECTIVE_ERRORS: &str = "lab_collective_errors_total";
/// Gauge: the world size this rank was told to expect.
pub const WORLD_SIZE: &str = "lab_world_size";
/// Gauge: peers this rank has joined with at rendezvous (the world size once training runs).
pub const PEERS_CONNECTED: &str = "lab_peers_connected";
/// Gauge: 1 while the rank is blocked at rendezvous waiting for peers, else 0.
pub const RENDEZVOUS_WAITING: &str = "lab_rendezvous_waiting";
/// Gauge: training loss of the last step (mean squared error on this rank's batch).
pub const LOSS: &str = "lab_loss";
/// Gauge: the step of the last checkpoint written (rank 0) or resumed from.
pub const CHECKPOINT_STEP: &str = "lab_checkpoint_step";
/// Gauge: when rank 0 last wrote a checkpoint, seconds since the Unix epoch (absent before its first).
pub const CHECKPOINT_TIME: &str = "lab_checkpoint_timestamp_seconds";
/// Counter: times this rank's job resumed from a checkpoint after a failure.
pub const RESUMES: &str = "lab_resumes_total";
/// Counter: steps lost, i.e. the steps done since the last checkpoint before a failure, redone after it.
pub const STEPS_LOST: &str = "lab_steps_lost_total";
/// Counter: CFS periods of this rank's cgroup (`nr_periods`).
pub const CPU_PERIODS: &str = "lab_cpu_periods_total";
/// Counter: CFS periods in which this rank's cgroup was throttled (`nr_throttled`).
pub const CPU_THROTTLED_PERIODS: &str = "lab_cpu_throttled_periods_total";
/// Counter: seconds this rank's cgroup was throttled (`throttled_time` / `throttled_usec`).
pub const CPU_THROTTLED_SECONDS: &str = "lab_cpu_throttled_seconds_total";
/// Gauge: the CPU limit of this rank's cgroup in cores (absent when unlimited or unreadable).
pub const CPU_LIMIT_CORES: &str = "lab_cpu_limit_cores";
/// Counter, label `server`: rows of training data whose checksum the rank verified after reading them.
pub const STORAGE_CHECKSUMS_VERIFIED: &str = "lab_storage_checksums_verified_total";
/// Gauge: CRC32 of the model's parameters after the last step (equal on every rank at the same step).
pub const MODEL_CHECKSUM: &str = "lab_model_checksum";
/// Counter: checkpoint or progress writes that failed (rank 0).
pub const CHECKPOINT_WRITE_ERRORS: &str = "lab_checkpoint_write_errors_total";
/// Gauge with labels `rank`, `world_size`, `server`: always 1; identifies the rank and the server it reads.
pub const RANK_INFO: &str = "lab_rank_info";

/// SeaweedFS's own request latency histogram on a volume server's `-metricsPort` (label `type`).
pub const SEAWEED_VOLUME_REQUEST_SECONDS: &str = "SeaweedFS_volumeServer_request_seconds";

/// Phases of a step, the values of [`LABEL_PHASE`].
pub const PHASES: [&str; 4] = ["read", "compute", "wait", "transfer"];

/// Counter, label `server`: whole-needle reads a job of another team (`lab-reader`, not a rank) made.
pub const JOB_READS: &str = "lab_job_reads_total";
/// Counter, label `server`: payload bytes those reads returned.
pub const JOB_READ_BYTES: &str = "lab_job_read_bytes_total";
/// Histogram, label `server`: one such read as that job sees it.
pub const JOB_READ_DURATION: &str = "lab_job_read_duration_seconds";
/// Gauge: the read rate that job is held to, reads per second (absent while it runs unthrottled).
pub const JOB_RATE_LIMIT: &str = "lab_job_read_rate_limit";
