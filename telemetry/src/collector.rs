//! The pure core of telemetry: one call per tick turns the runtime's status and the raw scrapes into a
//! whole [`Snapshot`]. No clock, no I/O: time is passed in, so every figure and alert is testable.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::sync::Arc;

use lab_model::ChangeRecord;
use lab_model::metrics as m;
use lab_model::names;
use lab_model::scrape::ScrapeTarget;
use lab_model::snapshot::{
    ActiveFault, Alert, ClientReads, GoldenSignal, RankView, Snapshot, StorageView, Training,
};
use lab_model::status::{LabStatus, Phase, PodStatus, Role};

use crate::baseline::{self, LearnedBaseline};
use crate::error::ScrapeError;
use crate::expo::{Sample, parse};
use crate::labels::Labels;
use crate::rules::{ActiveAlert, Engine, RuleSet};
use crate::store::Store;
use crate::views::{Figures, RankFigures, ServerFigures};
use lab_model::format::error_chain;

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
/// The instance name under which the collector keeps the series it writes from the runtime's status.
pub const KUBE_STATE: &str = "kube-state-metrics";

/// How much the collector keeps.
#[derive(Debug, Clone)]
pub struct CollectorConfig {
    /// Points in each sparkline history (one per tick).
    pub history_len: usize,
    /// How long raw samples stay in the store; raised to the longest window a rule reads.
    pub retention_ms: i64,
    /// A target's metrics text longer than this is refused as garbage.
    pub max_metrics_bytes: usize,
}

impl Default for CollectorConfig {
    fn default() -> Self {
        CollectorConfig {
            history_len: 120,
            retention_ms: 60_000,
            max_metrics_bytes: 8 << 20,
        }
    }
}

/// Metric families the lab's own rules and views read; everything else a target exports is dropped on
/// ingest, unless a rule reads it (`rule_metrics`).
fn wanted(name: &str) -> bool {
    name.starts_with("lab_")
        || name.starts_with(m::SEAWEED_VOLUME_REQUEST_SECONDS)
        || name == POD_STATUS_PHASE
        || name == POD_STATUS_UNSCHEDULABLE
        || name == POD_RESTARTS
        || name == POD_LAST_EXIT_CODE
}

/// The phases kube-state-metrics reports a pod in, one series each.
const PHASES: [(Phase, &str); 4] = [
    (Phase::Pending, "Pending"),
    (Phase::Running, "Running"),
    (Phase::Succeeded, "Succeeded"),
    (Phase::Failed, "Failed"),
];

/// The rank pods' phases as kube-state-metrics exports them (`kube_pod_status_phase{pod, phase}`, 1 for
/// the pod's phase and 0 for the others), and `kube_pod_status_unschedulable{pod}` (1) for each Pending
/// pod the scheduler refused, from the runtime's status; and each rank's restarts
/// (`kube_pod_container_status_restarts_total{pod}`) with the exit code it last restarted after
/// (`kube_pod_container_status_last_terminated_exitcode{pod}`, only once it has one).
fn pod_phase_samples(status: &LabStatus) -> Vec<Sample> {
    let phases = status.ranks().flat_map(|p| {
        PHASES.iter().map(move |(phase, name)| Sample {
            name: POD_STATUS_PHASE.to_string(),
            labels: Labels::from_pairs([("pod", p.name.as_str()), ("phase", name)]),
            value: if p.phase == *phase { 1.0 } else { 0.0 },
            timestamp_ms: None,
        })
    });
    // kube-state-metrics exports this series only for unschedulable pods.
    let unschedulable = status.ranks().filter(|p| unschedulable(p)).map(|p| Sample {
        name: POD_STATUS_UNSCHEDULABLE.to_string(),
        labels: Labels::from_pairs([("pod", p.name.as_str())]),
        value: 1.0,
        timestamp_ms: None,
    });
    let restarts = status.ranks().map(|p| Sample {
        name: POD_RESTARTS.to_string(),
        labels: Labels::from_pairs([("pod", p.name.as_str())]),
        value: f64::from(p.restarts),
        timestamp_ms: None,
    });
    let exit_codes = status.ranks().filter_map(|p| {
        Some(Sample {
            name: POD_LAST_EXIT_CODE.to_string(),
            labels: Labels::from_pairs([("pod", p.name.as_str())]),
            value: f64::from(p.last_exit_code?),
            timestamp_ms: None,
        })
    });
    phases
        .chain(unschedulable)
        .chain(restarts)
        .chain(exit_codes)
        .collect()
}

/// A Pending pod the scheduler refused (`PodScheduled=False`): no node has what it asks for
/// (`Insufficient gpu`, `Insufficient lab.dev/gpu`) or the scheduler said `Unschedulable`. A pod being
/// replaced is Pending too, but scheduled: its containers are only starting.
fn unschedulable(p: &PodStatus) -> bool {
    p.phase == Phase::Pending
        && p.reason
            .as_deref()
            .is_some_and(|r| r.starts_with("Insufficient ") || r == "Unschedulable")
}

/// Turns ticks of status and scrapes into snapshots, keeping the bounded state in between.
#[derive(Debug)]
pub struct Collector {
    config: CollectorConfig,
    store: Store,
    engine: Engine,
    latch: baseline::Latch,
    /// Every metric name a rule reads: kept on ingest beside the lab's own families.
    rule_metrics: HashSet<String>,
    throughput_history: VecDeque<f64>,
    latency_history: BTreeMap<String, VecDeque<f64>>,
    /// When the first tick was observed: rates never reach back before it.
    started_ms: Option<i64>,
    /// When the last tick was observed.
    last_ms: Option<i64>,
}

impl Default for Collector {
    fn default() -> Self {
        Collector::new(CollectorConfig::default())
    }
}

impl Collector {
    /// A collector evaluating the lab's built-in rules, with no history and no baseline.
    pub fn new(config: CollectorConfig) -> Self {
        Collector::with_rules(config, crate::rules::builtin())
    }

    /// A collector evaluating `rules` (the built-in ones, and a team's own after them).
    pub fn with_rules(config: CollectorConfig, rules: Arc<RuleSet>) -> Self {
        let retention = config
            .retention_ms
            .max(baseline::BASELINE_WINDOW_MS + 5_000)
            .max(rules.longest_window_ms() + 5_000);
        let rule_metrics = rules
            .rules()
            .flat_map(|(_, r)| r.expr.selectors())
            .map(|(s, _)| s.name.clone())
            .collect();
        Collector {
            store: Store::new(retention),
            config,
            engine: Engine::new(rules),
            latch: baseline::Latch::default(),
            rule_metrics,
            throughput_history: VecDeque::new(),
            latency_history: BTreeMap::new(),
            last_ms: None,
            started_ms: None,
        }
    }

    /// The rules it evaluates.
    pub fn rules(&self) -> &RuleSet {
        self.engine.rules()
    }

    /// The series it keeps: what [`crate::query::instant`] and [`crate::query::range`] read.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// When the last tick was observed, ms.
    pub fn last_ms(&self) -> Option<i64> {
        self.last_ms
    }

    /// The baseline, once learned (or restored); persist it so a later console starts with it.
    pub fn baseline(&self) -> Option<&LearnedBaseline> {
        self.latch.get()
    }

    /// The 3 s throughput values (samples/s, oldest first) the baseline latch judged on the last tick;
    /// empty before the first tick or while no rank's step counter has been scraped twice.
    pub fn baseline_window(&self) -> Vec<f64> {
        self.last_ms
            .map(|t| baseline::window(&self.store, t))
            .unwrap_or_default()
    }

    /// Starts from a baseline learned earlier (for example while `lab up` waited for training).
    pub fn restore_baseline(&mut self, baseline: LearnedBaseline) {
        self.latch.set(Some(baseline));
    }

    /// Forgets the baseline; the rule file's latch learns a new one once the job is steady.
    pub fn reset_baseline(&mut self) {
        self.latch.set(None);
    }

    /// Series and samples held, for figures about the collector itself.
    pub fn store_size(&self) -> (usize, usize) {
        self.store.size()
    }

    /// One tick at `now_ms`: ingests every scrape (a failed or garbage one marks that target's series
    /// stale and is reported in `scrape_errors`), evaluates the rules, and builds the snapshot.
    pub fn observe(
        &mut self,
        now_ms: u64,
        status: LabStatus,
        scrapes: Vec<(ScrapeTarget, Result<String, String>)>,
        changes: Vec<ChangeRecord>,
        faults: Vec<ActiveFault>,
    ) -> Snapshot {
        let t = i64::try_from(now_ms).unwrap_or(i64::MAX);
        let mut scrape_errors = Vec::new();
        let mut up: BTreeMap<String, bool> = BTreeMap::new();
        // The pods' phases, as a cluster's kube-state-metrics would export them, unless one is scraped.
        let ksm = KUBE_STATE;
        if !scrapes.iter().any(|(target, _)| target.instance == ksm) {
            self.store.ingest(ksm, t, pod_phase_samples(&status));
            up.insert(ksm.to_string(), true);
        }
        for (target, result) in scrapes {
            let samples = result.and_then(|text| {
                if text.len() > self.config.max_metrics_bytes {
                    return Err(error_chain(&ScrapeError::TooLarge { bytes: text.len() }));
                }
                parse(&text).map_err(|e| error_chain(&ScrapeError::Parse(e)))
            });
            match samples {
                Ok(samples) => {
                    let kept = samples
                        .into_iter()
                        .filter(|s| wanted(&s.name) || self.rule_metrics.contains(&s.name))
                        .collect();
                    self.store.ingest(&target.instance, t, kept);
                    up.insert(target.instance, true);
                }
                Err(e) => {
                    self.store.mark_stale(&target.instance, t);
                    scrape_errors.push(format!("{}: {e}", target.instance));
                    up.insert(target.instance, false);
                }
            }
        }
        let gone: Vec<String> = self
            .store
            .instances()
            .filter(|i| !up.contains_key(*i))
            .map(String::from)
            .collect();
        for instance in gone {
            self.store.mark_stale(&instance, t);
        }

        self.last_ms = Some(t);
        let started = *self.started_ms.get_or_insert(t);
        // A collector younger than a window reads its rates over what it watched: the time before it
        // started is not idle time of the job.
        let earliest = (t > started).then_some(started);
        self.latch.before(&mut self.store, t);
        let cache = crate::promql::eval::Cache::default();
        let active = self.engine.evaluate_cached(&mut self.store, t, earliest, &cache);
        self.latch.after(&self.store, t);
        scrape_errors.extend(self.engine.errors().iter().cloned());
        let figures = Figures::compute(&self.store, t, earliest, &cache);
        self.store.gc(t);
        self.push_history(&figures);

        let training = self.training(&figures, &status);
        let ranks = rank_views(&figures, &status, &up);
        let storage = self.storage_views(&figures, &status, &active, &ranks);
        let alerts = active
            .iter()
            .filter(|a| a.firing)
            .map(|a| Alert {
                signal: a.signal,
                rule: a.name.clone(),
                target: a.target.clone(),
                since_ms: u64::try_from(a.since_ms).unwrap_or(0),
                value: if a.value.is_finite() { a.value } else { 0.0 },
                summary: crate::describe::describe(a, &figures, &status, self.latch.get()),
            })
            .collect();
        let database = database_view(&self.store, t);
        Snapshot {
            at_ms: now_ms,
            status,
            training,
            ranks,
            storage,
            alerts,
            changes,
            faults,
            scrape_errors,
            database,
        }
    }

    fn push_history(&mut self, s: &Figures) {
        let cap = self.config.history_len.max(1);
        push_bounded(&mut self.throughput_history, s.job_samples_per_s, cap);
        for (server, sv) in &s.servers {
            let h = self.latency_history.entry(server.clone()).or_default();
            // A tick without reads on the server keeps the last value, so the line does not drop to zero.
            if let Some(v) = sv
                .client_p50
                .filter(|v| v.is_finite())
                .or_else(|| h.back().copied())
            {
                push_bounded(h, v, cap);
            }
        }
    }

    fn training(&self, s: &Figures, status: &LabStatus) -> Training {
        let baseline = self.latch.get().map(|b| b.job);
        let samples = s.samples_reported.then_some(s.job_samples_per_s);
        // Against the baseline, the throughput over the window it was learned on and the throughput rule
        // compares (3 s): the 10 s figure would lag a recovery by up to 10 s.
        let short = s.samples_reported.then_some(s.job_samples_per_s_short);
        let pct = match (short, baseline) {
            (Some(v), Some(b)) if b.samples_per_s > 0.0 => Some(100.0 * v / b.samples_per_s),
            _ => None,
        };
        let max_of = |f: fn(&RankFigures) -> Option<f64>| {
            s.ranks
                .values()
                .filter_map(f)
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
        };
        let loss = s
            .ranks
            .get(&names::rank(0))
            .and_then(|r| r.loss)
            .or_else(|| s.ranks.values().find_map(|r| r.loss));
        Training {
            baseline,
            samples_per_s: samples,
            steps_per_s: s.job_steps_per_s.filter(|v| v.is_finite()),
            step_seconds: s.job_step_seconds,
            pct_of_baseline: pct,
            history: self.throughput_history.iter().copied().collect(),
            step: max_of(|r| r.step).map_or(0, as_u64),
            loss,
            steps_lost: max_of(|r| r.steps_lost).map_or(0, as_u64),
            checkpoint_step: max_of(|r| r.checkpoint_step).map(as_u64),
            checkpoint_at_ms: max_of(|r| r.checkpoint_time).map(|t| as_u64(t * 1000.0)),
            world_size: max_of(|r| r.world_size)
                .map(|v| as_u64(v) as u32)
                .or(Some(status.world_size)),
        }
    }

    fn storage_views(
        &self,
        s: &Figures,
        status: &LabStatus,
        active: &[ActiveAlert],
        ranks: &[RankView],
    ) -> Vec<StorageView> {
        let mut names: BTreeSet<String> = status
            .pods
            .iter()
            .filter(|p| p.role == Role::StorageServer)
            .map(|p| p.name.clone())
            .collect();
        names.extend(s.servers.keys().cloned());
        let baseline = self.latch.get();
        let mut views: Vec<StorageView> = names
            .into_iter()
            .map(|name| {
                let sv = s.servers.get(&name).cloned().unwrap_or_default();
                let fin = |v: Option<f64>| v.filter(|x| x.is_finite());
                StorageView {
                    index: index_of(&name, "storage", status),
                    client_p50: fin(sv.client_p50),
                    client_p99: fin(sv.client_p99),
                    server_p50: fin(sv.server_p50),
                    server_p99: fin(sv.server_p99),
                    own_probe: fin(sv.own_probe),
                    baseline_p50: baseline.and_then(|b| b.storage_p50.get(&name).copied()),
                    history: self
                        .latency_history
                        .get(&name)
                        .map(|h| h.iter().copied().collect())
                        .unwrap_or_default(),
                    reads_per_s: fin(sv.reads_per_s),
                    errors_per_s: fin(sv.errors_per_s),
                    // Any latency alert on the server, pending included.
                    outlier: active
                        .iter()
                        .any(|a| a.signal == GoldenSignal::Latency && a.target == name),
                    readers: ranks
                        .iter()
                        .filter(|r| r.server.as_deref() == Some(&name))
                        .map(|r| r.name.clone())
                        .collect(),
                    served_per_s: fin(sv.served_per_s),
                    clients: clients(&sv, status),
                    name,
                }
            })
            .collect();
        views.sort_by(|a, b| (a.index, &a.name).cmp(&(b.index, &b.name)));
        views
    }
}

/// Reads by client on one server, busiest first, with `other` for what the server served beyond the
/// clients that report their reads (more than 1 read/s and a tenth of what it served: probes and the
/// odd request are not a client).
fn clients(sv: &ServerFigures, status: &LabStatus) -> Vec<ClientReads> {
    let kind_of = |c: &str| {
        let foreign = status
            .pods
            .iter()
            .any(|p| p.name == c && p.role == Role::ForeignJob);
        if foreign { "job" } else { "rank" }
    };
    let mut out: Vec<ClientReads> = sv
        .by_client
        .iter()
        .filter(|(_, v)| v.is_finite())
        .map(|(c, v)| ClientReads {
            client: c.clone(),
            kind: kind_of(c).into(),
            reads_per_s: *v,
        })
        .collect();
    if let Some(served) = sv.served_per_s.filter(|v| v.is_finite()) {
        let known: f64 = out.iter().map(|c| c.reads_per_s).sum();
        let rest = served - known;
        if rest > 1.0 && rest > 0.1 * served {
            out.push(ClientReads {
                client: "other".into(),
                kind: "other".into(),
                reads_per_s: rest,
            });
        }
    }
    out.sort_by(|a, b| b.reads_per_s.total_cmp(&a.reads_per_s));
    out
}

/// The database writer's own gauges, when it is scraped (`lab up --database`).
fn database_view(store: &Store, t: i64) -> Option<lab_model::snapshot::DatabaseView> {
    let writer = lab_model::db::WRITER;
    let get = |name: &str| {
        store
            .instant(name, t, |l| l.get("instance") == Some(writer))
            .first()
            .map(|(_, v)| *v)
    };
    Some(lab_model::snapshot::DatabaseView {
        commits_per_s: get(m::WRITER_COMMIT_RATE)?,
        reads_per_s: get(m::WRITER_READ_RATE).unwrap_or(0.0),
        commit_p50_s: get(m::WRITER_COMMIT_P50).unwrap_or(0.0),
        commit_p99_s: get(m::WRITER_COMMIT_P99).unwrap_or(0.0),
        commit_waiting_s: get(m::WRITER_COMMIT_WAITING).unwrap_or(0.0),
    })
}

fn push_bounded(q: &mut VecDeque<f64>, v: f64, cap: usize) {
    q.push_back(v);
    while q.len() > cap {
        q.pop_front();
    }
}

fn as_u64(v: f64) -> u64 {
    if v.is_finite() && v > 0.0 { v as u64 } else { 0 }
}

fn index_of(name: &str, prefix: &str, status: &LabStatus) -> u32 {
    status
        .pods
        .iter()
        .find(|p| p.name == name)
        .and_then(|p| p.index)
        .or_else(|| names::index_of(name, prefix))
        .unwrap_or(u32::MAX)
}

fn rank_views(s: &Figures, status: &LabStatus, up: &BTreeMap<String, bool>) -> Vec<RankView> {
    let mut names: BTreeSet<String> = status.ranks().map(|p| p.name.clone()).collect();
    names.extend(
        s.ranks
            .keys()
            .filter(|n| names::index_of(n, "rank").is_some())
            .cloned(),
    );
    let mut views: Vec<RankView> = names
        .into_iter()
        .map(|name| {
            let r = s.ranks.get(&name).cloned().unwrap_or_default();
            let phase = |p: &str| r.phases.get(p).copied().filter(|v| v.is_finite());
            let fin = |v: Option<f64>| v.filter(|x| x.is_finite());
            RankView {
                rank: index_of(&name, "rank", status),
                server: r.server.clone(),
                up: up.get(&name).copied().unwrap_or(false),
                read: phase("read"),
                compute: phase("compute"),
                wait: phase("wait"),
                transfer: phase("transfer"),
                step_seconds: fin(r.step_seconds),
                read_p50: fin(r.read_p50),
                throttled: fin(r.throttled_ratio),
                cpu_limit_cores: fin(r.cpu_limit_cores),
                waiting_for_peers: r.waiting_for_peers,
                step: r.step.map(as_u64),
                name,
            }
        })
        .collect();
    views.sort_by(|a, b| (a.rank, &a.name).cmp(&(b.rank, &b.name)));
    views
}

#[cfg(test)]
mod tests {
    use lab_model::Millicores;
    use lab_model::scrape::TargetKind;
    use lab_model::snapshot::{Baseline, GoldenSignal};
    use lab_model::status::{Phase, RuntimeKind};

    use super::*;

    fn status(ranks: u32, servers: u32) -> LabStatus {
        let mut pods = Vec::new();
        for s in 0..servers {
            let mut p = PodStatus::new(names::storage(s), Role::StorageServer, Some(s));
            p.phase = Phase::Running;
            p.ready = true;
            pods.push(p);
        }
        for r in 0..ranks {
            let mut p = PodStatus::new(names::rank(r), Role::Rank, Some(r));
            p.phase = Phase::Running;
            p.ready = true;
            p.resources.cpu_live = Some(Millicores(if r == 1 { 150 } else { 400 }));
            p.resources.cpu_template = Some(Millicores(400));
            pods.push(p);
        }
        LabStatus {
            lab: "t".into(),
            runtime: RuntimeKind::Local,
            pods,
            gpus_capacity: 4,
            gpu_resource: "gpu".into(),
            ranks_desired: ranks,
            world_size: ranks,
            storage_servers: servers,
            delay_path: "proxy".into(),
            notes: Vec::new(),
        }
    }

    fn target(instance: &str) -> ScrapeTarget {
        let rank = instance.starts_with("rank");
        ScrapeTarget {
            instance: instance.into(),
            kind: if rank {
                TargetKind::Rank
            } else {
                TargetKind::Storage
            },
            index: names::index_of(instance, if rank { "rank" } else { "storage" }).unwrap_or(0),
            address: "http://127.0.0.1:1/metrics".into(),
        }
    }

    /// What rank `r` exports after `secs` seconds of steady training: 2 steps/s of 50 samples, reads of
    /// `read_ms` from storage `r mod 3`, the given share of time in each phase.
    fn rank_text(r: u32, secs: f64, read_ms: f64, phases: [f64; 3]) -> String {
        let server = names::storage(r % 3);
        let reads = 10.0 * secs;
        let mut t = format!(
            "# TYPE lab_samples_total counter\nlab_samples_total {}\nlab_steps_total {}\nlab_step {}\n",
            100.0 * secs,
            2.0 * secs,
            (2.0 * secs) as u64
        );
        for (p, share) in ["read", "compute", "wait"].iter().zip(phases) {
            t += &format!("lab_phase_seconds_total{{phase=\"{p}\"}} {}\n", share * secs);
        }
        for le in ["0.005", "0.05", "0.5", "+Inf"] {
            let within = le == "+Inf" || read_ms / 1000.0 <= le.parse::<f64>().unwrap();
            t += &format!(
                "lab_storage_read_duration_seconds_bucket{{server=\"{server}\",le=\"{le}\"}} {}\n",
                if within { reads } else { 0.0 }
            );
        }
        t += &format!("lab_storage_read_duration_seconds_count{{server=\"{server}\"}} {reads}\n");
        t += &format!(
            "lab_cpu_periods_total {}\nlab_cpu_throttled_periods_total {}\n",
            10.0 * secs,
            5.0 * secs
        );
        t += &format!(
            "lab_cpu_throttled_seconds_total {}\nlab_cpu_limit_cores 0.4\n",
            0.2 * secs
        );
        t += "lab_rendezvous_waiting 0\nlab_world_size 4\nlab_loss 0.25\n";
        t += "go_goroutines 12\n";
        t
    }

    fn seaweed_text(secs: f64) -> String {
        let mut t = String::new();
        for (le, n) in [("0.0001", 0.0), ("0.0008", 10.0 * secs), ("+Inf", 10.0 * secs)] {
            t += &format!("SeaweedFS_volumeServer_request_seconds_bucket{{type=\"GET\",le=\"{le}\"}} {n}\n");
        }
        t
    }

    fn tick(c: &mut Collector, secs: u64, slow: Option<u32>, broken: Option<&str>) -> Snapshot {
        let mut scrapes = Vec::new();
        for r in 0..4 {
            let read_ms = if slow == Some(r % 3) { 300.0 } else { 3.0 };
            let phases = if slow.is_some() {
                [0.1, 0.2, 0.7]
            } else {
                [0.1, 0.7, 0.2]
            };
            scrapes.push((
                target(&names::rank(r)),
                Ok(rank_text(r, secs as f64, read_ms, phases)),
            ));
        }
        for s in 0..3 {
            scrapes.push((target(&names::storage(s)), Ok(seaweed_text(secs as f64))));
        }
        if let Some(b) = broken {
            scrapes[2].1 = Err(b.to_string());
        }
        c.observe(
            1_700_000_000_000 + secs * 1000,
            status(4, 3),
            scrapes,
            Vec::new(),
            Vec::new(),
        )
    }

    #[test]
    fn views_from_scrapes() {
        let mut c = Collector::default();
        let mut snap = None;
        for s in 0..=12 {
            snap = Some(tick(&mut c, s, None, None));
        }
        let snap = snap.unwrap();
        assert!(snap.scrape_errors.is_empty(), "{:?}", snap.scrape_errors);
        assert!(snap.alerts.is_empty(), "{:?}", snap.alerts);
        let t = &snap.training;
        assert!((t.samples_per_s.unwrap() - 400.0).abs() < 1e-6);
        assert!((t.steps_per_s.unwrap() - 2.0).abs() < 1e-6);
        assert_eq!((t.step, t.world_size, t.loss), (24, Some(4), Some(0.25)));
        assert_eq!(t.history.len(), 13);
        let r1 = &snap.ranks[1];
        assert_eq!((r1.name.as_str(), r1.rank, r1.up), ("rank-1", 1, true));
        assert_eq!(r1.server.as_deref(), Some("storage-1"));
        assert!((r1.compute.unwrap() - 0.7).abs() < 1e-9 && (r1.wait.unwrap() - 0.2).abs() < 1e-9);
        assert!((r1.throttled.unwrap() - 0.5).abs() < 1e-9);
        assert_eq!(r1.cpu_limit_cores, Some(0.4));
        assert!((r1.read_p50.unwrap() - 0.0025).abs() < 1e-9);
        let s0 = &snap.storage[0];
        assert_eq!(s0.readers, vec!["rank-0".to_string(), "rank-3".to_string()]);
        assert!((s0.client_p50.unwrap() - 0.0025).abs() < 1e-9);
        assert!((s0.server_p50.unwrap() - 0.00045).abs() < 1e-9);
        assert!((s0.reads_per_s.unwrap() - 20.0).abs() < 1e-6);
        assert!(!s0.outlier);
        // Only what the rules and views read is kept (and the four phase series of each rank pod), beside
        // the rules' recorded series.
        let (series, _) = c.store_size();
        let phases = 4 * snap.status.ranks().count();
        let t = i64::try_from(snap.at_ms).unwrap();
        let recorded: usize = c
            .rules()
            .records()
            .iter()
            .map(|r| c.store().range(r, t, 60_000, |_| true).len())
            .sum();
        assert!(
            series - phases - recorded < 100,
            "{series} series, {recorded} recorded"
        );
    }

    #[test]
    fn a_young_collector_reports_the_real_rate_not_a_fraction_of_it() {
        // `lab status` watches for two seconds: its rates must not count the 8 s before it started.
        let mut c = Collector::default();
        let mut snap = None;
        for s in 0..=2 {
            snap = Some(tick(&mut c, s, None, None));
        }
        let t = snap.unwrap().training;
        assert!(
            (t.samples_per_s.unwrap() - 400.0).abs() < 1e-6,
            "{:?}",
            t.samples_per_s
        );
        assert!((t.steps_per_s.unwrap() - 2.0).abs() < 1e-6, "{:?}", t.steps_per_s);
    }

    #[test]
    fn garbage_and_failed_scrapes_are_errors_not_panics() {
        let mut c = Collector::default();
        tick(&mut c, 0, None, None);
        let snap = c.observe(
            1_700_000_001_000,
            status(4, 3),
            vec![
                (target("rank-0"), Ok("lab_steps_total{ 12".into())),
                (target("rank-1"), Ok("\u{0}\u{fffd}garbage".into())),
                (target("rank-2"), Err("connection refused".into())),
                (target("rank-3"), Ok("x".repeat(9 << 20))),
            ],
            Vec::new(),
            Vec::new(),
        );
        assert_eq!(
            snap.scrape_errors,
            vec![
                "rank-0: garbage metrics: metrics text line 1: invalid label name",
                "rank-1: garbage metrics: metrics text line 1: invalid metric name",
                "rank-2: connection refused",
                "rank-3: metrics text too large (9437184 bytes)",
            ]
        );
        assert!(snap.ranks.iter().all(|r| !r.up));
        // The storage servers were not scraped this tick: their series went stale, not kept.
        assert!(snap.storage.iter().all(|s| s.server_p50.is_none()));
    }

    #[test]
    fn slow_storage_fires_latency_for_that_server_only() {
        let mut c = Collector::default();
        let mut first = None;
        for s in 0..=40 {
            let snap = tick(&mut c, s, (s > 20).then_some(1), None);
            if first.is_none() && snap.alerts.iter().any(|a| a.signal == GoldenSignal::Latency) {
                first = Some((s, snap));
            }
        }
        let (at, snap) = first.expect("latency fired");
        // Window of 3 s, no `for`: the window must hold mostly slow reads first.
        assert!((21..=24).contains(&at), "{at}");
        let a = snap
            .alerts
            .iter()
            .find(|a| a.signal == GoldenSignal::Latency)
            .unwrap();
        assert_eq!(
            (a.rule.as_str(), a.target.as_str()),
            ("LabStorageReadLatencyHigh", "storage-1")
        );
        assert_eq!(a.since_ms, 1_700_000_000_000 + at * 1000);
        assert!(
            a.summary.starts_with("storage-1 read p50 ") && a.summary.ends_with("(siblings 2.5 ms)"),
            "{}",
            a.summary
        );
        assert!(snap.storage[1].outlier && !snap.storage[0].outlier);
        // One point per tick from the second on (the first scrape alone gives no rate).
        assert_eq!(snap.storage[1].history.len(), at as usize);
    }

    #[test]
    fn a_restarted_rank_never_gives_negative_throughput() {
        let mut c = Collector::default();
        for s in 0..=12 {
            tick(&mut c, s, None, None);
        }
        // rank-2 restarts: its counters start again from zero.
        for s in 13..=16 {
            let mut scrapes: Vec<(ScrapeTarget, Result<String, String>)> = (0..4)
                .map(|r| {
                    (
                        target(&names::rank(r)),
                        Ok(rank_text(r, s as f64, 3.0, [0.1, 0.7, 0.2])),
                    )
                })
                .collect();
            scrapes[2].1 = Ok(rank_text(2, (s - 13) as f64, 3.0, [0.1, 0.7, 0.2]));
            let snap = c.observe(
                1_700_000_000_000 + s * 1000,
                status(4, 3),
                scrapes,
                Vec::new(),
                Vec::new(),
            );
            assert!(
                snap.training.samples_per_s.unwrap() > 300.0,
                "{:?}",
                snap.training.samples_per_s
            );
            assert!(snap.training.history.iter().all(|v| *v >= 0.0));
        }
    }

    #[test]
    fn a_restored_baseline_gives_percent_of_normal_and_throughput_alerts() {
        let mut c = Collector::default();
        c.restore_baseline(LearnedBaseline {
            job: Baseline {
                samples_per_s: 4000.0,
                step_seconds: 0.05,
                learned_at_ms: 1,
            },
            storage_p50: [("storage-1".to_string(), 0.003)].into_iter().collect(),
        });
        let mut snap = None;
        for s in 0..=14 {
            snap = Some(tick(&mut c, s, None, None));
        }
        let snap = snap.unwrap();
        assert!((snap.training.pct_of_baseline.unwrap() - 10.0).abs() < 1e-6);
        assert_eq!(snap.storage[1].baseline_p50, Some(0.003));
        let a = snap
            .alerts
            .iter()
            .find(|a| a.signal == GoldenSignal::Throughput)
            .unwrap();
        assert_eq!(a.summary, "training at 10% of normal (400 of 4000 samples/s)");
    }

    #[test]
    fn a_failed_status_target_marks_the_rank_down_and_hides_its_gauges() {
        let mut c = Collector::default();
        tick(&mut c, 0, None, None);
        let snap = tick(&mut c, 1, None, Some("no answer within 700 ms"));
        assert_eq!(snap.scrape_errors, vec!["rank-2: no answer within 700 ms"]);
        assert!(!snap.ranks[2].up && snap.ranks[2].cpu_limit_cores.is_none());
        assert!(snap.ranks[1].up);
    }

    #[test]
    fn a_rank_left_pending_opens_an_incident_from_the_runtime_status_alone() {
        let mut c = Collector::default();
        let mut st = status(5, 0);
        let p4 = st.pods.iter_mut().find(|p| p.name == "rank-4").unwrap();
        p4.phase = Phase::Pending;
        p4.ready = false;
        // Pending while its process starts (scheduled, no reason or a container's): never an incident.
        for (s, reason) in [None, Some("ContainerCreating")].into_iter().enumerate() {
            let mut st = st.clone();
            st.pods.iter_mut().find(|p| p.name == "rank-4").unwrap().reason = reason.map(Into::into);
            let mut c = Collector::default();
            for t in 0..=10 {
                let snap = c.observe(t * 1000, st.clone(), Vec::new(), Vec::new(), Vec::new());
                assert!(snap.alerts.is_empty(), "case {s} at {t} s: {:?}", snap.alerts);
            }
        }
        let p4 = st.pods.iter_mut().find(|p| p.name == "rank-4").unwrap();
        p4.reason = Some("Insufficient gpu".into());
        let mut last = None;
        for s in 0..=3 {
            let snap = c.observe(s * 1000, st.clone(), Vec::new(), Vec::new(), Vec::new());
            let fired: Vec<_> = snap
                .alerts
                .iter()
                .filter(|a| a.rule == "LabRankPending")
                .collect();
            if s < 2 {
                assert!(fired.is_empty(), "at {s} s: {fired:?}");
            }
            last = Some(snap);
        }
        let snap = last.unwrap();
        let a = snap.alerts.iter().find(|a| a.rule == "LabRankPending").unwrap();
        assert_eq!(
            (a.target.as_str(), a.signal),
            ("rank-4", GoldenSignal::Saturation)
        );
        assert_eq!(
            a.summary,
            "rank-4 Pending (Insufficient gpu): 5 ranks wanted, 4 GPUs"
        );
        // A real kube-state-metrics, when scraped, is read instead of the status.
        let ksm = ScrapeTarget {
            instance: KUBE_STATE.into(),
            kind: TargetKind::Rank,
            index: 0,
            address: String::new(),
        };
        let snap = c.observe(4_000, st, vec![(ksm, Ok(String::new()))], Vec::new(), Vec::new());
        assert!(snap.alerts.iter().all(|a| a.rule != "LabRankPending"));
    }
}
