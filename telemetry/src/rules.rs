//! The four golden-signal rules, the baseline they compare against, and the pending → firing state that
//! gives every alert its since-time.
//!
//! These are the rules of `manifests/rules/golden-signals.yaml`, evaluated in the lab: the same alert
//! names, thresholds, windows and `for` durations, and the same baseline latch. The agreement test feeds
//! the rule file's own `promtool` test series through this evaluator and expects the same alerts.

use std::collections::BTreeMap;

use lab_model::snapshot::{Baseline, GoldenSignal};
use serde::{Deserialize, Serialize};

use crate::labels::Labels;
use crate::promql::{avg_over_time, min_over_time, stddev_over_time};
use crate::signals::Signals;
use crate::store::Store;

/// One alerting rule: its name in the rule file, its signal, and how long its condition must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub name: &'static str,
    pub signal: GoldenSignal,
    /// The rule file's `for:`.
    pub for_ms: i64,
    /// The rule file's `keep_firing_for:`: a firing alert whose condition lapses stays firing this long,
    /// so a noisy ratio near its threshold does not flicker.
    pub keep_firing_ms: i64,
}

/// A storage server's read p50 (unstarved readers) is over 50 ms and over 4× the servers' median, over
/// at least [`LATENCY_MIN_READS`] reads; or a read of an unstarved rank has waited for it over
/// [`LATENCY_WAITING_MIN_SECONDS`] and over 4× the servers' median; or an unstarved rank spent over
/// [`LATENCY_WAIT_SHARE_MIN`] of the window waiting on its reads, and over 4× the servers' median share;
/// or, over the longer [`crate::signals::HOLD_WINDOW_MS`], over [`LATENCY_WAIT_SHARE_10S_MIN`] and over 4×
/// that median: what keeps a server that holds its readers named while its 3 s figures swing.
/// No `for`: each way in already needs the slowness to have lasted.
pub const STORAGE_LATENCY: Rule = Rule {
    name: "LabStorageReadLatencyHigh",
    signal: GoldenSignal::Latency,
    for_ms: 0,
    keep_firing_ms: 0,
};
/// The job trains under half its baseline samples per second.
pub const THROUGHPUT_LOW: Rule = Rule {
    name: "LabTrainingThroughputLow",
    signal: GoldenSignal::Throughput,
    for_ms: 2_000,
    keep_firing_ms: 0,
};
/// Reads from a storage server fail.
pub const STORAGE_ERRORS: Rule = Rule {
    name: "LabStorageReadErrors",
    signal: GoldenSignal::Errors,
    for_ms: 0,
    keep_firing_ms: 0,
};
/// A rank's collective or rendezvous fails.
pub const COLLECTIVE_ERRORS: Rule = Rule {
    name: "LabCollectiveErrors",
    signal: GoldenSignal::Errors,
    for_ms: 0,
    keep_firing_ms: 0,
};
/// A rank crashes in a loop: it restarted in the last minute after exiting on an error of its own, not
/// the collective error its peers exit with when it goes away. Its peers fail and restart with it, and the
/// job resumes from its checkpoint each time: this names the rank that takes them down. No `for`: a
/// restart has already happened.
pub const RANK_CRASH_LOOPING: Rule = Rule {
    name: "LabRankCrashLooping",
    signal: GoldenSignal::Errors,
    for_ms: 0,
    keep_firing_ms: 0,
};
/// A rank is CPU-starved: throttled in over 25% of its CFS periods, and far more than its siblings.
pub const CPU_THROTTLED: Rule = Rule {
    name: "LabRankCpuThrottled",
    signal: GoldenSignal::Saturation,
    for_ms: 2_000,
    keep_firing_ms: 10_000,
};
/// The median rank spends over half of each step waiting at the collective.
pub const COLLECTIVE_WAIT: Rule = Rule {
    name: "LabRanksWaitingAtCollective",
    signal: GoldenSignal::Saturation,
    for_ms: 2_000,
    keep_firing_ms: 10_000,
};
/// Some rank waits at rendezvous for peers that have not joined.
pub const WAITING_FOR_PEERS: Rule = Rule {
    name: "LabRanksWaitingForPeers",
    signal: GoldenSignal::Saturation,
    for_ms: 3_000,
    keep_firing_ms: 0,
};

/// A rank pod stays Pending because the scheduler cannot place it: the GPU pool is saturated, and a
/// rollout of the ranks waits behind it while the running ranks may train on normally. A pod being
/// replaced is Pending but scheduled, so it never counts, and a short `for` suffices.
pub const RANK_PENDING: Rule = Rule {
    name: "LabRankPending",
    signal: GoldenSignal::Saturation,
    for_ms: 2_000,
    keep_firing_ms: 0,
};

/// A rank holds the job: its step counter stood still over the window while its metrics answer and it is
/// not itself waiting at the all-reduce, and a sibling has been blocked there, waiting, for over 2 s. No
/// `for`: both halves already need the stall to have lasted (a whole window without a step, a sibling
/// blocked for 2 s where a healthy all-reduce takes milliseconds).
pub const RANK_HUNG: Rule = Rule {
    name: "LabRankHung",
    signal: GoldenSignal::Saturation,
    for_ms: 0,
    keep_firing_ms: 0,
};

/// A rank computes far slower than its siblings: its compute seconds per step over 1.3× the fastest
/// half's (`quantile(0.25)`), so that two slow ranks of four are both named.
pub const COMPUTE_SLOW: Rule = Rule {
    name: "LabRankComputeSlow",
    signal: GoldenSignal::Saturation,
    for_ms: 2_000,
    keep_firing_ms: 10_000,
};

/// The database writer's commits stalled: the commit in flight has waited over
/// [`COMMIT_WAITING_MAX_SECONDS`]. The writer sends one commit at a time, so none completed meanwhile: its
/// age is the stall's. Reads and readiness may look fine (a synchronous standby that is not there holds
/// every commit on the primary). A latency signal: the primary answers the writer's commits slowly, or
/// never. Its `for` is 1 s: the age is a hold already, and a second look is enough to keep one odd scrape
/// from firing it.
pub const COMMITS_STALLED: Rule = Rule {
    name: "LabCommitsStalled",
    signal: GoldenSignal::Latency,
    for_ms: 1_000,
    keep_firing_ms: 0,
};

/// Every rule, in the order the rule file lists them.
pub const RULES: [Rule; 12] = [
    STORAGE_LATENCY,
    THROUGHPUT_LOW,
    STORAGE_ERRORS,
    COLLECTIVE_ERRORS,
    RANK_CRASH_LOOPING,
    CPU_THROTTLED,
    COLLECTIVE_WAIT,
    WAITING_FOR_PEERS,
    RANK_PENDING,
    RANK_HUNG,
    COMPUTE_SLOW,
    COMMITS_STALLED,
];

/// Latency: the absolute floor, in seconds.
pub const LATENCY_MIN_SECONDS: f64 = 0.05;
/// Latency: how many times the servers' median a server must exceed.
pub const LATENCY_MEDIAN_FACTOR: f64 = 4.0;
/// Latency: the fewest reads of the server in the window (`increase(...[3s])`) for its p50 to count: a
/// p50 of one or two reads (a reader that just restarted) says little. A server 300 ms slow still
/// answers one reader about ten times in 3 s.
pub const LATENCY_MIN_READS: f64 = 3.0;
/// Latency, from reads in flight: the fewest seconds a read must have been seen waiting for its server
/// in the window. A server that takes seconds per read completes too few reads in the window for a p50
/// (each rank reads once per step, and every step waits for the slowest read), but its reads show while
/// they wait. A healthy read takes milliseconds; a read held up a whole second is twenty times the
/// p50 rule's floor.
pub const LATENCY_WAITING_MIN_SECONDS: f64 = 1.0;
/// The share of an unstarved rank's time, over the window, spent waiting on one server's reads (ended or
/// still in flight) over which the server is slow. Each rank reads once per step and computes and
/// all-reduces the rest of it, so a healthy server holds its readers a few percent of the time; a server
/// too slow to end three reads in the window holds them most of it, from its first slow reads on. Over
/// half: a 3 s window of one-second scrapes spans 2 s between its first and last sample, so one lone read
/// of 0.9 s is already a share of about 0.5 there.
pub const LATENCY_WAIT_SHARE_MIN: f64 = 0.75;
/// The same share over [`crate::signals::HOLD_WINDOW_MS`] (10 s) over which the server is slow. A server
/// that holds its readers most of the time may end many of their reads quickly and the rest after a wait
/// of under a second (slow-disk at 10m with two readers: a CPU budget spent early in each 382 ms period),
/// so that in 3 s windows its p50 stays under the floor, no read waits 1 s, and its readers' share swings
/// from 0.5 to 1.0 around [`LATENCY_WAIT_SHARE_MIN`]: the alert came and went while the job stayed at a
/// fifth of normal. Over 10 s the share held at 0.6-0.8. 40 % of 10 s: one lone read of 0.9 s is a share
/// of 0.09 there, a healthy reader's 0.04-0.15; and the window fills with the fault's waits at the fault's
/// share, so a server holding its reader 65 % of the time passes 0.4 about 6 s after it began (0.5: 8 s),
/// before a drill that holds its detection 5 s asks for a plan.
pub const LATENCY_WAIT_SHARE_10S_MIN: f64 = 0.4;
/// Throughput: fires below this fraction of the baseline.
pub const THROUGHPUT_MIN_FRACTION: f64 = 0.5;
/// Saturation: fires when the median rank waits more than this share of its step at the collective.
pub const WAIT_SHARE_MAX: f64 = 0.5;

/// Hung rank: a sibling blocked in its all-reduce longer than this, seconds, says the job is held (a
/// healthy all-reduce of the job's gradient takes milliseconds).
pub const HUNG_SIBLING_WAIT_SECONDS: f64 = 2.0;
/// ... and the rank that holds it is blocked there less than this (it is not waiting: it is stuck).
pub const HUNG_SELF_WAIT_MAX_SECONDS: f64 = 1.0;
/// ... and spent at most this share of the window waiting on its own reads: a rank held by a slow
/// storage server is waiting too, and the latency rule names the server (its reads in flight count
/// only while its thread waits, so a frozen rank's do not).
pub const HUNG_READ_WAIT_MAX_SHARE: f64 = 0.5;
/// Slow compute: fires above this many times the fastest half's compute seconds per step. Measured on
/// the local lab (debug build, shared 2-core machine): healthy ranks within 1.07x of each other; a CPU hog
/// sharing a rank's 400m limit 1.46-1.69x; so 1.5x would flicker, and 1.3x sits between the two.
pub const COMPUTE_SLOW_FACTOR: f64 = 1.3;
/// Stalled commits: the commit in flight has waited longer than this, seconds. The writer commits 20
/// times a second in a few milliseconds each on a quiet lab; 2 s is hundreds of times that, and with the
/// rule's 1 s `for` opens the incident 3 to 4 s after the last commit (the goal: 5 s from the inject).
pub const COMMIT_WAITING_MAX_SECONDS: f64 = 2.0;

/// The baseline's window: `[5s]` over the recorded 3 s throughput ([`recorded::JOB_SAMPLES_SHORT`]).
pub const BASELINE_WINDOW_MS: i64 = 5_000;
/// The baseline needs this many recorded values in its window (a full window at 1 s, some slack).
pub const BASELINE_MIN_SAMPLES: usize = 4;
/// ... and a standard deviation under this fraction of the mean (the job is stable).
pub const BASELINE_MAX_VARIATION: f64 = 0.1;

/// Names of the recorded series the store keeps, as in the rule file.
pub mod recorded {
    /// `sum(rate(lab_samples_total[10s])) or vector(0)`.
    pub const JOB_SAMPLES: &str = "lab:job_samples_per_second";
    /// `sum(rate(lab_samples_total[3s])) or vector(0)`: what the throughput rule compares.
    pub const JOB_SAMPLES_SHORT: &str = "lab:job_samples_per_second:rate3s";
    /// The latched baseline of [`JOB_SAMPLES_SHORT`].
    pub const JOB_SAMPLES_BASELINE: &str = "lab:job_samples_per_second:baseline";
    /// `histogram_quantile(0.5, sum by (le) (rate(lab_step_duration_seconds_bucket[10s])))`.
    pub const JOB_STEP_SECONDS: &str = "lab:job_step_seconds";
    /// `histogram_quantile(0.5, sum by (server, le) (rate(lab_storage_read_duration_seconds_bucket[3s])))`.
    pub const STORAGE_P50: &str = "lab:storage_read_p50_seconds";
}

/// The baseline the lab learned (or was given): the job's and each storage server's normal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LearnedBaseline {
    pub job: Baseline,
    /// Client-seen read p50 per server at the time the job's baseline was learned, seconds.
    pub storage_p50: BTreeMap<String, f64>,
}

/// A rule whose condition holds now for one target.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub rule: Rule,
    /// `storage-1`, `rank-1` or `job`.
    pub target: String,
    /// The value the rule compared, in its unit.
    pub value: f64,
    /// Since when the condition has held without a break, ms.
    pub active_since_ms: i64,
    /// Whether it has held for the rule's `for` duration.
    pub firing: bool,
    /// True when the condition no longer holds and the alert only stays firing for `keep_firing_for`.
    pub kept: bool,
}

#[derive(Debug, Clone, Copy)]
struct Active {
    since: i64,
    firing: bool,
    keep_since: Option<i64>,
    value: f64,
}

/// The rule evaluator: the baseline latch and each alert's state (pending or firing, since when).
#[derive(Debug, Default)]
pub struct Engine {
    baseline: Option<LearnedBaseline>,
    active: BTreeMap<(&'static str, String), (Rule, Active)>,
}

impl Engine {
    /// An evaluator with no baseline yet.
    pub fn new() -> Self {
        Engine::default()
    }

    /// The baseline, once learned or restored.
    pub fn baseline(&self) -> Option<&LearnedBaseline> {
        self.baseline.as_ref()
    }

    /// Sets the baseline (learned by an earlier process, e.g. during `lab up`), replacing any.
    pub fn set_baseline(&mut self, baseline: Option<LearnedBaseline>) {
        self.baseline = baseline;
    }

    /// Records the tick's rule inputs into the store, learns the baseline if due, and evaluates every
    /// rule at `t`. Returns the conditions that hold, firing or still pending.
    pub fn evaluate(&mut self, store: &mut Store, signals: &Signals, t: i64) -> Vec<Condition> {
        let none = Labels::new();
        store.record(
            recorded::JOB_SAMPLES,
            t,
            &[(none.clone(), signals.job_samples_per_s)],
        );
        store.record(
            recorded::JOB_SAMPLES_SHORT,
            t,
            &[(none.clone(), signals.job_samples_per_s_short)],
        );
        let step: Vec<(Labels, f64)> = signals
            .job_step_seconds
            .map(|s| (none.clone(), s))
            .into_iter()
            .collect();
        store.record(recorded::JOB_STEP_SECONDS, t, &step);
        let p50: Vec<(Labels, f64)> = signals
            .servers
            .iter()
            .filter_map(|(name, s)| {
                s.client_p50
                    .map(|v| (Labels::from_pairs([("server", name.as_str())]), v))
            })
            .collect();
        store.record(recorded::STORAGE_P50, t, &p50);
        if self.baseline.is_none() {
            self.baseline = learn(store, t);
        }
        let b: Vec<(Labels, f64)> = self
            .baseline
            .as_ref()
            .map(|b| (none.clone(), b.job.samples_per_s))
            .into_iter()
            .collect();
        store.record(recorded::JOB_SAMPLES_BASELINE, t, &b);

        let holding = self.conditions(signals);
        self.step_alerts(holding, t)
    }

    /// Prometheus' alert state machine: a new condition is pending from `t`, fires after `for`; a lapsed
    /// condition ends the alert, unless it was firing and `keep_firing_for` has not yet run out.
    fn step_alerts(&mut self, holding: Vec<(Rule, String, f64)>, t: i64) -> Vec<Condition> {
        let mut now: BTreeMap<(&'static str, String), (Rule, Active)> = BTreeMap::new();
        for (rule, target, value) in holding {
            let key = (rule.name, target);
            let a = match self.active.remove(&key) {
                Some((_, a)) => Active {
                    keep_since: None,
                    value,
                    ..a
                },
                None => Active {
                    since: t,
                    firing: false,
                    keep_since: None,
                    value,
                },
            };
            now.insert(key, (rule, a));
        }
        for (key, (rule, mut a)) in std::mem::take(&mut self.active) {
            if a.firing && rule.keep_firing_ms > 0 {
                let since = *a.keep_since.get_or_insert(t);
                if t - since < rule.keep_firing_ms {
                    now.insert(key, (rule, a));
                }
            }
        }
        for (rule, a) in now.values_mut() {
            if !a.firing && t - a.since >= rule.for_ms {
                a.firing = true;
            }
        }
        self.active = now;
        let order = |r: &Rule| RULES.iter().position(|x| x.name == r.name).unwrap_or(usize::MAX);
        let mut out: Vec<Condition> = self
            .active
            .iter()
            .map(|((_, target), (rule, a))| Condition {
                rule: *rule,
                target: target.clone(),
                value: a.value,
                active_since_ms: a.since,
                firing: a.firing,
                kept: a.keep_since.is_some(),
            })
            .collect();
        out.sort_by(|a, b| (order(&a.rule), &a.target).cmp(&(order(&b.rule), &b.target)));
        out
    }

    fn conditions(&self, s: &Signals) -> Vec<(Rule, String, f64)> {
        let mut out = Vec::new();
        // Latency: lab:storage_read_p50_seconds:unstarved > 0.05
        //   and lab:storage_read_p50_seconds:unstarved > 4 * scalar(quantile(0.5, lab:storage_read_p50_seconds:unstarved))
        //   and on (server) sum by (server) (increase(lab_storage_read_duration_seconds_count[3s])) >= 3
        // or on (server)
        //   max by (server) (max_over_time(lab_storage_read_waiting_seconds[3s])
        //     unless on (instance) lab:rank_cpu_starved) > 1
        //   and ... > 4 * scalar(quantile(0.5, lab:storage_read_p50_seconds:unstarved))
        // or on (server)
        //   lab:storage_read_wait_share:unstarved > 0.75
        //   and ... > 4 * scalar(quantile(0.5, lab:storage_read_wait_share:unstarved))
        // or on (server)
        //   lab:storage_read_wait_share_10s:unstarved > 0.4
        //   and ... > 4 * scalar(quantile(0.5, lab:storage_read_wait_share_10s:unstarved))
        let window_s = crate::signals::WINDOW_MS as f64 / 1000.0;
        for (server, sv) in &s.servers {
            if let Some(p) = sv.p50_unstarved
                && p > LATENCY_MIN_SECONDS
                && p > LATENCY_MEDIAN_FACTOR * s.p50_unstarved_median
                && sv.reads_per_s.is_some_and(|r| r * window_s >= LATENCY_MIN_READS)
            {
                out.push((STORAGE_LATENCY, server.clone(), p));
            } else if let Some(w) = sv.read_waiting_unstarved
                && w > LATENCY_WAITING_MIN_SECONDS
                && w > LATENCY_MEDIAN_FACTOR * s.p50_unstarved_median
            {
                out.push((STORAGE_LATENCY, server.clone(), w));
            } else if let Some(f) = sv.read_wait_share_unstarved
                && f > LATENCY_WAIT_SHARE_MIN
                && f > LATENCY_MEDIAN_FACTOR * s.read_wait_share_median
            {
                out.push((STORAGE_LATENCY, server.clone(), f));
            } else if let Some(f) = sv.read_wait_share_10s_unstarved
                && f > LATENCY_WAIT_SHARE_10S_MIN
                && f > LATENCY_MEDIAN_FACTOR * s.read_wait_share_10s_median
            {
                out.push((STORAGE_LATENCY, server.clone(), f));
            }
        }
        // Throughput: lab:job_samples_per_second:rate3s < 0.5 * lab:job_samples_per_second:baseline
        if let Some(b) = &self.baseline
            && s.job_samples_per_s_short < THROUGHPUT_MIN_FRACTION * b.job.samples_per_s
        {
            out.push((THROUGHPUT_LOW, "job".to_string(), s.job_samples_per_s_short));
        }
        // Errors: sum by (server) (rate(lab_storage_read_errors_total[3s])) > 0
        for (server, sv) in &s.servers {
            if let Some(e) = sv.errors_per_s
                && e > 0.0
            {
                out.push((STORAGE_ERRORS, server.clone(), e));
            }
        }
        // Errors: sum by (instance) (rate(lab_collective_errors_total[3s])) > 0
        for (rank, rs) in &s.ranks {
            if let Some(e) = rs.collective_errors_per_s
                && e > 0.0
            {
                out.push((COLLECTIVE_ERRORS, rank.clone(), e));
            }
        }
        // Errors: max by (pod) (kube_pod_container_status_last_terminated_exitcode{pod=~"rank-[0-9]+"}) > 0 != 4
        //   and on (pod) max by (pod) (increase(kube_pod_container_status_restarts_total{pod=~"rank-[0-9]+"}[1m])) > 0
        for (pod, code) in &s.ranks_crashing {
            out.push((RANK_CRASH_LOOPING, pod.clone(), *code));
        }
        // Saturation: lab:rank_cpu_starved
        for (rank, rs) in &s.ranks {
            if rs.starved {
                out.push((
                    CPU_THROTTLED,
                    rank.clone(),
                    rs.throttled_ratio.unwrap_or(f64::NAN),
                ));
            }
        }
        // Saturation: quantile(0.5, lab:rank_wait_share) > 0.5
        if s.wait_share_median > WAIT_SHARE_MAX {
            out.push((COLLECTIVE_WAIT, "job".to_string(), s.wait_share_median));
        }
        // Saturation: count(lab_rendezvous_waiting == 1) > 0
        if !s.ranks_waiting_for_peers.is_empty() {
            out.push((
                WAITING_FOR_PEERS,
                "job".to_string(),
                s.ranks_waiting_for_peers.len() as f64,
            ));
        }
        // Saturation: max by (pod) (kube_pod_status_unschedulable{pod=~"rank-[0-9]+"}) == 1
        for pod in &s.ranks_pending {
            out.push((RANK_PENDING, pod.clone(), 1.0));
        }
        // Saturation: rate(lab_steps_total[3s]) == 0
        //   and on (instance) lab_collective_wait_seconds < 1
        //   and on () (max(lab_collective_wait_seconds) > 2)
        //   unless on (instance) sum by (instance) (rate(lab_storage_read_wait_seconds_total[3s])) > 0.5
        if s.collective_wait_max > HUNG_SIBLING_WAIT_SECONDS {
            for (rank, rs) in &s.ranks {
                if rs.steps_per_s == Some(0.0)
                    && rs
                        .collective_wait_s
                        .is_some_and(|w| w < HUNG_SELF_WAIT_MAX_SECONDS)
                    && !rs.read_wait_share.is_some_and(|f| f > HUNG_READ_WAIT_MAX_SHARE)
                {
                    out.push((RANK_HUNG, rank.clone(), s.collective_wait_max));
                }
            }
        }
        // Saturation: lab:rank_compute_seconds_per_step
        //   > 1.3 * scalar(quantile(0.25, lab:rank_compute_seconds_per_step))
        for (rank, rs) in &s.ranks {
            if let Some(c) = rs.compute_per_step
                && c > COMPUTE_SLOW_FACTOR * s.compute_per_step_q25
            {
                out.push((COMPUTE_SLOW, rank.clone(), c));
            }
        }
        // Latency: lab_writer_commit_waiting_seconds > 2
        for (writer, ws) in &s.writers {
            if let Some(w) = ws.commit_waiting_s
                && w > COMMIT_WAITING_MAX_SECONDS
            {
                out.push((COMMITS_STALLED, writer.clone(), w));
            }
        }
        out
    }
}

/// The recorded 3 s throughput values (samples/s, oldest first) the baseline latch judges at `t`: what
/// [`learn`] sees, for saying why no baseline came.
pub fn baseline_window(store: &Store, t: i64) -> Vec<f64> {
    store
        .range(recorded::JOB_SAMPLES_SHORT, t, BASELINE_WINDOW_MS, |_| true)
        .into_iter()
        .next()
        .map(|(_, pts)| pts.into_iter().map(|p| p.1).collect())
        .unwrap_or_default()
}

/// The baseline latch (the rule file's self-referencing recording rule): once the last 5 s hold at
/// least 4 recorded values of the 3 s throughput (the figure the throughput rule compares with the
/// baseline), all above zero, with a standard deviation under 10% of their mean, the mean is the
/// baseline, and it stays.
fn learn(store: &Store, t: i64) -> Option<LearnedBaseline> {
    let any = |_: &Labels| true;
    let series = store.range(recorded::JOB_SAMPLES_SHORT, t, BASELINE_WINDOW_MS, any);
    let pts = &series.first()?.1;
    let mean = avg_over_time(pts);
    let stable = pts.len() >= BASELINE_MIN_SAMPLES
        && min_over_time(pts) > 0.0
        && stddev_over_time(pts) < BASELINE_MAX_VARIATION * mean;
    if !stable {
        return None;
    }
    let step = store.range(recorded::JOB_STEP_SECONDS, t, BASELINE_WINDOW_MS, any);
    // 0 when the ranks export no step histogram: the model's field is not optional, and JSON has no NaN.
    let step_seconds = step
        .first()
        .map(|s| avg_over_time(&s.1))
        .filter(|v| v.is_finite())
        .unwrap_or(0.0);
    let storage_p50 = store
        .range(recorded::STORAGE_P50, t, BASELINE_WINDOW_MS, any)
        .into_iter()
        .filter_map(|(l, pts)| {
            let finite: Vec<(i64, f64)> = pts.into_iter().filter(|p| p.1.is_finite()).collect();
            let v = avg_over_time(&finite);
            Some((l.get("server")?.to_string(), v)).filter(|_| v.is_finite())
        })
        .collect();
    Some(LearnedBaseline {
        job: Baseline {
            samples_per_s: mean,
            step_seconds,
            learned_at_ms: u64::try_from(t).unwrap_or(0),
        },
        storage_p50,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signals::{RankSignals, ServerSignals, WriterSignals};

    fn server(p50: f64) -> ServerSignals {
        ServerSignals {
            client_p50: Some(p50),
            p50_unstarved: Some(p50),
            reads_per_s: Some(3.0),
            ..Default::default()
        }
    }

    fn signals_with_servers(p: &[f64]) -> Signals {
        let mut s = Signals {
            job_samples_per_s: 400.0,
            ..Default::default()
        };
        for (i, v) in p.iter().enumerate() {
            s.servers.insert(format!("storage-{i}"), server(*v));
        }
        s.p50_unstarved_median = crate::promql::quantile(0.5, p);
        s
    }

    fn warm() -> (Engine, Store) {
        (Engine::new(), Store::new(60_000))
    }

    fn names(c: &[Condition]) -> Vec<(&str, &str, bool)> {
        c.iter()
            .map(|c| (c.rule.name, c.target.as_str(), c.firing))
            .collect()
    }

    #[test]
    fn latency_needs_the_floor_and_the_siblings() {
        let (mut e, mut store) = warm();
        assert_eq!(
            e.evaluate(&mut store, &signals_with_servers(&[0.003, 0.488, 0.003]), 10_000)
                .len(),
            1
        );
        // Everything equally slow: nothing stands out.
        assert!(
            e.evaluate(&mut store, &signals_with_servers(&[0.5, 0.5, 0.5]), 11_000)
                .is_empty()
        );
        // Far above its siblings but under the floor: a fast lab, not an incident.
        assert!(
            e.evaluate(&mut store, &signals_with_servers(&[0.001, 0.04, 0.001]), 12_000)
                .is_empty()
        );
        // Slow, but over too few reads in the window (two in 3 s) to say so.
        let mut few = signals_with_servers(&[0.003, 0.488, 0.003]);
        few.servers.get_mut("storage-1").unwrap().reads_per_s = Some(2.0 / 3.0);
        assert!(e.evaluate(&mut store, &few, 13_000).is_empty());
    }

    #[test]
    fn latency_counts_a_read_still_waiting_when_too_few_have_ended() {
        let (mut e, mut store) = warm();
        // storage-1 answered one read in the window (too few for its p50), and a read waited 1.6 s.
        let mut s = signals_with_servers(&[0.003, 0.9, 0.003]);
        let s1 = s.servers.get_mut("storage-1").unwrap();
        s1.reads_per_s = Some(1.0 / 3.0);
        s1.read_waiting_unstarved = Some(1.6);
        let c = e.evaluate(&mut store, &s, 10_000);
        assert_eq!(names(&c), vec![("LabStorageReadLatencyHigh", "storage-1", true)]);
        assert_eq!(c[0].value, 1.6);
        // A read waiting 0.9 s is not enough, whatever the siblings; nor is one of 1.1 s when the servers'
        // median is as slow as 0.3 s (4x: 1.2 s).
        s.servers.get_mut("storage-1").unwrap().read_waiting_unstarved = Some(0.9);
        assert!(e.evaluate(&mut store, &s, 12_000).is_empty());
        let mut even = signals_with_servers(&[0.3, 0.3, 0.3]);
        even.servers.get_mut("storage-1").unwrap().read_waiting_unstarved = Some(1.1);
        assert!(e.evaluate(&mut store, &even, 13_000).is_empty());
    }

    #[test]
    fn latency_counts_a_reader_held_most_of_the_window() {
        let (mut e, mut store) = warm();
        // storage-1 ended one read in the window and no read has waited 1 s yet, but its reader spent
        // 80% of the window waiting on it, where the others wait 2-3% of theirs.
        let mut s = signals_with_servers(&[0.003, 0.4, 0.003]);
        s.read_wait_share_median = 0.03;
        for (server, f) in [("storage-0", 0.02), ("storage-1", 0.8), ("storage-2", 0.03)] {
            let sv = s.servers.get_mut(server).unwrap();
            sv.read_wait_share_unstarved = Some(f);
        }
        s.servers.get_mut("storage-1").unwrap().reads_per_s = Some(1.0 / 3.0);
        let c = e.evaluate(&mut store, &s, 10_000);
        assert_eq!(names(&c), vec![("LabStorageReadLatencyHigh", "storage-1", true)]);
        assert_eq!(c[0].value, 0.8);
        // 75% of the window is not enough; nor is 80% when every server holds its readers 25% of theirs
        // (a loaded machine, not one slow server).
        s.servers.get_mut("storage-1").unwrap().read_wait_share_unstarved = Some(0.75);
        assert!(e.evaluate(&mut store, &s, 11_000).is_empty());
        s.servers.get_mut("storage-1").unwrap().read_wait_share_unstarved = Some(0.8);
        s.read_wait_share_median = 0.25;
        assert!(e.evaluate(&mut store, &s, 12_000).is_empty());
    }

    #[test]
    fn latency_holds_a_server_that_holds_its_readers_over_ten_seconds() {
        let (mut e, mut store) = warm();
        // storage-0, read by two ranks at 10m: most reads end in milliseconds (p50 under the floor, many
        // reads), none waits 1 s, and this 3 s window's share is 0.6; over 10 s its readers waited 70% of
        // the time, where the other servers' wait 2%.
        let mut s = signals_with_servers(&[0.004, 0.001, 0.001]);
        s.servers.get_mut("storage-0").unwrap().reads_per_s = Some(8.0);
        s.read_wait_share_median = 0.02;
        s.read_wait_share_10s_median = 0.02;
        for (server, f3, f10) in [
            ("storage-0", 0.6, 0.7),
            ("storage-1", 0.02, 0.02),
            ("storage-2", 0.01, 0.02),
        ] {
            let sv = s.servers.get_mut(server).unwrap();
            sv.read_waiting_unstarved = Some(if server == "storage-0" { 0.4 } else { 0.003 });
            sv.read_wait_share_unstarved = Some(f3);
            sv.read_wait_share_10s_unstarved = Some(f10);
        }
        let c = e.evaluate(&mut store, &s, 10_000);
        assert_eq!(names(&c), vec![("LabStorageReadLatencyHigh", "storage-0", true)]);
        assert_eq!(c[0].value, 0.7);
        // 40% of 10 s is not enough; nor is 70% when every server holds its readers 20% of theirs.
        s.servers
            .get_mut("storage-0")
            .unwrap()
            .read_wait_share_10s_unstarved = Some(0.4);
        assert!(e.evaluate(&mut store, &s, 11_000).is_empty());
        s.servers
            .get_mut("storage-0")
            .unwrap()
            .read_wait_share_10s_unstarved = Some(0.7);
        s.read_wait_share_10s_median = 0.2;
        assert!(e.evaluate(&mut store, &s, 12_000).is_empty());
    }

    #[test]
    fn for_durations_and_since_times() {
        let (mut e, mut store) = warm();
        // The latency rule has no `for`: it fires on the first evaluation that holds.
        let slow = signals_with_servers(&[0.003, 0.488, 0.003]);
        let c = e.evaluate(&mut store, &slow, 10_000);
        assert_eq!(names(&c), vec![("LabStorageReadLatencyHigh", "storage-1", true)]);
        assert_eq!(c[0].active_since_ms, 10_000);
        // A break resets the since-time (this rule keeps nothing firing).
        assert!(
            e.evaluate(&mut store, &signals_with_servers(&[0.003, 0.003, 0.003]), 13_000)
                .is_empty()
        );
        assert_eq!(e.evaluate(&mut store, &slow, 14_000)[0].active_since_ms, 14_000);
        // A rule with a `for` (2 s) is pending until its condition has held that long.
        let mut starved = Signals::default();
        starved.ranks.insert(
            "rank-1".into(),
            RankSignals {
                starved: true,
                throttled_ratio: Some(0.3),
                ..Default::default()
            },
        );
        let pending = vec![("LabRankCpuThrottled", "rank-1", false)];
        assert_eq!(names(&e.evaluate(&mut store, &starved, 20_000)), pending);
        assert_eq!(names(&e.evaluate(&mut store, &starved, 21_500)), pending);
        let c = e.evaluate(&mut store, &starved, 22_000);
        assert_eq!(names(&c), vec![("LabRankCpuThrottled", "rank-1", true)]);
        assert_eq!(c[0].active_since_ms, 20_000);
    }

    #[test]
    fn keep_firing_for_bridges_a_lapse_of_a_firing_alert_only() {
        let (mut e, mut store) = warm();
        let starved = || {
            let mut s = Signals::default();
            s.ranks.insert(
                "rank-1".into(),
                RankSignals {
                    starved: true,
                    throttled_ratio: Some(0.3),
                    ..Default::default()
                },
            );
            s
        };
        let calm = Signals::default();
        // Pending, then lapsing: gone at once.
        e.evaluate(&mut store, &starved(), 10_000);
        assert!(e.evaluate(&mut store, &calm, 11_000).is_empty());
        // Firing, then lapsing: kept for 10 s, with its since-time.
        for t in (20_000..=23_000).step_by(1000) {
            e.evaluate(&mut store, &starved(), t);
        }
        let kept = e.evaluate(&mut store, &calm, 24_000);
        assert_eq!(names(&kept), vec![("LabRankCpuThrottled", "rank-1", true)]);
        assert!(kept[0].kept && kept[0].active_since_ms == 20_000);
        assert_eq!(e.evaluate(&mut store, &calm, 33_000).len(), 1);
        // Back before the time runs out: the same alert, no longer kept.
        let back = e.evaluate(&mut store, &starved(), 33_500);
        assert!(!back[0].kept && back[0].active_since_ms == 20_000);
        e.evaluate(&mut store, &calm, 34_000);
        assert!(e.evaluate(&mut store, &calm, 44_000).is_empty());
    }

    #[test]
    fn baseline_latches_once_stable_and_then_throughput_rules() {
        let mut e = Engine::new();
        let mut store = Store::new(120_000);
        let at = |v: f64| Signals {
            job_samples_per_s: v,
            job_samples_per_s_short: v,
            ..Default::default()
        };
        // Warm-up: ramping, so not stable.
        for i in 0..10 {
            e.evaluate(&mut store, &at(40.0 * i as f64), i * 1000);
            assert!(e.baseline().is_none());
        }
        let mut learned_at = None;
        for i in 10..60 {
            e.evaluate(&mut store, &at(400.0 + (i % 3) as f64), i * 1000);
            if learned_at.is_none() && e.baseline().is_some() {
                learned_at = Some(i);
            }
        }
        // Not before the window has left the zero at t = 0 behind; the ramp's tail may still be in it, and
        // pulls the baseline down by a few percent at most.
        let learned_at = learned_at.unwrap();
        assert!((11..=20).contains(&learned_at), "{learned_at}");
        let b = e.baseline().unwrap().job;
        assert!(
            b.samples_per_s > 380.0 && b.samples_per_s < 402.0,
            "{}",
            b.samples_per_s
        );
        // It stays put while throughput falls, and the rule fires after its `for`.
        let mut fired = None;
        for i in 60..70 {
            let c = e.evaluate(&mut store, &at(30.0), i * 1000);
            if fired.is_none() && c.iter().any(|c| c.rule == THROUGHPUT_LOW && c.firing) {
                fired = Some(i);
            }
        }
        assert_eq!(fired, Some(62));
        assert_eq!(e.baseline().unwrap().job, b);
    }

    fn ranks(f: impl Fn(usize) -> RankSignals) -> Signals {
        let mut s = Signals::default();
        for i in 0..4 {
            s.ranks.insert(format!("rank-{i}"), f(i));
        }
        s
    }

    #[test]
    fn the_hung_rank_is_named_not_the_siblings_that_wait_for_it() {
        let (mut e, mut store) = warm();
        let stalled = |wait_1: f64| {
            let mut s = ranks(|i| RankSignals {
                steps_per_s: Some(0.0),
                collective_wait_s: Some(if i == 1 { wait_1 } else { 12.0 }),
                ..Default::default()
            });
            s.collective_wait_max = 12.0;
            s
        };
        let c = e.evaluate(&mut store, &stalled(0.0), 10_000);
        assert_eq!(names(&c), vec![("LabRankHung", "rank-1", true)]);
        // Every rank blocked in its all-reduce (no one holds the job that answers): nobody is named.
        let (mut e, mut store) = warm();
        assert!(e.evaluate(&mut store, &stalled(12.0), 10_000).is_empty());
        // Siblings that have waited only briefly: a slow step, not a hang.
        let mut brief = stalled(0.0);
        brief.collective_wait_max = 1.5;
        assert!(e.evaluate(&mut store, &brief, 11_000).is_empty());
        // A rank that spent the window waiting on a slow server's read is held by storage, not hung.
        let (mut e, mut store) = warm();
        let mut reading = stalled(0.0);
        reading.ranks.get_mut("rank-1").unwrap().read_wait_share = Some(0.95);
        assert!(e.evaluate(&mut store, &reading, 10_000).is_empty());
        reading.ranks.get_mut("rank-1").unwrap().read_wait_share = Some(0.0);
        assert_eq!(
            names(&e.evaluate(&mut store, &reading, 11_000)),
            vec![("LabRankHung", "rank-1", true)]
        );
    }

    #[test]
    fn slow_compute_names_both_of_two_slow_ranks_and_nothing_on_equal_ones() {
        let (mut e, mut store) = warm();
        let with = |per_step: [f64; 4]| {
            let mut s = ranks(|i| RankSignals {
                compute_per_step: Some(per_step[i]),
                ..Default::default()
            });
            s.compute_per_step_q25 = crate::promql::quantile(0.25, &per_step);
            s
        };
        let slow = with([0.045, 0.095, 0.090, 0.044]);
        for t in (10_000..=11_000).step_by(1000) {
            e.evaluate(&mut store, &slow, t);
        }
        let c = e.evaluate(&mut store, &slow, 12_000);
        assert_eq!(
            names(&c),
            vec![
                ("LabRankComputeSlow", "rank-1", true),
                ("LabRankComputeSlow", "rank-2", true)
            ]
        );
        // The noise between healthy ranks (within 7 % measured) fires nothing.
        let (mut e, mut store) = warm();
        assert!(
            e.evaluate(&mut store, &with([0.050, 0.052, 0.053, 0.049]), 10_000)
                .is_empty()
        );
    }

    #[test]
    fn stalled_commits_need_a_commit_in_flight_for_over_two_seconds() {
        let (mut e, mut store) = warm();
        let writer = |rate: Option<f64>, waiting: f64| {
            let mut s = Signals::default();
            s.writers.insert(
                "lab-writer".into(),
                WriterSignals {
                    commits_per_s: rate,
                    commit_waiting_s: Some(waiting),
                },
            );
            s
        };
        // A quiet writer, a slow commit of 1.5 s that others follow: nothing.
        assert!(
            e.evaluate(&mut store, &writer(Some(20.0), 0.004), 10_000)
                .is_empty()
        );
        assert!(e.evaluate(&mut store, &writer(Some(0.3), 1.5), 11_000).is_empty());
        assert!(e.evaluate(&mut store, &writer(Some(0.3), 0.0), 12_000).is_empty());
        // One in flight for 2.5 s: pending, then firing 1 s later, valued by its age; a commit that
        // completes ends it.
        let c = e.evaluate(&mut store, &writer(Some(0.0), 2.5), 14_000);
        assert_eq!(names(&c), vec![("LabCommitsStalled", "lab-writer", false)]);
        let c = e.evaluate(&mut store, &writer(Some(0.0), 3.5), 15_000);
        assert_eq!(names(&c), vec![("LabCommitsStalled", "lab-writer", true)]);
        assert_eq!(c[0].value, 3.5);
        assert!(
            e.evaluate(&mut store, &writer(Some(0.3), 0.004), 16_000)
                .is_empty()
        );
    }

    #[test]
    fn saturation_and_errors() {
        let (mut e, mut store) = warm();
        let mut s = Signals {
            wait_share_median: 0.8,
            ..Default::default()
        };
        s.ranks.insert(
            "rank-1".into(),
            RankSignals {
                starved: true,
                throttled_ratio: Some(0.9),
                ..Default::default()
            },
        );
        s.ranks.insert(
            "rank-2".into(),
            RankSignals {
                collective_errors_per_s: Some(0.1),
                waiting_for_peers: true,
                ..Default::default()
            },
        );
        s.ranks_waiting_for_peers = vec!["rank-2".into()];
        s.servers.insert(
            "storage-0".into(),
            ServerSignals {
                errors_per_s: Some(0.0),
                ..Default::default()
            },
        );
        let c = e.evaluate(&mut store, &s, 10_000);
        assert_eq!(
            names(&c),
            vec![
                ("LabCollectiveErrors", "rank-2", true),
                ("LabRankCpuThrottled", "rank-1", false),
                ("LabRanksWaitingAtCollective", "job", false),
                ("LabRanksWaitingForPeers", "job", false),
            ]
        );
    }
}
