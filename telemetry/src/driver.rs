//! The thin async shell around the [`Collector`]: once a tick it asks the runtime for the status and the
//! scrape targets, fetches every target concurrently, and hands the results to the pure core.
//!
//! Every call has a deadline, so a hung endpoint costs one scrape timeout, never a stalled tick; a failed
//! call becomes a line in the snapshot's `scrape_errors`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::join_all;
use lab_model::ChangeRecord;
use lab_model::clock::now_ms;
use lab_model::scrape::ScrapeTarget;
use lab_model::snapshot::{ActiveFault, Snapshot};
use lab_model::status::{LabStatus, RuntimeKind};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{MissedTickBehavior, timeout};

use crate::error::ScrapeError;
use lab_model::format::error_chain;

use crate::Collector;

/// A failure of a [`Source`] call, as the source's own error.
pub use crate::error::SourceError;

/// What the driver reads a lab through: its status, its scrape targets and their metrics. Every runtime is
/// one (the façade adapts `lab_runtime::Runtime`); the telemetry core never names a runtime.
#[async_trait]
pub trait Source: Send + Sync + std::fmt::Debug {
    /// The lab's name.
    fn name(&self) -> &str;
    /// Which kind of runtime the lab runs on.
    fn kind(&self) -> RuntimeKind;
    /// Every role instance and the job's configuration.
    async fn status(&self) -> Result<LabStatus, SourceError>;
    /// The metrics endpoints that exist now.
    async fn scrape_targets(&self) -> Result<Vec<ScrapeTarget>, SourceError>;
    /// One target's metrics text, within `timeout`.
    async fn fetch_metrics(&self, target: &ScrapeTarget, timeout: Duration) -> Result<String, SourceError>;
}

/// Where the change records and the active faults come from (the fault ledger, which telemetry does not
/// own). Any `Fn() -> (changes, faults)` closure is one.
pub trait Ledger: Send + Sync {
    /// The change records and the faults active now.
    fn read(&self) -> (Vec<ChangeRecord>, Vec<ActiveFault>);
}

impl<F> Ledger for F
where
    F: Fn() -> (Vec<ChangeRecord>, Vec<ActiveFault>) + Send + Sync,
{
    fn read(&self) -> (Vec<ChangeRecord>, Vec<ActiveFault>) {
        self()
    }
}

/// A PromQL query asked of a running driver: an instant query now, or a range query over the last
/// `range_s` seconds at every `step_s`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QueryAsk {
    pub expr: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_s: Option<f64>,
}

impl QueryAsk {
    /// The answer at `now_ms` over `store`: Prometheus' HTTP API `data` (`resultType`, `result`), or the
    /// error as the evaluator words it (with its line and column).
    ///
    /// # Errors
    /// The evaluator's message for an expression it cannot parse or evaluate.
    pub fn answer(&self, store: &crate::store::Store, now_ms: i64) -> Result<serde_json::Value, String> {
        let result = match self.range_s {
            None => crate::query::instant(store, &self.expr, now_ms),
            Some(r) => {
                let step = (self.step_s.unwrap_or(5.0) * 1000.0).round() as i64;
                crate::query::range(
                    store,
                    &self.expr,
                    now_ms - (r * 1000.0).round() as i64,
                    now_ms,
                    step,
                )
            }
        }
        .map_err(|e| e.to_string())?;
        serde_json::to_value(&result).map_err(|e| e.to_string())
    }
}

/// A [`QueryAsk`] and where its answer goes.
#[derive(Debug)]
pub struct Query {
    pub ask: QueryAsk,
    pub reply: oneshot::Sender<Result<serde_json::Value, String>>,
}

/// A ledger with nothing in it.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoLedger;

impl Ledger for NoLedger {
    fn read(&self) -> (Vec<ChangeRecord>, Vec<ActiveFault>) {
        (Vec::new(), Vec::new())
    }
}

/// Timing of the driver.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// Time between ticks (the scrape interval).
    pub interval: Duration,
    /// Deadline for one target's metrics.
    pub scrape_timeout: Duration,
    /// Deadline for the runtime's status and target list.
    pub status_timeout: Duration,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            interval: Duration::from_secs(1),
            scrape_timeout: Duration::from_millis(700),
            status_timeout: Duration::from_millis(900),
        }
    }
}

/// Runs the collector against a runtime.
pub struct Driver {
    runtime: Arc<dyn Source>,
    ledger: Arc<dyn Ledger>,
    collector: Collector,
    config: DriverConfig,
    last_status: Option<LabStatus>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("runtime", &self.runtime)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Driver {
    /// A driver for `runtime`, reading changes and faults from `ledger`.
    pub fn new(
        runtime: Arc<dyn Source>,
        ledger: Arc<dyn Ledger>,
        collector: Collector,
        config: DriverConfig,
    ) -> Self {
        Driver {
            runtime,
            ledger,
            collector,
            config,
            last_status: None,
        }
    }

    /// The collector (to read or persist its baseline).
    pub fn collector(&self) -> &Collector {
        &self.collector
    }

    /// The collector, mutably (to restore a baseline).
    pub fn collector_mut(&mut self) -> &mut Collector {
        &mut self.collector
    }

    /// One tick: status, targets and every target's metrics, each within its deadline; then a snapshot.
    pub async fn tick(&mut self) -> Snapshot {
        let rt = self.runtime.as_ref();
        let deadline = self.config.status_timeout;
        let (status, targets) = tokio::join!(
            timeout(deadline, rt.status()),
            timeout(deadline, rt.scrape_targets())
        );
        let mut errors = Vec::new();
        let status = match status {
            Ok(Ok(s)) => {
                self.last_status = Some(s.clone());
                s
            }
            Ok(Err(e)) => {
                errors.push(format!("status: {}", error_chain(e.as_ref())));
                self.stale_status()
            }
            Err(_) => {
                errors.push(format!("status: {}", ScrapeError::Timeout(deadline)));
                self.stale_status()
            }
        };
        let targets = match targets {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => {
                errors.push(format!("scrape targets: {}", error_chain(e.as_ref())));
                Vec::new()
            }
            Err(_) => {
                errors.push(format!("scrape targets: {}", ScrapeError::Timeout(deadline)));
                Vec::new()
            }
        };
        let per_target = self.config.scrape_timeout;
        let scrapes = join_all(targets.into_iter().map(|target| async move {
            // The runtime is asked to honour the timeout; the outer one covers a runtime that does not.
            let result = match timeout(
                per_target + Duration::from_millis(50),
                rt.fetch_metrics(&target, per_target),
            )
            .await
            {
                Ok(Ok(text)) => Ok(text),
                Ok(Err(e)) => Err(error_chain(&ScrapeError::Fetch(e))),
                Err(_) => Err(ScrapeError::Timeout(per_target).to_string()),
            };
            (target, result)
        }))
        .await;
        let (changes, faults) = self.ledger.read();
        let mut snapshot = self.collector.observe(now_ms(), status, scrapes, changes, faults);
        snapshot.scrape_errors.extend(errors);
        snapshot
    }

    fn stale_status(&self) -> LabStatus {
        self.last_status.clone().unwrap_or_else(|| LabStatus {
            lab: self.runtime.name().to_string(),
            runtime: self.runtime.kind(),
            pods: Vec::new(),
            gpus_capacity: 0,
            gpu_resource: String::new(),
            ranks_desired: 0,
            world_size: 0,
            storage_servers: 0,
            delay_path: String::new(),
            notes: vec!["the runtime did not answer: status unknown".to_string()],
        })
    }

    /// Ticks every interval and publishes each snapshot, until every receiver is gone.
    pub async fn run(self, snapshots: watch::Sender<Option<Snapshot>>) {
        // A sender kept here, so the channel never closes and the loop only ticks.
        let (_keep, queries) = mpsc::channel(1);
        self.run_answering(snapshots, queries).await;
    }

    /// As [`Driver::run`], answering each [`Query`] from `queries` between ticks, over the series the
    /// collector holds at that moment.
    pub async fn run_answering(
        mut self,
        snapshots: watch::Sender<Option<Snapshot>>,
        mut queries: mpsc::Receiver<Query>,
    ) {
        let mut every = tokio::time::interval(self.config.interval);
        every.set_missed_tick_behavior(MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = every.tick() => {}
                () = snapshots.closed() => return,
                Some(q) = queries.recv() => {
                    let at = i64::try_from(now_ms()).unwrap_or(i64::MAX);
                    let _ = q.reply.send(q.ask.answer(self.collector.store(), at));
                    continue;
                }
            }
            let snapshot = self.tick().await;
            if snapshots.send(Some(snapshot)).is_err() {
                return;
            }
        }
    }

    /// Ticks until the baseline is learned or `deadline` passes.
    ///
    /// # Errors
    /// [`Unsettled`], the job as the last tick saw it, when no baseline came within `deadline`.
    pub async fn learn_baseline(&mut self, deadline: Duration) -> Result<crate::LearnedBaseline, Unsettled> {
        let mut every = tokio::time::interval(self.config.interval);
        every.set_missed_tick_behavior(MissedTickBehavior::Skip);
        let until = tokio::time::Instant::now() + deadline;
        let mut last = None;
        while tokio::time::Instant::now() < until {
            every.tick().await;
            let snapshot = self.tick().await;
            if let Some(b) = self.collector.baseline() {
                return Ok(b.clone());
            }
            last = Some(Box::new(snapshot));
        }
        Err(Unsettled {
            window: self.collector.baseline_window(),
            last,
        })
    }
}

/// Why no baseline came: the job as the last tick saw it, for an error that says what was wrong rather
/// than only that something was (the lab it describes may be gone by the time anyone looks).
#[derive(Debug, Clone)]
pub struct Unsettled {
    /// The 3 s throughput values (samples/s, oldest first) the baseline latch judged last.
    pub window: Vec<f64>,
    /// The last snapshot, if any tick ran.
    pub last: Option<Box<Snapshot>>,
}

impl std::fmt::Display for Unsettled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::baseline::{BASELINE_MAX_VARIATION, BASELINE_MIN_SAMPLES, BASELINE_WINDOW_MS};
        let w = &self.window;
        if w.is_empty() {
            write!(
                f,
                "no throughput recorded in the last {} s (no rank's step counter scraped twice)",
                BASELINE_WINDOW_MS / 1000
            )?;
        } else {
            let values: Vec<String> = w.iter().map(|v| format!("{v:.0}")).collect();
            // The latch's own functions, so the spread shown is the one it judged.
            let pts: Vec<(i64, f64)> = w.iter().map(|v| (0, *v)).collect();
            let mean = crate::promql::avg_over_time(&pts);
            let sd = crate::promql::stddev_over_time(&pts);
            let spread = if mean > 0.0 {
                format!("{:.0} %", 100.0 * sd / mean)
            } else {
                "—".to_string()
            };
            write!(
                f,
                "the job's 3 s throughput in the last {} s: {} samples/s (a baseline needs {} or more values, \
                 all above 0, varying under {:.0} % of their mean; these vary {spread})",
                BASELINE_WINDOW_MS / 1000,
                values.join(", "),
                BASELINE_MIN_SAMPLES,
                100.0 * BASELINE_MAX_VARIATION,
            )?;
        }
        let Some(s) = &self.last else {
            return Ok(());
        };
        let ranks: Vec<String> = s
            .ranks
            .iter()
            .map(|r| {
                let mut t = match (r.up, r.step) {
                    (false, _) => format!("{} not scraped", r.name),
                    (true, Some(step)) => format!("{} at step {step}", r.name),
                    (true, None) => format!("{} with no step yet", r.name),
                };
                if r.waiting_for_peers {
                    t.push_str(" (waiting for peers)");
                }
                t
            })
            .collect();
        if !ranks.is_empty() {
            write!(f, "; {}", ranks.join(", "))?;
        }
        let not_ready: Vec<String> = s
            .status
            .pods
            .iter()
            .filter(|p| !p.ready && p.phase != lab_model::status::Phase::Succeeded)
            .map(|p| match &p.reason {
                Some(r) => format!("{} ({}: {r})", p.name, p.phase),
                None => format!("{} ({})", p.name, p.phase),
            })
            .collect();
        if !not_ready.is_empty() {
            write!(f, "; not Ready: {}", not_ready.join(", "))?;
        }
        if !s.scrape_errors.is_empty() {
            let shown: Vec<&str> = s.scrape_errors.iter().take(3).map(String::as_str).collect();
            write!(f, "; scrape errors: {}", shown.join("; "))?;
            if s.scrape_errors.len() > 3 {
                write!(f, " (and {} more)", s.scrape_errors.len() - 3)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use lab_model::snapshot::RankView;
    use lab_model::status::{Phase, PodStatus, Role};

    use super::*;

    fn status(pods: Vec<PodStatus>) -> LabStatus {
        LabStatus {
            lab: "t".into(),
            runtime: RuntimeKind::Local,
            pods,
            gpus_capacity: 4,
            gpu_resource: "gpu".into(),
            ranks_desired: 2,
            world_size: 2,
            storage_servers: 1,
            delay_path: "proxy".into(),
            notes: Vec::new(),
        }
    }

    #[test]
    fn an_unsettled_job_is_described_by_what_the_latch_judged_and_what_the_ranks_did() {
        let none = Unsettled {
            window: vec![],
            last: None,
        };
        assert_eq!(
            none.to_string(),
            "no throughput recorded in the last 5 s (no rank's step counter scraped twice)"
        );

        let mut pending = PodStatus::new("rank-1", Role::Rank, Some(1));
        pending.reason = Some("Insufficient gpu".into());
        let mut running = PodStatus::new("rank-0", Role::Rank, Some(0));
        running.phase = Phase::Running;
        running.ready = true;
        let mut seeder = PodStatus::new("seeder", Role::Seeder, None);
        seeder.phase = Phase::Succeeded;
        let mut snapshot = Snapshot::new(0, status(vec![running, pending, seeder]));
        snapshot.ranks = vec![
            RankView {
                name: "rank-0".into(),
                up: true,
                step: Some(120),
                waiting_for_peers: true,
                ..Default::default()
            },
            RankView {
                rank: 1,
                name: "rank-1".into(),
                ..Default::default()
            },
        ];
        snapshot.scrape_errors = (0..4).map(|i| format!("rank-{i}: refused")).collect();
        let seen = Unsettled {
            window: vec![1000.0, 1000.0, 3000.0, 3000.0],
            last: Some(Box::new(snapshot)),
        };
        assert_eq!(
            seen.to_string(),
            "the job's 3 s throughput in the last 5 s: 1000, 1000, 3000, 3000 samples/s (a baseline needs 4 \
             or more values, all above 0, varying under 10 % of their mean; these vary 50 %); rank-0 at step \
             120 (waiting for peers), rank-1 not scraped; not Ready: rank-1 (Pending: Insufficient gpu); \
             scrape errors: rank-0: refused; rank-1: refused; rank-2: refused (and 1 more)"
        );
    }
}
