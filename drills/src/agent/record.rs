//! Recording incidents for replay (`lab drill run --record DIR`): per drill run, the incident as the
//! agent first saw it (the whole bundle, so a replay can cut it to any evidence level), the ledger's
//! truth, a short telemetry timeline, and the verified outcome of every plan tried.
//!
//! The folder: `recording.json` names the format; each run is `<drill>/run-<start>.json`. Runs of the
//! same drill add up: the right fix recorded in one run and a trap in another make one incident with two
//! known plans.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Mitigation, PlanOutcome, Truth};
use crate::report::{DrillReport, Verdict};

/// The recording format's identifier, versioned.
pub const RECORDING_FORMAT: &str = "straggler-lab.recording/v1";

/// The marker file of a recording folder.
pub const MARKER: &str = "recording.json";

/// A plan tried live, and what verification said of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TriedPlan {
    /// The commands, as argv, in order.
    pub commands: Vec<Vec<String>>,
    /// `fixed` or `failed`, as verified on the job's signals.
    pub outcome: Mitigation,
    pub evidence: super::EvidenceLevel,
}

/// One point of the recorded timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimePoint {
    pub t_s: f64,
    pub pct: Option<f64>,
    pub step_seconds: Option<f64>,
    pub ranks_ready: (usize, usize),
    pub firing: Vec<String>,
}

/// One recorded drill run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedRun {
    pub format: String,
    pub drill: String,
    pub started_at: String,
    pub verdict: Verdict,
    pub reason: String,
    pub truth: Option<Truth>,
    /// Seconds from the start of the drill to the first injection's detection.
    pub time_to_detect_s: Option<f64>,
    /// The first bundle handed out, whole.
    pub incident: Option<serde_json::Value>,
    pub tried: Vec<TriedPlan>,
    pub timeline: Vec<TimePoint>,
}

impl RecordedRun {
    /// What `report` holds worth replaying.
    pub fn of(report: &DrillReport) -> RecordedRun {
        let last = report.remediations.len().saturating_sub(1);
        let mut truth = None;
        let mut tried = Vec::new();
        for (i, r) in report.remediations.iter().enumerate() {
            let Some(a) = &r.agent else { continue };
            truth = truth.or_else(|| a.truth.clone());
            let (Some(p), PlanOutcome::Ran) = (&a.plan, a.outcome) else {
                continue;
            };
            // Only what verification judged: a pass after the last plan, a failure that sent it back.
            let outcome = match (i == last, report.verdict) {
                (true, Verdict::Pass) => Mitigation::Fixed,
                (false, _) | (true, Verdict::Fail) => Mitigation::Failed,
                _ => continue,
            };
            if i == last && report.verdict == Verdict::Fail && !failed_at_verify(report) {
                continue;
            }
            tried.push(TriedPlan {
                commands: p.commands.iter().map(|c| c.argv.clone()).collect(),
                outcome,
                evidence: a.evidence,
            });
        }
        RecordedRun {
            format: RECORDING_FORMAT.into(),
            drill: report.name.clone(),
            started_at: report.started_at.clone(),
            verdict: report.verdict,
            reason: report.reason.clone(),
            truth,
            time_to_detect_s: report.figures.time_to_detect_s,
            incident: report.full_bundles.first().cloned(),
            tried,
            timeline: report
                .timeline
                .iter()
                .map(|p| TimePoint {
                    t_s: p.t_s,
                    pct: p.pct,
                    step_seconds: p.step_seconds.map(|s| (s * 1e4).round() / 1e4),
                    ranks_ready: p.ranks_ready,
                    firing: p.firing.clone(),
                })
                .collect(),
        }
    }
}

/// Whether the drill's failure was its verification (the plan ran and the job did not come back), not
/// something before it.
fn failed_at_verify(report: &DrillReport) -> bool {
    report.reason.starts_with("verify")
}

/// Writes the runs of `report` that reached a remediation into `dir`.
///
/// # Errors
/// A message when the folder is of another format or cannot be written.
pub fn write(dir: &Path, reports: &[DrillReport]) -> Result<Vec<std::path::PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let marker = dir.join(MARKER);
    if marker.exists() {
        super::replay::check_marker(dir)?;
    } else {
        let text = serde_json::json!({ "format": RECORDING_FORMAT }).to_string();
        std::fs::write(&marker, text).map_err(|e| format!("cannot write {}: {e}", marker.display()))?;
    }
    let mut written = Vec::new();
    for r in reports.iter().filter(|r| !r.full_bundles.is_empty()) {
        let run = RecordedRun::of(r);
        let sub = dir.join(&r.name);
        std::fs::create_dir_all(&sub).map_err(|e| format!("cannot create {}: {e}", sub.display()))?;
        let stamp: String = r.started_at.chars().filter(char::is_ascii_digit).collect();
        let path = sub.join(format!("run-{stamp}.json"));
        let bytes = serde_json::to_vec_pretty(&run).map_err(|e| e.to_string())?;
        std::fs::write(&path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}
