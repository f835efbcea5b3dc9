//! The pure core of telemetry: one call per tick turns the runtime's status and the raw scrapes into a
//! whole [`Snapshot`]. No clock, no I/O: time is passed in, so every figure and alert is testable.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use lab_model::ChangeRecord;
use lab_model::metrics as m;
use lab_model::names;
use lab_model::snapshot::{ActiveFault, Alert, RankView, Snapshot, StorageView, Training};
use lab_model::status::{LabStatus, PodStatus, Role};
use lab_runtime::ScrapeTarget;

use crate::error::ScrapeError;
use crate::expo::parse;
use crate::rules::{self, Condition, Engine, LearnedBaseline};
use crate::signals::Signals;
use crate::store::Store;
use crate::{error_chain, fmt_secs};

/// How much the collector keeps.
#[derive(Debug, Clone)]
pub struct CollectorConfig {
    /// Points in each sparkline history (one per tick).
    pub history_len: usize,
    /// How long raw samples stay in the store; at least the longest window a rule reads (30 s).
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

/// Metric families the collector keeps; everything else a target exports is dropped on ingest.
fn wanted(name: &str) -> bool {
    name.starts_with("lab_") || name.starts_with(m::SEAWEED_VOLUME_REQUEST_SECONDS)
}

/// Turns ticks of status and scrapes into snapshots, keeping the bounded state in between.
#[derive(Debug)]
pub struct Collector {
    config: CollectorConfig,
    store: Store,
    engine: Engine,
    throughput_history: VecDeque<f64>,
    latency_history: BTreeMap<String, VecDeque<f64>>,
}

impl Default for Collector {
    fn default() -> Self {
        Collector::new(CollectorConfig::default())
    }
}

impl Collector {
    /// A collector with no history and no baseline.
    pub fn new(config: CollectorConfig) -> Self {
        Collector {
            store: Store::new(config.retention_ms.max(rules::BASELINE_WINDOW_MS + 5_000)),
            config,
            engine: Engine::new(),
            throughput_history: VecDeque::new(),
            latency_history: BTreeMap::new(),
        }
    }

    /// The baseline, once learned (or restored); persist it so a later console starts with it.
    pub fn baseline(&self) -> Option<&LearnedBaseline> {
        self.engine.baseline()
    }

    /// Starts from a baseline learned earlier (for example while `lab up` waited for training).
    pub fn restore_baseline(&mut self, baseline: LearnedBaseline) {
        self.engine.set_baseline(Some(baseline));
    }

    /// Forgets the baseline; the next stable 30 s learn a new one.
    pub fn reset_baseline(&mut self) {
        self.engine.set_baseline(None);
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
        for (target, result) in scrapes {
            let samples = result.and_then(|text| {
                if text.len() > self.config.max_metrics_bytes {
                    return Err(error_chain(&ScrapeError::TooLarge { bytes: text.len() }));
                }
                parse(&text).map_err(|e| error_chain(&ScrapeError::Parse(e)))
            });
            match samples {
                Ok(samples) => {
                    let kept = samples.into_iter().filter(|s| wanted(&s.name)).collect();
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

        let signals = Signals::compute(&self.store, t);
        let conditions = self.engine.evaluate(&mut self.store, &signals, t);
        self.store.gc(t);
        self.push_history(&signals);

        let training = self.training(&signals, &status);
        let ranks = rank_views(&signals, &status, &up);
        let storage = self.storage_views(&signals, &status, &conditions, &ranks);
        let alerts = conditions
            .iter()
            .filter(|c| c.firing)
            .map(|c| alert(c, &signals, &status, self.engine.baseline()))
            .collect();
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
        }
    }

    fn push_history(&mut self, s: &Signals) {
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

    fn training(&self, s: &Signals, status: &LabStatus) -> Training {
        let baseline = self.engine.baseline().map(|b| b.job);
        let samples = s.samples_reported.then_some(s.job_samples_per_s);
        let pct = match (samples, baseline) {
            (Some(v), Some(b)) if b.samples_per_s > 0.0 => Some(100.0 * v / b.samples_per_s),
            _ => None,
        };
        let max_of = |f: fn(&crate::signals::RankSignals) -> Option<f64>| {
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
            world_size: max_of(|r| r.world_size)
                .map(|v| as_u64(v) as u32)
                .or(Some(status.world_size)),
        }
    }

    fn storage_views(
        &self,
        s: &Signals,
        status: &LabStatus,
        conditions: &[Condition],
        ranks: &[RankView],
    ) -> Vec<StorageView> {
        let mut names: BTreeSet<String> = status
            .pods
            .iter()
            .filter(|p| p.role == Role::StorageServer)
            .map(|p| p.name.clone())
            .collect();
        names.extend(s.servers.keys().cloned());
        let baseline = self.engine.baseline();
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
                    baseline_p50: baseline.and_then(|b| b.storage_p50.get(&name).copied()),
                    history: self
                        .latency_history
                        .get(&name)
                        .map(|h| h.iter().copied().collect())
                        .unwrap_or_default(),
                    reads_per_s: fin(sv.reads_per_s),
                    errors_per_s: fin(sv.errors_per_s),
                    outlier: conditions
                        .iter()
                        .any(|c| c.rule == rules::STORAGE_LATENCY && c.target == name),
                    readers: ranks
                        .iter()
                        .filter(|r| r.server.as_deref() == Some(&name))
                        .map(|r| r.name.clone())
                        .collect(),
                    name,
                }
            })
            .collect();
        views.sort_by(|a, b| (a.index, &a.name).cmp(&(b.index, &b.name)));
        views
    }
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

fn rank_views(s: &Signals, status: &LabStatus, up: &BTreeMap<String, bool>) -> Vec<RankView> {
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

fn pod<'a>(status: &'a LabStatus, name: &str) -> Option<&'a PodStatus> {
    status.pods.iter().find(|p| p.name == name)
}

fn alert(c: &Condition, s: &Signals, status: &LabStatus, baseline: Option<&LearnedBaseline>) -> Alert {
    let value = if c.value.is_finite() { c.value } else { 0.0 };
    let summary = match c.rule.name {
        n if n == rules::STORAGE_LATENCY.name => {
            let mine = s
                .servers
                .get(&c.target)
                .and_then(|v| v.client_p50)
                .filter(|v| v.is_finite())
                .unwrap_or(value);
            let others: Vec<f64> = s
                .servers
                .iter()
                .filter(|(k, _)| **k != c.target)
                .filter_map(|(_, v)| v.client_p50.filter(|x| x.is_finite()))
                .collect();
            let siblings = crate::promql::quantile(0.5, &others);
            if siblings.is_finite() {
                format!(
                    "{} read p50 {} (siblings {})",
                    c.target,
                    fmt_secs(mine),
                    fmt_secs(siblings)
                )
            } else {
                format!("{} read p50 {}", c.target, fmt_secs(mine))
            }
        }
        n if n == rules::THROUGHPUT_LOW.name => match baseline {
            Some(b) if b.job.samples_per_s > 0.0 => format!(
                "training at {:.0}% of normal ({:.0} of {:.0} samples/s)",
                100.0 * value / b.job.samples_per_s,
                value,
                b.job.samples_per_s
            ),
            _ => format!("training at {value:.0} samples/s"),
        },
        n if n == rules::STORAGE_ERRORS.name => format!("{} read errors {:.1}/s", c.target, value),
        n if n == rules::COLLECTIVE_ERRORS.name => format!("{} collective errors {:.1}/s", c.target, value),
        n if n == rules::CPU_THROTTLED.name => {
            let limits = pod(status, &c.target)
                .map(|p| match (p.resources.cpu_live, p.resources.cpu_template) {
                    (Some(l), Some(t)) => format!(" (limit {l}, template {t})"),
                    (Some(l), None) => format!(" (limit {l})"),
                    _ => String::new(),
                })
                .unwrap_or_default();
            format!(
                "{} CPU throttled in {:.0}% of periods{limits}",
                c.target,
                100.0 * value
            )
        }
        n if n == rules::COLLECTIVE_WAIT.name => {
            format!("ranks wait {:.0}% of each step at the collective", 100.0 * value)
        }
        _ => {
            let n = s.ranks_waiting_for_peers.len();
            let world = s
                .ranks
                .values()
                .filter_map(|r| r.world_size)
                .fold(f64::NAN, f64::max);
            let world = if world.is_finite() {
                world as u32
            } else {
                status.world_size
            };
            let ranks = if n == 1 {
                "1 rank waits".to_string()
            } else {
                format!("{n} ranks wait")
            };
            format!("{ranks} at rendezvous for peers (world size {world})")
        }
    };
    Alert {
        signal: c.rule.signal,
        rule: c.rule.name.to_string(),
        target: c.target.clone(),
        since_ms: u64::try_from(c.active_since_ms).unwrap_or(0),
        value,
        summary,
    }
}
