//! A drill run as a recording for replay (`lab drill run --record DIR`): what its report holds worth
//! replaying — the incident as the agent first saw it, the ledger's truth, a short timeline, and the
//! verified outcome of every plan tried.

use std::path::{Path, PathBuf};

use lab_agents::record::{self, RECORDING_FORMAT, RecordedRun, TimePoint, TriedPlan};
use lab_agents::{EvidenceLevel, Mitigation, PlanOutcome};

use crate::report::{DrillReport, StepName};

/// What `report` holds worth replaying: the incident as first handed out, the ledger's truth, and each
/// remediation that a verification judged — an agent's plan, an interactive agent's acts, or a remediation
/// command made of `lab` commands — with that verification's word.
pub fn recorded(report: &DrillReport) -> RecordedRun {
    let judged = verifications(report);
    let mut truth = None;
    let mut tried = Vec::new();
    for (i, r) in report.remediations.iter().enumerate() {
        let (commands, evidence, t) = if let Some(a) = &r.agent {
            let Some(p) = a.plan.as_ref().filter(|_| a.outcome == PlanOutcome::Ran) else {
                truth = truth.or_else(|| a.truth.clone());
                continue;
            };
            (
                p.commands.iter().map(|c| c.argv.clone()).collect(),
                a.evidence,
                a.truth.clone(),
            )
        } else if let Some(m) = &r.mcp {
            let acts: Vec<Vec<String>> = m.acts().filter(|a| a.approved).map(|a| a.argv.clone()).collect();
            (acts, m.evidence, m.truth.clone())
        } else {
            let Some(cmds) = r.command.as_deref().and_then(record::lab_commands) else {
                truth = truth.or_else(|| r.truth.clone());
                continue;
            };
            (cmds, EvidenceLevel::Full, r.truth.clone())
        };
        truth = truth.or(t);
        // Only what a verification judged: the first verification after it.
        let Some((held, why)) = judged.get(i).cloned().flatten() else {
            continue;
        };
        tried.push(TriedPlan {
            commands,
            outcome: if held {
                Mitigation::Fixed
            } else {
                Mitigation::Failed
            },
            evidence,
            verification: (!held).then_some(why),
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
        replay: report.replay.clone(),
    }
}

/// For each remediation, in order, the verification that judged it (the next verify step before another
/// remediation): whether it held, and its summary; `None` when none judged it (the drill ended first).
fn verifications(report: &DrillReport) -> Vec<Option<(bool, String)>> {
    let mut out: Vec<Option<(bool, String)>> = Vec::new();
    for s in &report.steps {
        match s.step {
            StepName::Remediate => out.push(None),
            StepName::Verify => {
                if let Some(last) = out.last_mut()
                    && last.is_none()
                {
                    *last = Some((s.ok, format!("verify: {}", s.summary)));
                }
            }
            _ => {}
        }
    }
    out
}

/// Writes the runs of `reports` that reached a remediation into the recording folder `dir`.
///
/// # Errors
/// A message when the folder is of another format or cannot be written.
pub fn write(dir: &Path, reports: &[DrillReport]) -> Result<Vec<PathBuf>, String> {
    let runs: Vec<RecordedRun> = reports
        .iter()
        .filter(|r| !r.full_bundles.is_empty())
        .map(recorded)
        .collect();
    record::write(dir, &runs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{RemediationReport, StepReport, Verdict};
    use lab_agents::record::MARKER;
    use lab_agents::replay::{load, replay};
    use lab_agents::{AgentReport, Plan, PlanCommand, Truth, plan::PLAN_FORMAT};

    fn run(verdict: Verdict, reason: &str, argv: &[&str]) -> DrillReport {
        let drill = lab_drill_file::spec::parse(
            "name: slow\nseed: 1\nsteps:\n  - inject:\n      kind: slow-storage\n  - expect:\n      signals: [latency]\n  - remediate:\n  - verify:\n",
        )
        .unwrap();
        let mut r = DrillReport::not_run(&drill, "t.yaml", "lab", "local", reason.into());
        r.verdict = verdict;
        let step = |step, ok, summary: &str| StepReport {
            step,
            ok,
            started_s: 0.0,
            duration_s: 1.0,
            summary: summary.into(),
            evidence: vec![],
        };
        r.steps = vec![
            step(StepName::Remediate, true, "ran"),
            step(
                StepName::Verify,
                verdict == Verdict::Pass,
                reason.trim_start_matches("verify: "),
            ),
        ];
        r.full_bundles = vec![serde_json::json!({
            "format": "straggler-lab.incident/v3",
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
            truth: None,
            command: Some("agent".into()),
            bundle: None,
            exit_code: Some(0),
            timed_out: false,
            duration_s: 1.0,
            stdout: String::new(),
            stderr: String::new(),
            changes: vec![],
            mcp: None,
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
                    &[lab_model::Fault::SlowStorage(lab_model::fault::SlowStorage {
                        server: 1,
                        delay: std::time::Duration::from_millis(300),
                        jitter: std::time::Duration::ZERO,
                    })],
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
