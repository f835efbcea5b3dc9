//! Where a drill's snapshots come from: the [`SnapshotSource`] trait, and [`Ticking`], the telemetry
//! driver ticking once a second in a live run.

use std::future::Future;
use std::time::Duration;

use lab_model::Snapshot;
use lab_runtime::state::now_ms;

use crate::judge::PreFault;

/// Where snapshots come from: the telemetry driver in a live run, a list in a test.
pub trait SnapshotSource: Send {
    /// The next snapshot (about once a second).
    fn next(&mut self) -> impl Future<Output = Snapshot> + Send;

    /// Makes the golden-signal rules compare throughput with the drill's pre-fault baseline from now on.
    /// The baseline learned at `lab up` may be stale on a machine whose load changed since; a drill judges
    /// against the job's normal of a moment ago.
    fn rebase(&mut self, _pre: &PreFault) {}
}

/// The telemetry driver, ticking once a second.
#[derive(Debug)]
pub struct Ticking {
    driver: lab_telemetry::Driver,
    every: tokio::time::Interval,
}

impl Ticking {
    /// Ticks `driver` every `interval`.
    pub fn new(driver: lab_telemetry::Driver, interval: Duration) -> Self {
        let mut every = tokio::time::interval(interval);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Ticking { driver, every }
    }
}

impl SnapshotSource for Ticking {
    async fn next(&mut self) -> Snapshot {
        self.every.tick().await;
        self.driver.tick().await
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
