//! The baseline the lab judges against, as the rule file's latch learns it
//! (`lab:job_samples_per_second:baseline`, a recording rule that reads its own previous output), and
//! what the lab keeps beside it: the job's step time and each storage server's read p50 at that moment.
//!
//! The latch itself is the rule's: [`Latch`] only watches for its first value, and, when a baseline is
//! given from outside (learned by an earlier process, or a drill's pre-fault measurement), writes it into
//! the latch's series so the rule carries it on.

use std::collections::BTreeMap;

use lab_model::snapshot::Baseline;
use serde::{Deserialize, Serialize};

use crate::labels::Labels;
use crate::promql::avg_over_time;
use crate::rules::recorded;
use crate::store::Store;

/// The latch's window, `[5s]` over the recorded 3 s throughput, as the built-in rule file writes it
/// (its tests check that it does); for saying why no baseline came.
pub const BASELINE_WINDOW_MS: i64 = 5_000;
/// The latch needs this many recorded values in its window (`count_over_time(...) >= 4`).
pub const BASELINE_MIN_SAMPLES: usize = 4;
/// ... and a standard deviation under this fraction of their mean (`< 0.1 * avg_over_time(...)`).
pub const BASELINE_MAX_VARIATION: f64 = 0.1;

/// The baseline the lab learned (or was given): the job's and each storage server's normal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LearnedBaseline {
    pub job: Baseline,
    /// Client-seen read p50 per server at the time the job's baseline was learned, seconds.
    pub storage_p50: BTreeMap<String, f64>,
}

#[derive(Debug, Clone)]
enum Pending {
    /// Write this value into the latch's series at the next evaluation.
    Seed(f64),
    /// Forget the latch's series, so the rule learns again.
    Forget,
}

/// The baseline beside the rules: given, or read from the latch once it has learned.
#[derive(Debug, Default)]
pub struct Latch {
    learned: Option<LearnedBaseline>,
    pending: Option<Pending>,
}

impl Latch {
    /// The baseline, once learned or given.
    pub fn get(&self) -> Option<&LearnedBaseline> {
        self.learned.as_ref()
    }

    /// Sets the baseline (or, with `None`, forgets it): the latch's series takes the new value at the
    /// next evaluation, so the rules compare with it from then on.
    pub fn set(&mut self, baseline: Option<LearnedBaseline>) {
        self.pending = Some(match &baseline {
            Some(b) => Pending::Seed(b.job.samples_per_s),
            None => Pending::Forget,
        });
        self.learned = baseline;
    }

    /// Before the rules run at `t`: applies a baseline given since the last evaluation.
    pub fn before(&mut self, store: &mut Store, t: i64) {
        match self.pending.take() {
            Some(Pending::Seed(v)) => store.record(recorded::JOB_SAMPLES_BASELINE, t, &[(Labels::new(), v)]),
            Some(Pending::Forget) => store.forget(recorded::JOB_SAMPLES_BASELINE),
            None => {}
        }
    }

    /// After the rules ran at `t`: takes the latch's value when it has just learned one, with the step
    /// time and each server's read p50 averaged over the same window.
    pub fn after(&mut self, store: &Store, t: i64) {
        if self.learned.is_some() {
            return;
        }
        let Some(mean) = store
            .instant(recorded::JOB_SAMPLES_BASELINE, t, |_| true)
            .first()
            .map(|(_, v)| *v)
            .filter(|v| v.is_finite())
        else {
            return;
        };
        let any = |_: &Labels| true;
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
        self.learned = Some(LearnedBaseline {
            job: Baseline {
                samples_per_s: mean,
                step_seconds,
                learned_at_ms: u64::try_from(t).unwrap_or(0),
            },
            storage_p50,
        });
    }
}

/// The recorded 3 s throughput values (samples/s, oldest first) the latch judges at `t`: for saying why
/// no baseline came.
pub fn window(store: &Store, t: i64) -> Vec<f64> {
    store
        .range(recorded::JOB_SAMPLES_SHORT, t, BASELINE_WINDOW_MS, |_| true)
        .into_iter()
        .next()
        .map(|(_, pts)| pts.into_iter().map(|p| p.1).collect())
        .unwrap_or_default()
}
