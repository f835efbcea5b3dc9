//! Where a drill's snapshots come from: the [`SnapshotSource`] trait, and [`Ticking`], the telemetry
//! driver ticking once a second in a live run.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use lab_model::Snapshot;
use lab_runtime::state::now_ms;

use crate::history::{Recent, SteadyPoint};
use crate::judge::PreFault;

/// Where snapshots come from: the telemetry driver in a live run, a list in a test.
pub trait SnapshotSource: Send {
    /// The next snapshot (about once a second).
    fn next(&mut self) -> impl Future<Output = Snapshot> + Send;

    /// Makes the golden-signal rules compare throughput with the drill's pre-fault baseline from now on.
    /// The baseline learned at `lab up` may be stale on a machine whose load changed since; a drill judges
    /// against the job's normal of a moment ago.
    fn rebase(&mut self, _pre: &PreFault) {}

    /// The lab's recent past, for a baseline that starts from moments already seen (none by default).
    fn recent(&self) -> Recent {
        Recent::default()
    }

    /// The alerts the lab evaluates (its own and its `lab up --rules` files'), when known: a drill that
    /// expects another is refused at its check step.
    fn alert_names(&self) -> Option<Vec<String>> {
        None
    }
}

/// The telemetry driver, ticking once a second.
#[derive(Debug)]
pub struct Ticking {
    driver: lab_telemetry::Driver,
    every: tokio::time::Interval,
    /// What this run has seen.
    seen: Recent,
    /// What the lab's own watch kept, for the first drill of a run.
    watched: Option<PathBuf>,
}

impl Ticking {
    /// Ticks `driver` every `interval`.
    pub fn new(driver: lab_telemetry::Driver, interval: Duration) -> Self {
        let mut every = tokio::time::interval(interval);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Ticking {
            driver,
            every,
            seen: Recent::default(),
            watched: None,
        }
    }

    /// Also reads the lab's recent past from the file its watcher keeps at `path`.
    #[must_use]
    pub fn with_watched(mut self, path: PathBuf) -> Self {
        self.watched = Some(path);
        self
    }
}

impl SnapshotSource for Ticking {
    async fn next(&mut self) -> Snapshot {
        self.every.tick().await;
        let s = self.driver.tick().await;
        self.seen.push(SteadyPoint::of(&s));
        s
    }

    fn recent(&self) -> Recent {
        match &self.watched {
            Some(path) if self.seen.is_empty() => Recent::read(path),
            _ => self.seen.clone(),
        }
    }

    fn alert_names(&self) -> Option<Vec<String>> {
        let rules = self.driver.collector().rules();
        Some(rules.alert_names().into_iter().map(String::from).collect())
    }

    fn rebase(&mut self, pre: &PreFault) {
        let c = self.driver.collector_mut();
        let job = lab_model::snapshot::Baseline {
            samples_per_s: pre.samples_per_s,
            step_seconds: pre.step_seconds,
            learned_at_ms: now_ms(),
        };
        let b = match c.baseline() {
            Some(b) => lab_telemetry::LearnedBaseline { job, ..b.clone() },
            None => lab_telemetry::LearnedBaseline {
                job,
                storage_p50: std::collections::BTreeMap::new(),
            },
        };
        c.restore_baseline(b);
    }
}
