//! Scoring a plan against what the lab knows was injected: detection (did the agent see an anomaly),
//! localization (precision and recall over the components it blames), cause (the class it names) and
//! mitigation (verified on the job's own signals, live; in a replay, what was verified when the same
//! commands ran live, or unknown). Each with its time from the injection.

use std::collections::BTreeSet;

use lab_model::Fault;
use serde::{Deserialize, Serialize};

use crate::plan::Plan;

/// What was really wrong: from the ledger (the targets of the injection's change records) and the
/// injected fault's kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Truth {
    pub anomaly: bool,
    pub components: Vec<String>,
    pub cause: String,
}

/// The cause class of an injected fault (docs/agents.md), as its catalogue entry names it.
pub fn cause_of(fault: &Fault) -> &'static str {
    fault.kind().cause()
}

impl Truth {
    /// The truth of `faults` whose change records touched `targets`.
    pub fn of(faults: &[Fault], targets: &[String]) -> Truth {
        let set: BTreeSet<String> = targets.iter().cloned().collect();
        Truth {
            anomaly: !faults.is_empty(),
            components: set.into_iter().collect(),
            cause: faults.first().map_or("none", cause_of).to_string(),
        }
    }
}

/// Whether the plan's commands fixed the fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mitigation {
    /// Verified on the job's own signals.
    Fixed,
    /// Ran (or was verified live, in a replay) and the job did not come back.
    Failed,
    /// Declined, refused, or never run.
    NotRun,
    /// A replay with commands never verified live: not guessed.
    Unknown,
}

/// The four scores of one plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Score {
    pub detection: bool,
    /// Of the components blamed, the share that were really changed; `None` when none was blamed.
    pub precision: Option<f64>,
    /// Of the components really changed, the share blamed.
    pub recall: f64,
    pub cause: bool,
    pub cause_named: String,
    pub cause_expected: String,
    pub mitigation: Mitigation,
    /// Seconds from the injection to the plan (when detection, localization and cause were known).
    pub plan_at_s: Option<f64>,
    /// Seconds from the injection until the job was back at its baseline, when it was fixed.
    pub mitigated_at_s: Option<f64>,
}

impl Score {
    /// Whether every one of the four is right.
    pub fn all_right(&self) -> bool {
        self.detection
            && self.precision == Some(1.0)
            && self.recall == 1.0
            && self.cause
            && self.mitigation == Mitigation::Fixed
    }
}

/// Scores `plan` against `truth`.
pub fn score(
    plan: &Plan,
    truth: &Truth,
    mitigation: Mitigation,
    plan_at_s: Option<f64>,
    mitigated_at_s: Option<f64>,
) -> Score {
    score_conclusion(
        &Conclusion {
            anomaly: plan.anomaly,
            blame: plan.blame.clone(),
            cause: plan.cause.clone(),
        },
        truth,
        mitigation,
        plan_at_s,
        mitigated_at_s,
    )
}

/// What an agent concluded, however it said it: a plan's head, or an interactive agent's diagnosis (and
/// what it acted on).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conclusion {
    pub anomaly: bool,
    pub blame: Vec<String>,
    pub cause: String,
}

/// Scores a conclusion against `truth`.
pub fn score_conclusion(
    c: &Conclusion,
    truth: &Truth,
    mitigation: Mitigation,
    plan_at_s: Option<f64>,
    mitigated_at_s: Option<f64>,
) -> Score {
    let blamed: BTreeSet<&str> = c.blame.iter().map(String::as_str).collect();
    let real: BTreeSet<&str> = truth.components.iter().map(String::as_str).collect();
    let hit = blamed.intersection(&real).count() as f64;
    let round = |v: f64| (v * 1000.0).round() / 1000.0;
    Score {
        detection: c.anomaly == truth.anomaly,
        precision: (!blamed.is_empty()).then(|| round(hit / blamed.len() as f64)),
        recall: if real.is_empty() {
            1.0
        } else {
            round(hit / real.len() as f64)
        },
        cause: c.cause == truth.cause,
        cause_named: c.cause.clone(),
        cause_expected: truth.cause.clone(),
        mitigation,
        plan_at_s,
        mitigated_at_s: if mitigation == Mitigation::Fixed {
            mitigated_at_s
        } else {
            None
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::PLAN_FORMAT;

    fn plan(blame: &[&str], cause: &str) -> Plan {
        Plan {
            format: PLAN_FORMAT.into(),
            anomaly: true,
            blame: blame.iter().map(|s| s.to_string()).collect(),
            cause: cause.into(),
            summary: String::new(),
            commands: vec![],
        }
    }

    #[test]
    fn precision_recall_and_cause() {
        let truth = Truth::of(
            &[Fault::UnplaceableRank(lab_model::fault::UnplaceableRank {
                ranks: 5,
            })],
            &["ranks".into(), "job config".into(), "ranks".into()],
        );
        assert_eq!(truth.components, vec!["job config", "ranks"]);
        let s = score(
            &plan(&["ranks"], "over-scaled"),
            &truth,
            Mitigation::Failed,
            Some(30.0),
            Some(90.0),
        );
        assert_eq!(
            (s.precision, s.recall, s.cause, s.detection),
            (Some(1.0), 0.5, true, true)
        );
        assert_eq!(s.mitigated_at_s, None);
        assert!(!s.all_right());
        let s = score(
            &plan(&["ranks", "job config", "rank-4"], "over-scaled"),
            &truth,
            Mitigation::Fixed,
            Some(30.0),
            Some(90.0),
        );
        assert_eq!((s.precision, s.recall), (Some(0.667), 1.0));
        let s = score(
            &plan(&["ranks", "job config"], "over-scaled"),
            &truth,
            Mitigation::Fixed,
            Some(30.0),
            Some(90.0),
        );
        assert!(s.all_right());
        assert_eq!(s.mitigated_at_s, Some(90.0));
        let s = score(
            &plan(&[], "starved-client"),
            &truth,
            Mitigation::Unknown,
            None,
            None,
        );
        assert_eq!((s.precision, s.recall, s.cause), (None, 0.0, false));
        let mut quiet = plan(&[], "none");
        quiet.anomaly = false;
        assert!(!score(&quiet, &truth, Mitigation::NotRun, None, None).detection);
    }
}
