//! The figures the snapshot shows (the console's, `lab status`'s, the incident bundle's): the job's
//! throughput and step time, each rank's time split and throttling, each server's latency as the ranks
//! see it and as SeaweedFS reports it, who reads each server.
//!
//! They read the rules' recorded series where the rule file records them (`lab:storage_read_p50_seconds`,
//! `lab:rank_cpu_throttled_ratio`, …), and otherwise ask the same PromQL evaluator the rules run on, so a
//! figure in the console is the figure a rule compared. None of this decides an alert: the rule file does.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use lab_model::metrics as m;

use crate::labels::Labels;
use crate::promql::eval::{Cache, Ctx, Value};
use crate::promql::{Expr, parse};
use crate::rules::recorded;
use crate::store::{INSTANCE, Store};

/// One rank's figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RankFigures {
    /// Seconds per second in each phase (read, compute, wait, transfer), over 3 s.
    pub phases: BTreeMap<String, f64>,
    /// Its median step time over 10 s.
    pub step_seconds: Option<f64>,
    /// Its read p50 over 3 s.
    pub read_p50: Option<f64>,
    /// `lab:rank_cpu_throttled_ratio`.
    pub throttled_ratio: Option<f64>,
    /// `lab_collective_wait_seconds`: how long its current all-reduce has been blocked on a peer, now.
    pub collective_wait_s: Option<f64>,
    pub waiting_for_peers: bool,
    pub cpu_limit_cores: Option<f64>,
    pub step: Option<f64>,
    pub world_size: Option<f64>,
    pub loss: Option<f64>,
    pub checkpoint_step: Option<f64>,
    /// `lab_checkpoint_timestamp_seconds` (rank 0).
    pub checkpoint_time: Option<f64>,
    pub steps_lost: Option<f64>,
    /// The storage server it reads from (the `server` label of its info or read metrics).
    pub server: Option<String>,
}

/// One storage server's figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerFigures {
    /// `lab:storage_read_p50_seconds`: read latency as all its readers see it (NaN without reads).
    pub client_p50: Option<f64>,
    /// `lab:storage_read_p99_seconds`.
    pub client_p99: Option<f64>,
    /// `lab:storage_read_waiting_seconds:unstarved`: the longest a read waited for it in the window.
    pub read_waiting_unstarved: Option<f64>,
    /// `lab:storage_read_wait_share:unstarved`: the largest share of a reader's time waiting on it.
    pub read_wait_share_unstarved: Option<f64>,
    /// `lab:storage_read_wait_share_10s:unstarved`: the same share over 10 s.
    pub read_wait_share_10s_unstarved: Option<f64>,
    pub reads_per_s: Option<f64>,
    pub errors_per_s: Option<f64>,
    /// GET latency as SeaweedFS itself reports it on its metrics port.
    pub server_p50: Option<f64>,
    pub server_p99: Option<f64>,
    /// GETs per second SeaweedFS itself served, whoever asked.
    pub served_per_s: Option<f64>,
    /// Reads per second by client (rank or foreign job instance) that reported them.
    pub by_client: BTreeMap<String, f64>,
    /// The server's own latency, probed straight (bypassing the ranks' path): median over the window.
    pub own_probe: Option<f64>,
}

/// Everything the views show on one tick.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// `lab:job_samples_per_second` (0 when no rank reports).
    pub job_samples_per_s: f64,
    /// `lab:job_samples_per_second:rate3s`: what the throughput rule compares with the baseline.
    pub job_samples_per_s_short: f64,
    /// Whether any rank reported its sample counter in the window (else the 0 above is the rule's default).
    pub samples_reported: bool,
    pub job_steps_per_s: Option<f64>,
    /// `lab:job_step_seconds`: median step time over all ranks' steps.
    pub job_step_seconds: Option<f64>,
    pub ranks: BTreeMap<String, RankFigures>,
    pub servers: BTreeMap<String, ServerFigures>,
    /// `quantile(0.25, lab:rank_compute_seconds_per_step)`: the fastest half's compute per step.
    pub compute_per_step_q25: f64,
}

/// The window of the display's rates, `[3s]` as the rules' (a fault shows within seconds).
const WINDOW: &str = "3s";
/// The window of the job's throughput and step time, `[10s]`: steady rather than quick.
const JOB_WINDOW: &str = "10s";

/// The view queries, parsed once.
struct Queries {
    samples_reported: Expr,
    steps_per_s: Expr,
    phases: Expr,
    rank_step: Expr,
    rank_read_p50: Expr,
    server_p99: Expr,
    reads: Expr,
    errors: Expr,
    served: Expr,
    rank_reads: Expr,
    job_reads: Expr,
    compute_q25: Expr,
}

fn queries() -> &'static Queries {
    static Q: OnceLock<Queries> = OnceLock::new();
    Q.get_or_init(|| {
        let q = |s: String| parse(&s).unwrap_or_else(|e| panic!("view query {s}: {e}"));
        let get = format!("{}_bucket{{type=\"GET\"}}", m::SEAWEED_VOLUME_REQUEST_SECONDS);
        Queries {
            samples_reported: q(format!("count(rate({}[{JOB_WINDOW}]))", m::SAMPLES)),
            steps_per_s: q(format!("max(rate({}[{JOB_WINDOW}]))", m::STEPS)),
            phases: q(format!(
                "sum by (instance, phase) (rate({}[{WINDOW}]))",
                m::PHASE_SECONDS
            )),
            rank_step: q(format!(
                "histogram_quantile(0.5, sum by (instance, le) (rate({}_bucket[{JOB_WINDOW}])))",
                m::STEP_DURATION
            )),
            rank_read_p50: q(format!(
                "histogram_quantile(0.5, sum by (instance, le) (rate({}_bucket[{WINDOW}])))",
                m::STORAGE_READ_DURATION
            )),
            server_p99: q(format!(
                "histogram_quantile(0.99, sum by (instance, le) (rate({get}[{WINDOW}])))"
            )),
            reads: q(format!(
                "sum by (server) (rate({}_count[{WINDOW}]))",
                m::STORAGE_READ_DURATION
            )),
            errors: q(format!(
                "sum by (server) (rate({}[{WINDOW}]))",
                m::STORAGE_READ_ERRORS
            )),
            served: q(format!(
                "sum by (instance) (rate({}_count{{type=\"GET\"}}[{WINDOW}]))",
                m::SEAWEED_VOLUME_REQUEST_SECONDS
            )),
            rank_reads: q(format!(
                "sum by (instance, server) (rate({}_count[{WINDOW}]))",
                m::STORAGE_READ_DURATION
            )),
            job_reads: q(format!(
                "sum by (instance, server) (rate({}[{WINDOW}]))",
                m::JOB_READS
            )),
            compute_q25: q(format!("quantile(0.25, {})", recorded::RANK_COMPUTE_PER_STEP)),
        }
    })
}

fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

fn label(l: &Labels, name: &str) -> String {
    l.get(name).unwrap_or_default().to_string()
}

impl Figures {
    /// The figures at `t`, after the rules ran (their recorded series are read). `earliest` cuts the
    /// windows of a young collector to what it watched, as the rules' are cut.
    pub fn compute(store: &Store, t: i64, earliest: Option<i64>, cache: &Cache) -> Figures {
        let ctx = Ctx {
            store,
            t,
            earliest,
            cache: Some(cache),
        };
        let q = queries();
        let eval = |e: &Expr| match ctx.eval(e) {
            Ok(Value::Vector(v)) => v,
            Ok(Value::Scalar(s)) => vec![(Labels::new(), s)],
            _ => Vec::new(),
        };
        let inst = |name: &str| store.instant(name, t, |_| true);
        let one = |name: &str| inst(name).first().map(|(_, v)| *v);
        let mut f = Figures {
            samples_reported: eval(&q.samples_reported).first().is_some_and(|e| e.1 > 0.0),
            job_samples_per_s: one(recorded::JOB_SAMPLES).unwrap_or(0.0),
            job_samples_per_s_short: one(recorded::JOB_SAMPLES_SHORT).unwrap_or(0.0),
            job_steps_per_s: eval(&q.steps_per_s).first().map(|e| e.1),
            job_step_seconds: one(recorded::JOB_STEP_SECONDS).and_then(finite),
            compute_per_step_q25: eval(&q.compute_q25).first().map_or(f64::NAN, |e| e.1),
            ..Figures::default()
        };

        let mut ranks: BTreeMap<String, RankFigures> = BTreeMap::new();
        let mut ranks_of = |v: Vec<(Labels, f64)>, set: fn(&mut RankFigures, &Labels, f64)| {
            for (l, x) in v {
                set(ranks.entry(label(&l, INSTANCE)).or_default(), &l, x);
            }
        };
        ranks_of(eval(&q.phases), |r, l, x| {
            *r.phases.entry(label(l, m::LABEL_PHASE)).or_insert(0.0) += x;
        });
        ranks_of(eval(&q.rank_step), |r, _, x| r.step_seconds = finite(x));
        ranks_of(eval(&q.rank_read_p50), |r, _, x| r.read_p50 = finite(x));
        ranks_of(inst(recorded::RANK_CPU_THROTTLED_RATIO), |r, _, x| {
            r.throttled_ratio = Some(x);
        });
        ranks_of(inst(m::COLLECTIVE_WAIT_SECONDS), |r, _, x| {
            r.collective_wait_s = finite(x);
        });
        ranks_of(inst(m::RENDEZVOUS_WAITING), |r, _, x| {
            r.waiting_for_peers = x == 1.0
        });
        ranks_of(inst(m::CPU_LIMIT_CORES), |r, _, x| r.cpu_limit_cores = finite(x));
        ranks_of(inst(m::STEP), |r, _, x| r.step = finite(x));
        ranks_of(inst(m::WORLD_SIZE), |r, _, x| r.world_size = finite(x));
        ranks_of(inst(m::LOSS), |r, _, x| r.loss = finite(x));
        ranks_of(inst(m::CHECKPOINT_STEP), |r, _, x| r.checkpoint_step = finite(x));
        ranks_of(inst(m::CHECKPOINT_TIME), |r, _, x| r.checkpoint_time = finite(x));
        ranks_of(inst(m::STEPS_LOST), |r, _, x| r.steps_lost = finite(x));
        // The rank → server edge: the info metric's label, else the server its reads mostly go to.
        let mut reads_by_rank: BTreeMap<String, (String, f64)> = BTreeMap::new();
        for (l, v) in inst(&format!("{}_count", m::STORAGE_READ_DURATION)) {
            let e = reads_by_rank
                .entry(label(&l, INSTANCE))
                .or_insert((String::new(), f64::NEG_INFINITY));
            if v > e.1 {
                *e = (label(&l, m::LABEL_SERVER), v);
            }
        }
        for (rank, (server, _)) in reads_by_rank {
            ranks.entry(rank).or_default().server = Some(server);
        }
        for (l, _) in inst(m::RANK_INFO) {
            if let Some(server) = l.get(m::LABEL_SERVER) {
                ranks.entry(label(&l, INSTANCE)).or_default().server = Some(server.to_string());
            }
        }

        let mut servers: BTreeMap<String, ServerFigures> = BTreeMap::new();
        let mut servers_of = |v: Vec<(Labels, f64)>, by: &str, set: fn(&mut ServerFigures, &Labels, f64)| {
            for (l, x) in v {
                set(servers.entry(label(&l, by)).or_default(), &l, x);
            }
        };
        let server = m::LABEL_SERVER;
        servers_of(inst(recorded::STORAGE_P50), server, |s, _, x| {
            s.client_p50 = Some(x)
        });
        servers_of(inst(recorded::STORAGE_P99), server, |s, _, x| {
            s.client_p99 = Some(x)
        });
        servers_of(inst(recorded::READ_WAITING_UNSTARVED), server, |s, _, x| {
            s.read_waiting_unstarved = Some(x);
        });
        servers_of(inst(recorded::READ_WAIT_SHARE_UNSTARVED), server, |s, _, x| {
            s.read_wait_share_unstarved = Some(x);
        });
        servers_of(
            inst(recorded::READ_WAIT_SHARE_10S_UNSTARVED),
            server,
            |s, _, x| {
                s.read_wait_share_10s_unstarved = Some(x);
            },
        );
        servers_of(eval(&q.reads), server, |s, _, x| s.reads_per_s = Some(x));
        servers_of(eval(&q.errors), server, |s, _, x| s.errors_per_s = Some(x));
        servers_of(inst(recorded::STORAGE_SERVER_GET_P50), INSTANCE, |s, _, x| {
            s.server_p50 = finite(x);
        });
        servers_of(eval(&q.server_p99), INSTANCE, |s, _, x| s.server_p99 = finite(x));
        servers_of(eval(&q.served), INSTANCE, |s, _, x| s.served_per_s = finite(x));
        // Who reads each server: the ranks' reads and foreign jobs' reads, by instance.
        for v in [eval(&q.rank_reads), eval(&q.job_reads)] {
            servers_of(v, server, |s, l, x| {
                s.by_client.insert(label(l, INSTANCE), x);
            });
        }
        for (l, pts) in store.range(m::STORAGE_OWN_PROBE_SECONDS, t, WINDOW_MS, |_| true) {
            let mut v: Vec<f64> = pts
                .into_iter()
                .map(|(_, v)| v)
                .filter(|v| v.is_finite())
                .collect();
            v.sort_by(f64::total_cmp);
            if !v.is_empty() {
                servers.entry(label(&l, INSTANCE)).or_default().own_probe = Some(v[v.len() / 2]);
            }
        }
        servers.remove("");
        ranks.remove("");
        f.ranks = ranks;
        f.servers = servers;
        f
    }
}

/// [`WINDOW`] in ms, for the probe's median, read straight from the store.
const WINDOW_MS: i64 = 3_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_view_query_is_promql_the_lab_evaluates() {
        let _ = queries();
        assert_eq!(crate::promql::lexer::parse_duration(WINDOW), Some(WINDOW_MS));
    }
}
