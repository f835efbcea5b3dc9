//! One attempt of an interactive agent at an incident, as a drill (or a replay) reports it: how the agent
//! ran, every call it made, what it concluded, and — once verification has spoken — its score.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::calls::{ActRecord, Outcome, ToolCall};
use super::tools::Diagnosis;
use crate::score::{Conclusion, Score};
use crate::{EvidenceLevel, Truth};

/// How a drill runs an interactive agent (`--mcp-agent`).
#[derive(Debug, Clone)]
pub struct McpAgentOptions {
    /// A shell command; the MCP client, which starts the server as `LAB_MCP_SERVER` says.
    pub command: String,
    pub evidence: EvidenceLevel,
    /// `auto`, `ask`, `never`, or an approval policy file.
    pub approve: String,
    pub approvals: Option<PathBuf>,
    pub timeout: Duration,
    /// The `lab` binary the server runs as.
    pub lab_bin: PathBuf,
}

/// One attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpAttempt {
    /// The agent's command line.
    pub agent: String,
    pub evidence: EvidenceLevel,
    /// 1 for the first attempt at this incident, 2 after a failed verification, ...
    pub attempt: u32,
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub duration_s: f64,
    /// Why the attempt ended badly (the agent crashed, hung, or was never started), if it did.
    pub problem: Option<String>,
    /// Every call, in order; `at_ms` is wall time.
    pub calls: Vec<ToolCall>,
    /// What it said it concluded (its last `diagnose`).
    pub diagnosis: Option<Diagnosis>,
    /// The session file the server was started with.
    pub session: String,
    /// The ledger's truth and the attempt's score, once verification has spoken.
    pub truth: Option<Truth>,
    pub score: Option<Score>,
}

impl McpAttempt {
    /// The acts it asked for, approved or not.
    pub fn acts(&self) -> impl Iterator<Item = &ActRecord> {
        self.calls.iter().filter_map(|c| c.act.as_ref())
    }

    /// Acts that ran and exited 0.
    pub fn acts_run(&self) -> usize {
        self.calls
            .iter()
            .filter(|c| c.act.is_some() && c.outcome == Outcome::Ok && c.tool == "remediate")
            .count()
    }

    /// Calls declined by the approval.
    pub fn declined(&self) -> usize {
        self.calls
            .iter()
            .filter(|c| c.outcome == Outcome::Declined)
            .count()
    }

    /// Calls refused as wrong (an unknown tool, bad arguments, a command off the allow-list, garbage).
    pub fn refused(&self) -> usize {
        self.calls
            .iter()
            .filter(|c| c.outcome == Outcome::Refused)
            .count()
    }

    /// The components its approved acts changed.
    pub fn touched(&self) -> Vec<String> {
        let mut t: Vec<String> = self
            .acts()
            .filter(|a| a.approved)
            .flat_map(|a| a.touched.iter().cloned())
            .collect();
        t.sort();
        t.dedup();
        t
    }

    /// What it concluded: its diagnosis, with what it acted on counted as blamed; without a diagnosis,
    /// what its acts say (an act is an anomaly seen; its cause, the act's).
    pub fn conclusion(&self) -> Conclusion {
        let mut blame: Vec<String> = self
            .diagnosis
            .as_ref()
            .map(|d| d.blame.clone())
            .unwrap_or_default();
        if blame.is_empty() {
            blame = self.touched();
        }
        blame.sort();
        blame.dedup();
        let acted = self.acts().any(|a| a.approved);
        match &self.diagnosis {
            Some(d) => Conclusion {
                anomaly: d.anomaly,
                blame,
                cause: d.cause.clone(),
            },
            None => Conclusion {
                anomaly: acted,
                blame,
                cause: self
                    .acts()
                    .find_map(|a| a.cause.clone())
                    .unwrap_or_else(|| "unknown".into()),
            },
        }
    }

    /// Approved acts whose changes touched only parts that were not at fault: a healthy part made worse.
    pub fn harmful(&self, truth: &Truth) -> Vec<String> {
        self.acts()
            .filter(|a| a.approved && !a.touched.is_empty() && !crate::replay::changes_nothing(&a.argv))
            .filter(|a| !a.touched.iter().any(|t| truth.components.contains(t)))
            .map(|a| format!("{} (changed {})", a.argv.join(" "), a.touched.join(", ")))
            .collect()
    }
}
