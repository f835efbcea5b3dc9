//! The database writer beside the job (`lab-writer`): small transactions committed on the PostgreSQL
//! primary at a steady rate, and reads on a connection of their own, with the golden signals of both
//! exported on `/metrics`: commits per second, commit latency (p50, p99), the age of the commit in flight,
//! reads per second.
//!
//! A commit that waits for a synchronous standby that is not there never answers. The writer waits for it
//! as long as it takes (that is what an application does) and counts its age in the latency quantiles, so
//! a hung commit shows as p99 rising and commits per second at zero while reads keep answering.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lab_model::metrics as m;

use crate::error::{Result, WorkloadError};
use crate::metrics::Registry;
use crate::serve;

/// How far back the rates and quantiles look.
pub const WINDOW: Duration = Duration::from_secs(10);
/// The most commits per second `--rate` accepts.
pub const MAX_RATE: f64 = 1000.0;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const READ_TIMEOUT: Duration = Duration::from_secs(5);
const READ_EVERY: Duration = Duration::from_millis(200);
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// What the writer is told.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// The primary, `HOST:PORT` (`127.0.0.1:5432`, or a name such as `db-0.db:5432`).
    pub primary: String,
    /// The database user (trusted on loopback).
    pub user: String,
    /// Commits per second it aims for.
    pub rate: f64,
    /// Where `/metrics`, `/readyz` and `/healthz` are served.
    pub metrics_listen: String,
}

/// Checks the options.
///
/// # Errors
/// [`WorkloadError::Invalid`] saying what is wrong.
pub fn validate(opts: &WriterOptions) -> Result<()> {
    if !(opts.rate.is_finite() && opts.rate > 0.0 && opts.rate <= MAX_RATE) {
        return Err(WorkloadError::invalid(
            "--rate",
            format!(
                "{} must be more than 0 and at most {MAX_RATE} commits/s",
                opts.rate
            ),
        ));
    }
    // HOST:PORT, HOST an address or a name (resolved at each connect, so not here: on Kubernetes the
    // primary's name answers only once its pod runs).
    if host_port(&opts.primary).is_none() {
        return Err(WorkloadError::invalid(
            "--primary",
            format!("{:?} is not HOST:PORT (e.g. 127.0.0.1:5432)", opts.primary),
        ));
    }
    Ok(())
}

/// `HOST:PORT`'s host and port (a port above 0), or `None`.
fn host_port(primary: &str) -> Option<(&str, u16)> {
    let (host, port) = primary.rsplit_once(':')?;
    let port = port.parse::<u16>().ok().filter(|p| *p > 0)?;
    (!host.is_empty()).then_some((host, port))
}

/// The writer's recent history, from which its gauges are computed when scraped.
#[derive(Debug, Default)]
pub struct Window {
    /// When each recent commit finished, and how long it took.
    commits: VecDeque<(Instant, Duration)>,
    /// When each recent read answered.
    reads: VecDeque<Instant>,
    /// When the commit in flight was sent.
    in_flight: Option<Instant>,
    /// When the writer started (rates never reach back before it).
    started: Option<Instant>,
}

/// The writer's signals at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WriterSignals {
    pub commits_per_second: f64,
    pub reads_per_second: f64,
    pub p50: Duration,
    pub p99: Duration,
    /// The age of the commit in flight.
    pub waiting: Duration,
}

impl Window {
    /// A window that starts at `now`.
    pub fn new(now: Instant) -> Self {
        Window {
            started: Some(now),
            ..Window::default()
        }
    }

    pub fn begin_commit(&mut self, now: Instant) {
        self.in_flight = Some(now);
    }

    pub fn end_commit(&mut self, now: Instant, ok: bool) {
        if let Some(t) = self.in_flight.take()
            && ok
        {
            self.commits.push_back((now, now.duration_since(t)));
        }
        self.trim(now);
    }

    pub fn read(&mut self, now: Instant) {
        self.reads.push_back(now);
        self.trim(now);
    }

    fn trim(&mut self, now: Instant) {
        let old = |t: Instant| now.duration_since(t) > WINDOW;
        while self.commits.front().is_some_and(|(t, _)| old(*t)) {
            self.commits.pop_front();
        }
        while self.reads.front().is_some_and(|t| old(*t)) {
            self.reads.pop_front();
        }
    }

    /// The signals at `now`: rates over the window (or since the start, when younger), quantiles of the
    /// commits in it with the waiting commit counted at its age.
    pub fn signals(&mut self, now: Instant) -> WriterSignals {
        self.trim(now);
        let span = self
            .started
            .map_or(WINDOW, |s| now.duration_since(s).min(WINDOW))
            .as_secs_f64()
            .max(1.0);
        let waiting = self.in_flight.map_or(Duration::ZERO, |t| now.duration_since(t));
        let mut lat: Vec<Duration> = self.commits.iter().map(|(_, d)| *d).collect();
        if !waiting.is_zero() {
            lat.push(waiting);
        }
        lat.sort_unstable();
        let q = |p: f64| -> Duration {
            if lat.is_empty() {
                return Duration::ZERO;
            }
            let i = ((lat.len() as f64) * p).ceil() as usize;
            lat[i.clamp(1, lat.len()) - 1]
        };
        WriterSignals {
            commits_per_second: self.commits.len() as f64 / span,
            reads_per_second: self.reads.len() as f64 / span,
            p50: q(0.50),
            p99: q(0.99),
            waiting,
        }
    }
}

/// Registers the writer's metrics.
pub fn register_metrics(r: &Registry) {
    r.counter(m::WRITER_COMMITS, "Transactions committed on the primary.");
    r.counter(m::WRITER_COMMIT_ERRORS, "Commits that failed.");
    r.counter(m::WRITER_READS, "Reads answered by the primary.");
    r.float_gauge(m::WRITER_COMMIT_RATE, "Commits per second over the last 10 s.");
    r.float_gauge(m::WRITER_READ_RATE, "Reads per second over the last 10 s.");
    r.float_gauge(
        m::WRITER_COMMIT_P50,
        "Median commit latency over the last 10 s, seconds (a waiting commit counts with its age).",
    );
    r.float_gauge(
        m::WRITER_COMMIT_P99,
        "99th percentile commit latency over the last 10 s, seconds (a waiting commit counts too).",
    );
    r.float_gauge(
        m::WRITER_COMMIT_WAITING,
        "Age of the commit in flight, seconds (0: none).",
    );
}

/// Runs the writer until it is killed.
///
/// # Errors
/// Bad options, or a metrics address that cannot be bound.
pub fn run(opts: &WriterOptions) -> Result<()> {
    validate(opts)?;
    let registry = Arc::new(Registry::new());
    register_metrics(&registry);
    for name in [m::WRITER_COMMITS, m::WRITER_COMMIT_ERRORS, m::WRITER_READS] {
        registry.touch(name, &[]);
    }
    let window = Arc::new(Mutex::new(Window::new(Instant::now())));
    let w = window.clone();
    let refresh = Arc::new(move |r: &Registry| {
        let s = w.lock().expect("writer window").signals(Instant::now());
        r.set(m::WRITER_COMMIT_RATE, &[], s.commits_per_second);
        r.set(m::WRITER_READ_RATE, &[], s.reads_per_second);
        r.set(m::WRITER_COMMIT_P50, &[], s.p50.as_secs_f64());
        r.set(m::WRITER_COMMIT_P99, &[], s.p99.as_secs_f64());
        r.set(m::WRITER_COMMIT_WAITING, &[], s.waiting.as_secs_f64());
    });
    let addr = serve::spawn(&opts.metrics_listen, registry.clone(), refresh, None)?;
    eprintln!(
        "writer: up: committing {} transactions/s on {}, metrics on http://{addr}/metrics",
        opts.rate, opts.primary
    );
    // The commits and the reads each on a connection of their own (`tokio-postgres`), on one thread: a
    // commit that hangs is a future that does not finish, and the reads go on beside it.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| WorkloadError::io("writer runtime", &opts.primary, e, Duration::ZERO))?;
    let (host, port) = host_port(&opts.primary).expect("validated above");
    let mut primary = tokio_postgres::Config::new();
    primary
        .host(host)
        .port(port)
        .user(&opts.user)
        .dbname("postgres")
        .connect_timeout(CONNECT_TIMEOUT);
    runtime.block_on(async {
        tokio::join!(
            commit_loop(&primary, opts.rate, &registry, &window),
            read_loop(&primary, &registry, &window)
        )
    });
    Ok(())
}

/// A connection to the primary as `app` (`application_name`), or `None` after saying why and waiting a
/// moment. The name is looked up at every connect: a primary made again answers at its new address.
async fn connect(primary: &tokio_postgres::Config, app: &str) -> Option<tokio_postgres::Client> {
    let made = primary
        .clone()
        .application_name(app)
        .connect(tokio_postgres::NoTls)
        .await;
    match made {
        Ok((client, connection)) => {
            let app = app.to_string();
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    eprintln!("writer: {app}: connection: {}", said(&e));
                }
            });
            Some(client)
        }
        Err(e) => {
            eprintln!("writer: {app}: {}", said(&e));
            tokio::time::sleep(RETRY_AFTER).await;
            None
        }
    }
}

/// The server's own message where it sent one (`database error 42P01: ...`), else the client's.
fn said(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("database error {}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    }
}

async fn commit_loop(
    primary: &tokio_postgres::Config,
    rate: f64,
    registry: &Registry,
    window: &Mutex<Window>,
) {
    let every = Duration::from_secs_f64(1.0 / rate);
    let mut conn: Option<tokio_postgres::Client> = None;
    let mut next = Instant::now();
    loop {
        let Some(c) = conn.as_ref() else {
            let Some(c) = connect(primary, "lab-writer").await else {
                continue;
            };
            let made = tokio::time::timeout(
                READ_TIMEOUT,
                c.batch_execute(
                    "CREATE TABLE IF NOT EXISTS lab_writes \
                     (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT now(), note text)",
                ),
            )
            .await;
            match made {
                Ok(Ok(())) => conn = Some(c),
                Ok(Err(e)) => eprintln!("writer: preparing the table: {}", said(&e)),
                Err(_) => eprintln!("writer: preparing the table: no answer in {READ_TIMEOUT:?}"),
            }
            if conn.is_none() {
                tokio::time::sleep(RETRY_AFTER).await;
            }
            continue;
        };
        let now = Instant::now();
        if now < next {
            tokio::time::sleep(next - now).await;
        }
        next = (next + every).max(Instant::now() - every);
        window.lock().expect("writer window").begin_commit(Instant::now());
        // A commit waits for as long as the server takes: that wait is the signal.
        let r = c
            .batch_execute("INSERT INTO lab_writes (note) VALUES ('step')")
            .await;
        let ok = r.is_ok();
        window
            .lock()
            .expect("writer window")
            .end_commit(Instant::now(), ok);
        match r {
            Ok(()) => registry.inc(m::WRITER_COMMITS, &[], 1.0),
            Err(e) => {
                registry.inc(m::WRITER_COMMIT_ERRORS, &[], 1.0);
                eprintln!("writer: commit: {}", said(&e));
                conn = None;
            }
        }
    }
}

async fn read_loop(primary: &tokio_postgres::Config, registry: &Registry, window: &Mutex<Window>) {
    let mut conn: Option<tokio_postgres::Client> = None;
    loop {
        let Some(c) = conn.as_ref() else {
            conn = connect(primary, "lab-writer-reads").await;
            continue;
        };
        let read = tokio::time::timeout(
            READ_TIMEOUT,
            c.simple_query("SELECT count(*) FROM pg_stat_activity"),
        );
        match read.await {
            Ok(Ok(_)) => {
                registry.inc(m::WRITER_READS, &[], 1.0);
                window.lock().expect("writer window").read(Instant::now());
            }
            Ok(Err(e)) => {
                eprintln!("writer: read: {}", said(&e));
                conn = None;
            }
            Err(_) => {
                eprintln!("writer: read: no answer in {READ_TIMEOUT:?}");
                conn = None;
            }
        }
        tokio::time::sleep(READ_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_quantiles_come_from_the_window() {
        let t0 = Instant::now();
        let mut w = Window::new(t0);
        for i in 0..100u64 {
            let at = t0 + Duration::from_millis(100 * i);
            w.begin_commit(at);
            // 99 commits of 2 ms and one of 500 ms.
            let took = if i == 50 { 500 } else { 2 };
            w.end_commit(at + Duration::from_millis(took), true);
            w.read(at);
        }
        let s = w.signals(t0 + Duration::from_millis(10_000));
        assert!((s.commits_per_second - 10.0).abs() < 0.5, "{s:?}");
        assert!((s.reads_per_second - 10.0).abs() < 0.5, "{s:?}");
        assert_eq!(s.p50, Duration::from_millis(2));
        assert_eq!(s.p99, Duration::from_millis(2));
        assert_eq!(s.waiting, Duration::ZERO);
    }

    #[test]
    fn a_commit_that_hangs_empties_the_rate_and_raises_p99_while_reads_go_on() {
        let t0 = Instant::now();
        let mut w = Window::new(t0);
        w.begin_commit(t0);
        w.end_commit(t0 + Duration::from_millis(3), true);
        w.begin_commit(t0 + Duration::from_secs(1));
        for i in 0..100u64 {
            w.read(t0 + Duration::from_millis(1000 + 100 * i));
        }
        let s = w.signals(t0 + Duration::from_secs(12));
        assert_eq!(s.commits_per_second, 0.0);
        assert_eq!(s.waiting, Duration::from_secs(11));
        assert_eq!(s.p99, Duration::from_secs(11));
        assert!(s.reads_per_second > 8.0, "reads in the last 10 s go on: {s:?}");
    }

    #[test]
    fn bad_options_are_refused() {
        let ok = WriterOptions {
            primary: "127.0.0.1:5432".into(),
            user: "postgres".into(),
            rate: 20.0,
            metrics_listen: "127.0.0.1:0".into(),
        };
        assert!(validate(&ok).is_ok());
        assert!(
            validate(&WriterOptions {
                rate: 0.0,
                ..ok.clone()
            })
            .is_err()
        );
        for bad in ["db", "db-0.db:", ":5432", "db-0.db:0", "db-0.db:http"] {
            assert!(
                validate(&WriterOptions {
                    primary: bad.into(),
                    ..ok.clone()
                })
                .is_err(),
                "{bad}"
            );
        }
        // A name is resolved when the writer connects, not here.
        assert!(
            validate(&WriterOptions {
                primary: "db-0.db:5432".into(),
                ..ok
            })
            .is_ok()
        );
    }
}
