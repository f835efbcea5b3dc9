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
        let mut path = sub.join(format!("run-{stamp}.json"));
        let mut n = 1;
        while path.exists() {
            n += 1;
            path = sub.join(format!("run-{stamp}-{n}.json"));
        }
        let bytes = serde_json::to_vec_pretty(&run).map_err(|e| e.to_string())?;
        std::fs::write(&path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::replay::{load, replay};
    use crate::agent::{AgentReport, EvidenceLevel, Plan, PlanCommand, plan::PLAN_FORMAT};
    use crate::report::RemediationReport;

    fn run(verdict: Verdict, reason: &str, argv: &[&str]) -> DrillReport {
        let drill = crate::spec::parse(
            "name: slow\nseed: 1\nsteps:\n  - inject:\n      kind: slow-storage\n  - expect:\n      signals: [latency]\n  - remediate:\n  - verify:\n",
        )
        .unwrap();
        let mut r = DrillReport::not_run(&drill, "t.yaml", "lab", "local", reason.into());
        r.verdict = verdict;
        r.full_bundles = vec![serde_json::json!({
            "format": "straggler-lab.incident/v1",
            "changes": [], "wiring": {"pods": []}, "dependencies": [], "training": {"ranks": []},
            "signals_firing": [{"signal": "latency"}],
        })];
        let plan = Plan {
            format: PLAN_FORMAT.into(),
            anomaly: true,
            blame: vec!["storage-1".into()],
            cause: "bad-network-path".into(),
            summary: String::new(),
            commands: vec![PlanCommand {
                argv: argv.iter().map(|s| s.to_string()).collect(),
                reason: "r".into(),
            }],
        };
        r.remediations.push(RemediationReport {
            command: Some("agent".into()),
            bundle: None,
            exit_code: Some(0),
            timed_out: false,
            duration_s: 1.0,
            stdout: String::new(),
            stderr: String::new(),
            changes: vec![],
            agent: Some(AgentReport {
                agent: "agent".into(),
                evidence: EvidenceLevel::Full,
                exit_code: Some(0),
                timed_out: false,
                duration_s: 0.1,
                outcome: PlanOutcome::Ran,
                problem: None,
                plan: Some(plan),
                commands: vec![],
                plan_at_s: Some(20.0),
                truth: Some(Truth::of(
                    &[lab_faults::Fault::SlowStorage {
                        server: 1,
                        delay: std::time::Duration::from_millis(300),
                        jitter: std::time::Duration::ZERO,
                    }],
                    &["storage-1".into()],
                )),
                score: None,
            }),
        });
        r
    }

    /// A recorded right fix and a recorded trap replay as `fixed` and `failed`; other commands are
    /// `unknown`; a folder of another format is refused.
    #[tokio::test]
    async fn recorded_plans_replay_with_their_verified_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let fix = run(Verdict::Pass, "ok", &["lab", "fault", "clear", "slow-storage"]);
        let trap = run(
            Verdict::Fail,
            "verify: not back",
            &["lab", "restart", "rank", "1"],
        );
        let mut trap2 = trap.clone();
        trap2.started_at = "2026-01-01T00:00:01Z".into();
        write(dir.path(), &[fix, trap]).unwrap();
        write(dir.path(), &[trap2]).unwrap();
        let inc = &load(dir.path()).unwrap()[0];
        assert_eq!(inc.runs, 3);
        let argv = |v: &[&str]| vec![v.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
        assert_eq!(
            inc.outcome_of(&argv(&["lab", "fault", "clear", "slow-storage"]))
                .0,
            Mitigation::Fixed
        );
        let (m, why) = inc.outcome_of(&argv(&["lab", "restart", "rank", "1"]));
        assert_eq!(
            (m, why.as_str()),
            (Mitigation::Failed, "a recorded trap (failed verification 2×)")
        );
        assert_eq!(
            inc.outcome_of(&argv(&["lab", "restart", "rank", "2"])).0,
            Mitigation::Unknown
        );

        // An agent that prints the trap, through the real replay.
        let agent = r#"printf '%s' '{"format":"straggler-lab.plan/v1","anomaly":true,"blame":["rank-1"],"cause":"slow-node","commands":[{"argv":["lab","restart","rank","1"],"reason":"slow"}]}'"#;
        let r = replay(
            dir.path(),
            agent,
            EvidenceLevel::Metrics,
            std::time::Duration::from_secs(10),
        )
        .await
        .unwrap();
        assert_eq!((r.fixed, r.failed, r.unknown, r.no_plan), (0, 1, 0, 0));
        let s = r.incidents[0].score.as_ref().unwrap();
        assert_eq!((s.precision, s.recall, s.cause), (Some(0.0), 0.0, false));
        let r = replay(
            dir.path(),
            "exit 1",
            EvidenceLevel::Full,
            std::time::Duration::from_secs(10),
        )
        .await
        .unwrap();
        assert_eq!(r.no_plan, 1);

        std::fs::write(
            dir.path().join(MARKER),
            r#"{"format":"straggler-lab.recording/v0"}"#,
        )
        .unwrap();
        let e = load(dir.path()).unwrap_err();
        assert!(
            e.contains("format \"straggler-lab.recording/v0\"") && e.contains("record it again"),
            "{e}"
        );
        assert!(
            write(dir.path(), &[]).is_err(),
            "no run is added to a folder of another format"
        );
        let e = load(&dir.path().join("nothing-here")).unwrap_err();
        assert!(e.contains("is not a recording"), "{e}");
    }
}
