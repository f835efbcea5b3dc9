//! `lab-reader`: a job of another team that shares the lab's storage — the noisy neighbour of the
//! `competing-job` fault. It is not a rank: it takes no part in the training, holds no GPU slot and
//! trains nothing. It reads, over and over, the whole needles that one storage server holds, from
//! `--threads` connections at once, straight to the server's internal address (it has a network path of
//! its own; the latency proxy in front of the server is the ranks' path, not this job's).
//!
//! `--rate` holds it to that many reads per second across all its threads (how a person throttles it);
//! without it, it reads as fast as the server answers. It exports what it does on `/metrics`
//! (`lab_job_reads_total` and friends, see `docs/metrics.md`), which is how `lab job list` and the
//! evidence see its read rate.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lab_model::metrics as m;

use crate::checkpoint::JobStore;
use crate::dataset::Manifest;
use crate::error::{Result, WorkloadError};
use crate::metrics::Registry;
use crate::serve;
use crate::storage::{self, Storage};

/// Settings of one reader job.
#[derive(Debug, Clone)]
pub struct ReaderOptions {
    /// The SeaweedFS master, `host:port`.
    pub master: String,
    /// The dataset whose needles it reads (the training job's, so they live where the ranks read).
    pub dataset: String,
    /// The storage server it reads from, by rack name (`storage-1`).
    pub server: String,
    /// Connections reading at once.
    pub threads: u32,
    /// Reads per second across all threads; `None`: as fast as the server answers.
    pub rate: Option<f64>,
    /// Where `/metrics`, `/readyz` and `/healthz` are served.
    pub metrics_listen: String,
    /// Bound on each storage request.
    pub timeout: Duration,
    /// How long to wait for the dataset's manifest before giving up.
    pub startup_timeout: Duration,
}

/// The most connections a reader opens.
pub const MAX_THREADS: u32 = lab_model::jobs::MAX_THREADS;
/// The highest `--rate` accepted (reads per second).
pub const MAX_RATE: f64 = lab_model::jobs::MAX_READ_RATE;

const READ_BUCKETS: [f64; 15] = [
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0,
];

/// Registers the reader's metrics.
pub fn register_metrics(r: &Registry) {
    r.counter(
        m::JOB_READS,
        "Whole-needle reads this job made, by storage server.",
    );
    r.counter(
        m::JOB_READ_BYTES,
        "Payload bytes this job read, by storage server.",
    );
    r.histogram(
        m::JOB_READ_DURATION,
        "One read as this job sees it, by storage server.",
        &READ_BUCKETS,
    );
    r.float_gauge(
        m::JOB_RATE_LIMIT,
        "The read rate this job is held to, reads per second (absent when unthrottled).",
    );
}

/// Checks the options that need no storage.
///
/// # Errors
/// [`WorkloadError::Invalid`] saying what is wrong.
pub fn validate(opts: &ReaderOptions) -> Result<()> {
    if opts.threads == 0 || opts.threads > MAX_THREADS {
        return Err(WorkloadError::invalid(
            "--threads",
            format!("{} is not between 1 and {MAX_THREADS}", opts.threads),
        ));
    }
    if let Some(r) = opts.rate
        && !(r.is_finite() && r > 0.0 && r <= MAX_RATE)
    {
        return Err(WorkloadError::invalid(
            "--rate",
            format!("{r} is not a read rate between 0 (excluded) and {MAX_RATE} per second"),
        ));
    }
    storage::validate_dataset_name(&opts.dataset)
}

/// Spaces reads out to a rate shared by every thread: each read takes the next free slot.
#[derive(Debug)]
pub struct Pacer {
    interval: Option<Duration>,
    next: Mutex<Instant>,
}

impl Pacer {
    /// A pacer for `rate` reads per second (`None`: no pacing).
    pub fn new(rate: Option<f64>, now: Instant) -> Pacer {
        Pacer {
            interval: rate.map(|r| Duration::from_secs_f64(1.0 / r)),
            next: Mutex::new(now),
        }
    }

    /// When the caller may make its next read, given the time is `now`; takes that slot.
    pub fn slot(&self, now: Instant) -> Instant {
        let Some(step) = self.interval else {
            return now;
        };
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        // A pacer that fell behind (a slow server) does not burst to catch up.
        let at = (*next).max(now);
        *next = at + step;
        at
    }
}

/// Runs the reader until it is killed.
///
/// # Errors
/// Bad options, a metrics address that cannot be bound, or no manifest (or no needle on the server)
/// within the startup timeout.
pub fn run(opts: &ReaderOptions) -> Result<()> {
    validate(opts)?;
    let registry = Arc::new(Registry::new());
    register_metrics(&registry);
    let labels = [(m::LABEL_SERVER, opts.server.as_str())];
    registry.touch(m::JOB_READS, &labels);
    registry.touch(m::JOB_READ_BYTES, &labels);
    if let Some(r) = opts.rate {
        registry.set(m::JOB_RATE_LIMIT, &[], r);
    }
    let addr = serve::spawn(
        &opts.metrics_listen,
        registry.clone(),
        Arc::new(|_: &Registry| {}),
        None,
    )?;
    eprintln!(
        "reader: up: reading {} from {} with {} threads at {}, metrics on http://{addr}/metrics",
        opts.dataset,
        opts.server,
        opts.threads,
        opts.rate
            .map_or_else(|| "no rate limit".to_string(), |r| format!("{r} reads/s"))
    );
    let fids = needles_on(opts)?;
    eprintln!("reader: {} needles on {}", fids.len(), opts.server);
    let pacer = Arc::new(Pacer::new(opts.rate, Instant::now()));
    let fids = Arc::new(fids);
    let mut handles = Vec::new();
    for t in 0..opts.threads {
        let (opts, registry, pacer, fids) = (opts.clone(), registry.clone(), pacer.clone(), fids.clone());
        handles.push(
            std::thread::Builder::new()
                .name(format!("reader-{t}"))
                .spawn(move || read_loop(&opts, &registry, &pacer, &fids, t as usize))
                .map_err(|e| WorkloadError::io("reader thread", "", e, Duration::ZERO))?,
        );
    }
    for h in handles {
        let _ = h.join();
    }
    Ok(())
}

/// The file ids of the dataset's shards that the server holds now.
fn needles_on(opts: &ReaderOptions) -> Result<Vec<String>> {
    let deadline = Instant::now() + opts.startup_timeout;
    loop {
        let err = match manifest_needles(opts) {
            Ok(f) if !f.is_empty() => return Ok(f),
            Ok(_) => WorkloadError::invalid(
                "--server",
                format!("{} holds none of dataset {}'s shards", opts.server, opts.dataset),
            ),
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            return Err(err);
        }
        eprintln!("reader: waiting for the dataset: {err}");
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn manifest_needles(opts: &ReaderOptions) -> Result<Vec<String>> {
    let mut store = JobStore::new(&opts.master, &opts.dataset, opts.timeout);
    let manifest: Manifest = store.load_manifest()?;
    let storage = store.storage();
    let mut out = Vec::new();
    for s in &manifest.shards {
        let now = storage::volume_of(&s.fid)
            .and_then(|v| storage.locate(v))
            .map(|l| l.server)
            .unwrap_or_else(|_| s.server.clone());
        if now == opts.server {
            out.push(s.fid.clone());
        }
    }
    Ok(out)
}

fn read_loop(opts: &ReaderOptions, registry: &Registry, pacer: &Pacer, fids: &[String], offset: usize) {
    let mut storage = Storage::new(&opts.master, opts.timeout);
    let mut body = Vec::new();
    let mut i = offset;
    loop {
        let at = pacer.slot(Instant::now());
        let wait = at.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        let fid = &fids[i % fids.len()];
        i += 1;
        let t = Instant::now();
        match storage.read_internal(fid, &mut body) {
            Ok(Some(server)) => {
                let l = [(m::LABEL_SERVER, server.as_str())];
                registry.inc(m::JOB_READS, &l, 1.0);
                registry.inc(m::JOB_READ_BYTES, &l, body.len() as f64);
                registry.observe(m::JOB_READ_DURATION, &l, t.elapsed().as_secs_f64());
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => {
                eprintln!("reader: read of {fid} failed: {e}");
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> ReaderOptions {
        ReaderOptions {
            master: "127.0.0.1:9333".into(),
            dataset: "lab-train".into(),
            server: "storage-1".into(),
            threads: 4,
            rate: None,
            metrics_listen: "127.0.0.1:0".into(),
            timeout: Duration::from_secs(5),
            startup_timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn bad_options_are_refused() {
        assert!(validate(&opts()).is_ok());
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY, MAX_RATE * 2.0] {
            let o = ReaderOptions {
                rate: Some(rate),
                ..opts()
            };
            assert!(validate(&o).is_err(), "{rate}");
        }
        let o = ReaderOptions { threads: 0, ..opts() };
        assert!(validate(&o).unwrap_err().to_string().contains("--threads"));
    }

    #[test]
    fn the_pacer_spaces_reads_across_threads_and_does_not_burst_after_a_stall() {
        let t0 = Instant::now();
        let p = Pacer::new(Some(10.0), t0);
        let slots: Vec<Duration> = (0..3).map(|_| p.slot(t0) - t0).collect();
        assert_eq!(
            slots,
            [0, 100, 200].map(Duration::from_millis).to_vec(),
            "10 reads/s: one every 100 ms"
        );
        // After a long stall the next read is now, not a backlog of slots in the past.
        let late = t0 + Duration::from_secs(5);
        assert_eq!(p.slot(late), late);
        assert_eq!(p.slot(late) - late, Duration::from_millis(100));
        let free = Pacer::new(None, t0);
        assert_eq!(free.slot(late), late);
    }
}
