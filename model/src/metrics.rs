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
/// Gauge, label `server`: seconds the rank's read in flight has waited for that server, read at the scrape;
/// absent outside a read, and while the reading thread is frozen or stopped (it is not waiting then).
pub const STORAGE_READ_WAITING: &str = "lab_storage_read_waiting_seconds";
/// Counter, label `server`: seconds the rank has spent waiting on reads of that server, counted as they
/// pass (a read in flight is counted up to the scrape; a frozen or stopped reader is not waiting), so its
/// rate is the share of the rank's time spent waiting on the server.
pub const STORAGE_READ_WAIT_SECONDS: &str = "lab_storage_read_wait_seconds_total";
/// Counter, labels `server` and `kind` = `connect` | `http` | `timeout` | `checksum`.
pub const STORAGE_READ_ERRORS: &str = "lab_storage_read_errors_total";
/// Counter, label `server`: payload bytes read.
pub const STORAGE_READ_BYTES: &str = "lab_storage_read_bytes_total";
/// Counter, label `kind` = `timeout` | `protocol` | `peer_closed` | `world_size` | `config` | `mismatch`:
/// errors at the collective or rendezvous (`world_size`: a rank announced another world size; `config`:
/// another dataset, model size or a rank number out of range; `mismatch`: a peer at another step, or models
/// that diverged).
pub const COLLECTIVE_ERRORS: &str = "lab_collective_errors_total";
/// Gauge: seconds this rank's current all-reduce has been blocked on a peer, read at the scrape; 0 outside
/// one, and 0 when the blocked thread has stopped polling (a frozen rank holds the job, it does not wait).
pub const COLLECTIVE_WAIT_SECONDS: &str = "lab_collective_wait_seconds";
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

/// A storage server's own latency: the time of one small request sent straight to it, bypassing the path
/// the ranks use (no latency proxy, no delay on that path). The local runtime adds it to each storage
/// server's scrape. Unlike SeaweedFS's histogram, which times only its handler, it also counts the time a
/// starved server takes to pick the request up, which is how a slow node shows (slow-disk).
pub const STORAGE_OWN_PROBE_SECONDS: &str = "lab_storage_own_probe_seconds";

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

/// Counter: transactions the database writer (`lab-writer`) committed on the primary.
pub const WRITER_COMMITS: &str = "lab_writer_commits_total";
/// Counter: commits that failed (the connection broke or the server refused).
pub const WRITER_COMMIT_ERRORS: &str = "lab_writer_commit_errors_total";
/// Counter: reads the writer made on the primary, on a connection of their own.
pub const WRITER_READS: &str = "lab_writer_reads_total";
/// Gauge: commits per second over the writer's window (10 s).
pub const WRITER_COMMIT_RATE: &str = "lab_writer_commits_per_second";
/// Gauge: reads per second over the writer's window.
pub const WRITER_READ_RATE: &str = "lab_writer_reads_per_second";
/// Gauge: median commit latency over the window, seconds; a commit still waiting counts with its age.
pub const WRITER_COMMIT_P50: &str = "lab_writer_commit_latency_p50_seconds";
/// Gauge: 99th percentile commit latency over the window, seconds; a commit still waiting counts too.
pub const WRITER_COMMIT_P99: &str = "lab_writer_commit_latency_p99_seconds";
/// Gauge: how long the commit in flight has waited, seconds (0 when none waits).
pub const WRITER_COMMIT_WAITING: &str = "lab_writer_commit_waiting_seconds";
