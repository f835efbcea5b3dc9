//! The job model the engine's tests drive drills against: snapshots of what the fake lab's state would do
//! to a synchronous training job, one a second on Tokio's paused clock, stamped a second apart and never
//! behind the wall clock the session times its steps with.
//!
//! Healthy: 1000 samples/s at 32 ms a step. A storage delay: 400 samples/s at 80 ms, with the latency and
//! throughput rules firing. With `starvation` on, a rank's live CPU limit below its template: 700 at 46 ms
//! with the saturation rule firing; both at once, 300 at 107 ms. `wander` makes the healthy rate swing by
//! half.

use std::time::Duration;

use lab_faults::Ledger;
use lab_model::Snapshot;
use lab_model::snapshot::GoldenSignal;
use lab_runtime::state::now_ms;
use lab_runtime::testing::FakeRuntime;

use super::SnapshotSource;
use crate::judge::PreFault;
use lab_model::testing::{alert, snap};
use lab_runtime::Lab;

#[derive(Debug)]
pub(super) struct Job {
    pub rt: FakeRuntime,
    last_ms: u64,
    step: u64,
    /// How many snapshots were taken.
    pub ticks: u64,
    /// The healthy rate swings between 500 and 1000 samples/s.
    pub wander: bool,
    /// A rank whose live CPU limit is below its template slows the job (off: only storage delays do).
    pub starvation: bool,
    /// The change log each snapshot carries, read from this ledger as the telemetry driver does.
    pub ledger: Option<Ledger>,
    /// What the session asked the source to take as the pre-fault baseline.
    pub rebased: Vec<PreFault>,
    /// What the lab's own watch kept before the drill.
    pub past: crate::history::Recent,
}

impl Job {
    pub fn new(rt: &FakeRuntime) -> Self {
        Job {
            rt: rt.clone(),
            last_ms: 0,
            step: 0,
            ticks: 0,
            wander: false,
            starvation: false,
            ledger: None,
            rebased: Vec::new(),
            past: crate::history::Recent::default(),
        }
    }
}

impl SnapshotSource for Job {
    async fn next(&mut self) -> Snapshot {
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.ticks += 1;
        let at = now_ms().max(self.last_ms + 1000);
        self.last_ms = at;
        let lab = self.rt.state();
        let slow = !lab.delays.is_empty();
        let starved = self.starvation && lab.cpu_live.values().any(|c| *c < lab.template);
        let (samples, step_s) = match (slow, starved, self.wander) {
            (true, true, _) => (300.0, 0.107),
            (true, false, _) => (400.0, 0.080),
            (false, true, _) => (700.0, 0.046),
            (false, false, true) if self.ticks.is_multiple_of(2) => (500.0, 0.064),
            (false, false, _) => (1000.0, 0.032),
        };
        self.step += (1.0 / step_s) as u64;
        let mut s = snap(0, Some(samples), Some(step_s), self.step);
        s.at_ms = at;
        if let Ok(st) = self.rt.status().await {
            s.status = st;
        }
        if let Some(ledger) = &self.ledger {
            s.changes = ledger.read().map(|d| d.changes).unwrap_or_default();
        }
        if slow {
            alert(&mut s, GoldenSignal::Latency, "LabStorageReadLatencyHigh");
            alert(&mut s, GoldenSignal::Throughput, "LabThroughputLow");
        }
        if starved {
            alert(&mut s, GoldenSignal::Saturation, "LabRankCpuThrottled");
        }
        s
    }

    fn rebase(&mut self, pre: &PreFault) {
        self.rebased.push(*pre);
    }

    fn recent(&self) -> crate::history::Recent {
        self.past.clone()
    }
}
