//! Snapshots for the unit tests of the crates above (`features = ["testing"]`): a healthy four-rank lab
//! at a given second, and an alert added to it.

use crate::Snapshot;
use crate::snapshot::{Alert, GoldenSignal, RankView, Training};
use crate::status::{LabStatus, Phase, PodStatus, Role, RuntimeKind};

/// The test clock's origin, ms since the Unix epoch.
pub const T0: u64 = 1_700_000_000_000;

/// A healthy four-rank lab at `t` seconds: `samples` per second, `step_s` per step, at step `step`.
pub fn snap(t: u64, samples: Option<f64>, step_s: Option<f64>, step: u64) -> Snapshot {
    let mut pods = Vec::new();
    for r in 0..4 {
        let mut p = PodStatus::new(crate::names::rank(r), Role::Rank, Some(r));
        p.phase = Phase::Running;
        p.ready = true;
        pods.push(p);
    }
    let status = LabStatus {
        pods,
        ..LabStatus::default_shape("t", RuntimeKind::Local)
    };
    Snapshot {
        training: Training {
            samples_per_s: samples,
            step_seconds: step_s,
            step,
            ..Default::default()
        },
        ranks: (0..4)
            .map(|r| RankView {
                rank: r,
                name: crate::names::rank(r),
                step: Some(step),
                up: true,
                ..Default::default()
            })
            .collect(),
        ..Snapshot::new(T0 + t * 1000, status)
    }
}

/// Adds a firing alert of `rule` on `signal`, against the job.
pub fn alert(s: &mut Snapshot, signal: GoldenSignal, rule: &str) {
    s.alerts.push(Alert {
        signal,
        rule: rule.into(),
        target: "job".into(),
        since_ms: s.at_ms,
        value: 1.0,
        summary: format!("{rule} fired"),
    });
}
