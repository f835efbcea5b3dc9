//! One training rank, from start to exit: metrics endpoint first, then the dataset manifest, rendezvous,
//! the ring, and the step loop (read one batch, compute the gradient, all-reduce it, apply it).
//!
//! Every step makes exactly one storage request (an HTTP range of the rank's current shard, over a
//! keep-alive connection to the server's public address), and the read is timed including the parse and
//! row-checksum verification, so a CPU-starved rank's reads look slow too. Rank 0 checkpoints every K
//! steps and records its progress four times a second, both from a background thread so that storage never
//! stalls the step for them. Any rank that waits longer than the watchdog timeout, at rendezvous or at
//! the all-reduce, or whose neighbour goes away, returns an error so that the process exits non-zero and
//! the job restarts from its checkpoint.

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lab_model::metrics as m;
use serde::Serialize;

use crate::allreduce::{self, Ring, RingOptions, RingSpec};
use crate::cgroup::CpuCgroup;
use crate::checkpoint::{self, Checkpoint, JobStore, Progress};
use crate::control::CheckpointControl;
use crate::dataset::{self, Manifest, ShardEntry};
use crate::device::DeviceFault;
use crate::error::{Result, WorkloadError};
use crate::metrics::Registry;
use crate::model::Model;
use crate::rendezvous::{self, Hello, Observer, Outcome, Resume};
use crate::serve;
use crate::storage::{self, Storage};
use lab_model::format::error_chain;

/// How often rank 0 records the furthest step reached (what a restart's lost steps are counted from).
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// Everything a rank is told at start.
#[derive(Debug, Clone)]
pub struct RankOptions {
    pub rank: u32,
    pub world_size: u32,
    pub master: String,
    pub rendezvous: String,
    pub rendezvous_bind: Option<String>,
    pub listen: String,
    pub advertise: Option<String>,
    pub metrics_listen: String,
    pub dataset: String,
    pub batch_size: u32,
    pub model_size: usize,
    /// The accelerator's share of each step, slept after the host's work (counted as compute).
    pub device_time: Duration,
    pub learning_rate: f32,
    pub checkpoint_every: u64,
    pub watchdog_timeout: Duration,
    pub storage_timeout: Duration,
    /// Stop after this many steps in this process (0: train forever).
    pub max_steps: u64,
    pub log_every: u64,
    pub socket_buffer: Option<usize>,
    /// The simulated accelerator fails after this many steps in this process (0: it never does): the
    /// rank-crash fault sets it on one rank, as a bad device or driver setting crashes one rank again and
    /// again while its peers see only a collective error.
    pub device_fault_after: u64,
    /// The pod's first failure of that device comes after this many steps instead ([`crate::device`]).
    pub device_fault_first: u64,
    /// A folder that outlives the rank's restarts but not its pod (the pod's emptyDir on Kubernetes).
    pub scratch_dir: Option<std::path::PathBuf>,
    /// The lab's control token: rank 0 takes a checkpoint request only with it (none: from anyone).
    pub control_token: Option<String>,
}

/// How a rank that stopped by itself (`--max-steps`) ended, printed as one JSON line.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    pub rank: u32,
    pub world_size: u32,
    pub start_step: u64,
    pub final_step: u64,
    pub steps_lost: u64,
    pub steps_lost_total: u64,
    pub resumes_total: u64,
    pub first_loss: f32,
    pub last_loss: f32,
    /// Mean loss over the first and the last tenth of the steps this process ran.
    pub early_mean_loss: f32,
    pub late_mean_loss: f32,
    pub model_crc: String,
    pub server: String,
    pub rows_verified: u64,
    pub mean_step_ms: f64,
    /// CPU time of the training thread per step (from `/proc/thread-self/schedstat`): what a CPU limit
    /// divides, so that the step time under a limit of `q` cores is at least `cpu_ms_per_step / q`.
    pub cpu_ms_per_step: Option<f64>,
    /// Time the training thread spent runnable but waiting for a CPU, per step (a busy host).
    pub runqueue_ms_per_step: Option<f64>,
}

impl RankOptions {
    /// Checks the options before anything is started.
    ///
    /// # Errors
    /// [`WorkloadError::Invalid`] naming the flag that is wrong and why.
    pub fn validate(&self) -> Result<()> {
        if self.world_size == 0 {
            return Err(WorkloadError::invalid("--world-size", "must be at least 1"));
        }
        if self.rank >= self.world_size {
            return Err(WorkloadError::invalid(
                "--rank",
                format!(
                    "rank {} is not below the world size {}",
                    self.rank, self.world_size
                ),
            ));
        }
        if self.batch_size == 0 {
            return Err(WorkloadError::invalid("--batch-size", "must be at least 1"));
        }
        if self.model_size == 0 || self.model_size > crate::model::MAX_MODEL_SIZE {
            return Err(WorkloadError::invalid(
                "--model-size",
                format!("use 1 to {}", crate::model::MAX_MODEL_SIZE),
            ));
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return Err(WorkloadError::invalid(
                "--learning-rate",
                "must be a positive number",
            ));
        }
        if self.watchdog_timeout.is_zero() || self.storage_timeout.is_zero() {
            return Err(WorkloadError::invalid(
                "--watchdog-timeout/--storage-timeout",
                "must be above zero",
            ));
        }
        storage::validate_dataset_name(&self.dataset)
    }
}

/// The series a rank exports from start-up, before its first step: its world size, waiting at rendezvous
/// with no peer connected, and every counter at zero (a rate needs the zero a counter starts from).
pub fn start_series(registry: &Registry, world_size: u32) {
    registry.set(m::WORLD_SIZE, &[], f64::from(world_size));
    registry.set(m::RENDEZVOUS_WAITING, &[], 1.0);
    registry.set(m::PEERS_CONNECTED, &[], 0.0);
    for kind in [
        "timeout",
        "protocol",
        "peer_closed",
        "world_size",
        "config",
        "mismatch",
    ] {
        registry.touch(m::COLLECTIVE_ERRORS, &[("kind", kind)]);
    }
    for metric in [
        m::STEPS,
        m::SAMPLES,
        m::RESUMES,
        m::STEPS_LOST,
        m::CHECKPOINT_WRITE_ERRORS,
    ] {
        registry.touch(metric, &[]);
    }
}

/// The exit code of a rank whose (simulated) accelerator failed.
pub const DEVICE_FAULT_EXIT: u8 = lab_model::actions::DEVICE_FAULT_EXIT;

/// Registers every metric a rank exports, with its help text (the long form is in `docs/metrics.md`).
pub fn register_metrics(r: &Registry) {
    const STEP_BUCKETS: [f64; 16] = [
        0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0,
    ];
    const READ_BUCKETS: [f64; 17] = [
        0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0,
    ];
    r.counter(m::STEPS, "Training steps this rank completed in this process.");
    r.counter(m::SAMPLES, "Samples this rank trained on in this process.");
    r.gauge(
        m::STEP,
        "The job's step on this rank (continues from the checkpoint after a restart).",
    );
    r.histogram(m::STEP_DURATION, "Wall time of one training step.", &STEP_BUCKETS);
    r.float_counter(
        m::PHASE_SECONDS,
        "Seconds spent in each phase of a step (read, compute, wait, transfer).",
    );
    r.histogram(
        m::STORAGE_READ_DURATION,
        "One storage read as the rank sees it, parse and checksum included.",
        &READ_BUCKETS,
    );
    r.counter(
        m::STORAGE_READ_ERRORS,
        "Failed storage reads, by server and kind.",
    );
    r.counter(
        m::STORAGE_READ_BYTES,
        "Payload bytes read from storage, by server.",
    );
    r.counter(
        m::STORAGE_CHECKSUMS_VERIFIED,
        "Rows whose checksum was verified after a read, by server.",
    );
    r.counter(
        m::COLLECTIVE_ERRORS,
        "Errors at rendezvous or the all-reduce, by kind.",
    );
    r.float_gauge(
        m::COLLECTIVE_WAIT_SECONDS,
        "Seconds the current all-reduce has been blocked on a peer (0 outside one, or when not polling).",
    );
    r.float_gauge(
        m::STORAGE_READ_WAITING,
        "Seconds the read in flight has waited for its server (absent outside a read).",
    );
    r.float_counter(
        m::STORAGE_READ_WAIT_SECONDS,
        "Seconds spent waiting on reads of each server, counted as they pass (reads in flight included).",
    );
    r.gauge(m::WORLD_SIZE, "The world size this rank expects.");
    r.gauge(
        m::PEERS_CONNECTED,
        "Ranks joined at rendezvous (the world size once training runs).",
    );
    r.gauge(
        m::RENDEZVOUS_WAITING,
        "1 while this rank waits at rendezvous for peers, else 0.",
    );
    r.float_gauge(
        m::LOSS,
        "Mean squared error of the last step on this rank's batch.",
    );
    r.gauge(
        m::MODEL_CHECKSUM,
        "CRC32 of the model after the last step; equal on every rank at the same step.",
    );
    r.gauge(
        m::CHECKPOINT_STEP,
        "The step of the last checkpoint written (rank 0) or resumed from.",
    );
    r.float_gauge(
        m::CHECKPOINT_TIME,
        "When rank 0 last wrote a checkpoint, seconds since the Unix epoch.",
    );
    r.counter(
        m::CHECKPOINT_WRITE_ERRORS,
        "Checkpoint or progress writes that failed (rank 0).",
    );
    r.counter(
        m::RESUMES,
        "Times the job resumed from a checkpoint after a failure, over the job's life.",
    );
    r.counter(
        m::STEPS_LOST,
        "Steps lost to failures (redone after resuming), over the job's life.",
    );
    r.counter(m::CPU_PERIODS, "CFS periods of this rank's cgroup.");
    r.counter(
        m::CPU_THROTTLED_PERIODS,
        "CFS periods in which this rank's cgroup was throttled.",
    );
    r.float_counter(
        m::CPU_THROTTLED_SECONDS,
        "Seconds this rank's cgroup was throttled.",
    );
    r.float_gauge(
        m::CPU_LIMIT_CORES,
        "CPU limit of this rank's cgroup in cores (absent when unlimited).",
    );
    r.gauge(
        m::RANK_INFO,
        "Always 1: the rank, its world size and the storage server it reads.",
    );
}

/// Refreshes what is read on demand (called at every scrape): the all-reduce's live wait, and the cgroup
/// metrics from the rank's own cgroup.
pub fn refresh(r: &Registry) {
    r.set(
        m::COLLECTIVE_WAIT_SECONDS,
        &[],
        crate::allreduce::waiting::seconds(),
    );
    refresh_read_waiting(r);
    refresh_cgroup(r);
}

/// Sets `lab_storage_read_wait_seconds_total` for every server waited on, and
/// `lab_storage_read_waiting_seconds` for the server of the read in flight, removing the series of the
/// server the last scrape showed when it is another or there is no read now.
fn refresh_read_waiting(r: &Registry) {
    static SHOWN: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
    let seen = crate::reading::look();
    for (server, s) in &seen.waited {
        r.set(m::STORAGE_READ_WAIT_SECONDS, &[("server", server)], *s);
    }
    let now = seen.current;
    let mut shown = SHOWN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(old) = shown.take()
        && now.as_ref().is_none_or(|(s, _)| *s != old)
    {
        r.remove(m::STORAGE_READ_WAITING, &[("server", &old)]);
    }
    if let Some((server, s)) = now {
        r.set(m::STORAGE_READ_WAITING, &[("server", &server)], s);
        *shown = Some(server);
    }
}

/// Refreshes the cgroup metrics from the rank's own cgroup.
pub fn refresh_cgroup(r: &Registry) {
    let Some(cg) = CpuCgroup::discover() else { return };
    if let Ok(s) = cg.stat() {
        r.set(m::CPU_PERIODS, &[], s.nr_periods as f64);
        r.set(m::CPU_THROTTLED_PERIODS, &[], s.nr_throttled as f64);
        r.set(m::CPU_THROTTLED_SECONDS, &[], s.throttled_seconds);
    }
    match cg.limit_cores() {
        Ok(Some(cores)) => r.set(m::CPU_LIMIT_CORES, &[], cores),
        _ => r.remove(m::CPU_LIMIT_CORES, &[]),
    }
}

/// Forwards rendezvous events to the log and the metrics.
struct RendezvousEvents<'a> {
    rank: u32,
    registry: &'a Registry,
    last: std::cell::Cell<u32>,
}

impl Observer for RendezvousEvents<'_> {
    fn joined(&self, joined: u32, world: u32) {
        self.registry.set(m::PEERS_CONNECTED, &[], f64::from(joined));
        if self.last.replace(joined) != joined && joined < world {
            eprintln!(
                "rank {}: waiting at rendezvous: {joined} of {world} ranks joined",
                self.rank
            );
        }
    }

    fn error(&self, kind: &str, message: &str) {
        self.registry.inc(m::COLLECTIVE_ERRORS, &[("kind", kind)], 1.0);
        eprintln!("rank {}: rendezvous: {message}", self.rank);
    }
}

/// Runs the rank until `max_steps` (if set) or an error.
///
/// # Errors
/// [`WorkloadError::Watchdog`] when the rank waited too long at rendezvous or the all-reduce, or could not
/// read its data for that long; [`WorkloadError::PeerClosed`] when a neighbour went away; configuration
/// and storage errors as they happen. The message says what the job does next.
pub fn run(opts: &RankOptions) -> Result<RunSummary> {
    opts.validate()?;
    let rank = opts.rank;
    let registry = Arc::new(Registry::new());
    register_metrics(&registry);
    start_series(&registry, opts.world_size);
    refresh(&registry);
    // Rank 0 takes checkpoint requests on its endpoint from the start; it answers them once it trains.
    let control = (rank == 0)
        .then(|| Arc::new(CheckpointControl::new(unix_ms()).with_token(opts.control_token.clone())));
    // The endpoint comes first and answers /readyz from now on, whatever happens next.
    let metrics_addr = serve::spawn(
        &opts.metrics_listen,
        registry.clone(),
        Arc::new(refresh),
        control.clone(),
    )?;
    let ring_listener = TcpListener::bind(&opts.listen).map_err(|source| WorkloadError::Connect {
        what: "ring listen address (bind)".into(),
        addr: opts.listen.clone(),
        source,
    })?;
    let ring_port = ring_listener.local_addr().map(|a| a.port()).unwrap_or(0);
    eprintln!(
        "rank {rank}: up: world size {}, metrics on http://{metrics_addr}/metrics, ring port {ring_port}, storage \
         master {}, dataset {}, batch {}, model size {}, device time {} ms, watchdog {} s",
        opts.world_size,
        opts.master,
        opts.dataset,
        opts.batch_size,
        opts.model_size,
        opts.device_time.as_millis(),
        opts.watchdog_timeout.as_secs_f64()
    );

    let startup_deadline = Instant::now() + opts.watchdog_timeout;
    let manifest = load_manifest(opts, &registry, startup_deadline)?;
    if opts.batch_size > manifest.samples_per_shard {
        return Err(WorkloadError::invalid(
            "--batch-size",
            format!(
                "{} is more than the {} samples per shard of dataset {}: lower it, or reseed with \
                 --samples-per-shard {} or more",
                opts.batch_size, manifest.samples_per_shard, manifest.dataset, opts.batch_size
            ),
        ));
    }
    if rank >= manifest.ranks {
        eprintln!(
            "rank {rank}: the dataset was cut for {} ranks; this rank reads rank {}'s shards",
            manifest.ranks,
            rank % manifest.ranks
        );
    }
    let mut model = Model::new(manifest.seed, manifest.features, opts.model_size)?;
    let shards: Vec<ShardEntry> = manifest.shards_for(rank).into_iter().cloned().collect();
    let mut storage = Storage::new(&opts.master, opts.storage_timeout);
    let _ = storage.refresh_topology();
    let main_server = export_servers(opts, &registry, &mut storage, &shards);
    let outcome = meet(opts, &registry, &manifest, ring_port)?;
    registry.set(m::RENDEZVOUS_WAITING, &[], 0.0);
    registry.set(m::PEERS_CONNECTED, &[], f64::from(opts.world_size));
    let Outcome {
        generation,
        peers,
        resume,
        model: start_params,
    } = outcome;
    if !start_params.is_empty() {
        if start_params.len() != model.size() {
            return Err(WorkloadError::Mismatch {
                detail: format!(
                    "rank 0 sent a model of {} values, this rank has {}",
                    start_params.len(),
                    model.size()
                ),
            });
        }
        model.theta = start_params;
    }
    announce_resume(rank, opts.world_size, &resume, &registry);

    let spec = RingSpec {
        rank,
        world: opts.world_size,
        peers: &peers,
        generation,
        deadline: Instant::now() + opts.watchdog_timeout,
        opts: RingOptions {
            socket_buffer: opts.socket_buffer,
        },
    };
    let ring = allreduce::connect_ring(&spec, &ring_listener, &|why| {
        registry.inc(m::COLLECTIVE_ERRORS, &[("kind", "protocol")], 1.0);
        eprintln!("rank {rank}: {why}");
    })
    .inspect_err(|_| registry.inc(m::COLLECTIVE_ERRORS, &[("kind", "timeout")], 1.0))?;
    let writer = (rank == 0).then(|| JobWriter::spawn(opts, &resume, registry.clone(), control.clone()));
    let mut trainer = Trainer {
        opts,
        registry: &registry,
        storage,
        shards,
        features: manifest.features,
        seed: manifest.seed,
        ring,
        model,
        writer,
        control,
        main_server,
        batches_per_shard: u64::from(manifest.samples_per_shard / opts.batch_size),
        step: resume.start_step,
        last_checkpoint: resume.start_step,
    };
    trainer.train(&resume).map_err(|e| trainer.on_failure(e))
}

/// Looks up which server holds each of the rank's shards, creates the per-server series at zero and the
/// info metric, and returns the server the rank reads from.
fn export_servers(
    opts: &RankOptions,
    registry: &Registry,
    storage: &mut Storage,
    shards: &[ShardEntry],
) -> String {
    let labels: Vec<String> = shards.iter().map(|s| label_for(storage, s)).collect();
    let main = labels.first().cloned().unwrap_or_default();
    let mut servers = labels;
    servers.sort();
    servers.dedup();
    for server in &servers {
        for kind in ["connect", "http", "timeout", "checksum"] {
            registry.touch(m::STORAGE_READ_ERRORS, &[("server", server), ("kind", kind)]);
        }
        registry.touch(m::STORAGE_READ_BYTES, &[("server", server)]);
        registry.touch(m::STORAGE_CHECKSUMS_VERIFIED, &[("server", server)]);
    }
    let (world, rank) = (opts.world_size.to_string(), opts.rank.to_string());
    registry.set(
        m::RANK_INFO,
        &[("rank", &rank), ("world_size", &world), ("server", &main)],
        1.0,
    );
    main
}

/// Rendezvous: rank 0 hosts it and decides where the job resumes; the others join. A watchdog timeout is
/// counted before it is returned.
fn meet(opts: &RankOptions, registry: &Registry, manifest: &Manifest, ring_port: u16) -> Result<Outcome> {
    let rank = opts.rank;
    let events = RendezvousEvents {
        rank,
        registry,
        last: std::cell::Cell::new(0),
    };
    let deadline = Instant::now() + opts.watchdog_timeout;
    let hello = |ip: IpAddr| Hello {
        protocol: rendezvous::PROTOCOL.into(),
        rank,
        world_size: opts.world_size,
        ring_addr: match &opts.advertise {
            Some(host) => join_host_port(host, ring_port),
            // Rank 0 learns its address from the connections it accepts.
            None if rank == 0 => format!(":{ring_port}"),
            None => SocketAddr::new(ip, ring_port).to_string(),
        },
        dataset: opts.dataset.clone(),
        model_size: opts.model_size as u64,
    };
    let outcome = if rank == 0 {
        let host = bind_host(opts, deadline)?;
        eprintln!(
            "rank 0: hosting the rendezvous on {} for {} ranks",
            host.local_addr(),
            opts.world_size
        );
        let me = hello(IpAddr::from([127, 0, 0, 1]));
        host.run(&me, deadline, &events, || decide_resume(opts, manifest))
    } else {
        rendezvous::join(&opts.rendezvous, &hello, deadline, &events)
    };
    outcome.inspect_err(|e| {
        if matches!(e, WorkloadError::Watchdog { .. }) {
            registry.inc(m::COLLECTIVE_ERRORS, &[("kind", "timeout")], 1.0);
        }
    })
}

fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The storage server label of a shard: the rack of the node holding its volume now, or the manifest's
/// record when the master cannot say.
fn label_for(storage: &mut Storage, shard: &ShardEntry) -> String {
    storage::volume_of(&shard.fid)
        .and_then(|vid| storage.locate(vid))
        .map(|l| l.server)
        .ok()
        .filter(|s| s.starts_with("storage-"))
        .unwrap_or_else(|| shard.server.clone())
}

fn load_manifest(opts: &RankOptions, registry: &Registry, deadline: Instant) -> Result<Manifest> {
    let mut store = JobStore::new(&opts.master, &opts.dataset, opts.storage_timeout);
    let mut said = String::new();
    loop {
        let err = match store.load_manifest() {
            Ok(m) => return Ok(m),
            Err(e @ WorkloadError::Invalid { .. }) => return Err(e),
            Err(e) => e,
        };
        let text = error_chain(&err);
        if !matches!(err, WorkloadError::NoManifest { .. }) {
            registry.inc(
                m::STORAGE_READ_ERRORS,
                &[("server", "master"), ("kind", storage::error_kind(&err))],
                1.0,
            );
        }
        if Instant::now() >= deadline {
            return Err(WorkloadError::Watchdog {
                detail: format!(
                    "waited {:.0} s for the dataset manifest: {text}",
                    opts.watchdog_timeout.as_secs_f64()
                ),
            });
        }
        if text != said {
            eprintln!("rank {}: waiting for the dataset manifest: {text}", opts.rank);
            said = text;
        }
        // Four times a second: the ranks start while the dataset is seeded, and training begins as soon
        // as its manifest is there (a look is one small request to the master).
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn bind_host(opts: &RankOptions, deadline: Instant) -> Result<rendezvous::Host> {
    loop {
        match rendezvous::Host::bind(&opts.rendezvous, opts.rendezvous_bind.as_deref()) {
            Ok(h) => return Ok(h),
            // The previous incarnation of rank 0 may still hold the port for a moment.
            Err(WorkloadError::Connect { source, .. })
                if source.kind() == std::io::ErrorKind::AddrInUse && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Rank 0, when everyone has joined: reads the checkpoint and the progress record and decides where the
/// job starts; records that decision so that the same lost steps are not counted twice.
fn decide_resume(opts: &RankOptions, manifest: &Manifest) -> Result<(Resume, Vec<f32>)> {
    let mut store = JobStore::new(&opts.master, &opts.dataset, opts.storage_timeout);
    let deadline = Instant::now() + opts.watchdog_timeout;
    let (ckpt, progress) = loop {
        let got = store
            .load_checkpoint()
            .and_then(|c| Ok((c, store.load_progress()?)));
        match got {
            Ok(x) => break x,
            Err(e @ WorkloadError::Checksum { .. }) => {
                eprintln!("rank 0: the stored checkpoint is damaged ({e}); starting from step 0");
                break (None, store.load_progress().ok().flatten());
            }
            Err(e) if e.is_transient() && Instant::now() < deadline => {
                eprintln!("rank 0: cannot read the checkpoint yet: {}", error_chain(&e));
                std::thread::sleep(Duration::from_secs(1));
            }
            Err(e) => return Err(e),
        }
    };
    let (resume, params, note) =
        checkpoint::decide_resume(ckpt, progress, manifest.seed, manifest.features, opts.model_size);
    if let Some(note) = note {
        eprintln!("rank 0: {note}");
    }
    let record = Progress {
        step: resume.start_step,
        checkpoint_step: resume.start_step,
        steps_lost_total: resume.steps_lost_total,
        resumes_total: resume.resumes_total,
        model_size: opts.model_size as u64,
        updated_unix_ms: unix_ms(),
    };
    store.save_progress(&record)?;
    Ok((resume, params))
}

fn announce_resume(rank: u32, world: u32, resume: &Resume, registry: &Registry) {
    registry.set(m::STEP, &[], resume.start_step as f64);
    registry.set(m::CHECKPOINT_STEP, &[], resume.start_step as f64);
    registry.set(m::STEPS_LOST, &[], resume.steps_lost_total as f64);
    registry.set(m::RESUMES, &[], resume.resumes_total as f64);
    if resume.resumes_total == 0 && resume.start_step == 0 {
        eprintln!("rank {rank}: all {world} ranks joined; starting a new job at step 0");
    } else {
        eprintln!(
            "rank {rank}: all {world} ranks joined; resuming from the checkpoint at step {} ({} steps lost in this \
             restart, {} over the job's life, restart {})",
            resume.start_step, resume.steps_lost, resume.steps_lost_total, resume.resumes_total
        );
    }
}

/// This thread's time on a CPU and waiting for one, in nanoseconds.
fn schedstat() -> Option<(f64, f64)> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let mut it = text.split_whitespace().map(|v| v.parse::<f64>().ok());
    Some((it.next()??, it.next()??))
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// What rank 0's writer thread is asked to store.
enum JobWrite {
    /// A checkpoint, and the request it answers (0: a periodic one).
    Checkpoint(Checkpoint, u64),
    Progress(u64),
    /// Store this step as the furthest reached, then acknowledge.
    Final(u64, mpsc::Sender<()>),
}

/// Rank 0's background writer of checkpoints and progress records.
struct JobWriter {
    tx: SyncSender<JobWrite>,
}

impl JobWriter {
    fn spawn(
        opts: &RankOptions,
        resume: &Resume,
        registry: Arc<Registry>,
        control: Option<Arc<CheckpointControl>>,
    ) -> JobWriter {
        let (tx, rx) = mpsc::sync_channel(4);
        let store = JobStore::new(&opts.master, &opts.dataset, opts.storage_timeout);
        let progress = Progress {
            step: resume.start_step,
            checkpoint_step: resume.start_step,
            steps_lost_total: resume.steps_lost_total,
            resumes_total: resume.resumes_total,
            model_size: opts.model_size as u64,
            updated_unix_ms: unix_ms(),
        };
        let spawned = std::thread::Builder::new()
            .name("job-writer".into())
            .spawn(move || writer_loop(store, progress, &rx, &registry, control.as_deref()));
        if let Err(e) = spawned {
            eprintln!(
                "rank 0: cannot start the checkpoint writer: {e}; training goes on without checkpoints"
            );
        }
        JobWriter { tx }
    }
}

fn writer_loop(
    mut store: JobStore,
    mut progress: Progress,
    rx: &Receiver<JobWrite>,
    registry: &Registry,
    control: Option<&CheckpointControl>,
) {
    let fail = |what: &str, e: &WorkloadError| {
        registry.inc(m::CHECKPOINT_WRITE_ERRORS, &[], 1.0);
        eprintln!("rank 0: {what} failed: {}", error_chain(e));
    };
    while let Ok(msg) = rx.recv() {
        match msg {
            JobWrite::Checkpoint(c, request) => {
                let t = Instant::now();
                match store.save_checkpoint(&c) {
                    Ok(()) => {
                        let at_ms = unix_ms();
                        progress.checkpoint_step = c.step;
                        progress.step = progress.step.max(c.step);
                        registry.set(m::CHECKPOINT_STEP, &[], c.step as f64);
                        registry.set(m::CHECKPOINT_TIME, &[], at_ms as f64 / 1000.0);
                        if let Some(control) = control {
                            control.saved(c.step, at_ms, request);
                        }
                        eprintln!(
                            "rank 0: checkpoint at step {} written ({:.1} ms){}",
                            c.step,
                            t.elapsed().as_secs_f64() * 1e3,
                            if request > 0 { ", as asked" } else { "" }
                        );
                    }
                    Err(e) => fail(&format!("checkpoint at step {}", c.step), &e),
                }
            }
            JobWrite::Progress(step) => {
                progress.step = progress.step.max(step);
                progress.updated_unix_ms = unix_ms();
                if let Err(e) = store.save_progress(&progress) {
                    fail("progress record", &e);
                }
            }
            JobWrite::Final(step, ack) => {
                progress.step = progress.step.max(step);
                progress.updated_unix_ms = unix_ms();
                if let Err(e) = store.save_progress(&progress) {
                    fail("final progress record", &e);
                }
                let _ = ack.send(());
            }
        }
    }
}

struct Trainer<'a> {
    opts: &'a RankOptions,
    registry: &'a Registry,
    storage: Storage,
    shards: Vec<ShardEntry>,
    features: u32,
    seed: u64,
    ring: Ring,
    model: Model,
    writer: Option<JobWriter>,
    /// Rank 0's checkpoint requests, taken between steps.
    control: Option<Arc<CheckpointControl>>,
    main_server: String,
    batches_per_shard: u64,
    /// Steps the job has completed.
    step: u64,
    last_checkpoint: u64,
}

/// Phase times summed over the steps since the last log line.
#[derive(Default)]
struct Window {
    steps: u32,
    read: f64,
    compute: f64,
    wait: f64,
    transfer: f64,
    loss: f64,
}

impl Trainer<'_> {
    fn device_fault(&self) -> DeviceFault {
        DeviceFault {
            after: self.opts.device_fault_after,
            first: self.opts.device_fault_first,
            scratch: self.opts.scratch_dir.clone(),
        }
    }

    fn train(&mut self, resume: &Resume) -> Result<RunSummary> {
        let (opts, reg) = (self.opts, self.registry);
        let rank = opts.rank;
        let rl = dataset::row_len(self.features) as u64;
        let batch = opts.batch_size as usize;
        let (mut x, mut y) = (
            Vec::with_capacity(batch * self.features as usize),
            Vec::with_capacity(batch),
        );
        let mut grad = vec![0.0f32; self.model.size()];
        let mut h = Vec::new();
        let mut body = Vec::new();
        let mut window = Window::default();
        let mut losses = Vec::new();
        let mut last_progress = Instant::now();
        let mut rows_verified = 0u64;
        let started = Instant::now();
        let sched_start = schedstat();
        let mut ran = 0u64;
        let device = self.device_fault();
        if let Err(e) = device.forget_if_healthy() {
            eprintln!("rank {rank}: cannot clear the device's failures in --scratch-dir: {e}");
        }
        let (fault_after, faults_before) = device.plan();
        if fault_after > 0 {
            eprintln!(
                "rank {rank}: the simulated accelerator fails after {fault_after} steps of this process ({})",
                match faults_before {
                    Some(n) => format!("{n} earlier failure(s) in this pod"),
                    None => "no --scratch-dir: earlier failures are not known".into(),
                }
            );
        }
        let batch_label = f64::from(opts.batch_size);
        if let Some(c) = &self.control {
            c.progress(self.step, true);
        }

        while opts.max_steps == 0 || ran < opts.max_steps {
            let t0 = Instant::now();
            // Read: one HTTP range request, decoded and verified.
            let b = self.step;
            let shard =
                self.shards[((b / self.batches_per_shard) % self.shards.len() as u64) as usize].clone();
            let first_row = (b % self.batches_per_shard) * u64::from(opts.batch_size);
            let start = dataset::HEADER_LEN as u64 + first_row * rl;
            let range = (start, start + rl * u64::from(opts.batch_size) - 1);
            let server = self.read_batch(&shard, range, first_row as u32, &mut body, &mut x, &mut y)?;
            let read = t0.elapsed();
            reg.observe(
                m::STORAGE_READ_DURATION,
                &[("server", &server)],
                read.as_secs_f64(),
            );
            reg.inc(m::STORAGE_READ_BYTES, &[("server", &server)], body.len() as f64);
            reg.inc(
                m::STORAGE_CHECKSUMS_VERIFIED,
                &[("server", &server)],
                y.len() as f64,
            );
            rows_verified += y.len() as u64;

            // Compute.
            let t1 = Instant::now();
            let loss = self.model.gradient(&x, &y, &mut grad, &mut h);
            let mut compute = t1.elapsed();

            // All-reduce.
            let crc_before = self.model.checksum();
            let stats = self
                .ring
                .allreduce(&mut grad, self.step, crc_before, opts.watchdog_timeout)?;

            // Update.
            let t3 = Instant::now();
            self.model
                .apply(&grad, opts.world_size as usize, opts.learning_rate)?;
            let crc = self.model.checksum();
            // The accelerator: the host waits for its kernels without using a CPU.
            if !opts.device_time.is_zero() {
                std::thread::sleep(opts.device_time);
            }
            compute += t3.elapsed();
            self.step += 1;
            ran += 1;

            let total = t0.elapsed();
            reg.inc(m::STEPS, &[], 1.0);
            reg.inc(m::SAMPLES, &[], batch_label);
            // The step, its loss and the model's checksum at it, seen together by every scrape.
            reg.set_together(&[
                (m::STEP, &[], self.step as f64),
                (m::LOSS, &[], f64::from(loss)),
                (m::MODEL_CHECKSUM, &[], f64::from(crc)),
            ]);
            reg.observe(m::STEP_DURATION, &[], total.as_secs_f64());
            for (phase, d) in [
                ("read", read),
                ("compute", compute),
                ("wait", stats.wait),
                ("transfer", stats.transfer),
            ] {
                reg.inc(m::PHASE_SECONDS, &[("phase", phase)], d.as_secs_f64());
            }
            losses.push(loss);

            let periodic = opts.checkpoint_every > 0 && self.step.is_multiple_of(opts.checkpoint_every);
            let asked = if let Some(w) = &self.writer {
                let asked = self.control.as_ref().and_then(|c| {
                    c.progress(self.step, true);
                    c.take()
                });
                if let Some(request) = asked {
                    let c = Checkpoint {
                        step: self.step,
                        seed: self.seed,
                        features: self.features,
                        params: self.model.theta.clone(),
                    };
                    // Asked for: waits for room rather than skip it; a writer that is gone puts it back.
                    if w.tx.send(JobWrite::Checkpoint(c, request)).is_err()
                        && let Some(control) = &self.control
                    {
                        control.untake(request);
                    }
                } else if periodic {
                    let c = Checkpoint {
                        step: self.step,
                        seed: self.seed,
                        features: self.features,
                        params: self.model.theta.clone(),
                    };
                    match w.tx.try_send(JobWrite::Checkpoint(c, 0)) {
                        Ok(()) => {}
                        Err(TrySendError::Full(_)) => {
                            eprintln!(
                                "rank 0: the checkpoint writer is behind; skipping the checkpoint at step {}",
                                self.step
                            );
                        }
                        Err(TrySendError::Disconnected(_)) => {}
                    }
                }
                if last_progress.elapsed() >= PROGRESS_EVERY {
                    let _ = w.tx.try_send(JobWrite::Progress(self.step));
                    last_progress = Instant::now();
                }
                asked
            } else {
                None
            };
            if periodic || asked.is_some() {
                self.last_checkpoint = self.step;
            }

            if fault_after > 0 && ran >= fault_after {
                if let Err(e) = device.record() {
                    eprintln!("rank {rank}: cannot record the device's failure in --scratch-dir: {e}");
                }
                return Err(WorkloadError::Stopped {
                    message: format!(
                        "the accelerator failed after {ran} steps (simulated device fault, --device-fault-after {}, \
                         the pod's first after {})",
                        opts.device_fault_after, opts.device_fault_first
                    ),
                    exit_code: DEVICE_FAULT_EXIT,
                });
            }

            window.steps += 1;
            window.read += read.as_secs_f64();
            window.compute += compute.as_secs_f64();
            window.wait += stats.wait.as_secs_f64();
            window.transfer += stats.transfer.as_secs_f64();
            window.loss += f64::from(loss);
            if opts.log_every > 0 && self.step.is_multiple_of(opts.log_every) {
                let n = f64::from(window.steps.max(1));
                eprintln!(
                    "rank {rank}: step {} loss {:.4} (read {:.1} ms, compute {:.1} ms, wait {:.1} ms, transfer {:.1} ms; \
                     model {crc:08x})",
                    self.step,
                    window.loss / n,
                    window.read / n * 1e3,
                    window.compute / n * 1e3,
                    window.wait / n * 1e3,
                    window.transfer / n * 1e3,
                );
                window = Window::default();
            }
        }
        if let Some(w) = &self.writer {
            let (ack_tx, ack_rx) = mpsc::channel();
            if w.tx.send(JobWrite::Final(self.step, ack_tx)).is_ok() {
                let _ = ack_rx.recv_timeout(Duration::from_secs(5));
            }
        }
        let tenth = (losses.len() / 10).max(1);
        let mean = |s: &[f32]| {
            if s.is_empty() {
                f32::NAN
            } else {
                s.iter().sum::<f32>() / s.len() as f32
            }
        };
        Ok(RunSummary {
            rank,
            world_size: opts.world_size,
            start_step: resume.start_step,
            final_step: self.step,
            steps_lost: resume.steps_lost,
            steps_lost_total: resume.steps_lost_total,
            resumes_total: resume.resumes_total,
            first_loss: losses.first().copied().unwrap_or(f32::NAN),
            last_loss: losses.last().copied().unwrap_or(f32::NAN),
            early_mean_loss: mean(&losses[..tenth.min(losses.len())]),
            late_mean_loss: mean(&losses[losses.len().saturating_sub(tenth)..]),
            model_crc: format!("{:08x}", self.model.checksum()),
            server: self.main_server.clone(),
            rows_verified,
            mean_step_ms: started.elapsed().as_secs_f64() * 1e3 / ran.max(1) as f64,
            cpu_ms_per_step: sched_start
                .zip(schedstat())
                .map(|(a, b)| (b.0 - a.0) / 1e6 / ran.max(1) as f64),
            runqueue_ms_per_step: sched_start
                .zip(schedstat())
                .map(|(a, b)| (b.1 - a.1) / 1e6 / ran.max(1) as f64),
        })
    }

    /// Reads one batch, retrying on errors (each one counted) until the watchdog timeout.
    fn read_batch(
        &mut self,
        shard: &ShardEntry,
        range: (u64, u64),
        first_row: u32,
        body: &mut Vec<u8>,
        x: &mut Vec<f32>,
        y: &mut Vec<f32>,
    ) -> Result<String> {
        let deadline = Instant::now() + self.opts.watchdog_timeout;
        let mut checksum_failures = 0;
        let mut backoff = Duration::from_millis(100);
        loop {
            // The server the read goes to, for the live clock of the read in flight (the location is
            // cached; the read itself looks it up again).
            let to = self
                .storage
                .locate(storage::volume_of(&shard.fid).unwrap_or(0))
                .map_or_else(|_| shard.server.clone(), |l| l.server);
            crate::reading::start(&to);
            let attempt = self
                .storage
                .read(&shard.fid, Some(range), body)
                .and_then(|found| {
                    found.ok_or_else(|| WorkloadError::HttpStatus {
                        addr: shard.server.clone(),
                        method: "GET".into(),
                        path: format!("/{}", shard.fid),
                        status: 404,
                        body: "shard not found: reseed the dataset".into(),
                    })
                })
                .and_then(|server| {
                    dataset::decode_rows(body, self.seed, shard.id, first_row, self.features, x, y)
                        .map(|_| server)
                });
            crate::reading::end();
            let err = match attempt {
                Ok(server) => return Ok(server),
                Err(e) => e,
            };
            let server = self
                .storage
                .locate(storage::volume_of(&shard.fid).unwrap_or(0))
                .map(|l| l.server)
                .unwrap_or_else(|_| shard.server.clone());
            let kind = storage::error_kind(&err);
            self.registry.inc(
                m::STORAGE_READ_ERRORS,
                &[("server", &server), ("kind", kind)],
                1.0,
            );
            eprintln!(
                "rank {}: read of shard {} from {server} failed: {}",
                self.opts.rank,
                shard.id,
                error_chain(&err)
            );
            if kind == "checksum" {
                checksum_failures += 1;
                if checksum_failures >= 3 {
                    return Err(WorkloadError::Checksum {
                        what: format!("shard {} on {server}", shard.id),
                        detail: format!(
                            "it failed verification {checksum_failures} times in a row: reseed the dataset \
                             (`lab-seeder --fresh`)"
                        ),
                    });
                }
                if let Ok(vid) = storage::volume_of(&shard.fid) {
                    self.storage.invalidate(vid);
                }
                continue;
            }
            if Instant::now() + backoff >= deadline {
                return Err(WorkloadError::Watchdog {
                    detail: format!(
                        "could not read a batch from {server} for {:.0} s at step {}: {}",
                        self.opts.watchdog_timeout.as_secs_f64(),
                        self.step,
                        error_chain(&err)
                    ),
                });
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    }

    /// Counts the failure, records how far rank 0 got, and says what happens next.
    fn on_failure(&mut self, e: WorkloadError) -> WorkloadError {
        let kind = match e {
            WorkloadError::Watchdog { .. } => Some("timeout"),
            WorkloadError::PeerClosed { .. } => Some("peer_closed"),
            WorkloadError::Protocol { .. } => Some("protocol"),
            WorkloadError::Mismatch { .. } => Some("mismatch"),
            _ => None,
        };
        if let Some(kind) = kind {
            self.registry.inc(m::COLLECTIVE_ERRORS, &[("kind", kind)], 1.0);
        }
        if let Some(w) = &self.writer {
            let (ack_tx, ack_rx) = mpsc::channel();
            if w.tx.send(JobWrite::Final(self.step, ack_tx)).is_ok() {
                let _ = ack_rx.recv_timeout(Duration::from_secs(3));
            }
        }
        WorkloadError::Stopped {
            message: format!(
                "{}; exiting so the job can restart from the checkpoint at step {}",
                error_chain(&e),
                self.last_checkpoint
            ),
            exit_code: e.exit_code(),
        }
    }
}
