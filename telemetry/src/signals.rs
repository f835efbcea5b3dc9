//! The figures of one tick, computed from the store with the same PromQL semantics as the rule file's
//! recording rules: job throughput and step time, per-rank time split and throttling, per-server latency
//! as the ranks see it and as SeaweedFS reports it.
//!
//! Every rule input has the name of its recording rule in `manifests/rules/golden-signals.yaml` beside
//! it; display-only figures use the same functions.

use std::collections::BTreeMap;

use lab_model::metrics as m;

use crate::labels::Labels;
use crate::promql::{Vector, histogram_quantile, max_by, quantile, rate, sum_by};
use crate::store::{INSTANCE, Store};

/// kube-state-metrics' pod phase gauge: 1 for the pod's phase, 0 for the others. The lab writes it from
/// the runtime's status (the collector's `kube-state-metrics` instance); a cluster's own exporter, when
/// scraped, is read the same way.
pub const POD_STATUS_PHASE: &str = "kube_pod_status_phase";
/// kube-state-metrics' gauge of a pod the scheduler cannot place (1, present only for such pods). The lab
/// writes it from the runtime's status beside [`POD_STATUS_PHASE`].
pub const POD_STATUS_UNSCHEDULABLE: &str = "kube_pod_status_unschedulable";
/// kube-state-metrics' restart counter of a pod's container. The lab writes it from the runtime's status
/// beside [`POD_STATUS_PHASE`]: restarts of the pod's instance after it exited.
pub const POD_RESTARTS: &str = "kube_pod_container_status_restarts_total";
/// kube-state-metrics' exit code of a container's last termination (present only once it has exited and
/// restarted; none after a kill by signal on the local runtime). The lab writes it from the runtime's
/// status beside [`POD_STATUS_PHASE`].
pub const POD_LAST_EXIT_CODE: &str = "kube_pod_container_status_last_terminated_exitcode";
/// The exit code of a rank that failed at the collective or at rendezvous because a peer went away
/// (`lab-rank`'s, for every error of the ring): the rank that exits with it follows a crash, it is not one.
pub const COLLECTIVE_ERROR_EXIT: f64 = 4.0;
/// The restart window of the crash-loop rule, `[1m]`: a rank that crashes every few hundred steps and
/// comes back after a doubling backoff restarts at least once a minute.
pub const RESTART_WINDOW_MS: i64 = 60_000;

/// The instance name under which the collector keeps the series it writes from the runtime's status.
pub const KUBE_STATE: &str = "kube-state-metrics";

/// The rate window of every alerting rule's input, `[3s]` in the rule file: short, so that a fault's
/// effect fills it within seconds (a slow server's few slow reads outnumber its fast ones once the fast
/// ones have aged out of the window). Each rule that compares a count-based figure guards it with a
/// minimum number of events in the window.
pub const WINDOW_MS: i64 = 3_000;
/// The window of the job's throughput and step time, `[10s]`: the display and the drills' verification
/// read these, and they need to be steady rather than quick (the baseline's step time too).
pub const JOB_WINDOW_MS: i64 = 10_000;
/// The window of the latency rule's steadier share of waiting, `[10s]`: a server slowed enough to hold its
/// readers most of the time may still end reads quickly between long waits (a CPU budget spent early in
/// each period, shared by two readers), so that from one 3 s window to the next its p50, its longest
/// read and its readers' share swing across their thresholds; over 10 s the share is steady.
pub const HOLD_WINDOW_MS: i64 = 10_000;
/// A rank throttled in more than this share of its CFS periods may be CPU-starved...
pub const THROTTLED_MIN_RATIO: f64 = 0.25;
/// ...when its throttled seconds per second are also more than this many times the ranks' median.
pub const THROTTLED_SIBLING_FACTOR: f64 = 2.0;

fn any(_: &Labels) -> bool {
    true
}

fn label(l: &Labels, name: &str) -> String {
    l.get(name).unwrap_or_default().to_string()
}

/// `a / b`, matching elements with identical label sets (PromQL's default one-to-one matching).
fn div(a: Vector, b: &Vector) -> Vector {
    let b: BTreeMap<&Labels, f64> = b.iter().map(|(l, v)| (l, *v)).collect();
    a.into_iter()
        .filter_map(|(l, x)| b.get(&l).map(|y| (l.clone(), x / y)))
        .collect()
}

/// One rank's figures over the window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RankSignals {
    /// Seconds per second in each phase: read, compute, wait, transfer.
    pub phases: BTreeMap<String, f64>,
    /// `lab:rank_wait_share`: wait over all phases (NaN when no phase advanced).
    pub wait_share: Option<f64>,
    pub step_seconds: Option<f64>,
    pub read_p50: Option<f64>,
    /// `lab:rank_cpu_throttled_ratio`.
    pub throttled_ratio: Option<f64>,
    /// `lab:rank_cpu_throttled_seconds_per_second`.
    pub throttled_seconds_per_s: Option<f64>,
    /// `lab:rank_cpu_starved`: throttled, and far more than its siblings.
    pub starved: bool,
    /// `rate(lab_steps_total[3s])`: steps this process completed per second.
    pub steps_per_s: Option<f64>,
    /// `lab:rank_compute_seconds_per_step`: compute seconds per step (absent without steps in the window).
    pub compute_per_step: Option<f64>,
    /// `lab_collective_wait_seconds`: how long its current all-reduce has been blocked on a peer, now.
    pub collective_wait_s: Option<f64>,
    pub collective_errors_per_s: Option<f64>,
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
    /// `sum by (instance) (rate(lab_storage_read_wait_seconds_total[3s]))`: the share of its time spent
    /// waiting on its reads, reads in flight included.
    pub read_wait_share: Option<f64>,
}

/// One storage server's figures over the window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerSignals {
    /// `lab:storage_read_p50_seconds`: read latency as all its readers see it (NaN without reads).
    pub client_p50: Option<f64>,
    pub client_p99: Option<f64>,
    /// `lab:storage_read_p50_seconds:unstarved`: the same, leaving out CPU-starved readers.
    pub p50_unstarved: Option<f64>,
    /// `max by (server) (max_over_time(lab_storage_read_waiting_seconds[3s]) unless on (instance)
    /// lab:rank_cpu_starved)`: the longest a read of an unstarved rank was seen waiting for the server in
    /// the window, whether it has ended since or not.
    pub read_waiting_unstarved: Option<f64>,
    /// `lab:storage_read_wait_share:unstarved`: `max by (server) (rate(lab_storage_read_wait_seconds_total[3s])
    /// unless on (instance) lab:rank_cpu_starved)`: the largest share of an unstarved rank's time spent
    /// waiting on the server's reads, reads in flight included.
    pub read_wait_share_unstarved: Option<f64>,
    /// `lab:storage_read_wait_share_10s:unstarved`: the same share over [`HOLD_WINDOW_MS`].
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

/// Everything computed on one tick.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Signals {
    /// `lab:job_samples_per_second` (0 when no rank reports), over [`JOB_WINDOW_MS`].
    pub job_samples_per_s: f64,
    /// `lab:job_samples_per_second:rate3s`: the same over [`WINDOW_MS`], which the throughput rule reads.
    pub job_samples_per_s_short: f64,
    /// Whether any rank reported its sample counter in the window (else the 0 above is the rule's default).
    pub samples_reported: bool,
    pub job_steps_per_s: Option<f64>,
    /// `lab:job_step_seconds`: median step time over all ranks' steps.
    pub job_step_seconds: Option<f64>,
    pub ranks: BTreeMap<String, RankSignals>,
    pub servers: BTreeMap<String, ServerSignals>,
    /// `quantile(0.5, lab:storage_read_p50_seconds:unstarved)`, the servers' median latency.
    pub p50_unstarved_median: f64,
    /// `quantile(0.5, lab:rank_wait_share)`.
    pub wait_share_median: f64,
    /// `quantile(0.5, lab:storage_read_wait_share:unstarved)`, the servers' median share of waiting.
    pub read_wait_share_median: f64,
    /// `quantile(0.5, lab:storage_read_wait_share_10s:unstarved)`: the same over [`HOLD_WINDOW_MS`].
    pub read_wait_share_10s_median: f64,
    /// `quantile(0.25, lab:rank_compute_seconds_per_step)`: the fastest half's compute per step.
    pub compute_per_step_q25: f64,
    /// `max(lab_collective_wait_seconds)`: the longest a rank has been blocked in its all-reduce, now.
    pub collective_wait_max: f64,
    /// Ranks with `lab_rendezvous_waiting == 1`.
    pub ranks_waiting_for_peers: Vec<String>,
    /// Rank pods the scheduler cannot place (`kube_pod_status_unschedulable == 1`), by pod name.
    pub ranks_pending: Vec<String>,
    /// Rank pods that restarted in the last minute after exiting on an error of their own (not the
    /// collective error a crash's peers exit with), by pod name, with that exit code.
    pub ranks_crashing: Vec<(String, f64)>,
    /// The database writers (`lab-writer`), by instance: present only when one is scraped.
    pub writers: BTreeMap<String, WriterSignals>,
}

/// A database writer's figures: the commits it completes, and the one it waits on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WriterSignals {
    /// `rate(lab_writer_commits_total[3s])` (absent until two scrapes are in the window).
    pub commits_per_s: Option<f64>,
    /// `lab_writer_commit_waiting_seconds`: how long the commit in flight has waited, now.
    pub commit_waiting_s: Option<f64>,
}

/// Where a per-rank gauge goes in [`RankSignals`].
type GaugeField = fn(&mut RankSignals) -> &mut Option<f64>;

fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

impl Signals {
    /// Computes the tick's figures at `t` from the store, over the usual windows.
    pub fn compute(store: &Store, t: i64) -> Signals {
        Signals::compute_over(store, t, JOB_WINDOW_MS)
    }

    /// Computes the tick's figures at `t` having watched for `watched` ms: each window is cut to what was
    /// watched. A collector that has watched for less than a window passes how long it has watched:
    /// PromQL's `rate` over a range that reaches back before the first sample would count the unobserved
    /// time as idle, and a just-started `lab status` would report a fraction of the real throughput.
    pub fn compute_over(store: &Store, t: i64, watched: i64) -> Signals {
        let w = watched.clamp(1, WINDOW_MS);
        let jw = watched.clamp(1, JOB_WINDOW_MS);
        let r = |name: &str| rate(store.range(name, t, w, any), t, w);
        let rj = |name: &str| rate(store.range(name, t, jw, any), t, jw);
        let inst = |name: &str| store.instant(name, t, any);
        let mut s = Signals::default();

        // sum(rate(lab_samples_total[10s])) or vector(0)
        let samples = rj(m::SAMPLES);
        s.samples_reported = !samples.is_empty();
        s.job_samples_per_s = sum_by(samples, &[]).first().map_or(0.0, |e| e.1);
        // sum(rate(lab_samples_total[3s])) or vector(0)
        s.job_samples_per_s_short = sum_by(r(m::SAMPLES), &[]).first().map_or(0.0, |e| e.1);
        s.job_steps_per_s = max_by(rj(m::STEPS), &[]).first().map(|e| e.1);
        let step_buckets = rj(&format!("{}_bucket", m::STEP_DURATION));
        s.job_step_seconds = histogram_quantile(0.5, sum_by(step_buckets.clone(), &["le"]))
            .first()
            .and_then(|e| finite(e.1));

        let read_buckets = r(&format!("{}_bucket", m::STORAGE_READ_DURATION));

        // Ranks: every instance that exports any rank metric.
        let rank_of = |l: &Labels| label(l, INSTANCE);
        let mut ranks: BTreeMap<String, RankSignals> = BTreeMap::new();
        for (l, v) in r(m::PHASE_SECONDS) {
            let phase = label(&l, m::LABEL_PHASE);
            *ranks
                .entry(rank_of(&l))
                .or_default()
                .phases
                .entry(phase)
                .or_insert(0.0) += v;
        }
        let wait = sum_by(
            rate(
                store.range(m::PHASE_SECONDS, t, w, |l| l.get(m::LABEL_PHASE) == Some("wait")),
                t,
                w,
            ),
            &[INSTANCE],
        );
        let all_phases = sum_by(r(m::PHASE_SECONDS), &[INSTANCE]);
        let wait_share = div(wait, &all_phases);
        s.wait_share_median = quantile(0.5, &wait_share.iter().map(|e| e.1).collect::<Vec<_>>());
        for (l, v) in wait_share {
            ranks.entry(rank_of(&l)).or_default().wait_share = Some(v);
        }
        for (l, v) in histogram_quantile(0.5, sum_by(step_buckets, &[INSTANCE, "le"])) {
            ranks.entry(rank_of(&l)).or_default().step_seconds = finite(v);
        }
        for (l, v) in histogram_quantile(0.5, sum_by(read_buckets.clone(), &[INSTANCE, "le"])) {
            ranks.entry(rank_of(&l)).or_default().read_p50 = finite(v);
        }
        let ratio = div(r(m::CPU_THROTTLED_PERIODS), &r(m::CPU_PERIODS));
        let throttled_sps = r(m::CPU_THROTTLED_SECONDS);
        // scalar(quantile(0.5, ...)): NaN when no rank reports, and then no rank is starved.
        let sps_median = quantile(0.5, &throttled_sps.iter().map(|e| e.1).collect::<Vec<_>>());
        let sps_by_rank: BTreeMap<String, f64> =
            throttled_sps.iter().map(|(l, v)| (rank_of(l), *v)).collect();
        for (l, v) in &throttled_sps {
            ranks.entry(rank_of(l)).or_default().throttled_seconds_per_s = Some(*v);
        }
        for (l, v) in ratio {
            let name = rank_of(&l);
            let starved = v > THROTTLED_MIN_RATIO
                && sps_by_rank
                    .get(&name)
                    .is_some_and(|x| *x > THROTTLED_SIBLING_FACTOR * sps_median);
            let rs = ranks.entry(name).or_default();
            rs.throttled_ratio = Some(v);
            rs.starved = starved;
        }
        // sum by (instance) (rate(lab_phase_seconds_total{phase="compute"}[3s]))
        //   / (sum by (instance) (rate(lab_steps_total[3s])) > 0)
        let steps = sum_by(r(m::STEPS), &[INSTANCE]);
        let compute = sum_by(
            rate(
                store.range(m::PHASE_SECONDS, t, w, |l| {
                    l.get(m::LABEL_PHASE) == Some("compute")
                }),
                t,
                w,
            ),
            &[INSTANCE],
        );
        let stepping: Vector = steps.iter().filter(|e| e.1 > 0.0).cloned().collect();
        let per_step = div(compute, &stepping);
        s.compute_per_step_q25 = quantile(0.25, &per_step.iter().map(|e| e.1).collect::<Vec<_>>());
        for (l, v) in per_step {
            ranks.entry(rank_of(&l)).or_default().compute_per_step = Some(v);
        }
        for (l, v) in steps {
            ranks.entry(rank_of(&l)).or_default().steps_per_s = Some(v);
        }
        let waits = inst(m::COLLECTIVE_WAIT_SECONDS);
        s.collective_wait_max = waits.iter().map(|e| e.1).fold(f64::NAN, f64::max);
        for (l, v) in waits {
            ranks.entry(rank_of(&l)).or_default().collective_wait_s = finite(v);
        }
        for (l, v) in sum_by(r(m::COLLECTIVE_ERRORS), &[INSTANCE]) {
            ranks.entry(rank_of(&l)).or_default().collective_errors_per_s = Some(v);
        }
        // max by (pod) (kube_pod_status_unschedulable{pod=~"rank-[0-9]+"}) == 1
        let pending = store.instant(POD_STATUS_UNSCHEDULABLE, t, |l| {
            l.get("pod")
                .is_some_and(|p| lab_model::names::index_of(p, "rank").is_some())
        });
        for (l, v) in max_by(pending, &["pod"]) {
            if v == 1.0 {
                s.ranks_pending.push(label(&l, "pod"));
            }
        }
        // max by (pod) (kube_pod_container_status_last_terminated_exitcode{pod=~"rank-[0-9]+"}) > 0 != 4
        //   and on (pod)
        //   max by (pod) (increase(kube_pod_container_status_restarts_total{pod=~"rank-[0-9]+"}[1m])) > 0
        let rank_pod = |l: &Labels| {
            l.get("pod")
                .is_some_and(|p| lab_model::names::index_of(p, "rank").is_some())
        };
        // increase() is rate() times the window: one is above zero when the other is.
        let rw = watched.clamp(1, RESTART_WINDOW_MS);
        let restarted: BTreeMap<String, f64> =
            max_by(rate(store.range(POD_RESTARTS, t, rw, rank_pod), t, rw), &["pod"])
                .into_iter()
                .filter(|e| e.1 > 0.0)
                .map(|(l, v)| (label(&l, "pod"), v))
                .collect();
        for (l, code) in max_by(store.instant(POD_LAST_EXIT_CODE, t, rank_pod), &["pod"]) {
            let pod = label(&l, "pod");
            if code > 0.0 && code != COLLECTIVE_ERROR_EXIT && restarted.contains_key(&pod) {
                s.ranks_crashing.push((pod, code));
            }
        }
        for (l, v) in inst(m::RENDEZVOUS_WAITING) {
            let rs = ranks.entry(rank_of(&l)).or_default();
            rs.waiting_for_peers = v == 1.0;
            if v == 1.0 {
                s.ranks_waiting_for_peers.push(rank_of(&l));
            }
        }
        let gauges: [(&str, GaugeField); 7] = [
            (m::CPU_LIMIT_CORES, |r| &mut r.cpu_limit_cores),
            (m::STEP, |r| &mut r.step),
            (m::WORLD_SIZE, |r| &mut r.world_size),
            (m::LOSS, |r| &mut r.loss),
            (m::CHECKPOINT_STEP, |r| &mut r.checkpoint_step),
            (m::CHECKPOINT_TIME, |r| &mut r.checkpoint_time),
            (m::STEPS_LOST, |r| &mut r.steps_lost),
        ];
        for (name, field) in gauges {
            for (l, v) in inst(name) {
                *field(ranks.entry(rank_of(&l)).or_default()) = finite(v);
            }
        }
        // The rank → server edge: the info metric's label, else the server its reads mostly go to.
        let mut reads_by_rank: BTreeMap<String, (String, f64)> = BTreeMap::new();
        for (l, v) in inst(&format!("{}_count", m::STORAGE_READ_DURATION)) {
            let e = reads_by_rank
                .entry(rank_of(&l))
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
                ranks.entry(rank_of(&l)).or_default().server = Some(server.to_string());
            }
        }

        // Servers, as the ranks see them.
        let mut servers: BTreeMap<String, ServerSignals> = BTreeMap::new();
        let by_server = sum_by(read_buckets.clone(), &[m::LABEL_SERVER, "le"]);
        for (l, v) in histogram_quantile(0.5, by_server.clone()) {
            servers.entry(label(&l, m::LABEL_SERVER)).or_default().client_p50 = Some(v);
        }
        for (l, v) in histogram_quantile(0.99, by_server) {
            servers.entry(label(&l, m::LABEL_SERVER)).or_default().client_p99 = Some(v);
        }
        // ... unless on(instance) lab:rank_cpu_starved
        let unstarved: Vector = read_buckets
            .into_iter()
            .filter(|(l, _)| !ranks.get(&rank_of(l)).is_some_and(|r| r.starved))
            .collect();
        let p50_unstarved = histogram_quantile(0.5, sum_by(unstarved, &[m::LABEL_SERVER, "le"]));
        s.p50_unstarved_median = quantile(0.5, &p50_unstarved.iter().map(|e| e.1).collect::<Vec<_>>());
        for (l, v) in p50_unstarved {
            servers
                .entry(label(&l, m::LABEL_SERVER))
                .or_default()
                .p50_unstarved = Some(v);
        }
        for (l, v) in sum_by(
            r(&format!("{}_count", m::STORAGE_READ_DURATION)),
            &[m::LABEL_SERVER],
        ) {
            servers.entry(label(&l, m::LABEL_SERVER)).or_default().reads_per_s = Some(v);
        }
        // max by (server) (max_over_time(lab_storage_read_waiting_seconds[3s])
        //   unless on (instance) lab:rank_cpu_starved)
        for (l, pts) in store.range(m::STORAGE_READ_WAITING, t, w, any) {
            if ranks.get(&rank_of(&l)).is_some_and(|r| r.starved) {
                continue;
            }
            let v = pts.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
            let e = &mut servers
                .entry(label(&l, m::LABEL_SERVER))
                .or_default()
                .read_waiting_unstarved;
            *e = Some(e.map_or(v, |o: f64| o.max(v)));
        }
        // max by (server) (rate(lab_storage_read_wait_seconds_total[3s]) unless on (instance) lab:rank_cpu_starved)
        let shares = r(m::STORAGE_READ_WAIT_SECONDS);
        for (l, v) in sum_by(shares.clone(), &[INSTANCE]) {
            ranks.entry(rank_of(&l)).or_default().read_wait_share = Some(v);
        }
        let shares = shares
            .into_iter()
            .filter(|(l, _)| !ranks.get(&rank_of(l)).is_some_and(|r| r.starved))
            .collect();
        let shares = max_by(shares, &[m::LABEL_SERVER]);
        s.read_wait_share_median = quantile(0.5, &shares.iter().map(|e| e.1).collect::<Vec<_>>());
        for (l, v) in shares {
            servers
                .entry(label(&l, m::LABEL_SERVER))
                .or_default()
                .read_wait_share_unstarved = Some(v);
        }
        // max by (server) (rate(lab_storage_read_wait_seconds_total[10s]) unless on (instance) lab:rank_cpu_starved)
        let hw = watched.clamp(1, HOLD_WINDOW_MS);
        let held: Vector = rate(store.range(m::STORAGE_READ_WAIT_SECONDS, t, hw, any), t, hw)
            .into_iter()
            .filter(|(l, _)| !ranks.get(&rank_of(l)).is_some_and(|r| r.starved))
            .collect();
        let held = max_by(held, &[m::LABEL_SERVER]);
        s.read_wait_share_10s_median = quantile(0.5, &held.iter().map(|e| e.1).collect::<Vec<_>>());
        for (l, v) in held {
            servers
                .entry(label(&l, m::LABEL_SERVER))
                .or_default()
                .read_wait_share_10s_unstarved = Some(v);
        }
        for (l, v) in sum_by(r(m::STORAGE_READ_ERRORS), &[m::LABEL_SERVER]) {
            servers
                .entry(label(&l, m::LABEL_SERVER))
                .or_default()
                .errors_per_s = Some(v);
        }
        // ... and as SeaweedFS reports its own GET handling time.
        let get = rate(
            store.range(
                &format!("{}_bucket", m::SEAWEED_VOLUME_REQUEST_SECONDS),
                t,
                w,
                |l| l.get("type") == Some("GET"),
            ),
            t,
            w,
        );
        let get = sum_by(get, &[INSTANCE, "le"]);
        for (l, v) in histogram_quantile(0.5, get.clone()) {
            servers.entry(label(&l, INSTANCE)).or_default().server_p50 = finite(v);
        }
        for (l, v) in histogram_quantile(0.99, get) {
            servers.entry(label(&l, INSTANCE)).or_default().server_p99 = finite(v);
        }
        // Who reads each server: the ranks' reads and foreign jobs' reads by instance, and what the
        // server itself served.
        for name in [
            format!("{}_count", m::STORAGE_READ_DURATION),
            m::JOB_READS.to_string(),
        ] {
            for (l, v) in sum_by(r(&name), &[INSTANCE, m::LABEL_SERVER]) {
                servers
                    .entry(label(&l, m::LABEL_SERVER))
                    .or_default()
                    .by_client
                    .insert(label(&l, INSTANCE), v);
            }
        }
        let served = rate(
            store.range(
                &format!("{}_count", m::SEAWEED_VOLUME_REQUEST_SECONDS),
                t,
                w,
                |l| l.get("type") == Some("GET"),
            ),
            t,
            w,
        );
        for (l, v) in sum_by(served, &[INSTANCE]) {
            servers.entry(label(&l, INSTANCE)).or_default().served_per_s = finite(v);
        }
        for (l, pts) in store.range(m::STORAGE_OWN_PROBE_SECONDS, t, w, |_| true) {
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
        // The database writer: rate(lab_writer_commits_total[3s]) and lab_writer_commit_waiting_seconds.
        for (l, v) in sum_by(r(m::WRITER_COMMITS), &[INSTANCE]) {
            s.writers.entry(label(&l, INSTANCE)).or_default().commits_per_s = finite(v);
        }
        for (l, v) in inst(m::WRITER_COMMIT_WAITING) {
            s.writers.entry(label(&l, INSTANCE)).or_default().commit_waiting_s = finite(v);
        }
        s.writers.remove("");
        servers.remove("");
        ranks.remove("");
        s.ranks = ranks;
        s.servers = servers;
        s
    }
}
